/* The uffd tracker through the public API: the changes (raw system calls included), faults on
 * watched pages served, watches that survive re-mapping and overlaps, monitor shutdown. */
#define _GNU_SOURCE
#include <fcntl.h>

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vmtrack.h>

#include "tracker_changes.h"

#if defined(__SANITIZE_THREAD__)
/* The child of fork_child_tracks_itself starts a monitor thread of its own: allowed, it only
 * calls async-safe code before that and the parent's threads are not used in the child. */
const char *__tsan_default_options(void);
const char *__tsan_default_options(void)
{
    return "die_after_fork=0";
}
#endif

static int user_mode_only(struct fixture *e)
{
    char buf[4096];
    vmt_cache_tracker_report(e->cache, buf, sizeof buf);
    return strstr(buf, "UFFD_USER_MODE_ONLY") != NULL;
}

/* A cached range moved (and grown) by mremap keeps its userfaultfd registration at the new
 * address, where nothing is cached: the monitor drops it, so kernel accesses to the new,
 * not yet present pages work (in UFFD_USER_MODE_ONLY mode they would fail with EFAULT). */
START_TEST(moved_range_not_registered)
{
    struct fixture e;
    char *p = tracker_open_cached(&e, MB);
    char *target = mmap(NULL, 4 * MB, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(target, MAP_FAILED);
    char *q = mremap(p, MB, 4 * MB, MREMAP_MAYMOVE | MREMAP_FIXED, target);
    ck_assert_ptr_eq(q, target);
    assert_dropped(&e, "mremap(FIXED) away");
    ck_assert_int_eq(q[4096], 0x5a); /* the pages moved */
    int fd = open("/dev/zero", O_RDONLY);
    ck_assert_int_ge(fd, 0);
    ssize_t n = -1;
    for (int i = 0; i < 100 && n != 8192; i++) { /* the monitor drops it right after the event */
        n = read(fd, q + 2 * MB, 8192);
        if (n != 8192)
            usleep(1000);
    }
    close(fd);
    ck_assert_msg(n == 8192, "read into the moved range: %zd (%s)", n, strerror(errno));
    munmap(q, 4 * MB);
    fixture_close(&e);
}
END_TEST

/* The fake device populates nothing: touching the rest of a watched range takes missing-page
 * faults that the monitor must serve (zero pages), from several threads. */
static void *toucher(void *arg)
{
    char *p = arg;
    for (size_t off = 0; off < 4 * MB; off += 4096)
        p[off] = (char)(off >> 12);
    return NULL;
}

START_TEST(faults_served)
{
    struct fixture e;
    tracker_open(&e);
    char *p = map_anon(8 * MB);
    p[0] = 1;
    cache_it(&e, p, 8 * MB, NULL);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, toucher, p + 4 * MB), 0);
    for (size_t off = 4096; off < 4 * MB; off += 4096)
        ck_assert_int_eq(p[off], 0);
    pthread_join(t, NULL);
    for (size_t off = 0; off < 4 * MB; off += 4096)
        ck_assert_int_eq(p[4 * MB + off], (char)(off >> 12));
    /* a kernel-side access to a not-yet-present watched page (read into it); in
     * UFFD_USER_MODE_ONLY mode (unprivileged) that is EFAULT until the entry's watch is
     * dropped: documented, not checked */
    if (!user_mode_only(&e)) {
        int fd = open("/dev/zero", O_RDONLY);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(madvise(p, 8 * MB, MADV_DONTNEED), 0);
        ssize_t n = read(fd, p + 4096, 8192);
        close(fd);
        ck_assert_msg(n == 8192, "read into a watched range: %zd (%s)", n, strerror(errno));
    }
    munmap(p, 8 * MB);
    fixture_close(&e);
}
END_TEST

/* A new mapping at an address that was watched before keeps its own watch when the old
 * entry's watch is dropped. */
START_TEST(rewatch_same_address)
{
    struct fixture e;
    tracker_open(&e);
    /* The monitor maps its thread record at its first event: let that be another unmap's,
     * so that nothing it maps can land in the hole this test maps again. */
    void *warm = map_filled(MB, 0x5a);
    cache_it(&e, warm, MB, NULL);
    munmap(warm, MB);
    ck_assert_uint_eq(stats_of(e.cache).entries, 0);
    void *p = map_filled(MB, 0x5a);
    struct vmt_reg *old;
    cache_it(&e, p, MB, &old);
    munmap(p, MB);
    ck_assert_uint_eq(stats_of(e.cache).entries, 0);
    void *q = map_anon_at(p, MB);
    memset(q, 2, MB);
    cache_it(&e, q, MB, NULL);
    vmt_put(old);    /* the old entry goes away now: its unwatch must not drop q's watch */
    vmt_flush(e.cache);  /* (flush drops q's entry too: cache it again) */
    cache_it(&e, q, MB, NULL);
    long before = (long)stats_of(e.cache).invalidations;
    ck_assert_int_eq(syscall(SYS_munmap, q, MB), 0);
    ck_assert_uint_eq(stats_of(e.cache).entries, 0);
    ck_assert_int_gt((long)stats_of(e.cache).invalidations, before);
    fixture_close(&e);
}
END_TEST

/* Overlapping entries (no merging): dropping one unregisters only what the other does not
 * cover. */
START_TEST(overlap_keeps_the_other_watch)
{
    struct fixture e;
    int rc = fixture_try_open(&e, tracker_under_test, VMT_CACHE_NO_MERGE);
    ck_assert_int_eq(rc, 0);
    char *p = map_filled(2 * MB, 0x5a);
    struct vmt_reg *a, *b;
    ck_assert_int_eq(vmt_get(e.dev, p, MB, VMT_ACCESS_READ, &a), 0);
    ck_assert_int_eq(vmt_get(e.dev, p + MB / 2, MB, VMT_ACCESS_READ, &b), 0);
    vmt_put(a); /* a left the index when b came; now it is reaped and unwatched */
    vmt_put(b);
    ck_assert_uint_eq(stats_of(e.cache).entries, 1);
    ck_assert_int_eq(atomic_load(&e.fake.deregs), 1); /* a was reaped (and unwatched) */
    /* in the overlap: a's unwatch must not have unregistered b's pages */
    ck_assert_int_eq(syscall(SYS_munmap, p + 3 * MB / 4, 4096), 0);
    ck_assert_uint_eq(stats_of(e.cache).entries, 0);
    munmap(p, 2 * MB);
    fixture_close(&e);
}
END_TEST

START_TEST(file_mapping_uncached)
{
    struct fixture e;
    tracker_open(&e);
    char path[] = "/tmp/vmtrack-uffd-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    ck_assert_int_eq(ftruncate(fd, MB), 0);
    void *p = mmap(NULL, MB, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    ck_assert_ptr_ne(p, MAP_FAILED);
    struct vmt_reg *r;
    ck_assert_int_eq(vmt_get(e.dev, p, MB, VMT_ACCESS_READ, &r), 0);
    vmt_put(r);
    struct vmt_stats s = stats_of(e.cache);
    ck_assert_uint_eq(s.entries, 0);
    ck_assert_uint_ge(s.uncached, 1);
    munmap(p, MB);
    close(fd);
    fixture_close(&e);
}
END_TEST

/* Start and stop the monitor many times with watched ranges and events in flight. */
START_TEST(monitor_shutdown)
{
    for (int i = 0; i < 30; i++) {
        struct fixture e;
        tracker_open(&e);
        void *p = map_filled(MB, 0x5a), *q = map_filled(MB, 0x5a);
        cache_it(&e, p, MB, NULL);
        munmap(p, MB);
        struct vmt_reg *r;
        ck_assert_int_eq(vmt_get(e.dev, q, MB, VMT_ACCESS_READ, &r), 0);
        vmt_put(r);
        fixture_close(&e); /* q is still watched: closing the fd must drop the registration */
        ((volatile char *)q)[4096] = 3;
        ck_assert_int_eq(madvise(q, MB, MADV_DONTNEED), 0); /* no monitor: must not block */
        ck_assert_int_eq(((volatile char *)q)[4096], 0);
        munmap(q, MB);
    }
}
END_TEST

int main(void)
{
    int rc = skip_unless_tracker("test_uffd", tracker_under_test);
    if (rc)
        return rc;
    Suite *s = tracker_changes_suite(NULL);
    TCase *tu = tcase_create("uffd");
    tcase_set_timeout(tu, 60);
    tcase_add_test(tu, faults_served);
    tcase_add_test(tu, moved_range_not_registered);
    tcase_add_test(tu, rewatch_same_address);
    tcase_add_test(tu, overlap_keeps_the_other_watch);
    tcase_add_test(tu, file_mapping_uncached);
    tcase_add_test(tu, monitor_shutdown);
    suite_add_tcase(s, tu);
    return check_run(s, CK_FORK) ? 1 : 0;
}
