/* UCX's own registration cache (ucs_rcache, io_uring fixed buffers) against the scenario suite,
 * without libvmtrack-ucx (UCX's own hooks) and with it, once per vmtrack tracker available.
 *
 * Run without arguments it is the driver: it runs itself once per configuration
 * (`--config ucx`, and `--config vmtrack:<tracker>` with LD_PRELOAD=libvmtrack-ucx.so and
 * VMTRACK_TRACKER=<tracker>), prints each configuration's Check results, then the scenario
 * table and the costs side by side. What is asserted:
 *   - ucx:               no scenario errors or crashes (UCX's results are reported as they are);
 *   - vmtrack:<tracker>: every scenario vmtrack's own cache catches with <tracker>
 *                        (scn_vmtrack_claims) is caught by UCX's rcache too, and with the
 *                        hooks tracker ucm_test_external_events(UCM_EVENT_VM_UNMAPPED) passes.
 * A configuration that cannot run here (no kernel module, no userfaultfd) prints why and is
 * skipped; if no configuration with the module could run the test exits VMT_TEST_SKIP (77). */
#define _GNU_SOURCE
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ucm/api/ucm.h>
#include <ucs/memory/rcache.h>

#include "provider_ucx.h"
#include "ucx_rcache_params.h"
#include "../lib/vmt_test.h"

#ifndef VMT_UCX_MODULE_PATH
#error "VMT_UCX_MODULE_PATH must name the built libvmtrack-ucx.so"
#endif

static const char *g_variant;             /* child: the configuration under test */
static enum scn_result g_res[64];
static char g_detail[64][240];
static int g_unavailable;
static char g_unavail_why[256];

/* ---- the scenarios ------------------------------------------------------------------- */
static int claims(const char *variant, const char *scenario)
{
    if (strncmp(variant, "vmtrack:", 8))
        return 0;
    return scn_vmtrack_claims(variant + 8, scenario);
}

START_TEST(scenario_as_claimed)
{
    const struct scn_scenario *s = &scn_scenarios[_i];
    struct scn_outcome o;
    ck_assert_int_eq(scn_run(s, &scn_provider_ucx, g_variant, 60000, &o), 0);
    g_res[_i] = o.result;
    snprintf(g_detail[_i], sizeof(g_detail[_i]), "%s", o.detail);
    if (o.result == SCN_UNAVAILABLE) {
        g_unavailable = 1;
        snprintf(g_unavail_why, sizeof(g_unavail_why), "%s", o.detail);
        return;
    }
    if (o.result == SCN_ERROR && !strncmp(o.detail, "before the change", 17)) {
        /* The first registration failed: the machine cannot register this kind of memory
         * (e.g. SysV shm for io_uring on older kernels). The driver accepts it only if UCX
         * without the module failed the same way. */
        snprintf(g_detail[_i], sizeof(g_detail[_i]), "ENV %.200s", o.detail);
        return;
    }
    ck_assert_msg(o.result != SCN_ERROR && o.result != SCN_CRASH, "%s with %s: %s: %s",
                  s->name, g_variant, scn_result_name(o.result), o.detail);
    if (claims(g_variant, s->name))
        ck_assert_msg(o.result == SCN_CAUGHT || o.result == SCN_NA,
                      "%s with %s: UCX's rcache handed out a stale registration that vmtrack's "
                      "own cache catches with the same tracker (%s: %s)",
                      s->name, g_variant, scn_result_name(o.result), o.detail);
}
END_TEST

/* With the hooks tracker every unmap reaches UCX in the unmapping thread: ucm's own check of
 * external events must pass. (kmod/uffd report only watched ranges: see doc/ucx.md.) */
START_TEST(external_events)
{
    char tracker[32], why[256];
    int mode = ucx_module_state(tracker, sizeof(tracker), why, sizeof(why));
    if (mode <= 0) {
        printf("  external events: module off (%s)\n", why);
        return;
    }
    ucs_status_t st = ucm_test_external_events(UCM_EVENT_VM_UNMAPPED);
    printf("  ucm_test_external_events(VM_UNMAPPED) with %s: %s\n", tracker,
           ucs_status_string(st));
    printf("NUM external_events %s\n", st == UCS_OK ? "ok" : "unsupported");
    if (!strcmp(tracker, "hooks"))
        ck_assert_msg(st == UCS_OK, "ucm_test_external_events failed with the hooks tracker: %s",
                      ucs_status_string(st));
}
END_TEST

/* Workers get/write/check/put while mutators unmap, remap, free and malloc the same buffers
 * (tools/scenarios/stress.c): with the module no checked write may find old bytes. */
START_TEST(stress_no_stale_write)
{
    struct scn_stress_opts o = {.workers = 2, .mutators = 2, .slots = 16, .duration_ms = 2000};
    /* uffd hears of an munmap only after it, and another thread's mmap into the hole can hit
     * the stale entry before the monitor has run (doc/trackers.md): one mutator for uffd. */
    if (!strcmp(g_variant, "vmtrack:uffd"))
        o.mutators = 1;
    struct scn_stress_result r;
    memset(&r, 0, sizeof(r));
    /* in a child, so that a crash is reported as one, not taken for the whole configuration */
    struct { int ret; struct scn_stress_result r; } *shm =
        mmap(NULL, sizeof(*shm), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(shm, MAP_FAILED);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        shm->ret = scn_stress(&scn_provider_ucx, g_variant, &o, &shm->r);
        _exit(0);
    }
    int wst = 0;
    while (waitpid(pid, &wst, 0) < 0 && errno == EINTR)
        ;
    int ret = shm->ret;
    r = shm->r;
    munmap(shm, sizeof(*shm));
    /* Known, not ours: the uffd tracker's UFFDIO_REGISTER of a page-rounded range splits the
     * VMAs around it, the stress's own mremap of a buffer that now spans two VMAs fails with
     * EFAULT, and the stress then writes to a buffer it no longer has (SIGSEGV). The same
     * happens with vmtrack's own cache (test/stress_no_stale_write). Reported; shown, never a pass. */
    if (!strcmp(g_variant, "vmtrack:uffd") &&
        (!WIFEXITED(wst) || (r.errors && !strncmp(r.detail, "mutator:", 8)))) {
        printf("  stress: NOT CHECKED with uffd: %s %s (known uffd tracker issue: VMA split -> "
               "mremap EFAULT in the stress's mutator)\n",
               WIFEXITED(wst) ? "mutator error:" : "the stress child died,", r.detail);
        ck_assert_msg(r.stale == 0, "%lu stale writes before the uffd issue", r.stale);
        return;
    }
    /* Known, not ours either: on Linux 6.1 (the guest's kernel) io_uring cannot pin pages that
     * are not present inside a range the uffd tracker registered, so a get fails with EFAULT
     * (doc/scenarios.md, "What the suite found"). Stale writes are still checked. */
    if (!strcmp(g_variant, "vmtrack:uffd") && WIFEXITED(wst) && r.errors &&
        !strncmp(r.detail, "get(", 4) && strstr(r.detail, "Bad address")) {
        printf("  stress: NOT CHECKED with uffd: %s (known uffd tracker issue: io_uring of this "
               "kernel cannot pin non-present pages in a uffd-registered range)\n", r.detail);
        ck_assert_msg(r.stale == 0, "%lu stale writes before the uffd issue", r.stale);
        return;
    }
    ck_assert_msg(WIFEXITED(wst), "the stress child died (signal %d)",
                  WIFSIGNALED(wst) ? WTERMSIG(wst) : 0);
    if (ret == -ENOTSUP || ret == -ENODEV) {
        printf("  stress: unavailable: %s\n", r.detail);
        return;
    }
    printf("  stress: %lu writes, %lu judged, %lu stale, %lu errors, %lu mutations %s\n",
           r.writes, r.judged, r.stale, r.errors, r.mutations, r.detail);
    printf("NUM stress_stale %lu/%lu\n", r.stale, r.judged);
    ck_assert_int_eq(ret, 0);
    ck_assert_msg(r.judged > 0, "the stress judged no write");
    if (strncmp(g_variant, "vmtrack:", 8)) {
        /* UCX alone: reported as it is (its hooks send the event before the system call, so
         * another thread can register the old pages in between: a stale write now and then) */
        if (r.stale || r.errors)
            printf("  stress: UCX alone: %lu stale, %lu errors (%s)\n", r.stale, r.errors,
                   r.detail);
        return;
    }
    ck_assert_msg(r.stale == 0, "%lu of %lu judged writes found a stale registration (%s)",
                  r.stale, r.judged, r.detail);
    ck_assert_msg(r.errors == 0, "stress errors: %lu (%s)", r.errors, r.detail);
}
END_TEST

/* ---- numbers ------------------------------------------------------------------------- */
static ucs_status_t null_reg(void *c, ucs_rcache_t *r, void *a, ucs_rcache_region_t *g,
                             uint16_t f)
{
    (void)c; (void)r; (void)a; (void)g; (void)f;
    return UCS_OK;
}
static void null_dereg(void *c, ucs_rcache_t *r, ucs_rcache_region_t *g)
{
    (void)c; (void)r; (void)g;
}
static const ucs_rcache_ops_t null_ops = {.mem_reg = null_reg, .mem_dereg = null_dereg};

/* An rcache whose registrations do nothing, regions aligned to `alignment`; NULL if UCX
 * refused it. */
static ucs_rcache_t *null_rcache(const char *name, size_t alignment)
{
    ucs_rcache_params_t p =
        ucx_test_rcache_params(sizeof(ucs_rcache_region_t), alignment, &null_ops, NULL);
    ucs_rcache_t *rc;
    return ucs_rcache_create(&p, name, NULL, &rc) == UCS_OK ? rc : NULL;
}

/* Unmapped memory: with a tracker that watches (kmod, uffd) the module cannot watch it, so it
 * must refuse the registration even though this rcache's own mem_reg would accept anything. */
START_TEST(unmapped_memory_not_cached)
{
    char tracker[32], why[256];
    int mode = ucx_module_state(tracker, sizeof(tracker), why, sizeof(why));
    if (mode != 2) {
        printf("  unmapped memory: not applicable (module mode %d, %s)\n", mode, tracker);
        return;
    }
    void *p = map_anon(4 * page);
    ck_assert_int_eq(munmap(p, 4 * page), 0);
    ucs_rcache_t *rc = null_rcache("null", page);
    ck_assert_ptr_nonnull(rc);
    ucs_rcache_region_t *r;
    ucs_status_t st = ucs_rcache_get(rc, p, 4 * page, PROT_READ, NULL, &r);
    if (st == UCS_OK)
        ucs_rcache_region_put(rc, r);
    ucs_rcache_destroy(rc);
    ck_assert_msg(st != UCS_OK, "a region of unmapped memory was registered and cached");
}
END_TEST

/* Watch mode, two regions that share a page (UCX's ib md aligns to 16 bytes): hitting them in
 * turn must stay hits, not re-register one another's range every time. */
START_TEST(shared_page_regions)
{
    char tracker[32], why[256];
    if (ucx_module_state(tracker, sizeof(tracker), why, sizeof(why)) != 2) {
        printf("  shared page: not applicable (%s)\n", tracker);
        return;
    }
    ucs_rcache_t *rc = null_rcache("shared-page", 16);
    ck_assert_ptr_nonnull(rc);
    char *b = map_anon(4 * page);
    struct { size_t sz; uint64_t events, event_bytes, rcaches, watches, stale; } a = {.sz = sizeof(a)},
        z = {.sz = sizeof(a)};
    int (*stats)(void *) = (int (*)(void *))dlsym(RTLD_DEFAULT, "vmt_ucx_stats_get");
    ck_assert_ptr_nonnull(stats);
    ucs_rcache_region_t *r;
    for (int i = 0; i < 2; i++) {   /* register both once */
        ck_assert_int_eq(ucs_rcache_get(rc, b + 256, page, PROT_READ, NULL, &r), UCS_OK);
        ucs_rcache_region_put(rc, r);
        ck_assert_int_eq(ucs_rcache_get(rc, b + page + 512, page, PROT_READ, NULL, &r), UCS_OK);
        ucs_rcache_region_put(rc, r);
    }
    stats(&a);
    for (int i = 0; i < 1000; i++) {
        ck_assert_int_eq(ucs_rcache_get(rc, b + 256, page, PROT_READ, NULL, &r), UCS_OK);
        ucs_rcache_region_put(rc, r);
        ck_assert_int_eq(ucs_rcache_get(rc, b + page + 512, page, PROT_READ, NULL, &r), UCS_OK);
        ucs_rcache_region_put(rc, r);
    }
    stats(&z);
    ucs_rcache_destroy(rc);
    munmap(b, 4 * page);
    printf("  shared page: %lu watches, %lu stale in 2000 hits\n",
           (unsigned long)(z.watches - a.watches), (unsigned long)(z.stale - a.stale));
    ck_assert_msg(z.watches - a.watches == 0 && z.stale - a.stale == 0,
                  "regions sharing a page re-registered %lu times in 2000 hits",
                  (unsigned long)(z.watches - a.watches));
}
END_TEST

/* ns per munmap of 64 KiB that was (registered=1) or was not registered in an rcache: the
 * best of 7 batches, so that other load on the machine disturbs it less */
static double munmap_batch(ucs_rcache_t *rc, int registered, int n);
static double munmap_cost(ucs_rcache_t *rc, int registered, int n)
{
    double best = -1;
    for (int b = 0; b < 7; b++) {
        double v = munmap_batch(rc, registered, n / 7 + 1);
        if (v >= 0 && (best < 0 || v < best))
            best = v;
    }
    return best;
}

static double munmap_batch(ucs_rcache_t *rc, int registered, int n)
{
    const size_t len = 64 << 10;
    double total = 0;
    for (int i = 0; i < n; i++) {
        char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            return -1;
        p[0] = 1;
        if (registered) {
            ucs_rcache_region_t *r;
            if (ucs_rcache_get(rc, p, len, PROT_READ, NULL, &r) != UCS_OK)
                return -1;
            ucs_rcache_region_put(rc, r);
        }
        double t0 = thread_cpu_ns();
        munmap(p, len);
        total += thread_cpu_ns() - t0;
    }
    return total / n;
}

/* In the guest rig (qemu TCG) costs mean nothing and every operation is ~50x slower: measure
 * little there, the point is correctness. */
static int in_vm(void)
{
    return getenv("VMT_IN_VM") != NULL;   /* set by test/vm/run */
}

static void print_numbers(void)
{
    const int scale = in_vm() ? 20 : 1;
    double raw = munmap_cost(NULL, 0, 20000 / scale);   /* no rcache yet */
    ucs_rcache_t *rc = null_rcache("null", page);
    if (!rc) {
        printf("  numbers: ucs_rcache_create failed\n");
        return;
    }
    double plain = munmap_cost(rc, 0, 20000 / scale);
    double reg = munmap_cost(rc, 1, 5000 / scale);

    /* hit: get+put of one cached region */
    const size_t len = 64 << 10;
    char *b = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ucs_rcache_region_t *r;
    double hit = -1;
    if (b != MAP_FAILED && ucs_rcache_get(rc, b, len, PROT_READ, NULL, &r) == UCS_OK) {
        ucs_rcache_region_put(rc, r);
        const int n = 200000 / scale;
        for (int k = 0; k < 7; k++) {
            double t0 = thread_cpu_ns();
            for (int i = 0; i < n; i++) {
                if (ucs_rcache_get(rc, b, len, PROT_READ, NULL, &r) != UCS_OK)
                    break;
                ucs_rcache_region_put(rc, r);
            }
            double v = (thread_cpu_ns() - t0) / n;
            if (hit < 0 || v < hit)
                hit = v;
        }
    }
    ucs_rcache_destroy(rc);
    if (b != MAP_FAILED)
        munmap(b, len);
    printf("NUM munmap_no_rcache_ns %.0f\n", raw);
    printf("NUM munmap_ns %.0f\n", plain);
    printf("NUM munmap_registered_ns %.0f\n", reg);
    printf("NUM hit_ns %.1f\n", hit);
    struct {
        size_t sz;
        uint64_t events, event_bytes, rcaches, watches, stale;
    } ms = {.sz = sizeof(ms)};
    int (*stats)(void *) = (int (*)(void *))dlsym(RTLD_DEFAULT, "vmt_ucx_stats_get");
    if (stats && stats(&ms) == 0)
        printf("NUM module_events_stale %lu/%lu\n", (unsigned long)ms.events,
               (unsigned long)ms.stale);
}

/* ---- one configuration (child) ------------------------------------------------------- */
static int run_config(const char *variant)
{
    g_variant = variant;
    Suite *su = suite_create(variant);
    TCase *tc = tcase_create("scenarios");
    tcase_set_timeout(tc, 900);
    tcase_add_loop_test(tc, scenario_as_claimed, 0, (int)scn_scenario_count);
    tcase_add_test(tc, external_events);
    tcase_add_test(tc, unmapped_memory_not_cached);
    tcase_add_test(tc, shared_page_regions);
    tcase_add_test(tc, stress_no_stale_write);
    suite_add_tcase(su, tc);
    /* scn_run forks per scenario already */
    int failed = check_run(su, CK_NOFORK);

    for (size_t i = 0; i < scn_scenario_count; i++)
        printf("ROW %s %s %s\n", scn_scenarios[i].name,
               strncmp(g_detail[i], "ENV ", 4) ? scn_result_name(g_res[i]) : "ENV",
               g_detail[i]);
    if (g_unavailable) {
        printf("UNAVAILABLE %s\n", g_unavail_why);
        fflush(stdout);
        return VMT_TEST_SKIP;
    }
    print_numbers();
    fflush(stdout);
    return failed ? 1 : 0;
}

/* ---- driver -------------------------------------------------------------------------- */
#define NCONF 4
static const char *conf_names[NCONF] = {"ucx", "vmtrack:hooks", "vmtrack:uffd", "vmtrack:kmod"};
static char results[NCONF][64][64];
static char nums[NCONF][8][2][64];
static int nnums[NCONF];
static int status_of[NCONF];

static int quiet;

/* keep the smaller of two figures (costs: the least disturbed run is the closest to the truth) */
static void keep_num(int ci, const char *key, const char *val)
{
    for (int i = 0; i < nnums[ci]; i++) {
        if (strcmp(nums[ci][i][0], key))
            continue;
        char *e1, *e2;
        double a = strtod(nums[ci][i][1], &e1), b = strtod(val, &e2);
        if (*e1 == '\0' && *e2 == '\0' && b < a)
            snprintf(nums[ci][i][1], 64, "%s", val);
        return;
    }
    if (nnums[ci] < 8) {
        snprintf(nums[ci][nnums[ci]][0], 64, "%s", key);
        snprintf(nums[ci][nnums[ci]][1], 64, "%s", val);
        nnums[ci]++;
    }
}

static int spawn(int ci, const char *mode)
{
    const char *variant = conf_names[ci];
    int fds[2];
    if (pipe(fds) < 0)
        return -errno;
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        if (strncmp(variant, "vmtrack:", 8) == 0) {
            setenv("LD_PRELOAD", VMT_UCX_MODULE_PATH, 1);
            setenv("VMTRACK_TRACKER", variant + 8, 1);
            setenv("UCX_MEM_MMAP_HOOK_MODE", "none", 1);   /* see doc/ucx.md */
        } else {
            unsetenv("LD_PRELOAD");
            unsetenv("UCX_MEM_MMAP_HOOK_MODE");
        }
        execl("/proc/self/exe", "test_ucx_rcache", mode, variant, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    char line[1024];
    while (f && fgets(line, sizeof(line), f)) {
        char a[64], b[64];
        if (sscanf(line, "ROW %63s %63s", a, b) == 2) {
            for (size_t i = 0; i < scn_scenario_count; i++)
                if (!strcmp(scn_scenarios[i].name, a))
                    snprintf(results[ci][i], sizeof(results[ci][i]), "%s", b);
        } else if (sscanf(line, "NUM %63s %63s", a, b) == 2) {
            keep_num(ci, a, b);
        }
        if (!quiet)
            printf("[%s] %s", variant, line);
    }
    if (f)
        fclose(f);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static const char *num(int ci, const char *key)
{
    for (int i = 0; i < nnums[ci]; i++)
        if (!strcmp(nums[ci][i][0], key))
            return nums[ci][i][1];
    return "-";
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--config"))
        return run_config(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "--expect-off")) {
        /* the module must be loaded, off, and say why */
        char tracker[32], why[256];
        int mode = ucx_module_state(tracker, sizeof(tracker), why, sizeof(why));
        printf("  module mode %d (%s): %s\n", mode, tracker, why);
        return mode == 0 && strstr(why, argv[2]) ? 0 : 1;
    }
    if (argc == 3 && !strcmp(argv[1], "--numbers")) {
        print_numbers();
        return 0;
    }
    if (argc != 1) {
        fprintf(stderr, "usage: %s [--config ucx|vmtrack:<tracker>]\n", argv[0]);
        return 2;
    }
    if (access(VMT_UCX_MODULE_PATH, R_OK) != 0) {
        return test_skip("%s not built: %s", VMT_UCX_MODULE_PATH, strerror(errno));
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    int failed = 0, module_ran = 0;

    /* Bad set-ups: the module must stay off and say why (UCX then keeps its own hooks). */
    static const struct { const char *env[3][2]; const char *why; } bad[] = {
        {{{"UCX_MEM_MMAP_HOOK_MODE", NULL}, {"VMTRACK_UCX", NULL}, {NULL, NULL}},
         "already patched libc"},
        {{{"UCX_MEM_MMAP_HOOK_MODE", "none"}, {"VMTRACK_UCX", "maybe"}, {NULL, NULL}},
         "is not 1 or 0"},
        {{{"UCX_MEM_MMAP_HOOK_MODE", "none"}, {"VMTRACK_UCX", "0"}, {NULL, NULL}},
         "VMTRACK_UCX=0"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        pid_t pid = fork();
        if (pid == 0) {
            setenv("LD_PRELOAD", VMT_UCX_MODULE_PATH, 1);
            setenv("VMTRACK_TRACKER", "hooks", 1);
            for (int k = 0; bad[i].env[k][0]; k++) {
                if (bad[i].env[k][1])
                    setenv(bad[i].env[k][0], bad[i].env[k][1], 1);
                else
                    unsetenv(bad[i].env[k][0]);
            }
            execl("/proc/self/exe", "test_ucx_rcache", "--expect-off", bad[i].why, (char *)NULL);
            _exit(127);
        }
        int st = 0;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
        printf("%s: module off with \"%s\" in its reason\n", ok ? "PASS" : "FAIL", bad[i].why);
        failed += !ok;
    }
    for (int ci = 0; ci < NCONF; ci++) {
        status_of[ci] = spawn(ci, "--config");
        printf("config %s: exit status %d\n", conf_names[ci], status_of[ci]);
        if (status_of[ci] == VMT_TEST_SKIP)
            printf("SKIP %s: not available here (reason above)\n", conf_names[ci]);
        else if (status_of[ci] != 0)
            failed++;
        else if (ci > 0)
            module_ran++;
    }

    /* the costs twice more, the configurations taking turns, keeping each one's best */
    quiet = 1;
    for (int round = 0; round < (in_vm() ? 0 : 2); round++)
        for (int ci = 0; ci < NCONF; ci++)
            if (status_of[ci] != VMT_TEST_SKIP)
                spawn(ci, "--numbers");
    quiet = 0;

    printf("\nUCX ucs_rcache (io_uring fixed buffers) against the scenario suite:\n");
    printf("%-20s", "scenario");
    for (int ci = 0; ci < NCONF; ci++)
        printf(" %-14s", conf_names[ci]);
    printf("\n");
    for (size_t i = 0; i < scn_scenario_count; i++) {
        printf("%-20s", scn_scenarios[i].name);
        for (int ci = 0; ci < NCONF; ci++)
            printf(" %-14s", status_of[ci] == VMT_TEST_SKIP ? "unavailable"
                             : results[ci][i][0] ? results[ci][i] : "?");
        printf("\n");
    }
    printf("\nCosts (ns; one run):\n%-34s", "");
    for (int ci = 0; ci < NCONF; ci++)
        printf(" %-14s", conf_names[ci]);
    printf("\n");
    const char *keys[][2] = {
        {"munmap_no_rcache_ns", "munmap 64K, no rcache yet"},
        {"munmap_ns", "munmap 64K, not registered"},
        {"munmap_registered_ns", "munmap 64K, registered in rcache"},
        {"hit_ns", "ucs_rcache_get+put hit"},
        {"external_events", "ucm_test_external_events"},
        {"stress_stale", "stress: stale/judged writes"},
        {"module_events_stale", "module: events/stale hits"},
    };
    for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
        printf("%-34s", keys[k][1]);
        for (int ci = 0; ci < NCONF; ci++)
            printf(" %-14s", num(ci, keys[k][0]));
        printf("\n");
    }
    /* ENV (the first registration failed) is accepted only where UCX alone failed alike */
    for (size_t i = 0; i < scn_scenario_count; i++)
        for (int ci = 1; ci < NCONF; ci++)
            if (status_of[ci] != VMT_TEST_SKIP && !strcmp(results[ci][i], "ENV") &&
                strcmp(results[0][i], "ENV")) {
                printf("FAIL %s: %s could not register the buffer with the module, but could "
                       "without it (%s)\n", conf_names[ci], scn_scenarios[i].name,
                       results[0][i]);
                failed++;
            }
    if (failed)
        return 1;
    if (!module_ran) {
        return test_skip("no configuration with libvmtrack-ucx could run here");
    }
    return 0;
}
