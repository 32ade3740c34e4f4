/* The contract of /dev/vmtrack (kmod/uapi/vmtrack_kmod.h), including hostile input.
 * Needs the module loaded (run under test/vm/run); skipped (exit 77) without it. */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#include "kmod_util.h"
#include "../lib/check_run.h"

static long pg;

static void open_ok(struct vt *v)
{
	int r = vt_open(v);

	ck_assert_msg(r == 0, "open/info/mmap of %s: %s", VMTRACK_DEVICE, strerror(-r));
}

static int read_events(struct vt *v, struct vmtrack_event *ev, int max)
{
	ssize_t n = read(v->fd, ev, max * sizeof(*ev));

	if (n < 0)
		return -errno;
	ck_assert_int_eq(n % sizeof(*ev), 0);
	return (int)(n / sizeof(*ev));
}

/* ---- basics ----------------------------------------------------------------------------- */
START_TEST(info_and_header)
{
	struct vt v;

	open_ok(&v);
	ck_assert_uint_eq(v.info.abi_version, VMTRACK_ABI_VERSION);
	ck_assert_uint_eq(v.info.first_index, VMTRACK_FIRST_INDEX);
	ck_assert_uint_eq(v.info.event_size, sizeof(struct vmtrack_event));
	ck_assert_uint_ge(v.info.max_watches, 1);
	ck_assert_uint_eq(v.info.nr_watches, 0);
	ck_assert(v.info.map_bytes >= (VMTRACK_FIRST_INDEX + (uint64_t)v.info.max_watches) * 4);
	ck_assert(memchr(v.info.version, 0, sizeof(v.info.version)) != NULL);
	ck_assert(strlen(v.info.version) > 0);
	/* the module built from this tree carries configure.ac's version (kmod/Makefile reads
	 * it when built outside configure, as the guest rig does) */
	ck_assert_str_eq(v.info.version, PACKAGE_VERSION);
	ck_assert_uint_eq(v.info.features,
			  VMTRACK_FEATURE_WATCH_MAPPED | VMTRACK_FEATURE_CHANGE_LOG);
	for (unsigned i = 0; i < 3; i++)
		ck_assert_uint_eq(v.info.reserved[i], 0);
	ck_assert_uint_eq(v.w[VMTRACK_W_MAGIC], VMTRACK_MAGIC);
	ck_assert_uint_eq(v.w[VMTRACK_W_ABI], VMTRACK_ABI_VERSION);
	ck_assert_uint_eq(v.w[VMTRACK_W_EVENTS], 0);
	vt_close(&v);
}
END_TEST

START_TEST(watch_unwatch)
{
	struct vt v;
	struct vmtrack_watch a, b;
	char *buf = vt_map(4 * pg);

	open_ok(&v);
	ck_assert_int_eq(vt_watch(&v, buf, 4 * pg, 7, &a), 0);
	ck_assert_uint_ge(a.index, VMTRACK_FIRST_INDEX);
	ck_assert_uint_eq(a.handle, ((uint64_t)a.gen << 32) | a.index);
	ck_assert(vt_valid(&v, &a));
	/* overlapping ranges are separate watches */
	ck_assert_int_eq(vt_watch(&v, buf + pg, pg, 8, &b), 0);
	ck_assert_uint_ne(a.index, b.index);
	ck_assert_int_eq(vt_unwatch(&v, a.handle), 0);
	ck_assert_msg(v.w[a.index] != a.gen, "unwatch must change the word");
	ck_assert_int_eq(vt_unwatch(&v, a.handle), -ENOENT);	/* double unwatch */
	ck_assert(vt_valid(&v, &b));
	/* the word is reused with a fresh generation: the old handle stays dead */
	ck_assert_int_eq(vt_watch(&v, buf, pg, 9, &a), 0);
	ck_assert_int_eq(vt_unwatch(&v, b.handle), 0);
	ck_assert_int_eq(vt_unwatch(&v, a.handle), 0);
	ck_assert_int_eq(ioctl(v.fd, VMTRACK_IOC_INFO, &v.info), 0);
	ck_assert_uint_eq(v.info.nr_watches, 0);
	vt_close(&v);
	munmap(buf, 4 * pg);
}
END_TEST

/* ---- hostile input ---------------------------------------------------------------------- */
static int raw_watch(struct vt *v, uint64_t start, uint64_t len, uint32_t flags, uint32_t res)
{
	struct vmtrack_watch a;

	memset(&a, 0, sizeof(a));
	a.start = start;
	a.len = len;
	a.flags = flags;
	a.reserved = res;
	return ioctl(v->fd, VMTRACK_IOC_WATCH, &a) ? -errno : 0;
}

START_TEST(hostile_watch)
{
	struct vt v;
	char *buf = vt_map(2 * pg);
	uint64_t b = (uintptr_t)buf;

	open_ok(&v);
	ck_assert_int_eq(raw_watch(&v, b, 0, 0, 0), -EINVAL);		/* empty */
	ck_assert_int_eq(raw_watch(&v, b + 1, pg, 0, 0), -EINVAL);	/* unaligned start */
	ck_assert_int_eq(raw_watch(&v, b, pg + 1, 0, 0), -EINVAL);	/* unaligned length */
	ck_assert_int_eq(raw_watch(&v, b, 100, 0, 0), -EINVAL);
	ck_assert_int_eq(raw_watch(&v, -(uint64_t)pg, 2 * pg, 0, 0), -EINVAL);	/* wraps */
	ck_assert_int_eq(raw_watch(&v, b, -(uint64_t)pg, 0, 0), -EINVAL);	/* wraps */
	ck_assert_int_eq(raw_watch(&v, 1ull << 56, pg, 0, 0), -EINVAL);	/* kernel half */
	ck_assert_int_eq(raw_watch(&v, 0xffff800000000000ull, pg, 0, 0), -EINVAL);
	ck_assert_int_eq(raw_watch(&v, b, pg, 2, 0), -EINVAL);		/* unknown flag */
	ck_assert_int_eq(raw_watch(&v, b, pg, VMTRACK_WATCH_MAPPED | 2, 0), -EINVAL);
	ck_assert_int_eq(raw_watch(&v, b, pg, 0x80000000u, 0), -EINVAL);
	ck_assert_int_eq(raw_watch(&v, b, pg, 0, 1), -EINVAL);		/* reserved */
	/* bad pointers */
	ck_assert_int_eq(ioctl(v.fd, VMTRACK_IOC_WATCH, NULL), -1);
	ck_assert_int_eq(errno, EFAULT);
	ck_assert_int_eq(ioctl(v.fd, VMTRACK_IOC_WATCH, (void *)1), -1);
	ck_assert_int_eq(errno, EFAULT);
	ck_assert_int_eq(ioctl(v.fd, VMTRACK_IOC_INFO, (void *)0xffff880000000000ull), -1);
	ck_assert_int_eq(errno, EFAULT);
	/* unknown commands */
	ck_assert_int_eq(ioctl(v.fd, _IO(VMTRACK_IOC_MAGIC, 99)), -1);
	ck_assert_int_eq(errno, ENOTTY);
	ck_assert_int_eq(ioctl(v.fd, _IOW(VMTRACK_IOC_MAGIC, 1, int), buf), -1);
	ck_assert_int_eq(errno, ENOTTY);
	/* nothing was left watched */
	ck_assert_int_eq(ioctl(v.fd, VMTRACK_IOC_INFO, &v.info), 0);
	ck_assert_uint_eq(v.info.nr_watches, 0);
	/* watching unmapped memory is allowed (a cache only watches what it registers) */
	ck_assert_int_eq(raw_watch(&v, 1ull << 40, pg, 0, 0), 0);
	vt_close(&v);
	munmap(buf, 2 * pg);
}
END_TEST

/* VMTRACK_WATCH_MAPPED: a range with a hole anywhere (or none of it mapped) is refused and
 * leaves no watch; a wholly mapped one, of several VMAs, is watched as without the flag. */
START_TEST(watch_mapped_refuses_holes)
{
	struct vt v;
	struct vmtrack_watch a;
	char *buf = vt_map(8 * pg);
	uint64_t b = (uintptr_t)buf;

	open_ok(&v);
	ck_assert_int_eq(mprotect(buf + 2 * pg, pg, PROT_READ), 0);	/* three VMAs */
	ck_assert_int_eq(raw_watch(&v, b, 8 * pg, VMTRACK_WATCH_MAPPED, 0), 0);
	ck_assert_int_eq(munmap(buf + 5 * pg, pg), 0);
	ck_assert_int_eq(raw_watch(&v, b, 8 * pg, VMTRACK_WATCH_MAPPED, 0), -EFAULT);
	ck_assert_int_eq(raw_watch(&v, b + 5 * pg, pg, VMTRACK_WATCH_MAPPED, 0), -EFAULT);
	ck_assert_int_eq(raw_watch(&v, b + 4 * pg, 2 * pg, VMTRACK_WATCH_MAPPED, 0), -EFAULT);
	ck_assert_int_eq(raw_watch(&v, b + 5 * pg, 2 * pg, VMTRACK_WATCH_MAPPED, 0), -EFAULT);
	ck_assert_int_eq(raw_watch(&v, 1ull << 40, pg, VMTRACK_WATCH_MAPPED, 0), -EFAULT);
	ck_assert_int_eq(raw_watch(&v, b, 5 * pg, VMTRACK_WATCH_MAPPED, 0), 0);
	ck_assert_int_eq(ioctl(v.fd, VMTRACK_IOC_INFO, &v.info), 0);
	ck_assert_uint_eq(v.info.nr_watches, 2);	/* the two that were accepted */
	/* a watch made with the flag moves its word when the range goes, as any other */
	memset(&a, 0, sizeof(a));
	a.start = b + 6 * pg;
	a.len = pg;
	a.flags = VMTRACK_WATCH_MAPPED;
	ck_assert_int_eq(ioctl(v.fd, VMTRACK_IOC_WATCH, &a), 0);
	ck_assert(vt_valid(&v, &a));
	ck_assert_int_eq(munmap(buf + 6 * pg, pg), 0);
	ck_assert(!vt_valid(&v, &a));
	vt_close(&v);
	munmap(buf, 8 * pg);
}
END_TEST

START_TEST(hostile_unwatch)
{
	struct vt v;
	struct vmtrack_watch a;
	struct vmtrack_unwatch u;
	char *buf = vt_map(pg);

	open_ok(&v);
	ck_assert_int_eq(vt_watch(&v, buf, pg, 1, &a), 0);
	ck_assert_int_eq(vt_unwatch(&v, 0), -ENOENT);
	ck_assert_int_eq(vt_unwatch(&v, ~0ull), -ENOENT);
	ck_assert_int_eq(vt_unwatch(&v, a.index), -ENOENT);			/* no generation */
	ck_assert_int_eq(vt_unwatch(&v, a.handle + (1ull << 32)), -ENOENT);	/* wrong gen */
	ck_assert_int_eq(vt_unwatch(&v, a.handle + 1), -ENOENT);		/* wrong index */
	ck_assert_int_eq(vt_unwatch(&v, VMTRACK_W_MAGIC), -ENOENT);		/* header */
	memset(&u, 0, sizeof(u));
	u.handle = a.handle;
	u.flags = 1;
	ck_assert_int_eq(ioctl(v.fd, VMTRACK_IOC_UNWATCH, &u), -1);
	ck_assert_int_eq(errno, EINVAL);
	u.flags = 0;
	u.reserved = 5;
	ck_assert_int_eq(ioctl(v.fd, VMTRACK_IOC_UNWATCH, &u), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(ioctl(v.fd, VMTRACK_IOC_UNWATCH, NULL), -1);
	ck_assert_int_eq(errno, EFAULT);
	ck_assert(vt_valid(&v, &a));	/* none of that touched the watch */
	ck_assert_int_eq(vt_unwatch(&v, a.handle), 0);
	vt_close(&v);
	munmap(buf, pg);
}
END_TEST

START_TEST(handles_of_another_file)
{
	struct vt v1, v2;
	struct vmtrack_watch a, b;
	char *buf = vt_map(pg);

	open_ok(&v1);
	open_ok(&v2);
	ck_assert_int_eq(vt_watch(&v1, buf, pg, 1, &a), 0);
	ck_assert_int_eq(vt_unwatch(&v2, a.handle), -ENOENT);
	ck_assert_int_eq(vt_watch(&v2, buf, pg, 2, &b), 0);
	ck_assert_msg(a.handle != b.handle, "two files gave the same handle");
	ck_assert_int_eq(vt_unwatch(&v1, b.handle), -ENOENT);
	ck_assert(vt_valid(&v1, &a));
	ck_assert(vt_valid(&v2, &b));
	/* both see the change */
	munmap(buf, pg);
	ck_assert(!vt_valid(&v1, &a));
	ck_assert(!vt_valid(&v2, &b));
	ck_assert_int_eq(vt_unwatch(&v1, a.handle), 0);
	ck_assert_int_eq(vt_unwatch(&v2, b.handle), 0);
	vt_close(&v1);
	vt_close(&v2);
}
END_TEST

START_TEST(mmap_rules)
{
	struct vt v;
	void *p;
	size_t len;

	open_ok(&v);
	len = v.map_bytes;
	/* the words cannot be written, now or later */
	ck_assert_int_eq(mprotect((void *)v.w, pg, PROT_READ | PROT_WRITE), -1);
	ck_assert_int_eq(errno, EACCES);
	ck_assert_int_eq(mprotect((void *)v.w, pg, PROT_READ | PROT_EXEC), -1);
	ck_assert(mmap(NULL, pg, PROT_READ | PROT_WRITE, MAP_SHARED, v.fd, 0) == MAP_FAILED);
	ck_assert(mmap(NULL, pg, PROT_READ, MAP_PRIVATE, v.fd, 0) == MAP_FAILED);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert(mmap(NULL, pg, PROT_READ, MAP_SHARED, v.fd, pg) == MAP_FAILED);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert(mmap(NULL, len + pg, PROT_READ, MAP_SHARED, v.fd, 0) == MAP_FAILED);
	ck_assert_int_eq(errno, EINVAL);
	/* a second read-only mapping shows the same words */
	p = mmap(NULL, pg, PROT_READ, MAP_SHARED, v.fd, 0);
	ck_assert(p != MAP_FAILED);
	ck_assert_uint_eq(((uint32_t *)p)[VMTRACK_W_MAGIC], VMTRACK_MAGIC);
	munmap(p, pg);
	/* it cannot grow */
	p = mremap((void *)v.w, pg, 2 * pg, 0);
	ck_assert(p == MAP_FAILED);
	vt_close(&v);
}
END_TEST

static sigjmp_buf segv_jmp;
static void on_segv(int sig)
{
	(void)sig;
	siglongjmp(segv_jmp, 1);
}

/* Can this process read the word at w? (SIGSEGV says no) */
static __attribute__((noinline)) int readable(const volatile uint32_t *w)
{
	signal(SIGSEGV, on_segv);
	if (sigsetjmp(segv_jmp, 1))
		return 0;
	(void)*w;
	return 1;
}

START_TEST(read_rules)
{
	struct vt v;
	struct vmtrack_event ev[2];
	char small[8];
	struct pollfd pfd;

	open_ok(&v);
	ck_assert_int_eq(read(v.fd, small, sizeof(small)), -1);
	ck_assert_int_eq(errno, EINVAL);
	ck_assert_int_eq(read_events(&v, ev, 2), -EAGAIN);
	pfd.fd = v.fd;
	pfd.events = POLLIN;
	ck_assert_int_eq(poll(&pfd, 1, 0), 0);
	ck_assert_int_eq(write(v.fd, small, sizeof(small)), -1);
	vt_close(&v);
}
END_TEST

/* ---- changes of the address space ------------------------------------------------------- */
/* Each change must move the word before the system call returns; mprotect must not. */
struct watched {
	struct vt v;
	struct vmtrack_watch w;
	uint32_t changes;
};

static void watch_buf(struct watched *s, void *buf, size_t len, uint64_t cookie)
{
	open_ok(&s->v);
	ck_assert_int_eq(vt_watch(&s->v, buf, len, cookie, &s->w), 0);
	s->changes = s->v.w[VMTRACK_W_CHANGES];
}

static void expect_changed(struct watched *s, const char *what, uint32_t reason)
{
	struct vmtrack_event ev[4];
	int n;

	ck_assert_msg(!vt_valid(&s->v, &s->w), "%s: the word did not change", what);
	ck_assert_msg(s->v.w[VMTRACK_W_CHANGES] != s->changes, "%s: change counter", what);
	ck_assert_uint_ge(s->v.w[VMTRACK_W_EVENTS], 1);
	n = read_events(&s->v, ev, 4);
	ck_assert_msg(n == 1, "%s: %d events", what, n);
	ck_assert_uint_eq(ev[0].cookie, s->w.cookie);
	ck_assert_uint_eq(ev[0].handle, s->w.handle);
	ck_assert(ev[0].start >= s->w.start && ev[0].len > 0 &&
		  ev[0].start + ev[0].len <= s->w.start + s->w.len);
	if (reason)
		ck_assert_msg(ev[0].reason == reason, "%s: reason %u, want %u", what,
			      ev[0].reason, reason);
	ck_assert_uint_eq(ev[0].flags, 0);
	ck_assert_uint_eq(s->v.w[VMTRACK_W_EVENTS], 0);
	ck_assert_int_eq(vt_unwatch(&s->v, s->w.handle), 0);
	vt_close(&s->v);
}

static void expect_unchanged(struct watched *s, const char *what)
{
	struct vmtrack_event ev;

	ck_assert_msg(vt_valid(&s->v, &s->w), "%s: the word changed", what);
	ck_assert_int_eq(read_events(&s->v, &ev, 1), -EAGAIN);
}

START_TEST(change_munmap)
{
	struct watched s;
	char *buf = vt_map(8 * pg);

	watch_buf(&s, buf + 2 * pg, 2 * pg, 11);
	munmap(buf + 3 * pg, pg);	/* part of it */
	expect_changed(&s, "munmap", VMTRACK_EV_UNMAP);
	munmap(buf, 8 * pg);
}
END_TEST

START_TEST(change_munmap_raw)
{
	struct watched s;
	char *buf = vt_map(4 * pg);

	watch_buf(&s, buf, 4 * pg, 12);
	ck_assert_int_eq(syscall(SYS_munmap, buf, 4 * pg), 0);
	expect_changed(&s, "syscall(SYS_munmap)", VMTRACK_EV_UNMAP);
}
END_TEST

START_TEST(change_munmap_outside)
{
	struct watched s;
	char *buf = vt_map(8 * pg);

	watch_buf(&s, buf + 2 * pg, 2 * pg, 13);
	munmap(buf, 2 * pg);		/* next to it, not in it */
	munmap(buf + 4 * pg, 4 * pg);
	expect_unchanged(&s, "munmap next to the range");
	munmap(buf + 2 * pg, 2 * pg);
	expect_changed(&s, "munmap", VMTRACK_EV_UNMAP);
}
END_TEST

START_TEST(change_mremap)
{
	struct watched s;
	char *buf = vt_map(4 * pg);
	char *dst = vt_map(4 * pg);
	void *p;

	watch_buf(&s, buf, 4 * pg, 14);
	p = mremap(buf, 4 * pg, 4 * pg, MREMAP_MAYMOVE | MREMAP_FIXED, dst);
	ck_assert(p == dst);
	expect_changed(&s, "mremap", 0);
	munmap(dst, 4 * pg);
}
END_TEST

START_TEST(change_mremap_shrink)
{
	struct watched s;
	char *buf = vt_map(4 * pg);

	watch_buf(&s, buf, 4 * pg, 15);
	ck_assert(mremap(buf, 4 * pg, pg, 0) == buf);
	expect_changed(&s, "mremap shrink", 0);
	munmap(buf, pg);
}
END_TEST

START_TEST(change_madvise_dontneed)
{
	struct watched s;
	char *buf = vt_map(4 * pg);

	watch_buf(&s, buf, 4 * pg, 16);
	ck_assert_int_eq(madvise(buf + pg, pg, MADV_DONTNEED), 0);
	expect_changed(&s, "madvise(MADV_DONTNEED)", VMTRACK_EV_CLEAR);
	munmap(buf, 4 * pg);
}
END_TEST

START_TEST(change_map_fixed)
{
	struct watched s;
	char *buf = vt_map(4 * pg);
	void *p;

	watch_buf(&s, buf, 4 * pg, 17);
	p = mmap(buf + pg, pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
		 -1, 0);
	ck_assert(p == buf + pg);
	expect_changed(&s, "mmap(MAP_FIXED) over it", 0);
	munmap(buf, 4 * pg);
}
END_TEST

START_TEST(change_shmdt)
{
	struct watched s;
	int id = shmget(IPC_PRIVATE, 4 * pg, IPC_CREAT | 0600);
	char *buf;

	ck_assert_int_ge(id, 0);
	buf = shmat(id, NULL, 0);
	ck_assert(buf != (void *)-1);
	shmctl(id, IPC_RMID, NULL);
	memset(buf, 1, 4 * pg);
	watch_buf(&s, buf, 4 * pg, 18);
	ck_assert_int_eq(shmdt(buf), 0);
	expect_changed(&s, "shmdt", VMTRACK_EV_UNMAP);
}
END_TEST

START_TEST(change_brk)
{
	struct watched s;
	uintptr_t cur = (uintptr_t)syscall(SYS_brk, 0);
	uintptr_t top, lo, hi;

	top = (uintptr_t)syscall(SYS_brk, cur + 16 * pg);
	ck_assert_uint_eq(top, cur + 16 * pg);
	lo = (cur + pg - 1) & ~(uintptr_t)(pg - 1);
	hi = top & ~(uintptr_t)(pg - 1);
	memset((void *)lo, 3, hi - lo);
	watch_buf(&s, (void *)(hi - 4 * pg), 4 * pg, 19);
	ck_assert_uint_eq((uintptr_t)syscall(SYS_brk, hi - 8 * pg), hi - 8 * pg);
	expect_changed(&s, "brk shrink", VMTRACK_EV_UNMAP);
	syscall(SYS_brk, cur);
}
END_TEST

START_TEST(change_truncate)
{
	struct watched s;
	int fd = memfd_create("vmtrack-test", MFD_CLOEXEC);
	char *buf;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, 4 * pg), 0);
	buf = mmap(NULL, 4 * pg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ck_assert(buf != MAP_FAILED);
	memset(buf, 4, 4 * pg);
	watch_buf(&s, buf, 4 * pg, 20);
	ck_assert_int_eq(ftruncate(fd, pg), 0);
	expect_changed(&s, "ftruncate of the mapped file", VMTRACK_EV_CLEAR);
	munmap(buf, 4 * pg);
	close(fd);
}
END_TEST

/* The page frame behind addr, 0 if not present or not readable (pagemap shows frames to root
 * only; the guest runs the tests as root). */
static uint64_t page_frame(const void *addr)
{
	uint64_t e = 0;
	int fd = open("/proc/self/pagemap", O_RDONLY);

	if (fd < 0)
		return 0;
	if (pread(fd, &e, sizeof(e), (off_t)((uintptr_t)addr / pg) * sizeof(e)) != sizeof(e))
		e = 0;
	close(fd);
	return (e >> 63) ? (e & ((1ull << 55) - 1)) : 0;
}

/* mprotect changes no page: the word stays valid. The write after mprotect(READ) and back to
 * RW may still copy the page (5.10's write fault copies an anonymous page unless nothing else
 * holds a reference; 5.19's PageAnonExclusive reuses it): then the page really was replaced
 * and the module must say so. Which one happened is read from the page frame, not assumed. */
START_TEST(no_change_mprotect)
{
	struct watched s;
	char *buf = vt_map(4 * pg);
	uint64_t before, after;

	watch_buf(&s, buf, 4 * pg, 21);
	ck_assert_int_eq(mprotect(buf, 4 * pg, PROT_READ), 0);
	ck_assert_int_eq(mprotect(buf + pg, pg, PROT_NONE), 0);
	ck_assert_int_eq(mprotect(buf, 4 * pg, PROT_READ | PROT_WRITE), 0);
	expect_unchanged(&s, "mprotect");
	ck_assert_uint_eq(s.v.w[VMTRACK_W_CHANGES], s.changes);
	before = page_frame(buf);
	ck_assert_msg(before != 0, "cannot read the page frame from /proc/self/pagemap (root?)");
	buf[0] = 1;
	after = page_frame(buf);
	if (after == before) {
		expect_unchanged(&s, "a write after mprotect that kept the page");
		ck_assert_uint_eq(s.v.w[VMTRACK_W_CHANGES], s.changes);
	} else {
		printf("no_change_mprotect: the write after mprotect copied the page (frame %#llx -> %#llx): expecting a change\n",
		       (unsigned long long)before, (unsigned long long)after);
		/* (expect_changed ends the watch) */
		expect_changed(&s, "a write after mprotect that replaced the page", VMTRACK_EV_CLEAR);
		munmap(buf, 4 * pg);
		return;
	}
	munmap(buf, 4 * pg);
	expect_changed(&s, "munmap after mprotect", VMTRACK_EV_UNMAP);
}
END_TEST

START_TEST(no_change_fork)
{
	struct watched s;
	char *buf = vt_map(4 * pg);
	pid_t pid;
	int st;

	watch_buf(&s, buf, 4 * pg, 22);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(0);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	expect_unchanged(&s, "fork (the parent keeps its pages)");
	munmap(buf, 4 * pg);
	expect_changed(&s, "munmap after fork", VMTRACK_EV_UNMAP);
}
END_TEST

START_TEST(overlapping_ranges)
{
	struct vt v;
	struct vmtrack_watch a, b, c;
	char *buf = vt_map(8 * pg);
	struct vmtrack_event ev[8];

	open_ok(&v);
	ck_assert_int_eq(vt_watch(&v, buf, 4 * pg, 1, &a), 0);
	ck_assert_int_eq(vt_watch(&v, buf + 2 * pg, 4 * pg, 2, &b), 0);
	ck_assert_int_eq(vt_watch(&v, buf + 2 * pg, 4 * pg, 3, &c), 0);	/* same range */
	ck_assert_int_eq(madvise(buf + 5 * pg, pg, MADV_DONTNEED), 0);
	ck_assert(vt_valid(&v, &a));
	ck_assert(!vt_valid(&v, &b));
	ck_assert(!vt_valid(&v, &c));
	ck_assert_int_eq(read_events(&v, ev, 8), 2);
	ck_assert_uint_eq(ev[0].start, (uintptr_t)buf + 5 * pg);
	ck_assert_uint_eq(ev[0].len, pg);
	/* one event per watch: b and c are already reported */
	ck_assert_int_eq(madvise(buf + 2 * pg, 2 * pg, MADV_DONTNEED), 0);
	ck_assert(!vt_valid(&v, &a));
	ck_assert_int_eq(read_events(&v, ev, 8), 1);
	ck_assert_uint_eq(ev[0].cookie, 1);
	ck_assert_uint_eq(ev[0].start, (uintptr_t)buf + 2 * pg);
	ck_assert_uint_eq(ev[0].len, 2 * pg);
	vt_close(&v);
	munmap(buf, 8 * pg);
}
END_TEST

START_TEST(poll_and_blocking_read)
{
	struct vt v;
	struct vmtrack_watch a;
	struct pollfd pfd;
	struct vmtrack_event ev;
	char *buf = vt_map(pg);

	open_ok(&v);
	ck_assert_int_eq(vt_watch(&v, buf, pg, 5, &a), 0);
	munmap(buf, pg);
	pfd.fd = v.fd;
	pfd.events = POLLIN;
	ck_assert_int_eq(poll(&pfd, 1, 1000), 1);
	ck_assert(pfd.revents & POLLIN);
	ck_assert_int_eq(fcntl(v.fd, F_SETFL, 0), 0);	/* blocking read */
	ck_assert_int_eq(read(v.fd, &ev, sizeof(ev)), sizeof(ev));
	ck_assert_uint_eq(ev.cookie, 5);
	vt_close(&v);
}
END_TEST

/* ---- limits ----------------------------------------------------------------------------- */
static int set_param(const char *name, unsigned val, unsigned *old)
{
	char path[128], b[32];
	FILE *f;

	snprintf(path, sizeof(path), "/sys/module/vmtrack/parameters/%s", name);
	f = fopen(path, "r");
	if (!f)
		return -errno;
	if (!fgets(b, sizeof(b), f)) {
		fclose(f);
		return -EIO;
	}
	fclose(f);
	*old = (unsigned)strtoul(b, NULL, 10);
	f = fopen(path, "w");
	if (!f)
		return -errno;
	fprintf(f, "%u\n", val);
	return fclose(f) ? -errno : 0;
}

START_TEST(thousands_of_watches)
{
	enum { N = 20000 };
	struct vt v;
	struct vmtrack_watch *w = calloc(N, sizeof(*w));
	char *buf = vt_map(64 * pg);
	int i, changed = 0;

	ck_assert_ptr_nonnull(w);
	open_ok(&v);
	/* (no ck_assert in the loops: each one is a write to Check's pipe) */
	for (i = 0; i < N; i++)
		if (vt_watch(&v, buf + (i % 64) * pg, pg, i, &w[i]))
			break;
	ck_assert_msg(i == N, "watch %d of %d: %s", i, N, strerror(errno));
	ck_assert_int_eq(ioctl(v.fd, VMTRACK_IOC_INFO, &v.info), 0);
	ck_assert_uint_eq(v.info.nr_watches, N);
	for (i = 0; i < N; i++)
		if (!vt_valid(&v, &w[i]))
			break;
	ck_assert_msg(i == N, "watch %d changed", i);
	munmap(buf + 10 * pg, 2 * pg);
	for (i = 0; i < N; i++) {
		int in = i % 64 == 10 || i % 64 == 11;

		if (vt_valid(&v, &w[i]) != !in)
			break;
		changed += in;
	}
	ck_assert_msg(i == N, "watch %d: valid %d", i, vt_valid(&v, &w[i]));
	ck_assert_int_eq(changed, 2 * ((N + 63) / 64));
	for (i = 0; i < N; i += 2)
		if (vt_unwatch(&v, w[i].handle))
			break;
	ck_assert_msg(i >= N, "unwatch %d: %s", i, strerror(errno));
	/* close with the other half still watched */
	vt_close(&v);
	munmap(buf, 64 * pg);
	free(w);
}
END_TEST

START_TEST(limit_and_overflow)
{
	struct vt v;
	struct vmtrack_watch a;
	struct vmtrack_event ev[64];
	unsigned old_w, old_e;
	char *buf = vt_map(64 * pg);
	int i, r, n;

	r = set_param("max_watches", 40, &old_w);
	if (r) {
		printf("limit_and_overflow: cannot set module parameters (%s): not checked\n",
		       strerror(-r));
		return;
	}
	ck_assert_int_eq(set_param("max_events", 16, &old_e), 0);
	r = vt_open(&v);
	set_param("max_watches", old_w, &old_w);
	set_param("max_events", old_e, &old_e);
	ck_assert_int_eq(r, 0);
	ck_assert_uint_eq(v.info.max_watches, 40);
	ck_assert_uint_eq(v.info.max_events, 16);
	for (i = 0; i < 40; i++)
		ck_assert_int_eq(vt_watch(&v, buf + i * pg, pg, i + 1, NULL), 0);
	ck_assert_int_eq(vt_watch(&v, buf, pg, 99, &a), -ENOSPC);
	/* 40 events into a queue of 16: one overflow event tells to drop everything */
	munmap(buf, 64 * pg);
	ck_assert_uint_ge(v.w[VMTRACK_W_EVENTS], 1);
	n = read_events(&v, ev, 64);
	ck_assert_int_ge(n, 1);
	ck_assert_uint_eq(ev[0].reason, VMTRACK_EV_OVERFLOW);
	ck_assert_int_eq(read_events(&v, ev, 64), -EAGAIN);
	vt_close(&v);
}
END_TEST

/* ---- fork, exit, close ------------------------------------------------------------------ */
START_TEST(fork_child_cannot_use_parent_file)
{
	struct vt v;
	struct vmtrack_watch a;
	char *buf = vt_map(pg);
	pid_t pid;
	int st;

	open_ok(&v);
	ck_assert_int_eq(vt_watch(&v, buf, pg, 1, &a), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct vmtrack_info info;
		struct vmtrack_event ev;
		struct vt mine;
		int bad = 0;

		bad |= ioctl(v.fd, VMTRACK_IOC_INFO, &info) != -1 || errno != EBADF;
		bad |= (vt_watch(&v, buf, pg, 2, NULL) != -EBADF) << 1;
		bad |= (vt_unwatch(&v, a.handle) != -EBADF) << 2;
		bad |= (read(v.fd, &ev, sizeof(ev)) != -1 || errno != EBADF) << 3;
		bad |= (mmap(NULL, pg, PROT_READ, MAP_SHARED, v.fd, 0) != MAP_FAILED) << 4;
		/* the parent's words are not mapped in the child */
		bad |= readable(v.w) << 5;
		/* the child opens its own */
		bad |= (vt_open(&mine) != 0) << 6;
		bad |= (vt_watch(&mine, buf, pg, 3, &a) != 0) << 7;
		munmap(buf, pg);
		bad |= vt_valid(&mine, &a) << 8;
		_exit(bad);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x", st);
	/* the child's munmap did not touch the parent's range; the parent's file works */
	ck_assert(vt_valid(&v, &a));
	munmap(buf, pg);
	ck_assert(!vt_valid(&v, &a));
	ck_assert_int_eq(vt_unwatch(&v, a.handle), 0);
	vt_close(&v);
}
END_TEST

START_TEST(exit_and_close_while_watched)
{
	for (int round = 0; round < 20; round++) {
		pid_t pid = fork();
		int st;

		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			struct vt v;
			char *buf = vt_map(16 * pg);

			if (!buf || vt_open(&v))
				_exit(1);
			for (int i = 0; i < 500; i++)
				if (vt_watch(&v, buf + (i % 16) * pg, pg, i, NULL))
					_exit(2);
			if (round % 3 == 0)
				close(v.fd);	/* the mapping keeps the file */
			if (round % 3 == 1)
				vt_close(&v);
			if (round % 2)
				munmap(buf, 16 * pg);
			_exit(0);	/* round % 3 == 2: exit with everything open */
		}
		ck_assert_int_eq(waitpid(pid, &st, 0), pid);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x", st);
	}
}
END_TEST

/* A child inherits the fd and outlives the parent: the file goes away in the child. */
START_TEST(file_outlives_its_mm)
{
	int pipefd[2];
	pid_t pid;
	int st;

	ck_assert_int_eq(pipe(pipefd), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct vt v;
		char *buf = vt_map(4 * pg);
		pid_t gc;

		if (vt_open(&v) || vt_watch(&v, buf, 4 * pg, 1, NULL))
			_exit(1);
		gc = fork();
		if (gc == 0) {
			char c;

			close(pipefd[1]);
			(void)read(pipefd[0], &c, 1);	/* until the parent is gone */
			usleep(100000);
			close(v.fd);	/* last reference, from another mm */
			_exit(0);
		}
		_exit(gc < 0);
	}
	close(pipefd[0]);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_int_eq(st, 0);
	close(pipefd[1]);
	usleep(300000);
}
END_TEST

/* ---- concurrency ------------------------------------------------------------------------ */
struct stress {
	struct vt *v;
	char *buf;
	volatile int stop;
	long errors;
};

static void *stress_watcher(void *arg)
{
	struct stress *s = arg;
	struct vmtrack_watch w[64];
	unsigned seed = 1;

	while (!s->stop) {
		int n = 0;

		for (int i = 0; i < 64; i++) {
			int r = vt_watch(s->v, s->buf + (rand_r(&seed) % 64) * pg, pg, i, &w[n]);

			if (r == 0)
				n++;
			else
				s->errors++;
		}
		for (int i = 0; i < n; i++)
			if (vt_unwatch(s->v, w[i].handle))
				s->errors++;
	}
	return NULL;
}

static void *stress_reader(void *arg)
{
	struct stress *s = arg;
	struct vmtrack_event ev[16];

	while (!s->stop)
		if (read(s->v->fd, ev, sizeof(ev)) < 0 && errno != EAGAIN)
			s->errors++;
	return NULL;
}

START_TEST(concurrent_watch_unmap_read)
{
	struct vt v;
	struct stress s;
	pthread_t t[3];
	char *buf;
	long rounds = 0;
	time_t end = time(NULL) + 3;

	open_ok(&v);
	buf = mmap(NULL, 64 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ck_assert(buf != MAP_FAILED);
	memset(&s, 0, sizeof(s));
	s.v = &v;
	s.buf = buf;
	pthread_create(&t[0], NULL, stress_watcher, &s);
	pthread_create(&t[1], NULL, stress_watcher, &s);
	pthread_create(&t[2], NULL, stress_reader, &s);
	while (time(NULL) < end) {
		/* unmap and map again at the same place, and drop pages */
		int k = rounds % 60;

		munmap(buf + k * pg, 4 * pg);
		ck_assert(mmap(buf + k * pg, 4 * pg, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == buf + k * pg);
		memset(buf + k * pg, 1, 4 * pg);
		madvise(buf + ((k + 7) % 64) * pg, pg, MADV_DONTNEED);
		rounds++;
	}
	s.stop = 1;
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	printf("concurrent: %ld unmap rounds, %ld errors\n", rounds, s.errors);
	ck_assert_int_eq(s.errors, 0);
	vt_close(&v);
	munmap(buf, 64 * pg);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("kmod");
	TCase *tc;
	int failed;

	vt_require_device("kmod_contract");
	pg = vt_page();

	tc = tcase_create("contract");
	tcase_add_test(tc, info_and_header);
	tcase_add_test(tc, watch_unwatch);
	tcase_add_test(tc, mmap_rules);
	tcase_add_test(tc, read_rules);
	tcase_add_test(tc, overlapping_ranges);
	tcase_add_test(tc, poll_and_blocking_read);
	suite_add_tcase(s, tc);

	tc = tcase_create("hostile");
	tcase_add_test(tc, hostile_watch);
	tcase_add_test(tc, watch_mapped_refuses_holes);
	tcase_add_test(tc, hostile_unwatch);
	tcase_add_test(tc, handles_of_another_file);
	suite_add_tcase(s, tc);

	tc = tcase_create("changes");
	tcase_add_test(tc, change_munmap);
	tcase_add_test(tc, change_munmap_raw);
	tcase_add_test(tc, change_munmap_outside);
	tcase_add_test(tc, change_mremap);
	tcase_add_test(tc, change_mremap_shrink);
	tcase_add_test(tc, change_madvise_dontneed);
	tcase_add_test(tc, change_map_fixed);
	tcase_add_test(tc, change_shmdt);
	tcase_add_test(tc, change_brk);
	tcase_add_test(tc, change_truncate);
	tcase_add_test(tc, no_change_mprotect);
	tcase_add_test(tc, no_change_fork);
	suite_add_tcase(s, tc);

	tc = tcase_create("lifetime");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, thousands_of_watches);
	tcase_add_test(tc, limit_and_overflow);
	tcase_add_test(tc, fork_child_cannot_use_parent_file);
	tcase_add_test(tc, exit_and_close_while_watched);
	tcase_add_test(tc, file_outlives_its_mm);
	tcase_add_test(tc, concurrent_watch_unmap_read);
	suite_add_tcase(s, tc);

	failed = check_run(s, CK_FORK);
	printf("%s: kmod_contract\n", failed ? "FAIL" : "PASS");
	return failed ? 1 : 0;
}
