/* Concurrency stress for every tracker available here that claims the changes it makes
 * (munmap/mmap, MAP_FIXED, MADV_DONTNEED, mremap, free/malloc): zero stale or wrong writes.
 * Bounded: SCN_STRESS_MS per tracker (default 2000), longer (at most 60 s) only where fewer
 * than 100 writes were checked by then (an emulated guest). */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scenarios/scenario.h"
#include "lib/check_run.h"

static void stress(const char *tracker)
{
    struct scn_stress_opts o;
    memset(&o, 0, sizeof(o));
    const char *ms = getenv("SCN_STRESS_MS");
    o.duration_ms = ms ? (unsigned)atoi(ms) : 2000;
    o.min_writes = 100;      /* slow machines (an emulated guest) run longer, up to max_ms */
    o.max_ms = 60000;
    struct scn_stress_result r;
    int ret = scn_stress(&scn_provider_vmtrack, tracker, &o, &r);
    if (ret == -ENOTSUP || ret == -ENODEV) {
        printf("SKIP tracker %s: not available here: %s\n", tracker, r.detail);
        return;
    }
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

/* Positive control: with nothing tracking the address space ("none") the same stress must
 * find stale or wrong writes, or it proves nothing. */
START_TEST(test_none_finds_stale)
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

START_TEST(test_kmod) { stress("kmod"); }
END_TEST
START_TEST(test_hooks) { stress("hooks"); }
END_TEST
START_TEST(test_uffd) { stress("uffd"); }
END_TEST
START_TEST(test_pass) { stress("pass"); }
END_TEST

int main(void)
{
    Suite *s = suite_create("stress");
    TCase *tc = tcase_create("trackers");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_none_finds_stale);
    tcase_add_test(tc, test_kmod);
    tcase_add_test(tc, test_hooks);
    tcase_add_test(tc, test_uffd);
    tcase_add_test(tc, test_pass);
    suite_add_tcase(s, tc);
    int failed = check_run(s, CK_FORK);
    return failed ? 1 : 0;
}
