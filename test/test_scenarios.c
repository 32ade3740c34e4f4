/* The scenario suite with one tracker (TRACKER; the programs test_scenarios_<tracker>): the
 * tracker must catch every scenario it claims (tools/scenarios/harness.c: scn_vmtrack_claims).
 * With "none" it is the positive control: nothing tracks the address space, so the suite must
 * see a stale registration, or it could not tell one. A tracker that is not available here
 * skips the program (VMT_TEST_SKIP) with the reason; it is never counted as passing. */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "scenarios/scenario.h"
#include "lib/vmt_test.h"

#ifndef TRACKER
#error "TRACKER (the tracker under test, a string) must be defined"
#endif

static void run_tracker(const char *tracker)
{
    int failures = 0;
    for (size_t i = 0; i < scn_scenario_count; i++) {
        const struct scn_scenario *s = &scn_scenarios[i];
        struct scn_outcome o;
        ck_assert_int_eq(scn_run(s, &scn_provider_vmtrack, tracker, 60000, &o), 0);
        ck_assert_msg(o.result != SCN_UNAVAILABLE,
                      "%s: tracker %s unavailable to the suite, though main created a cache on "
                      "it: %s", s->name, tracker, o.detail);
        int claimed = scn_vmtrack_claims(tracker, s->name);
        int bad = claimed && o.result != SCN_CAUGHT && o.result != SCN_NA;
        printf("%-6s %-20s %-12s%s%s%s\n", tracker, s->name, scn_result_name(o.result),
               claimed ? "" : " (not claimed)", o.detail[0] ? "  " : "", o.detail);
        failures += bad;
    }
    fflush(stdout);
    ck_assert_msg(failures == 0, "tracker %s failed %d scenario(s) it claims to catch", tracker,
                  failures);
}

START_TEST(claimed_scenarios_caught)
{
    run_tracker(TRACKER);
}
END_TEST

/* Without tracking, new pages at the same address must be seen as stale: the suite can tell. */
START_TEST(none_is_stale)
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

int main(void)
{
    int rc = skip_unless_iouring("test_scenarios_" TRACKER);
    if (!rc)
        rc = skip_unless_tracker("test_scenarios_" TRACKER, TRACKER);
    if (rc)
        return rc;
    const TTest *const control[] = {none_is_stale, NULL};
    const TTest *const claims[] = {claimed_scenarios_caught, NULL};
    return check_run_cases("scenarios " TRACKER, 900, strcmp(TRACKER, "none") ? claims : control);
}
