/* The io_uring fixed-buffer device on a real ring: data through WRITE_FIXED, hits, slot
 * exhaustion and eviction, -EBUSY, limits, sharing a ring between attachments, threads. */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <liburing.h>
#include <vmtrack.h>
#include <vmtrack/iouring.h>
#include "lib/vmt_test.h"

static int tmpfd(void)
{
    char path[] = "/tmp/vmtrack-test-iouring-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    return fd;
}

static void fill(unsigned char *b, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        b[i] = (unsigned char)(seed * 31 + i * 7 + (i >> 9));
}

static int write_fixed(struct io_uring *ring, int fd, const void *buf, size_t len, int idx,
                       off_t off)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
    ck_assert_ptr_nonnull(sqe);
    io_uring_prep_write_fixed(sqe, fd, buf, (unsigned)len, off, idx);
    ck_assert_int_eq(io_uring_submit(ring), 1);
    struct io_uring_cqe *cqe;
    int ret;
    do
        ret = io_uring_wait_cqe(ring, &cqe);
    while (ret == -EINTR);
    ck_assert_int_eq(ret, 0);
    ret = cqe->res;
    io_uring_cqe_seen(ring, cqe);
    return ret;
}

/* get -> index -> WRITE_FIXED -> read back -> compare; returns the index used. */
static int roundtrip(struct vmt_device *dev, struct io_uring *ring, int fd, void *buf, size_t len,
                     unsigned seed)
{
    fill(buf, len, seed);
    struct vmt_reg *reg;
    int ret = vmt_get(dev, buf, len, VMT_ACCESS_READ, &reg);
    ck_assert_msg(ret == 0, "vmt_get: %s", strerror(-ret));
    int idx = vmt_iouring_index(reg);
    ck_assert_int_ge(idx, 0);
    ck_assert_int_eq(write_fixed(ring, fd, buf, len, idx, 0), (int)len);
    vmt_put(reg);
    unsigned char *back = malloc(len);
    ck_assert_ptr_nonnull(back);
    ck_assert_int_eq(pread(fd, back, len, 0), (ssize_t)len);
    ck_assert_msg(memcmp(back, buf, len) == 0, "the file does not hold the buffer's bytes");
    free(back);
    return idx;
}

/* A ring of `entries`, a cache on `tracker` and the ring attached to it with `slots` slots. */
struct ring_fixture {
    struct io_uring ring;
    struct vmt_cache *c;
    struct vmt_device *dev;
};

static void ring_open(struct ring_fixture *r, unsigned entries, const char *tracker,
                      unsigned slots)
{
    ck_assert_int_eq(io_uring_queue_init(entries, &r->ring, 0), 0);
    r->c = cache_open(tracker);
    ck_assert_int_eq(vmt_iouring_attach(r->c, &r->ring, slots, &r->dev), 0);
}

static void ring_close(struct ring_fixture *r)
{
    vmt_iouring_detach(r->dev);
    vmt_cache_destroy(r->c);
    io_uring_queue_exit(&r->ring);
}

START_TEST(write_fixed_reaches_file)
{
    struct ring_fixture r;
    ring_open(&r, 8, "none", 64);
    int fd = tmpfd();

    size_t len = 256 * 1024;
    unsigned char *buf = map_anon(len);
    int idx1 = roundtrip(r.dev, &r.ring, fd, buf, len, 1);
    /* A second get of the same range is a hit: same fixed buffer, new bytes still arrive. */
    int idx2 = roundtrip(r.dev, &r.ring, fd, buf, len, 2);
    ck_assert_int_eq(idx1, idx2);
    /* A sub-range that is not page aligned, inside the cached registration. */
    int idx3 = roundtrip(r.dev, &r.ring, fd, buf + 1000, 5000, 3);
    ck_assert_int_eq(idx1, idx3);
    struct vmt_stats s = stats_of(r.c);
    ck_assert_uint_eq(s.registrations, 1);
    ck_assert_uint_ge(s.hits, 2);

    /* A malloc'd buffer that is not page aligned. */
    unsigned char *m = malloc(100000);
    ck_assert_ptr_nonnull(m);
    roundtrip(r.dev, &r.ring, fd, m + 3, 99990, 4);
    free(m);

    munmap(buf, len);
    close(fd);
    ring_close(&r);
}
END_TEST

START_TEST(slot_exhaustion)
{
    enum { SLOTS = 4 };
    struct ring_fixture r;
    ring_open(&r, 8, "none", SLOTS);
    int fd = tmpfd();
    size_t len = 64 * 1024;
    /* Separate mappings with a hole between them so that the cache cannot merge them. */
    unsigned char *area = map_anon((SLOTS + 1) * 2 * len);
    unsigned char *bufs[SLOTS + 1];
    struct vmt_reg *regs[SLOTS + 1];
    for (int i = 0; i <= SLOTS; i++) {
        bufs[i] = area + (size_t)i * 2 * len;
        munmap(bufs[i] + len, len);
    }
    /* Hold every slot: the next registration has nothing to evict. */
    int seen[SLOTS] = {0};
    for (int i = 0; i < SLOTS; i++) {
        ck_assert_int_eq(vmt_get(r.dev, bufs[i], len, VMT_ACCESS_READ, &regs[i]), 0);
        int idx = vmt_iouring_index(regs[i]);
        ck_assert_int_ge(idx, 0);
        ck_assert_int_lt(idx, SLOTS);
        ck_assert_int_eq(seen[idx], 0);
        seen[idx] = 1;
    }
    int ret = vmt_get(r.dev, bufs[SLOTS], len, VMT_ACCESS_READ, &regs[SLOTS]);
    ck_assert_msg(ret == -ENOSPC, "every slot held: expected -ENOSPC, got %d", ret);
    /* Release them (still cached): the next registration evicts one and succeeds. */
    for (int i = 0; i < SLOTS; i++)
        vmt_put(regs[i]);
    int idx = roundtrip(r.dev, &r.ring, fd, bufs[SLOTS], len, 9);
    ck_assert_int_lt(idx, SLOTS);
    struct vmt_stats s = stats_of(r.c);
    ck_assert_uint_ge(s.evictions, 1);
    ck_assert_uint_le(s.entries, SLOTS);
    /* An evicted buffer registers again, into some free slot, and its data is right. */
    roundtrip(r.dev, &r.ring, fd, bufs[0], len, 10);
    close(fd);
    ring_close(&r);
}
END_TEST

START_TEST(busy_ring)
{
    struct io_uring ring;
    ck_assert_int_eq(io_uring_queue_init(8, &ring, 0), 0);
    /* The ring already has a table of its own. */
    ck_assert_int_eq(io_uring_register_buffers_sparse(&ring, 8), 0);
    struct vmt_cache *c = cache_open("none");
    struct vmt_device *dev = NULL;
    ck_assert_int_eq(vmt_iouring_attach(c, &ring, 0, &dev), -EBUSY);
    ck_assert_ptr_null(dev);
    /* And the user's table is untouched. */
    ck_assert_int_eq(io_uring_unregister_buffers(&ring), 0);
    vmt_cache_destroy(c);
    io_uring_queue_exit(&ring);
}
END_TEST

START_TEST(bad_input)
{
    struct io_uring ring;
    ck_assert_int_eq(io_uring_queue_init(8, &ring, 0), 0);
    struct vmt_cache *c = cache_open("none");
    struct vmt_device *dev;
    ck_assert_int_eq(vmt_iouring_attach(c, &ring, 16385, &dev), -EINVAL);
    ck_assert_int_eq(vmt_iouring_attach(NULL, &ring, 0, &dev), -EINVAL);
    ck_assert_int_eq(vmt_iouring_attach(c, NULL, 0, &dev), -EINVAL);
    ck_assert_int_eq(vmt_iouring_attach(c, &ring, 0, NULL), -EINVAL);
    ck_assert_int_eq(vmt_iouring_index(NULL), -EINVAL);
    /* 0 slots: the kernel's maximum, 16384; the last slot is usable. */
    ck_assert_int_eq(vmt_iouring_attach(c, &ring, 0, &dev), 0);
    /* More than 1 GiB in one buffer: the device cannot (address space only, never touched). */
    size_t big = (1ul << 30) + 4096;
    void *p = mmap(NULL, big, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    ck_assert_ptr_ne(p, MAP_FAILED);
    struct vmt_reg *reg;
    int ret = vmt_get(dev, p, big, VMT_ACCESS_READ, &reg);
    ck_assert_msg(ret < 0, "a 1 GiB + 4 KiB fixed buffer was accepted");
    munmap(p, big);
    /* Unmapped memory: an error, nothing registered. */
    void *hole = map_anon(65536);
    munmap(hole, 65536);
    ret = vmt_get(dev, hole, 65536, VMT_ACCESS_READ, &reg);
    ck_assert_msg(ret == -EFAULT, "unmapped memory: expected -EFAULT, got %d", ret);
    vmt_iouring_detach(dev);
    vmt_cache_destroy(c);
    io_uring_queue_exit(&ring);
}
END_TEST

START_TEST(attach_twice_shares)
{
    struct io_uring ring;
    ck_assert_int_eq(io_uring_queue_init(8, &ring, 0), 0);
    struct vmt_cache *c = cache_open("none");
    struct vmt_device *d1, *d2;
    ck_assert_int_eq(vmt_iouring_attach(c, &ring, 32, &d1), 0);
    ck_assert_int_eq(vmt_iouring_attach(c, &ring, 0, &d2), 0);
    ck_assert_ptr_eq(d1, d2);
    int fd = tmpfd();
    size_t len = 128 * 1024;
    void *buf = map_anon(len);
    int i1 = roundtrip(d1, &ring, fd, buf, len, 5);
    int i2 = roundtrip(d2, &ring, fd, buf, len, 6);
    ck_assert_int_eq(i1, i2);
    struct vmt_stats s = stats_of(c);
    ck_assert_uint_eq(s.registrations, 1);
    /* One detach: still attached, still registered. */
    vmt_iouring_detach(d1);
    roundtrip(d2, &ring, fd, buf, len, 7);
    /* The last detach gives the ring back without a table: the user may register one. */
    vmt_iouring_detach(d2);
    struct iovec iov = {buf, len};
    ck_assert_int_eq(io_uring_register_buffers(&ring, &iov, 1), 0);
    ck_assert_int_eq(io_uring_unregister_buffers(&ring), 0);
    /* And vmtrack can attach again after that. */
    ck_assert_int_eq(vmt_iouring_attach(c, &ring, 8, &d1), 0);
    roundtrip(d1, &ring, fd, buf, len, 8);
    vmt_iouring_detach(d1);
    vmt_cache_destroy(c);
    munmap(buf, len);
    close(fd);
    io_uring_queue_exit(&ring);
}
END_TEST

/* Memory whose pages are not present (never touched, or dropped by MADV_DONTNEED) registers
 * with every tracker, and the device reads zeros from it. (uffd on Linux 6.1 failed this.)
 * One case per tracker, built where the tracker is available (main). ("none" does not see
 * MADV_DONTNEED: its second round would rightly be stale.) */
static const char *const untouched_trackers[] = {"kmod", "hooks", "uffd", "pass"};

START_TEST(untouched_memory_reads_zeros)
{
    const char *tracker = untouched_trackers[_i];
    int fd = tmpfd();
    struct ring_fixture r;
    ring_open(&r, 4, tracker, 8);
    size_t len = 64 * 1024;
    unsigned char *p = map_anon(len);
    for (int round = 0; round < 2; round++) {
        if (round == 1) {  /* touched, then dropped */
            memset(p, 0x5a, len);
            ck_assert_int_eq(madvise(p, len, MADV_DONTNEED), 0);
        }
        struct vmt_reg *reg;
        int ret = vmt_get(r.dev, p, len, VMT_ACCESS_READ, &reg);
        ck_assert_msg(ret == 0, "tracker %s: vmt_get of %s memory: %s", tracker,
                      round ? "MADV_DONTNEED'd" : "untouched", strerror(-ret));
        ck_assert_int_eq(write_fixed(&r.ring, fd, p, len, vmt_iouring_index(reg), 0), (int)len);
        vmt_put(reg);
        unsigned char back[4096];
        ck_assert_int_eq(pread(fd, back, sizeof(back), 0), (ssize_t)sizeof(back));
        for (size_t i = 0; i < sizeof(back); i++)
            ck_assert_msg(back[i] == 0, "tracker %s, %s memory: byte %zu is %#x, not 0",
                          tracker, round ? "MADV_DONTNEED'd" : "untouched", i, back[i]);
    }
    printf("untouched memory: tracker %s: ok\n", tracker);
    fflush(stdout);
    ring_close(&r);
    munmap(p, len);
    close(fd);
}
END_TEST

/* Two caches (say vmt_shared and a library's private one) on one ring: one table, two devices,
 * distinct slots; the table goes when the last attachment does. */
START_TEST(two_caches_one_ring)
{
    struct io_uring ring;
    ck_assert_int_eq(io_uring_queue_init(8, &ring, 0), 0);
    struct vmt_cache *c1 = cache_open("none"), *c2 = cache_open("none");
    struct vmt_device *d1, *d2;
    ck_assert_int_eq(vmt_iouring_attach(c1, &ring, 16, &d1), 0);
    ck_assert_int_eq(vmt_iouring_attach(c2, &ring, 16, &d2), 0);
    ck_assert_ptr_ne(d1, d2);
    int fd = tmpfd();
    size_t len = 64 * 1024;
    unsigned char *a = map_anon(len), *b = map_anon(len);
    struct vmt_reg *ra, *rb;
    fill(a, len, 21);
    fill(b, len, 22);
    ck_assert_int_eq(vmt_get(d1, a, len, VMT_ACCESS_READ, &ra), 0);
    ck_assert_int_eq(vmt_get(d2, b, len, VMT_ACCESS_READ, &rb), 0);
    ck_assert_int_ne(vmt_iouring_index(ra), vmt_iouring_index(rb));
    ck_assert_int_eq(write_fixed(&ring, fd, a, len, vmt_iouring_index(ra), 0), (int)len);
    ck_assert_int_eq(write_fixed(&ring, fd, b, len, vmt_iouring_index(rb), (off_t)len), (int)len);
    unsigned char *back = malloc(2 * len);
    ck_assert_int_eq(pread(fd, back, 2 * len, 0), (ssize_t)(2 * len));
    ck_assert(memcmp(back, a, len) == 0);
    ck_assert(memcmp(back + len, b, len) == 0);
    free(back);
    vmt_put(ra);
    vmt_put(rb);
    vmt_iouring_detach(d1);
    roundtrip(d2, &ring, fd, b, len, 23);  /* the other cache still works on the table */
    vmt_iouring_detach(d2);
    struct iovec iov = {a, len};
    ck_assert_int_eq(io_uring_register_buffers(&ring, &iov, 1), 0);  /* table gone */
    io_uring_unregister_buffers(&ring);
    vmt_cache_destroy(c1);
    vmt_cache_destroy(c2);
    close(fd);
    io_uring_queue_exit(&ring);
}
END_TEST

/* Threads registering distinct buffers through one small table: the slot allocator must never
 * hand one slot to two live registrations, and each thread's bytes must reach its file. */
struct tharg {
    struct vmt_device *dev;
    int id;
    int failures;
};

enum { TH = 4, TH_SLOTS = 6, TH_BUFS = 5, TH_ITERS = 300 };
static unsigned char *g_bufs[TH][TH_BUFS];
static const size_t g_len = 16 * 1024;

static void *slot_thread(void *arg)
{
    struct tharg *a = arg;
    for (int it = 0; it < TH_ITERS; it++) {
        unsigned char *b = g_bufs[a->id][it % TH_BUFS];
        fill(b, g_len, (unsigned)(a->id * 1000 + it));
        struct vmt_reg *reg;
        int ret = vmt_get(a->dev, b, g_len, VMT_ACCESS_READ, &reg);
        if (ret == -ENOSPC) {  /* all slots held by the other threads at this instant */
            it--;
            sched_yield();
            continue;
        }
        if (ret < 0) {
            a->failures++;
            continue;
        }
        int idx = vmt_iouring_index(reg);
        if (idx < 0 || idx >= TH_SLOTS)
            a->failures++;
        vmt_put(reg);
    }
    return NULL;
}

START_TEST(slot_allocator_threads)
{
    struct ring_fixture r;
    ring_open(&r, 64, "none", TH_SLOTS);
    for (int t = 0; t < TH; t++)
        for (int b = 0; b < TH_BUFS; b++) {
            /* one mapping each, with a hole after it, so that nothing merges */
            unsigned char *p = map_anon(2 * g_len);
            munmap(p + g_len, g_len);
            g_bufs[t][b] = p;
        }
    pthread_t th[TH];
    struct tharg args[TH];
    for (int t = 0; t < TH; t++) {
        args[t].dev = r.dev;
        args[t].id = t;
        args[t].failures = 0;
        ck_assert_int_eq(pthread_create(&th[t], NULL, slot_thread, &args[t]), 0);
    }
    for (int t = 0; t < TH; t++) {
        pthread_join(th[t], NULL);
        ck_assert_int_eq(args[t].failures, 0);
    }
    /* Now every buffer, one after the other: data through the table is right for each, and
     * each live registration has its own slot. */
    int fd = tmpfd();
    for (int t = 0; t < TH; t++)
        for (int b = 0; b < TH_BUFS; b++)
            roundtrip(r.dev, &r.ring, fd, g_bufs[t][b], g_len, (unsigned)(t * 10 + b));
    struct vmt_reg *held[TH_SLOTS];
    int seen[TH_SLOTS] = {0};
    for (int i = 0; i < TH_SLOTS; i++) {
        ck_assert_int_eq(vmt_get(r.dev, g_bufs[i % TH][i / TH], g_len, VMT_ACCESS_READ, &held[i]),
                         0);
        int idx = vmt_iouring_index(held[i]);
        ck_assert_int_ge(idx, 0);
        ck_assert_int_lt(idx, TH_SLOTS);
        ck_assert_int_eq(seen[idx], 0);
        seen[idx] = 1;
    }
    for (int i = 0; i < TH_SLOTS; i++)
        vmt_put(held[i]);
    struct vmt_stats s = stats_of(r.c);
    ck_assert_uint_ge(s.evictions, 1);
    close(fd);
    ring_close(&r);
}
END_TEST

int main(void)
{
    int rc = skip_unless_iouring("test_iouring");
    if (rc)
        return rc;
    Suite *s = suite_create("iouring");
    TCase *tc = tcase_create("device");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, write_fixed_reaches_file);
    tcase_add_test(tc, slot_exhaustion);
    tcase_add_test(tc, busy_ring);
    tcase_add_test(tc, bad_input);
    tcase_add_test(tc, attach_twice_shares);
    tcase_add_test(tc, two_caches_one_ring);
    for (int t = 0; t < (int)(sizeof untouched_trackers / sizeof untouched_trackers[0]); t++) {
        char why[256];
        if (tracker_available(untouched_trackers[t], why, sizeof why))
            tcase_add_loop_test(tc, untouched_memory_reads_zeros, t, t + 1);
        else
            printf("SKIP: untouched_memory_reads_zeros (not built) for tracker %s: %s\n",
                   untouched_trackers[t], why);
    }
    tcase_add_test(tc, slot_allocator_threads);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK) ? 1 : 0;
}
