/* The kmod tracker through the public API (a fake device): hits while nothing changed, no hit
 * once the kernel changed the pages (munmap, raw munmap, madvise, MAP_FIXED), hits across
 * mprotect, events drained into invalidations and subscribers, fork, event overflow, limit.
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

#include "../fake_device.h"
#include "../check_run.h"

static size_t page;

struct fx {
	struct vmt_cache *cache;
	struct fake_device fake;
	struct vmt_device *dev;
};

static void fx_open(struct fx *f)
{
	struct vmt_cache_opts o;

	memset(&o, 0, sizeof(o));
	o.sz = sizeof(o);
	o.tracker = "kmod";
	ck_assert_int_eq(vmt_cache_create(&o, &f->cache), 0);
	ck_assert_str_eq(vmt_cache_tracker(f->cache), "kmod");
	fake_init(&f->fake, 0);
	ck_assert_int_eq(vmt_device_attach(f->cache, &f->fake.ops, &f->fake, &f->dev), 0);
}

static void fx_close(struct fx *f)
{
	vmt_device_detach(f->dev);
	vmt_cache_destroy(f->cache);
}

static struct vmt_stats stats(struct fx *f)
{
	struct vmt_stats s;

	memset(&s, 0, sizeof(s));
	s.sz = sizeof(s);
	ck_assert_int_eq(vmt_stats_get(f->cache, &s), 0);
	return s;
}

static char *map_at(void *addr, size_t len)
{
	int flags = MAP_PRIVATE | MAP_ANONYMOUS | (addr ? MAP_FIXED_NOREPLACE : 0);
	char *p = mmap(addr, len, PROT_READ | PROT_WRITE, flags, -1, 0);

	ck_assert_ptr_ne(p, MAP_FAILED);
	if (addr)
		ck_assert_ptr_eq(p, addr);
	memset(p, 7, len);
	return p;
}

/* get + put; returns the registration's handle (the fake's record) */
static void *get_put(struct fx *f, void *addr, size_t len)
{
	struct vmt_reg *r;
	void *h;

	ck_assert_int_eq(vmt_get(f->dev, addr, len, VMT_ACCESS_READ, &r), 0);
	h = vmt_reg_handle(r);
	vmt_put(r);
	return h;
}

START_TEST(report_names_kmod)
{
	struct fx f;
	char buf[2048];

	fx_open(&f);
	ck_assert_int_gt(vmt_cache_tracker_report(f.cache, buf, sizeof(buf)), 0);
	ck_assert_msg(strstr(buf, "kmod: in use") != NULL, "report: %s", buf);
	fx_close(&f);
}
END_TEST

START_TEST(hit_until_changed)
{
	/* change 0: munmap, 1: raw munmap, 2: madvise DONTNEED, 3: MAP_FIXED over it */
	int how = _i;
	struct fx f;
	size_t len = 4 * page;
	char *buf;
	struct vmt_stats s;
	void *h1, *h2;

	fx_open(&f);
	buf = map_at(NULL, len);
	h1 = get_put(&f, buf, len);
	ck_assert_ptr_eq(get_put(&f, buf + page, page), h1);	/* a hit */
	s = stats(&f);
	ck_assert_uint_eq(s.registrations, 1);
	ck_assert_uint_ge(s.hits, 1);
	switch (how) {
	case 0:
		munmap(buf, len);
		map_at(buf, len);
		break;
	case 1:
		ck_assert_int_eq(syscall(SYS_munmap, buf, len), 0);
		map_at(buf, len);
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
	h2 = get_put(&f, buf, len);
	(void)h2;
	s = stats(&f);
	ck_assert_uint_eq(s.registrations, 2);
	ck_assert_int_eq(atomic_load(&f.fake.regs), 2);
	ck_assert_int_eq(vmt_flush(f.cache), 0);
	ck_assert_int_eq(atomic_load(&f.fake.live), 0);
	munmap(buf, len);
	fx_close(&f);
}
END_TEST

START_TEST(unmapped_is_efault)
{
	struct fx f;
	struct vmt_reg *r;
	char *buf;

	fx_open(&f);
	buf = map_at(NULL, 2 * page);
	get_put(&f, buf, 2 * page);
	munmap(buf, 2 * page);
	ck_assert_int_eq(vmt_get(f.dev, buf, 2 * page, VMT_ACCESS_READ, &r), -EFAULT);
	fx_close(&f);
}
END_TEST

START_TEST(mprotect_keeps_hits)
{
	struct fx f;
	char *buf;
	void *h;

	fx_open(&f);
	buf = map_at(NULL, 4 * page);
	h = get_put(&f, buf, 4 * page);
	ck_assert_int_eq(mprotect(buf, 4 * page, PROT_READ), 0);
	ck_assert_int_eq(mprotect(buf, 4 * page, PROT_READ | PROT_WRITE), 0);
	ck_assert_ptr_eq(get_put(&f, buf, 4 * page), h);
	ck_assert_uint_eq(stats(&f).registrations, 1);
	munmap(buf, 4 * page);
	fx_close(&f);
}
END_TEST

static atomic_long heard;
static atomic_uintptr_t heard_addr;
static void on_event(void *arg, const void *addr, size_t len)
{
	(void)arg;
	(void)len;
	atomic_fetch_add(&heard, 1);
	atomic_store(&heard_addr, (uintptr_t)addr);
}

START_TEST(events_reach_index_and_subscribers)
{
	struct fx f;
	char *buf;
	struct vmt_stats s;

	fx_open(&f);
	ck_assert_int_eq(vmt_subscribe(f.cache, on_event, NULL), 0);
	buf = map_at(NULL, 4 * page);
	get_put(&f, buf, 4 * page);
	ck_assert_uint_eq(stats(&f).entries, 1);
	munmap(buf + page, page);
	ck_assert_int_eq(vmt_flush(f.cache), 0);	/* drains the event */
	s = stats(&f);
	ck_assert_uint_eq(s.entries, 0);
	ck_assert_uint_ge(s.invalidations, 1);
	ck_assert_int_eq(atomic_load(&f.fake.live), 0);
	ck_assert_int_ge(atomic_load(&heard), 1);
	ck_assert_uint_eq(atomic_load(&heard_addr), (uintptr_t)buf + page);
	ck_assert_int_eq(vmt_unsubscribe(f.cache, on_event, NULL), 0);
	munmap(buf, 4 * page);
	fx_close(&f);
}
END_TEST

START_TEST(fork_child_tracks_itself)
{
	struct fx f;
	char *buf;
	void *h;
	pid_t pid;
	int st;

	fx_open(&f);
	buf = map_at(NULL, 4 * page);
	h = get_put(&f, buf, 4 * page);
	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct fake_device mine;
		struct vmt_device *d;
		struct vmt_reg *r;
		void *c1;

		fake_init(&mine, 0);
		if (vmt_device_attach(f.cache, &mine.ops, &mine, &d))
			_exit(10);
		if (strcmp(vmt_cache_tracker(f.cache), "kmod"))
			_exit(11);
		if (vmt_get(d, buf, 4 * page, VMT_ACCESS_READ, &r))
			_exit(12);
		c1 = vmt_reg_handle(r);
		vmt_put(r);
		if (vmt_get(d, buf, page, VMT_ACCESS_READ, &r) || vmt_reg_handle(r) != c1)
			_exit(13);	/* the child caches too */
		vmt_put(r);
		if (atomic_load(&mine.regs) != 1)
			_exit(15);
		munmap(buf, 4 * page);	/* the child's change, seen by the child's file */
		map_at(buf, 4 * page);
		if (vmt_get(d, buf, page, VMT_ACCESS_READ, &r) || atomic_load(&mine.regs) != 2)
			_exit(14);
		vmt_put(r);
		_exit(0);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x", st);
	/* the child's munmap was not the parent's: still a hit */
	ck_assert_ptr_eq(get_put(&f, buf, 4 * page), h);
	ck_assert_int_eq(atomic_load(&f.fake.regs), 1);
	munmap(buf, 4 * page);
	map_at(buf, 4 * page);
	get_put(&f, buf, 4 * page);
	ck_assert_int_eq(atomic_load(&f.fake.regs), 2);
	munmap(buf, 4 * page);
	fx_close(&f);
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
	struct fx f;
	unsigned old;
	char *buf;
	int i;

	if (set_param("max_events", 16, &old)) {
		printf("overflow_drops_everything: module parameters not writable: not checked\n");
		return;
	}
	fx_open(&f);
	set_param("max_events", old, &old);
	buf = map_at(NULL, 2 * N * page);
	for (i = 0; i < N; i++)	/* every other page: no merging */
		get_put(&f, buf + 2 * i * page, page);
	ck_assert_uint_eq(stats(&f).entries, N);
	for (i = 0; i < N; i++)
		munmap(buf + 2 * i * page, page);
	ck_assert_int_eq(vmt_flush(f.cache), 0);
	ck_assert_uint_eq(stats(&f).entries, 0);
	ck_assert_int_eq(atomic_load(&f.fake.live), 0);
	munmap(buf, 2 * N * page);
	fx_close(&f);
}
END_TEST

START_TEST(limit_serves_uncached)
{
	enum { N = 12 };
	struct fx f;
	unsigned old;
	char *buf;
	int i;

	if (set_param("max_watches", 4, &old)) {
		printf("limit_serves_uncached: module parameters not writable: not checked\n");
		return;
	}
	fx_open(&f);
	set_param("max_watches", old, &old);
	buf = map_at(NULL, 2 * N * page);
	for (i = 0; i < N; i++)	/* every other page: no merging */
		get_put(&f, buf + 2 * i * page, page);
	ck_assert_uint_le(stats(&f).entries, 4);
	ck_assert_uint_ge(stats(&f).uncached, N - 4);
	munmap(buf, 2 * N * page);
	ck_assert_int_eq(vmt_flush(f.cache), 0);
	fx_close(&f);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("kmod tracker");
	TCase *tc = tcase_create("kmod");
	struct vmt_cache_opts o;
	struct vmt_cache *c = NULL;
	int rc, failed;

	page = (size_t)sysconf(_SC_PAGESIZE);
	memset(&o, 0, sizeof(o));
	o.sz = sizeof(o);
	o.tracker = "kmod";
	rc = vmt_cache_create(&o, &c);
	if (rc) {
		printf("SKIP: test_kmod_tracker: the kmod tracker is not available here (%s): "
		       "run under test/vm/run\n", strerror(-rc));
		return 77;
	}
	vmt_cache_destroy(c);

	tcase_add_test(tc, report_names_kmod);
	tcase_add_loop_test(tc, hit_until_changed, 0, 4);
	tcase_add_test(tc, unmapped_is_efault);
	tcase_add_test(tc, mprotect_keeps_hits);
	tcase_add_test(tc, events_reach_index_and_subscribers);
	tcase_add_test(tc, fork_child_tracks_itself);
	tcase_add_test(tc, overflow_drops_everything);
	tcase_add_test(tc, limit_serves_uncached);
	suite_add_tcase(s, tc);
	failed = check_run(s, CK_FORK);
	printf("%s: test_kmod_tracker\n", failed ? "FAIL" : "PASS");
	return failed ? 1 : 0;
}
