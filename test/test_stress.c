/* Concurrency stress with one tracker (TRACKER; the programs test_stress_<tracker>) that claims
 * the changes the stress makes (munmap/mmap, MAP_FIXED, MADV_DONTNEED, mremap, free/malloc):
 * zero stale or wrong writes. With "none" it is the positive control: the same stress must find
 * stale writes. Bounded: SCN_STRESS_MS (default 2000), longer (at most 60 s) only where fewer
 * than 100 writes were checked by then (an emulated guest). A tracker that is not available
 * here skips the program (VMT_TEST_SKIP) with the reason. */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scenarios/scenario.h"
#include "lib/vmt_test.h"

#ifndef TRACKER
#error "TRACKER (the tracker under test, a string) must be defined"
#endif

static void stress(const char *tracker)
{
    struct scn_stress_opts o;
    memset(&o, 0, sizeof(o));
    const char *ms = getenv("SCN_STRESS_MS");
    o.duration_ms = ms ? (unsigned)atoi(ms) : 2000;
    o.min_writes = 100;      /* slow machines (an emulated guest) run longer, up to max_ms */
    o.max_ms = 60000;
    /* uffd hears of an munmap only after it: the unmapping thread waits for the monitor, but
     * another thread may map new memory into the hole and hit the stale entry before the
     * monitor has run (found by this stress, doc/trackers.md). One mutator keeps every
     * mapping after the unmap it replaces, which is what uffd can promise. */
    if (!strcmp(tracker, "uffd")) {
        o.mutators = 1;
        printf("uffd: one mutator (another thread's mmap into a hole before the monitor ran is "
               "a known uffd window, not checked here)\n");
    }
    struct scn_stress_result r;
    int ret = scn_stress(&scn_provider_vmtrack, tracker, &o, &r);
    ck_assert_msg(ret != -ENOTSUP && ret != -ENODEV,
                  "tracker %s unavailable to the stress, though main created a cache on it: %s",
                  tracker, r.detail);
    printf("%-6s %lu writes (%lu judged exactly), %lu address-space changes, %lu stale, "
           "%lu wrong%s%s\n", tracker, r.writes, r.judged, r.mutations, r.stale, r.errors,
           r.detail[0] ? ": " : "", r.detail);
    fflush(stdout);
    ck_assert_msg(ret == 0, "stress with %s: %s (%s)", tracker, strerror(-ret), r.detail);
    ck_assert_uint_gt(r.writes, 0);
    ck_assert_uint_gt(r.judged, 0);
    ck_assert_uint_gt(r.mutations, 0);
    ck_assert_msg(r.stale == 0 && r.errors == 0, "tracker %s: %lu stale, %lu wrong: %s", tracker,
                  r.stale, r.errors, r.detail);
}

START_TEST(no_stale_write_under_stress)
{
    stress(TRACKER);
}
END_TEST

/* Positive control: with nothing tracking the address space ("none") the same stress must
 * find stale or wrong writes, or it proves nothing. */
START_TEST(none_finds_stale)
{
    struct scn_stress_opts o;
    memset(&o, 0, sizeof(o));
    o.duration_ms = 1500;
    o.min_writes = 100000;   /* i.e. until the first stale write, or max_ms */
    o.max_ms = 60000;
    o.stop_on_stale = 1;
    struct scn_stress_result r;
    int ret = scn_stress(&scn_provider_vmtrack, "none", &o, &r);
    ck_assert_msg(ret == 0, "stress with none: %s (%s)", strerror(-ret), r.detail);
    printf("none   %lu writes checked, %lu address-space changes, %lu stale, %lu wrong "
           "(expected: nothing tracks)\n", r.writes, r.mutations, r.stale, r.errors);
    fflush(stdout);
    ck_assert_msg(r.stale + r.errors > 0, "the stress did not notice anything without a tracker");
}
END_TEST

int main(void)
{
    int rc = skip_unless_iouring("test_stress_" TRACKER);
    if (!rc)
        rc = skip_unless_tracker("test_stress_" TRACKER, TRACKER);
    if (rc)
        return rc;
    const TTest *const control[] = {none_finds_stale, NULL};
    const TTest *const stressed[] = {no_stale_write_under_stress, NULL};
    return check_run_cases("stress " TRACKER, 120, strcmp(TRACKER, "none") ? stressed : control);
}
