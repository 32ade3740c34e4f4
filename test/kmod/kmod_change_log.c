/* The module's change log (VMTRACK_IOC_LOG_START, VMTRACK_IOC_CHANGED), hostile input
 * included: what counts as a change, the marks it accepts, how far back it answers, and its
 * lifetime with the address space. Needs the module loaded (run under test/vm/run); skipped
 * (exit 77) without it. */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "kmod_util.h"
#include "../lib/check_run.h"

static long pg;

static void open_ok(struct vt *v)
{
	int r = vt_open(v);

	ck_assert_msg(r == 0, "open/info/mmap of %s: %s", VMTRACK_DEVICE, strerror(-r));
}

static int log_start(struct vt *v, struct vmtrack_log_start *out)
{
	struct vmtrack_log_start a;

	memset(&a, 0, sizeof(a));
	if (ioctl(v->fd, VMTRACK_IOC_LOG_START, &a) != 0)
		return -errno;
	if (out)
		*out = a;
	return 0;
}

static uint64_t count_now(const struct vt *v)
{
	return __atomic_load_n((const uint64_t *)&v->w[VMTRACK_W_LOG], __ATOMIC_SEQ_CST);
}

/* 0 or 1 (changed), or the negative errno. */
static int changed(struct vt *v, uint64_t mark, const void *addr, size_t len)
{
	struct vmtrack_changed a;

	memset(&a, 0, sizeof(a));
	a.mark = mark;
	a.start = (uintptr_t)addr;
	a.len = len;
	if (ioctl(v->fd, VMTRACK_IOC_CHANGED, &a) != 0)
		return -errno;
	ck_assert_uint_le(a.changed, 1);
	return (int)a.changed;
}

static void open_logging(struct vt *v)
{
	open_ok(v);
	ck_assert_int_eq(log_start(v, NULL), 0);
}

START_TEST(start_and_count)
{
	struct vt v;
	struct vmtrack_log_start a, again;

	open_ok(&v);
	ck_assert(v.info.features & VMTRACK_FEATURE_CHANGE_LOG);
	ck_assert_uint_eq(count_now(&v), 0);	/* nothing counts before the start */
	ck_assert_int_eq(changed(&v, 1, &v, 1), -EINVAL);
	ck_assert_int_eq(log_start(&v, &a), 0);
	ck_assert_uint_eq(a.entries, 256);
	ck_assert_uint_ne(a.base, 0);
	ck_assert_uint_eq(count_now(&v), a.base);
	ck_assert_int_eq(log_start(&v, &again), 0);	/* a second start changes nothing */
	ck_assert_uint_eq(again.base, a.base);
	vt_close(&v);
}
END_TEST

START_TEST(hostile_arguments)
{
	struct vt v;
	struct vmtrack_log_start s;
	struct vmtrack_changed c;
	uint64_t mark;

	open_ok(&v);
	memset(&s, 0, sizeof(s));
	s.flags = 1;
	ck_assert_int_eq(ioctl(v.fd, VMTRACK_IOC_LOG_START, &s), -1);
	ck_assert_int_eq(errno, EINVAL);
	memset(&s, 0, sizeof(s));
	s.reserved[1] = 7;
	ck_assert_int_eq(ioctl(v.fd, VMTRACK_IOC_LOG_START, &s), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(ioctl(v.fd, VMTRACK_IOC_LOG_START, (void *)16), -1);
	ck_assert_int_eq(errno, EFAULT);
	ck_assert_int_eq(log_start(&v, NULL), 0);
	mark = count_now(&v);
	ck_assert_int_eq(changed(&v, 0, &v, 1), -EINVAL);
	ck_assert_int_eq(changed(&v, mark - 1, &v, 1), -EINVAL);	/* before the log */
	ck_assert_int_eq(changed(&v, mark + 1, &v, 1), -EINVAL);	/* not counted yet */
	ck_assert_int_eq(changed(&v, UINT64_MAX, &v, 1), -EINVAL);
	ck_assert_int_eq(changed(&v, mark, &v, 0), -EINVAL);
	/* ranges that wrap or lie outside the address space are ranges like any other */
	ck_assert_int_eq(changed(&v, mark, (void *)UINTPTR_MAX, UINT64_MAX), 0);
	ck_assert_int_eq(changed(&v, mark, (void *)0, UINT64_MAX), 0);
	memset(&c, 0, sizeof(c));
	c.mark = mark;
	c.len = 1;
	c.flags = 1;
	ck_assert_int_eq(ioctl(v.fd, VMTRACK_IOC_CHANGED, &c), -1);
	ck_assert_int_eq(errno, EINVAL);
	c.flags = 0;
	c.reserved = 1;
	ck_assert_int_eq(ioctl(v.fd, VMTRACK_IOC_CHANGED, &c), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(ioctl(v.fd, VMTRACK_IOC_CHANGED, (void *)16), -1);
	ck_assert_int_eq(errno, EFAULT);
	vt_close(&v);
}
END_TEST

/* A mark of another file's log is not this one's (random bases 2^32 and more apart). */
START_TEST(marks_of_another_file)
{
	struct vt a, b;

	open_logging(&a);
	open_logging(&b);
	ck_assert_int_eq(changed(&b, count_now(&a), &a, 1), -EINVAL);
	ck_assert_int_eq(changed(&a, count_now(&b), &b, 1), -EINVAL);
	vt_close(&a);
	vt_close(&b);
}
END_TEST

START_TEST(changes_are_logged)
{
	struct vt v;
	char *a = vt_map(4 * pg), *b = vt_map(4 * pg);
	uint64_t mark;

	open_logging(&v);
	mark = count_now(&v);
	ck_assert_int_eq(changed(&v, mark, a, 4 * pg), 0);
	/* a raw system call, which no libc hook sees */
	ck_assert_int_eq(syscall(SYS_munmap, b, 4 * pg), 0);
	ck_assert_uint_gt(count_now(&v), mark);
	ck_assert_int_eq(changed(&v, mark, b, 4 * pg), 1);
	ck_assert_int_eq(changed(&v, mark, b + 3 * pg, 1), 1);
	ck_assert_int_eq(changed(&v, mark, a, 4 * pg), 0);	/* another range */
	ck_assert_int_eq(madvise(a + 2 * pg, pg, MADV_DONTNEED), 0);
	ck_assert_int_eq(changed(&v, mark, a, 2 * pg), 0);	/* not those pages */
	ck_assert_int_eq(changed(&v, mark, a, 4 * pg), 1);
	/* a change before the mark is not one since */
	mark = count_now(&v);
	ck_assert_int_eq(changed(&v, mark, a, 4 * pg), 0);
	ck_assert_int_eq(changed(&v, mark, b, 4 * pg), 0);
	/* the same pages with other permissions: no change */
	ck_assert_int_eq(mprotect(a, 4 * pg, PROT_READ), 0);
	ck_assert_int_eq(mprotect(a, 4 * pg, PROT_READ | PROT_WRITE), 0);
	ck_assert_int_eq(changed(&v, mark, a, 4 * pg), 0);
	/* new pages at the place of old ones */
	ck_assert_ptr_eq(mmap(a, pg, PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0), a);
	ck_assert_int_eq(changed(&v, mark, a, pg), 1);
	vt_close(&v);
	munmap(a, 4 * pg);
}
END_TEST

/* More changes since a mark than the log keeps: nothing can be proven. */
START_TEST(older_than_the_log)
{
	struct vt v;
	char *a = vt_map(pg), *b = vt_map(pg);
	struct vmtrack_log_start s;
	uint64_t mark;

	open_ok(&v);
	ck_assert_int_eq(log_start(&v, &s), 0);
	mark = count_now(&v);
	while (count_now(&v) - mark < s.entries)
		ck_assert_int_eq(madvise(b, pg, MADV_DONTNEED), 0);
	if (count_now(&v) - mark == s.entries)	/* all of them still there */
		ck_assert_int_eq(changed(&v, mark, a, pg), 0);
	ck_assert_int_eq(madvise(b, pg, MADV_DONTNEED), 0);
	ck_assert_int_eq(changed(&v, mark, a, pg), 1);
	vt_close(&v);
	munmap(a, pg);
	munmap(b, pg);
}
END_TEST

/* The parent's file in a child answers nothing about the child, nor about the parent. */
START_TEST(child_cannot_use_parent_log)
{
	struct vt v;
	uint64_t mark;
	pid_t pid;
	int st;

	open_logging(&v);
	mark = count_now(&v);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct vmtrack_log_start s;
		struct vmtrack_changed c;

		memset(&s, 0, sizeof(s));
		memset(&c, 0, sizeof(c));
		c.mark = mark;
		c.start = (uintptr_t)&v;
		c.len = 1;
		_exit(ioctl(v.fd, VMTRACK_IOC_LOG_START, &s) == -1 && errno == EBADF &&
		      ioctl(v.fd, VMTRACK_IOC_CHANGED, &c) == -1 && errno == EBADF ? 0 : 1);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x", st);
	ck_assert_int_ge(changed(&v, mark, &v, 1), 0);
	vt_close(&v);
}
END_TEST

/* Logging files go away with their process, closed or not, and after it (a child keeps the
 * fd): the kernel log check of check-vm.sh sees any leak or warning. */
START_TEST(exit_and_outlive_while_logging)
{
	for (int round = 0; round < 12; round++) {
		pid_t pid = fork();
		int st;

		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			struct vt v;
			char *buf = vt_map(4 * pg);
			pid_t gc = 0;

			if (!buf || vt_open(&v) || log_start(&v, NULL))
				_exit(1);
			munmap(buf, 4 * pg);	/* something logged */
			if (round % 3 == 0)
				vt_close(&v);
			if (round % 3 == 1) {
				gc = fork();	/* holds the fd a while after this mm is gone */
				if (gc == 0) {
					usleep(50000);
					_exit(0);
				}
			}
			_exit(gc < 0);
		}
		ck_assert_int_eq(waitpid(pid, &st, 0), pid);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x", st);
	}
	usleep(200000);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("kmod change log");
	TCase *tc;
	int failed;

	vt_require_device("kmod_change_log");
	pg = vt_page();

	tc = tcase_create("log");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, start_and_count);
	tcase_add_test(tc, hostile_arguments);
	tcase_add_test(tc, marks_of_another_file);
	tcase_add_test(tc, changes_are_logged);
	tcase_add_test(tc, older_than_the_log);
	tcase_add_test(tc, child_cannot_use_parent_log);
	tcase_add_test(tc, exit_and_outlive_while_logging);
	suite_add_tcase(s, tc);

	failed = check_run(s, CK_FORK);
	printf("%s: kmod_change_log\n", failed ? "FAIL" : "PASS");
	return failed ? 1 : 0;
}
