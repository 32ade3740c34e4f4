/* The kmod tracker through the public API (a fake device): hits while nothing changed, no hit
 * once the kernel changed the pages (munmap, raw munmap, madvise, MAP_FIXED), hits across
 * mprotect, events drained into invalidations and subscribers, fork, event overflow, limit,
 * a range registered again reusing its parked watch, and the module's change log through
 * vmt_changes_mark / vmt_changed_since (raw system calls included, which hooks' log misses).
 * Needs /dev/vmtrack (run under test/vm/run); skipped (exit 77) without it. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vmtrack.h>

#include "../lib/kernel_tracker_cases.h"
#include "../lib/vmt_test.h"

/* libfabric's monitor's question: pages pinned after a mark, watched by a vmt_get, unchanged
 * since the mark? The module's log answers it for any change, raw system calls included. */
START_TEST(change_log_answers_for_any_change)
{
	struct fixture f;
	size_t len = 4 * 4096;
	char *a = map_filled_at(NULL, len, 7), *b = map_filled_at(NULL, len, 7);
	uint64_t mark, second;
	char report[4096];

	fixture_open(&f, "kmod", 0);
	ck_assert_int_eq(vmt_changes_mark(f.cache, &mark), 0);
	ck_assert_uint_ne(mark, 0);
	fixture_get_put(&f, a, len);
	ck_assert_int_eq(vmt_changed_since(f.cache, mark, a, len), 0);
	ck_assert_int_eq(syscall(SYS_munmap, b, len), 0);
	ck_assert_int_eq(vmt_changed_since(f.cache, mark, b, len), 1);
	ck_assert_int_eq(vmt_changed_since(f.cache, mark, a, len), 0);
	ck_assert_int_eq(vmt_changes_mark(f.cache, &second), 0);
	ck_assert_uint_gt(second, mark);
	ck_assert_int_eq(madvise(a, 4096, MADV_DONTNEED), 0);
	ck_assert_int_eq(vmt_changed_since(f.cache, second, a, len), 1);
	ck_assert_int_eq(vmt_changed_since(f.cache, second, a + 4096, len - 4096), 0);
	ck_assert_int_eq(vmt_changed_since(f.cache, second + 1000, a, len), -EINVAL);
	vmt_cache_tracker_report(f.cache, report, sizeof report);
	ck_assert_msg(strstr(report, "change log: on"), "%s", report);
	fixture_close(&f);
	munmap(a, len);
}
END_TEST

START_TEST(report_names_kmod)
{
	struct fixture f;
	char buf[2048];

	fixture_open(&f, "kmod", 0);
	ck_assert_int_gt(vmt_cache_tracker_report(f.cache, buf, sizeof(buf)), 0);
	ck_assert_msg(strstr(buf, "kmod: in use") != NULL, "report: %s", buf);
	fixture_close(&f);
}
END_TEST

START_TEST(hit_until_changed)
{
	/* change 0: munmap, 1: raw munmap, 2: madvise DONTNEED, 3: MAP_FIXED over it */
	int how = _i;
	struct fixture f;
	size_t len = 4 * page;
	char *buf;
	struct vmt_stats s;
	void *h1, *h2;

	fixture_open(&f, "kmod", 0);
	buf = map_filled_at(NULL, len, 7);
	h1 = fixture_get_put(&f, buf, len);
	ck_assert_ptr_eq(fixture_get_put(&f, buf + page, page), h1);	/* a hit */
	s = stats_of(f.cache);
	ck_assert_uint_eq(s.registrations, 1);
	ck_assert_uint_ge(s.hits, 1);
	switch (how) {
	case 0:
		munmap(buf, len);
		map_filled_at(buf, len, 7);
		break;
	case 1:
		ck_assert_int_eq(syscall(SYS_munmap, buf, len), 0);
		map_filled_at(buf, len, 7);
		break;
	case 2:
		ck_assert_int_eq(madvise(buf + page, page, MADV_DONTNEED), 0);
		break;
	case 3:
		ck_assert_ptr_eq(mmap(buf + 2 * page, page, PROT_READ | PROT_WRITE,
				      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0), buf + 2 * page);
		break;
	}
	/* no event drained yet: the word alone must make this a miss (a new registration;
	 * the fake's record may reuse the old one's address, so count instead) */
	h2 = fixture_get_put(&f, buf, len);
	(void)h2;
	s = stats_of(f.cache);
	ck_assert_uint_eq(s.registrations, 2);
	ck_assert_int_eq(atomic_load(&f.fake.regs), 2);
	ck_assert_int_eq(vmt_flush(f.cache), 0);
	ck_assert_int_eq(atomic_load(&f.fake.live), 0);
	munmap(buf, len);
	fixture_close(&f);
}
END_TEST

START_TEST(unmapped_is_efault)
{
	struct fixture f;
	struct vmt_reg *r;
	char *buf;

	fixture_open(&f, "kmod", 0);
	buf = map_filled_at(NULL, 2 * page, 7);
	fixture_get_put(&f, buf, 2 * page);
	munmap(buf, 2 * page);
	ck_assert_int_eq(vmt_get(f.dev, buf, 2 * page, VMT_ACCESS_READ, &r), -EFAULT);
	fixture_close(&f);
}
END_TEST

/* With a module that checks the mapping in its watch, that is the only mapped check: a range
 * unmapped while its watch is parked, and one over a cached neighbour that went, are refused
 * all the same. */
START_TEST(unmapped_while_parked_is_efault)
{
	struct fixture f;
	struct vmt_reg *r;
	size_t len = 4 * page;
	char *buf;

	fixture_open(&f, "kmod", 0);
	buf = map_filled_at(NULL, 3 * len, 7);
	fixture_get_put(&f, buf, len);
	ck_assert_int_eq(vmt_flush(f.cache), 0);	/* its watch is parked */
	munmap(buf, len);
	ck_assert_int_eq(vmt_get(f.dev, buf, len, VMT_ACCESS_READ, &r), -EFAULT);
	/* a cached neighbour unmapped: a request touching it merges with nothing that is gone,
	 * and one reaching into the hole is refused */
	fixture_get_put(&f, buf + 2 * len, len);
	munmap(buf + 2 * len, len);
	ck_assert_int_eq(vmt_get(f.dev, buf + len, len, VMT_ACCESS_READ, &r), 0);
	vmt_put(r);
	ck_assert_int_eq(vmt_get(f.dev, buf + len, 2 * len, VMT_ACCESS_READ, &r), -EFAULT);
	ck_assert_int_eq(vmt_flush(f.cache), 0);
	ck_assert_int_eq(atomic_load(&f.fake.live), 0);
	munmap(buf, 3 * len);
	fixture_close(&f);
}
END_TEST

START_TEST(mprotect_keeps_hits)
{
	struct fixture f;
	char *buf;
	void *h;

	fixture_open(&f, "kmod", 0);
	buf = map_filled_at(NULL, 4 * page, 7);
	h = fixture_get_put(&f, buf, 4 * page);
	ck_assert_int_eq(mprotect(buf, 4 * page, PROT_READ), 0);
	ck_assert_int_eq(mprotect(buf, 4 * page, PROT_READ | PROT_WRITE), 0);
	ck_assert_ptr_eq(fixture_get_put(&f, buf, 4 * page), h);
	ck_assert_uint_eq(stats_of(f.cache).registrations, 1);
	munmap(buf, 4 * page);
	fixture_close(&f);
}
END_TEST

START_TEST(events_reach_index_and_subscribers)
{
	check_changes_reach_index_and_subscribers("kmod", HEARD_THE_CHANGE);
}
END_TEST

START_TEST(fork_child_tracks_itself)
{
	check_fork_child_tracks_itself("kmod");
}
END_TEST

static int set_param(const char *name, unsigned val, unsigned *old)
{
	char path[128], b[32];
	FILE *fp;

	snprintf(path, sizeof(path), "/sys/module/vmtrack/parameters/%s", name);
	fp = fopen(path, "r");
	if (!fp || !fgets(b, sizeof(b), fp)) {
		if (fp)
			fclose(fp);
		return -1;
	}
	fclose(fp);
	*old = (unsigned)strtoul(b, NULL, 10);
	fp = fopen(path, "w");
	if (!fp)
		return -1;
	fprintf(fp, "%u\n", val);
	return fclose(fp);
}

START_TEST(overflow_drops_everything)
{
	enum { N = 48 };
	struct fixture f;
	unsigned old;
	char *buf;
	int i;

	if (set_param("max_events", 16, &old)) {
		printf("overflow_drops_everything: module parameters not writable: not checked\n");
		return;
	}
	fixture_open(&f, "kmod", 0);
	set_param("max_events", old, &old);
	buf = map_filled_at(NULL, 2 * N * page, 7);
	for (i = 0; i < N; i++)	/* every other page: no merging */
		fixture_get_put(&f, buf + 2 * i * page, page);
	ck_assert_uint_eq(stats_of(f.cache).entries, N);
	for (i = 0; i < N; i++)
		munmap(buf + 2 * i * page, page);
	ck_assert_int_eq(vmt_flush(f.cache), 0);
	ck_assert_uint_eq(stats_of(f.cache).entries, 0);
	ck_assert_int_eq(atomic_load(&f.fake.live), 0);
	munmap(buf, 2 * N * page);
	fixture_close(&f);
}
END_TEST

START_TEST(limit_serves_uncached)
{
	enum { N = 12 };
	struct fixture f;
	unsigned old;
	char *buf;
	int i;

	if (set_param("max_watches", 4, &old)) {
		printf("limit_serves_uncached: module parameters not writable: not checked\n");
		return;
	}
	fixture_open(&f, "kmod", 0);
	set_param("max_watches", old, &old);
	buf = map_filled_at(NULL, 2 * N * page, 7);
	for (i = 0; i < N; i++)	/* every other page: no merging */
		fixture_get_put(&f, buf + 2 * i * page, page);
	ck_assert_uint_le(stats_of(f.cache).entries, 4);
	ck_assert_uint_ge(stats_of(f.cache).uncached, N - 4);
	munmap(buf, 2 * N * page);
	ck_assert_int_eq(vmt_flush(f.cache), 0);
	fixture_close(&f);
}
END_TEST

/* The tracker report's "watches reused: N". */
static unsigned long watches_reused(struct fixture *f)
{
	char buf[4096];
	const char *at;

	ck_assert_int_gt(vmt_cache_tracker_report(f->cache, buf, sizeof(buf)), 0);
	at = strstr(buf, "watches reused: ");
	ck_assert_msg(at != NULL, "report: %s", buf);
	return strtoul(at + strlen("watches reused: "), NULL, 10);
}

/* A range registered again at the same place, unchanged, reuses its parked watch (no system
 * call); one changed while parked gets a new watch; either way the next change is caught. */
START_TEST(a_range_registered_again_reuses_its_watch)
{
	struct fixture f;
	size_t len = 4 * page;
	char *buf;

	fixture_open(&f, "kmod", 0);
	buf = map_filled_at(NULL, len, 7);
	fixture_get_put(&f, buf, len);
	ck_assert_int_eq(vmt_flush(f.cache), 0);	/* deregistered: its watch is parked */
	ck_assert_uint_eq(watches_reused(&f), 0);
	fixture_get_put(&f, buf, len);
	ck_assert_uint_eq(watches_reused(&f), 1);
	ck_assert_uint_eq(stats_of(f.cache).registrations, 2);
	fixture_get_put(&f, buf, len);				/* a hit under the reused watch */
	ck_assert_uint_eq(stats_of(f.cache).registrations, 2);
	munmap(buf, len);				/* the reused watch still catches a change */
	map_filled_at(buf, len, 7);
	fixture_get_put(&f, buf, len);
	ck_assert_uint_eq(stats_of(f.cache).registrations, 3);

	ck_assert_int_eq(vmt_flush(f.cache), 0);	/* parked again... */
	munmap(buf, len);				/* ...and changed while parked */
	map_filled_at(buf, len, 7);
	fixture_get_put(&f, buf, len);
	ck_assert_uint_eq(watches_reused(&f), 1);	/* a fresh watch, not the fired one */
	ck_assert_uint_eq(stats_of(f.cache).registrations, 4);
	fixture_get_put(&f, buf, len);
	ck_assert_uint_eq(stats_of(f.cache).registrations, 4);
	ck_assert_int_eq(madvise(buf, page, MADV_DONTNEED), 0);
	fixture_get_put(&f, buf, len);
	ck_assert_uint_eq(stats_of(f.cache).registrations, 5);
	ck_assert_int_eq(vmt_flush(f.cache), 0);
	ck_assert_int_eq(atomic_load(&f.fake.live), 0);
	munmap(buf, len);
	fixture_close(&f);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("kmod tracker");
	TCase *tc = tcase_create("kmod");
	int rc = skip_unless_tracker("test_kmod_tracker", "kmod");

	if (rc)
		return rc;
	tcase_add_test(tc, report_names_kmod);
	tcase_add_test(tc, unmapped_while_parked_is_efault);
	tcase_add_loop_test(tc, hit_until_changed, 0, 4);
	tcase_add_test(tc, unmapped_is_efault);
	tcase_add_test(tc, mprotect_keeps_hits);
	tcase_add_test(tc, events_reach_index_and_subscribers);
	tcase_add_test(tc, fork_child_tracks_itself);
	tcase_add_test(tc, overflow_drops_everything);
	tcase_add_test(tc, limit_serves_uncached);
	tcase_add_test(tc, a_range_registered_again_reuses_its_watch);
	tcase_add_test(tc, change_log_answers_for_any_change);
	suite_add_tcase(s, tc);
	rc = check_run(s, CK_FORK);
	printf("%s: test_kmod_tracker\n", rc ? "FAIL" : "PASS");
	return rc ? 1 : 0;
}
