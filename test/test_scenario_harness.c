/* The scenario harness itself (tools/scenarios/harness.c): a scenario that crashes or hangs is
 * contained and reported, and the table of what each tracker claims to catch (doc/scenarios.md)
 * answers as it should for a few entries. */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "scenarios/scenario.h"
#include "lib/vmt_test.h"

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
START_TEST(harness_contains_crash_and_hang)
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
    const TTest *const cases[] = {harness_contains_crash_and_hang, NULL};
    return check_run_cases("scenario harness", 60, cases);
}
