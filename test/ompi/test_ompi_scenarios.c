/* The scenario suite (tools/scenarios/) through Open MPI's rcache framework: after MPI_Init,
 * each scenario creates its module with mca_rcache_base_module_create ("vmtrack" with each
 * tracker available here, and "grdma") over io_uring fixed buffers, changes the address space
 * and checks with WRITE_FIXED whether a stale registration was used. Prints the table.
 *
 * Two modes, by what the component decided at MPI_Init (test/ompi/scenarios_patcher.sh runs the
 * second): vmtrack's hooks took over from Open MPI's patcher (the default without vmtrack.ko),
 * or Open MPI's patcher stayed (--mca memory patcher).
 * Asserted: vmtrack never hands out a stale registration where its event source claims the
 * change (hooks, kmod, pass, uffd: what scn_vmtrack_claims says; "none": exactly what Open
 * MPI's memory hooks report, so its column must equal grdma's, which uses the same hooks);
 * after a takeover grdma is never stale where the hooks claim the change; nothing crashes or
 * errors. The stress (its own case) asserts no stale and no wrong write in the default mode. */
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <mpi.h>
#include <vmtrack.h>

#include "ompi_provider.h"
#include "ompi_testenv.h"
#include "ompi-rcache/rcache_vmtrack.h"
#include "../lib/check_run.h"

struct column {
    const struct scn_provider *p;
    const char *variant;
    const char *title;
    struct scn_outcome out[32];
    int available;
};

#define NCOLS 7   /* grdma, vmtrack auto, none, kmod, pass, uffd, hooks */

static bool acceptable(enum scn_result r)
{
    return SCN_CAUGHT == r || SCN_NA == r;
}

/* An error grdma hits too is the device's (e.g. io_uring of the guest's 6.1 kernel refuses
 * SysV shm pages), not the cache's. */
static void assert_no_error(const struct column *cols, size_t ncols, size_t i)
{
    for (size_t c = 1; c < ncols; c++) {
        enum scn_result r = cols[c].out[i].result;
        if (SCN_ERROR == r && SCN_ERROR == cols[0].out[i].result &&
            strstr(cols[c].out[i].detail, "before the change"))
            continue;
        ck_assert_msg(SCN_ERROR != r && SCN_CRASH != r, "%s / %s: %s: %s", cols[c].title,
                      scn_scenarios[i].name, scn_result_name(r), cols[c].out[i].detail);
    }
}

/* vmtrack's hooks took over at MPI_Init: the shared cache is on hooks (so the columns asking
 * for another tracker are unavailable), and grdma gets its events from vmtrack's forwarder. */
static void check_takeover_columns(const struct column *cols)
{
    ck_assert_msg(cols[1].available, "vmtrack(auto) unavailable: %s", cols[1].out[0].detail);
    ck_assert_str_eq(vmt_cache_tracker(vmt_shared()), "hooks");
    for (size_t i = 0; i < scn_scenario_count; i++) {
        const char *name = scn_scenarios[i].name;
        assert_no_error(cols, NCOLS, i);
        if (!scn_vmtrack_claims("hooks", name))
            continue;
        const size_t hooks_cols[] = {1, NCOLS - 1};   /* auto, and "hooks" asked for */
        for (size_t k = 0; k < 2; k++) {
            size_t c = hooks_cols[k];
            enum scn_result r = cols[c].out[i].result;
            ck_assert_msg(acceptable(r), "%s / %s: %s: %s", cols[c].title, name,
                          scn_result_name(r), cols[c].out[i].detail);
        }
        enum scn_result g = cols[0].out[i].result;
        ck_assert_msg(SCN_STALE != g, "%s: grdma STALE with vmtrack's hooks feeding Open MPI",
                      name);
    }
}

/* Open MPI's patcher stayed (opted out, or vmtrack not chosen by name): "none" is fed by the
 * same hooks as grdma and must see exactly what grdma sees; hooks are refused. */
static void check_patcher_columns(const struct column *cols)
{
    ck_assert_msg(cols[2].available, "vmtrack with Open MPI's events unavailable: %s",
                  cols[2].out[0].detail);
    for (size_t i = 0; i < scn_scenario_count; i++) {
        const char *name = scn_scenarios[i].name;
        assert_no_error(cols, NCOLS, i);
        enum scn_result g = cols[0].out[i].result, n = cols[2].out[i].result;
        if ((SCN_CAUGHT == g || SCN_STALE == g) && (SCN_CAUGHT == n || SCN_STALE == n))
            ck_assert_msg(g == n, "%s: grdma %s but vmtrack(none) %s", name,
                          scn_result_name(g), scn_result_name(n));
        if (SCN_CAUGHT == g)
            ck_assert_msg(acceptable(n), "%s: grdma caught it, vmtrack(none) %s: %s", name,
                          scn_result_name(n), cols[2].out[i].detail);
        /* kmod, pass and uffd: what vmtrack claims for them */
        for (size_t c = 3; c <= 5; c++) {
            enum scn_result r = cols[c].out[i].result;
            if (SCN_UNAVAILABLE != r && SCN_ERROR != r && scn_vmtrack_claims(cols[c].variant, name))
                ck_assert_msg(acceptable(r), "%s / %s: %s: %s", cols[c].title, name,
                              scn_result_name(r), cols[c].out[i].detail);
        }
    }
    /* hooks next to Open MPI's own memory patcher: refused, never run as a second patcher */
    ck_assert_msg(!cols[NCOLS - 1].available, "vmtrack hooks ran next to Open MPI's patcher");
}

START_TEST(t_scenarios)
{
    struct column cols[] = {
        {&scn_provider_ompi_grdma, NULL, "grdma", {{0}}, 0},
        {&scn_provider_ompi_vmtrack, NULL, "vmtrack(auto)", {{0}}, 0},
        {&scn_provider_ompi_vmtrack, "none", "vmtrack none", {{0}}, 0},
        {&scn_provider_ompi_vmtrack, "kmod", "vmtrack kmod", {{0}}, 0},
        {&scn_provider_ompi_vmtrack, "pass", "vmtrack pass", {{0}}, 0},
        {&scn_provider_ompi_vmtrack, "uffd", "vmtrack uffd", {{0}}, 0},
        {&scn_provider_ompi_vmtrack, "hooks", "vmtrack hooks", {{0}}, 0},
    };
    const size_t ncols = sizeof(cols) / sizeof(cols[0]);
    ck_assert_uint_eq(ncols, NCOLS);
    ck_assert_uint_le(scn_scenario_count, 32);

    for (size_t c = 0; c < ncols; c++) {
        for (size_t i = 0; i < scn_scenario_count; i++) {
            struct scn_outcome *o = &cols[c].out[i];
            int ret = scn_run(&scn_scenarios[i], cols[c].p, cols[c].variant, 0, o);
            ck_assert_int_eq(ret, 0);
            if (SCN_UNAVAILABLE != o->result)
                cols[c].available = 1;
        }
    }

    printf("\n%-20s", "scenario");
    for (size_t c = 0; c < ncols; c++)
        printf(" %-14s", cols[c].title);
    printf("\n");
    for (size_t i = 0; i < scn_scenario_count; i++) {
        printf("%-20s", scn_scenarios[i].name);
        for (size_t c = 0; c < ncols; c++)
            printf(" %-14s", scn_result_name(cols[c].out[i].result));
        printf("\n");
    }
    for (size_t c = 0; c < ncols; c++) {
        for (size_t i = 0; i < scn_scenario_count; i++) {
            const struct scn_outcome *o = &cols[c].out[i];
            if (SCN_CAUGHT != o->result && o->detail[0]) {
                printf("  %s / %s: %s: %s\n", cols[c].title, scn_scenarios[i].name,
                       scn_result_name(o->result), o->detail);
                if (SCN_UNAVAILABLE == o->result)
                    break;   /* the same reason for every scenario */
            }
        }
    }
    fflush(stdout);

    ck_assert_msg(cols[0].available, "grdma unavailable: %s", cols[0].out[0].detail);
    struct mca_rcache_vmtrack_component_t *comp = vmt_ompi_test_component();
    ck_assert_ptr_nonnull(comp);
    if (comp->took_over)
        check_takeover_columns(cols);
    else
        check_patcher_columns(cols);
}
END_TEST

static int stress(const struct scn_provider *p, const char *variant,
                  struct scn_stress_result *r)
{
    struct scn_stress_opts o;
    memset(&o, 0, sizeof(o));
    const char *ms = getenv("SCN_STRESS_MS");
    o.duration_ms = ms ? (unsigned) atoi(ms) : 2000;
    o.min_writes = 100;
    o.max_ms = 60000;
    /* uffd hears of an munmap only after it, and another thread's mmap into the hole can hit
     * the stale entry before the monitor has run (doc/trackers.md): one mutator for uffd. */
    if (variant && !strcmp(variant, "uffd"))
        o.mutators = 1;
    memset(r, 0, sizeof(*r));
    int ret = scn_stress(p, variant, &o, r);
    printf("%-14s %lu writes checked, %lu address-space changes, %lu stale, %lu wrong%s%s\n",
           p->name, r->writes, r->mutations, r->stale, r->errors, r->detail[0] ? ": " : "",
           r->detail);
    fflush(stdout);
    return ret;
}

/* Worker threads register/deregister through the module while mutator threads unmap, remap,
 * free and malloc the same buffers (every change goes through libc, so Open MPI's hooks and
 * kmod both see it): no stale and no wrong write through vmtrack. grdma's figures are printed
 * for comparison (in a child of its own: grdma _exits when memory it holds is freed). */
START_TEST(t_stress)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (0 == pid) {
        struct scn_stress_result r;
        _exit(stress(&scn_provider_ompi_grdma, NULL, &r) < 0 ? 2 : 0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || 0 != WEXITSTATUS(st))
        printf("ompi-grdma     stress ended with %s %d\n",
               WIFEXITED(st) ? "status" : "signal",
               WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));

    /* The component with a cache that cannot be stale (pass): every judged write through the
     * framework must be right. In a child: the process's shared cache keeps its tracker. (Not
     * after a takeover: the shared cache is on hooks from MPI_Init on.) */
    struct mca_rcache_vmtrack_component_t *comp = vmt_ompi_test_component();
    ck_assert_ptr_nonnull(comp);
    fflush(stdout);
    if (!comp->took_over) {
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (0 == pid) {
            struct scn_stress_result rp;
            int rc = stress(&scn_provider_ompi_vmtrack, "pass", &rp);
            _exit(0 == rc && rp.writes > 0 && 0 == rp.stale && 0 == rp.errors ? 0 : 3);
        }
        st = 0;
        waitpid(pid, &st, 0);
        ck_assert_msg(WIFEXITED(st) && 0 == WEXITSTATUS(st),
                      "vmtrack (pass) through the framework: a judged write was wrong "
                      "(status %d)", st);
    }

    /* The default mode: hooks after a takeover (or kmod, or uffd) must never be stale. "none"
     * (opted out: Open MPI's patcher feeds it) has grdma's window: its hook runs before the
     * system call and has no after-event, so a thread can re-register the old pages in
     * between. Shown, not asserted. */
    struct scn_stress_result r;
    int ret = stress(&scn_provider_ompi_vmtrack, NULL, &r);
    ck_assert_msg(0 == ret, "stress: %s (%s)", strerror(-ret), r.detail);
    ck_assert_uint_gt(r.writes, 0);
    ck_assert_uint_gt(r.mutations, 0);
    const char *tracker = vmt_cache_tracker(vmt_shared());
    printf("[stress] tracker: %s\n", tracker ? tracker : "?");
    if (tracker && 0 == strcmp(tracker, "none")) {
        printf("ompi-vmtrack   tracker none (Open MPI's events): %lu stale, %lu wrong - not "
               "asserted: Open MPI's hook fires before the system call only\n", r.stale,
               r.errors);
        return;
    }
    ck_assert_msg(0 == r.stale && 0 == r.errors, "vmtrack (%s): %lu stale, %lu wrong: %s",
                  tracker ? tracker : "?", r.stale, r.errors, r.detail);
}
END_TEST

int main(int argc, char **argv)
{
    if (0 != vmt_ompi_test_mpi_init(&argc, &argv))
        return 99;
    Suite *s = suite_create("ompi-scenarios");
    TCase *tc = tcase_create("scenarios");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, t_scenarios);
    suite_add_tcase(s, tc);
    tc = tcase_create("stress");   /* CK_RUN_CASE=stress: test/ompi/stress_series.sh */
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, t_stress);
    suite_add_tcase(s, tc);
    int failed = check_run(s, CK_FORK);
    MPI_Finalize();
    return failed ? 1 : 0;
}
