/* The scenario suite for every tracker available here: each tracker must catch every scenario
 * it claims (tools/scenarios/harness.c: scn_vmtrack_claims); trackers that are not available
 * say why and are skipped, never counted as passing. A positive control checks that the suite
 * does see a stale registration when nothing tracks the address space ("none"). */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "scenarios/scenario.h"
#include "lib/check_run.h"

static int g_ran_trackers;

static void run_tracker(const char *tracker)
{
    int failures = 0;
    for (size_t i = 0; i < scn_scenario_count; i++) {
        const struct scn_scenario *s = &scn_scenarios[i];
        struct scn_outcome o;
        ck_assert_int_eq(scn_run(s, &scn_provider_vmtrack, tracker, 60000, &o), 0);
        if (o.result == SCN_UNAVAILABLE) {
            printf("SKIP tracker %s: not available here: %s\n", tracker, o.detail);
            return;
        }
        int claimed = scn_vmtrack_claims(tracker, s->name);
        int bad = claimed && o.result != SCN_CAUGHT && o.result != SCN_NA;
        printf("%-6s %-20s %-12s%s%s%s\n", tracker, s->name, scn_result_name(o.result),
               claimed ? "" : " (not claimed)", o.detail[0] ? "  " : "", o.detail);
        failures += bad;
    }
    fflush(stdout);
    g_ran_trackers++;
    ck_assert_msg(failures == 0, "tracker %s failed %d scenario(s) it claims to catch", tracker,
                  failures);
}

START_TEST(test_kmod) { run_tracker("kmod"); }
END_TEST
START_TEST(test_hooks) { run_tracker("hooks"); }
END_TEST
START_TEST(test_uffd) { run_tracker("uffd"); }
END_TEST
START_TEST(test_pass) { run_tracker("pass"); }
END_TEST

/* Without tracking, new pages at the same address must be seen as stale: the suite can tell. */
START_TEST(test_none_is_stale)
{
    const char *names[] = {"mmap-fixed", "munmap-mmap", "madv-dontneed"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        struct scn_outcome o;
        ck_assert_int_eq(scn_run(scn_find(names[i]), &scn_provider_vmtrack, "none", 60000, &o), 0);
        printf("none   %-20s %s %s\n", names[i], scn_result_name(o.result), o.detail);
        if (o.result == SCN_NA)
            continue;
        ck_assert_msg(o.result == SCN_STALE,
                      "%s with tracker none: expected STALE (nothing tracks the address space), "
                      "got %s: %s", names[i], scn_result_name(o.result), o.detail);
    }
}
END_TEST

/* The harness itself: a scenario's crash or hang is contained and reported. */
static enum scn_result crash_run(const struct scn_provider *p, const char *v,
                                 struct scn_outcome *o)
{
    (void)p; (void)v; (void)o;
    *(volatile int *)0 = 1;
    return SCN_CAUGHT;
}
static enum scn_result hang_run(const struct scn_provider *p, const char *v,
                                struct scn_outcome *o)
{
    (void)p; (void)v; (void)o;
    for (;;)
        pause();
    return SCN_CAUGHT;
}
START_TEST(test_harness_contains)
{
    struct scn_scenario crash = {"crash", "segfaults", crash_run};
    struct scn_scenario hang = {"hang", "never returns", hang_run};
    struct scn_outcome o;
    ck_assert_int_eq(scn_run(&crash, &scn_provider_vmtrack, "pass", 10000, &o), 0);
    ck_assert_int_eq(o.result, SCN_CRASH);
    ck_assert_ptr_nonnull(strstr(o.detail, "signal"));
    ck_assert_int_eq(scn_run(&hang, &scn_provider_vmtrack, "pass", 300, &o), 0);
    ck_assert_int_eq(o.result, SCN_CRASH);
    ck_assert_ptr_nonnull(strstr(o.detail, "timed out"));
    ck_assert_int_eq(scn_vmtrack_claims("hooks", "raw-syscall-munmap"), 0);
    ck_assert_int_eq(scn_vmtrack_claims("hooks", "munmap-mmap"), 1);
    ck_assert_int_eq(scn_vmtrack_claims("uffd", "raw-syscall-munmap"), 1);
    ck_assert_int_eq(scn_vmtrack_claims("none", "munmap-mmap"), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("scenarios");
    TCase *tc = tcase_create("trackers");
    tcase_set_timeout(tc, 900);
    tcase_add_test(tc, test_harness_contains);
    tcase_add_test(tc, test_none_is_stale);
    tcase_add_test(tc, test_kmod);
    tcase_add_test(tc, test_hooks);
    tcase_add_test(tc, test_uffd);
    tcase_add_test(tc, test_pass);
    suite_add_tcase(s, tc);
    int failed = check_run(s, CK_FORK);
    return failed ? 1 : 0;
}
