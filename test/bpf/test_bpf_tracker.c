/* The bpf tracker's contract through the public API (a fake device): a hit while nothing
 * changed, no hit once the kernel changed the pages, whatever asked for the change (munmap,
 * raw munmap, MAP_FIXED, madvise DONTNEED and REMOVE, a memfd hole punch, io_uring's MADVISE,
 * mremap move and shrink, a COW copy after fork), hits across mprotect and an unrelated
 * munmap, changes drained into invalidations and subscribers, fork, registrations racing a
 * zap, and (when the guest script gives the commands) a daemon restart and crash, and a
 * daemon that never answers.
 * Needs vmtrackd (run by test/bpf/check-bpf.sh in the guest); skipped (exit 77) without it. */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <vmtrack.h>

#include "../../bpf/vmtrack_bpf_abi.h"
#include "../lib/kernel_tracker_cases.h"
#include "../lib/vmt_test.h"

static char *map_memfd(size_t len, int *fd)
{
	char *p;

	*fd = memfd_create("vmt-bpf", MFD_CLOEXEC);
	ck_assert_int_ge(*fd, 0);
	ck_assert_int_eq(ftruncate(*fd, (off_t)len), 0);
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
	ck_assert_ptr_ne(p, MAP_FAILED);
	memset(p, 7, len);
	return p;
}

START_TEST(report_names_bpf)
{
	struct fixture f;
	char buf[4096];

	fixture_open(&f, "bpf", 0);
	ck_assert_int_gt(vmt_cache_tracker_report(f.cache, buf, sizeof(buf)), 0);
	ck_assert_msg(strstr(buf, "bpf: in use") && strstr(buf, "serving this process"),
		      "report: %s", buf);
	fixture_close(&f);
}
END_TEST

static void io_uring_madvise(void *addr, size_t len)
{
	struct io_uring ring;
	struct io_uring_sqe *sqe;
	struct io_uring_cqe *cqe;

	ck_assert_int_eq(io_uring_queue_init(2, &ring, 0), 0);
	sqe = io_uring_get_sqe(&ring);
	io_uring_prep_madvise(sqe, addr, (off_t)len, MADV_DONTNEED);
	ck_assert_int_eq(io_uring_submit(&ring), 1);
	ck_assert_int_eq(io_uring_wait_cqe(&ring, &cqe), 0);
	ck_assert_msg(cqe->res == 0, "IORING_OP_MADVISE: %s", strerror(-cqe->res));
	io_uring_cqe_seen(&ring, cqe);
	io_uring_queue_exit(&ring);
}

/* The parent writes to its pages while a child still shares them: each write copies. */
static void cow_after_fork(char *buf)
{
	int go[2];
	pid_t pid;
	char c;
	int st;

	ck_assert_int_eq(pipe(go), 0);
	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(go[1]);
		_exit(read(go[0], &c, 1) == 1 ? 0 : 1);
	}
	close(go[0]);
	buf[page] = 9;	/* the copy happens here, in the parent */
	ck_assert_int_eq(write(go[1], "x", 1), 1);
	close(go[1]);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
}

enum change {
	CH_MUNMAP, CH_RAW_MUNMAP, CH_MAP_FIXED, CH_DONTNEED, CH_REMOVE, CH_PUNCH_HOLE,
	CH_IOURING_MADVISE, CH_MREMAP_MOVE, CH_MREMAP_SHRINK, CH_COW, CH_COUNT
};
static const char *const change_name[CH_COUNT] = {
	"munmap", "raw munmap", "MAP_FIXED", "madvise DONTNEED", "madvise REMOVE",
	"memfd hole punch", "io_uring MADVISE", "mremap move", "mremap shrink", "COW after fork",
};

/* Apply change `how` to the cached [buf, buf+len) (memfd-backed for REMOVE and hole punch);
 * leaves something mapped at buf again. */
static void apply(enum change how, char *buf, size_t len, int fd)
{
	char *p;

	switch (how) {
	case CH_MUNMAP:
		munmap(buf, len);
		map_filled_at(buf, len, 7);
		break;
	case CH_RAW_MUNMAP:
		ck_assert_int_eq(syscall(SYS_munmap, buf, len), 0);
		map_filled_at(buf, len, 7);
		break;
	case CH_MAP_FIXED:
		ck_assert_ptr_eq(mmap(buf + 2 * page, page, PROT_READ | PROT_WRITE,
				      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0), buf + 2 * page);
		break;
	case CH_DONTNEED:
		ck_assert_int_eq(madvise(buf + page, page, MADV_DONTNEED), 0);
		break;
	case CH_REMOVE:
		ck_assert_int_eq(madvise(buf + page, page, MADV_REMOVE), 0);
		break;
	case CH_PUNCH_HOLE:
		ck_assert_int_eq(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
					   (off_t)page, (off_t)page), 0);
		break;
	case CH_IOURING_MADVISE:
		io_uring_madvise(buf + page, page);
		break;
	case CH_MREMAP_MOVE:
		p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		ck_assert_ptr_ne(p, MAP_FAILED);
		ck_assert_ptr_eq(mremap(buf, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, p), p);
		munmap(p, len);
		map_filled_at(buf, len, 7);
		break;
	case CH_MREMAP_SHRINK:
		ck_assert_ptr_eq(mremap(buf, len, len - page, 0), buf);
		map_filled_at(buf + len - page, page, 7);
		break;
	case CH_COW:
		cow_after_fork(buf);
		break;
	default:
		ck_abort();
	}
}

/* Each change kind: the word alone makes the next get a miss (no flush, no event read). */
START_TEST(hit_until_changed)
{
	enum change how = (enum change)_i;
	struct fixture f;
	size_t len = 4 * page;
	int fd = -1;
	char *buf;

	fixture_open(&f, "bpf", 0);
	buf = how == CH_REMOVE || how == CH_PUNCH_HOLE ? map_memfd(len, &fd)
							: map_filled_at(NULL, len, 7);
	fixture_get_put(&f, buf, len);
	fixture_get_put(&f, buf + page, page);	/* a hit */
	ck_assert_uint_eq(stats_of(f.cache).registrations, 1);
	apply(how, buf, len, fd);
	fixture_get_put(&f, buf, how == CH_MREMAP_SHRINK ? len - page : len);
	ck_assert_msg(stats_of(f.cache).registrations == 2, "%s: still a hit (registrations %llu)",
		      change_name[how], (unsigned long long)stats_of(f.cache).registrations);
	ck_assert_int_eq(vmt_flush(f.cache), 0);
	ck_assert_int_eq(atomic_load(&f.fake.live), 0);
	munmap(buf, len);
	if (fd >= 0)
		close(fd);
	fixture_close(&f);
}
END_TEST

/* Changes that leave the pages as they were, or touch other pages: still hits. */
START_TEST(unrelated_changes_keep_hits)
{
	struct fixture f;
	size_t len = 4 * page;
	char *buf, *other;

	fixture_open(&f, "bpf", 0);
	buf = map_filled_at(NULL, len, 7);
	other = map_filled_at(NULL, len, 7);
	fixture_get_put(&f, buf, len);
	ck_assert_int_eq(mprotect(buf, len, PROT_READ), 0);
	ck_assert_int_eq(mprotect(buf, len, PROT_READ | PROT_WRITE), 0);
	munmap(other, len);
	ck_assert_int_eq(syscall(SYS_munmap, map_filled_at(NULL, len, 7), len), 0);
	ck_assert_int_eq(madvise(buf, len, MADV_WILLNEED), 0);
	fixture_get_put(&f, buf, len);
	ck_assert_uint_eq(stats_of(f.cache).registrations, 1);
	ck_assert_uint_eq(stats_of(f.cache).invalidations, 0);
	munmap(buf, len);
	fixture_close(&f);
}
END_TEST

START_TEST(changes_reach_index_and_subscribers)
{
	check_changes_reach_index_and_subscribers("bpf", HEARD_THE_CACHED_RANGE);
}
END_TEST

START_TEST(fork_child_tracks_itself)
{
	check_fork_child_tracks_itself("bpf");
}
END_TEST

/* The slots run out: more ranges are served uncached, never refused. */
START_TEST(limit_serves_uncached)
{
	enum { N = 520 };
	struct fixture f;
	char *buf;
	int i;

	fixture_open(&f, "bpf", 0);
	buf = map_filled_at(NULL, 2 * N * page, 7);
	for (i = 0; i < N; i++)	/* every other page: no merging */
		fixture_get_put(&f, buf + 2 * i * page, page);
	ck_assert_uint_le(stats_of(f.cache).entries, 512);
	ck_assert_uint_ge(stats_of(f.cache).uncached, N - 512);
	munmap(buf, 2 * N * page);
	ck_assert_int_eq(vmt_flush(f.cache), 0);
	fixture_close(&f);
}
END_TEST

/* Registrations racing a zap of their pages: a device whose registrations take a while,
 * threads registering the range while the main thread drops its pages. A registration
 * whose device call started before the madvise began must never be hit after it returned:
 * its watch was set before that call, so either the entry program bumped it, or its check
 * after registering saw the bump (or the exit program's). */
struct serial_dev {
	atomic_long started;
};

struct serial_reg {
	long serial;
};

static int serial_reg(void *ctx, void *addr, size_t len, unsigned access, void **handle)
{
	struct serial_dev *d = ctx;
	struct serial_reg *r = malloc(sizeof(*r));

	(void)addr;
	(void)len;
	(void)access;
	if (!r)
		return -ENOMEM;
	r->serial = atomic_fetch_add(&d->started, 1) + 1;
	usleep(50);
	*handle = r;
	return 0;
}

static void serial_dereg(void *ctx, void *handle)
{
	(void)ctx;
	free(handle);
}

struct racer {
	struct vmt_device *dev;
	char *buf;
	size_t len;
	atomic_int stop;
};

static void *register_loop(void *arg)
{
	struct racer *rc = arg;
	struct vmt_reg *r;

	while (!atomic_load(&rc->stop))
		if (vmt_get(rc->dev, rc->buf, rc->len, VMT_ACCESS_READ, &r) == 0)
			vmt_put(r);
	return NULL;
}

/* A bpf cache with the serial device, a 4-page buffer and two threads registering it. */
static void racers_start(struct racer *rc, struct serial_dev *sd, struct vmt_cache **c,
			 pthread_t th[2])
{
	struct vmt_device_ops ops;
	struct vmt_cache_opts cfg;
	int i;

	memset(&cfg, 0, sizeof(cfg));
	cfg.sz = sizeof(cfg);
	cfg.tracker = "bpf";
	ck_assert_int_eq(vmt_cache_create(&cfg, c), 0);
	device_ops_init(&ops, "serial", serial_reg, serial_dereg, 0);
	ck_assert_int_eq(vmt_device_attach(*c, &ops, sd, &rc->dev), 0);
	rc->len = 4 * page;
	rc->buf = map_filled_at(NULL, rc->len, 7);
	for (i = 0; i < 2; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, register_loop, rc), 0);
}

static void racers_stop(struct racer *rc, pthread_t th[2])
{
	int i;

	atomic_store(&rc->stop, 1);
	for (i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
}

static void racers_close(struct racer *rc, struct vmt_cache *c)
{
	vmt_device_detach(rc->dev);
	vmt_cache_destroy(c);
	munmap(rc->buf, rc->len);
}

/* The serial of the registration a get of the whole buffer returns. */
static long serial_of_get(struct racer *rc)
{
	struct vmt_reg *r;
	long serial;

	ck_assert_int_eq(vmt_get(rc->dev, rc->buf, rc->len, VMT_ACCESS_READ, &r), 0);
	serial = ((struct serial_reg *)vmt_reg_handle(r))->serial;
	vmt_put(r);
	return serial;
}

/* Drops the buffer's pages, then gets it: whether the registration it got started before. */
static int stale_after_zap(struct racer *rc, struct serial_dev *sd)
{
	long before = atomic_load(&sd->started);

	ck_assert_int_eq(madvise(rc->buf, rc->len, MADV_DONTNEED), 0);
	return serial_of_get(rc) <= before;
}

START_TEST(registrations_racing_a_zap)
{
	struct serial_dev sd = {0};
	struct vmt_cache *c;
	struct racer rc = {0};
	pthread_t th[2];
	int i, stale = 0;

	racers_start(&rc, &sd, &c, th);
	for (i = 0; i < 2000; i++)
		stale += stale_after_zap(&rc, &sd);
	racers_stop(&rc, th);
	printf("registrations_racing_a_zap: %ld registrations, %d stale hits\n",
	       atomic_load(&sd.started), stale);
	ck_assert_int_eq(stale, 0);
	racers_close(&rc, c);
}
END_TEST

/* The guest script's command (VMT_BPF_RESTART / VMT_BPF_CRASH) run between two gets. */
/* The daemon cases are registered only when check-bpf.sh gives all of these (main). */
static const char *const daemon_vars[] = {"VMT_BPF_RESTART", "VMT_BPF_STOP", "VMT_BPF_START",
					  "VMT_BPF_CRASH"};

static const char *daemon_cmd(const char *var)
{
	const char *cmd = getenv(var);

	ck_assert_msg(cmd && *cmd, "%s not set", var);
	return cmd;
}

static void run_daemon_cmd(const char *var)
{
	const char *cmd = daemon_cmd(var);

	ck_assert_msg(system(cmd) == 0, "%s: %s failed", var, cmd);
}

/* A daemon case's start: a cache on bpf with the 4-page buffer cached, then the command. */
static void cached_then_daemon_cmd(struct fixture *f, char *buf, const char *var)
{
	fixture_open(f, "bpf", 0);
	fixture_get_put(f, buf, 4 * page);
	run_daemon_cmd(var);
}

/* Gets of [buf, buf+len) until one is a hit (the cache is served again), 10 s at most: the
 * client tries to reach a daemon that let it go at most every 200 ms. Whether it was. */
static int cached_again(struct fixture *f, char *buf, size_t len)
{
	int i;

	for (i = 0; i < 100; i++) {
		uint64_t before;

		fixture_get_put(f, buf, len);
		before = stats_of(f->cache).registrations;
		fixture_get_put(f, buf, len);
		if (stats_of(f->cache).registrations == before)
			return 1;
		usleep(100 * 1000);
	}
	return 0;
}

/* The 4-page buffer is cached again (within cached_again's time), and a change of it after
 * that is seen: the cache is served by a daemon again. */
static void served_again(struct fixture *f, char *buf, const char *when)
{
	uint64_t regs;

	ck_assert_msg(cached_again(f, buf, 4 * page), "not cached again %s", when);
	regs = stats_of(f->cache).registrations;
	munmap(buf, page);
	map_filled_at(buf, page, 7);
	fixture_get_put(f, buf, 4 * page);
	ck_assert_msg(stats_of(f->cache).registrations == regs + 1, "a change %s not seen", when);
}

/* A daemon restart lets this process go: what it cached is treated as changed, and the cache
 * is served by the new daemon from then on: hits again, changes seen again. */
START_TEST(daemon_restart_is_a_change)
{
	struct fixture f;
	char *buf = map_filled_at(NULL, 4 * page, 7);
	struct vmt_stats s;

	cached_then_daemon_cmd(&f, buf, "VMT_BPF_RESTART");
	fixture_get_put(&f, buf, 4 * page);
	s = stats_of(f.cache);
	ck_assert_msg(s.registrations == 2, "a hit after the daemon restarted");
	served_again(&f, buf, "after the restart");
	fixture_close(&f);
	munmap(buf, 4 * page);
}
END_TEST

/* A stopped daemon: ranges are served uncached (never from the old words) until a daemon is
 * back, then cached again; a change after that is seen. */
START_TEST(daemon_stop_falls_back_until_back)
{
	struct fixture f;
	char *buf = map_filled_at(NULL, 4 * page, 7);
	struct vmt_stats s;

	cached_then_daemon_cmd(&f, buf, "VMT_BPF_STOP");
	fixture_get_put(&f, buf, 4 * page);
	fixture_get_put(&f, buf, 4 * page);
	s = stats_of(f.cache);
	ck_assert_msg(s.registrations == 3, "a hit with no daemon (%llu registrations)",
		      (unsigned long long)s.registrations);
	ck_assert_uint_ge(s.uncached, 2);
	run_daemon_cmd("VMT_BPF_START");
	served_again(&f, buf, "once the daemon was back");
	fixture_close(&f);
	munmap(buf, 4 * page);
}
END_TEST

/* Registrations racing a daemon restart (twice): the same judge as registrations_racing_a_zap
 * while the cache is let go, served uncached and reconnected beneath the threads; afterwards
 * the range is cached again. */
struct restarter {
	const char *cmd;
	atomic_int done;
	int status;
};

static void *restart_daemon(void *arg)
{
	struct restarter *rs = arg;

	rs->status = system(rs->cmd);
	atomic_store(&rs->done, 1);
	return NULL;
}

START_TEST(restart_racing_registrations)
{
	const char *cmd = daemon_cmd("VMT_BPF_RESTART");
	struct serial_dev sd = {0};
	struct vmt_cache *c;
	struct racer rc = {0};
	pthread_t th[2], rt;
	int i, round, stale = 0, judged = 0, hit = 0;

	racers_start(&rc, &sd, &c, th);
	for (round = 0; round < 2; round++) {
		struct restarter rs = {cmd, 0, -1};

		ck_assert_int_eq(pthread_create(&rt, NULL, restart_daemon, &rs), 0);
		for (i = 0; !atomic_load(&rs.done) || i < 300; i++, judged++)
			stale += stale_after_zap(&rc, &sd);
		pthread_join(rt, NULL);
		ck_assert_msg(rs.status == 0, "%s failed", cmd);
	}
	racers_stop(&rc, th);
	for (i = 0; i < 100 && !hit; i++) {
		hit = serial_of_get(&rc) == serial_of_get(&rc);
		if (!hit)
			usleep(100 * 1000);
	}
	printf("restart_racing_registrations: %d judged, %ld registrations, %d stale hits\n",
	       judged, atomic_load(&sd.started), stale);
	ck_assert_int_eq(stale, 0);
	ck_assert_msg(hit, "not cached again after the restarts");
	racers_close(&rc, c);
}
END_TEST

/* A daemon killed outright: its pinned programs go on tracking; the next one lets go. */
START_TEST(daemon_crash_keeps_tracking)
{
	struct fixture f;
	char *buf = map_filled_at(NULL, 4 * page, 7);

	cached_then_daemon_cmd(&f, buf, "VMT_BPF_CRASH");
	fixture_get_put(&f, buf, 4 * page);
	ck_assert_uint_eq(stats_of(f.cache).registrations, 1);	/* still tracked: a hit */
	munmap(buf, page);
	map_filled_at(buf, page, 7);
	fixture_get_put(&f, buf, 4 * page);
	ck_assert_uint_eq(stats_of(f.cache).registrations, 2);	/* the change was seen */
	run_daemon_cmd("VMT_BPF_START");
	fixture_get_put(&f, buf, 4 * page);	/* the new daemon let this process go */
	ck_assert_uint_eq(stats_of(f.cache).registrations, 3);
	served_again(&f, buf, "after the crash");
	fixture_close(&f);
	munmap(buf, 4 * page);
}
END_TEST

/* A socket at vmtrackd's address that takes connections and never answers: a daemon that
 * stopped serving. */
static int silent_daemon(void)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(s, 0);
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", VMTRACK_BPF_SOCKET);
	unlink(a.sun_path);
	ck_assert_msg(bind(s, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(s, 8) == 0,
		      "cannot listen at %s: %s", a.sun_path, strerror(errno));
	return s;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A daemon that never answers costs a miss the client's bound (20 s) once, the misses right
 * after it nothing: served uncached, never from the old words; a new cache is refused with
 * -ETIMEDOUT, not left waiting. Then a real daemon serves the first cache again. */
START_TEST(silent_daemon_is_bounded)
{
	struct vmt_cache_opts cfg;
	struct vmt_cache *c = NULL;
	struct fixture f;
	char *buf = map_filled_at(NULL, 4 * page, 7);
	double t0, first, second;
	int ls, rc;

	cached_then_daemon_cmd(&f, buf, "VMT_BPF_STOP");
	ls = silent_daemon();
	t0 = now_s();
	fixture_get_put(&f, buf, 4 * page);	/* let go: its reconnect waits for the silent daemon */
	first = now_s() - t0;
	t0 = now_s();
	fixture_get_put(&f, buf, 4 * page);
	second = now_s() - t0;
	printf("silent_daemon_is_bounded: the first miss waited %.1f s, the next %.3f s\n", first,
	       second);
	ck_assert_msg(first >= 19 && first < 60, "the first miss waited %.1f s, not the 20 s bound",
		      first);
	ck_assert_msg(second < 5, "the next miss waited %.1f s for the silent daemon again", second);
	ck_assert_uint_eq(stats_of(f.cache).registrations, 3);	/* no hit of the old words */
	memset(&cfg, 0, sizeof(cfg));
	cfg.sz = sizeof(cfg);
	cfg.tracker = "bpf";
	rc = vmt_cache_create(&cfg, &c);
	ck_assert_msg(rc == -ETIMEDOUT, "a new cache with a silent daemon: %d (%s)", rc,
		      strerror(-rc));
	close(ls);
	unlink(VMTRACK_BPF_SOCKET);
	run_daemon_cmd("VMT_BPF_START");
	served_again(&f, buf, "once a real daemon was back");
	fixture_close(&f);
	munmap(buf, 4 * page);
}
END_TEST

/* The daemon cases stop the daemon: last, each in a Check case of its own named after it, so
 * that test/bpf/check-bpf.sh runs them one at a time (CK_RUN_CASE) and a timeout names it. A
 * case takes about 10 s under TCG; 150 s leaves room for daemon.sh's own bounds (30 s to
 * stop, 60 s to come up), after which it fails saying what the daemon was doing. */
static int daemon_cmds_given(void)
{
	for (size_t i = 0; i < sizeof(daemon_vars) / sizeof(daemon_vars[0]); i++)
		if (!getenv(daemon_vars[i]) || !*getenv(daemon_vars[i]))
			return 0;
	return 1;
}

static void add_daemon_case(Suite *s, const char *name, const TTest *t)
{
	TCase *tc = tcase_create(name);

	tcase_set_timeout(tc, 150);
	tcase_add_test(tc, t);
	suite_add_tcase(s, tc);
}

int main(void)
{
	Suite *s = suite_create("bpf tracker");
	TCase *tc = tcase_create("bpf");
	int rc = skip_unless_tracker("test_bpf_tracker", "bpf");

	if (rc)
		return rc;
	/* each case takes a second or two under TCG */
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, report_names_bpf);
	tcase_add_loop_test(tc, hit_until_changed, 0, CH_COUNT);
	tcase_add_test(tc, unrelated_changes_keep_hits);
	tcase_add_test(tc, changes_reach_index_and_subscribers);
	tcase_add_test(tc, fork_child_tracks_itself);
	tcase_add_test(tc, limit_serves_uncached);
	tcase_add_test(tc, registrations_racing_a_zap);
	suite_add_tcase(s, tc);
	if (daemon_cmds_given()) {
		add_daemon_case(s, "daemon_restart_is_a_change", daemon_restart_is_a_change);
		add_daemon_case(s, "daemon_stop_falls_back_until_back",
				daemon_stop_falls_back_until_back);
		add_daemon_case(s, "restart_racing_registrations", restart_racing_registrations);
		add_daemon_case(s, "daemon_crash_keeps_tracking", daemon_crash_keeps_tracking);
		add_daemon_case(s, "silent_daemon_is_bounded", silent_daemon_is_bounded);
	} else {
		const char *only = getenv("CK_RUN_CASE");

		printf("SKIP: the daemon cases: VMT_BPF_RESTART, _STOP, _START, _CRASH not all set "
		       "(test/bpf/check-bpf.sh gives them, with a daemon it controls)\n");
		if (only && strcmp(only, "bpf"))
			return VMT_TEST_SKIP;	/* the one case asked for is such a case */
	}
	rc = check_run(s, CK_FORK);
	printf("%s: test_bpf_tracker\n", rc ? "FAIL" : "PASS");
	return rc ? 1 : 0;
}
