/* The cases every kernel-fed tracker shares: see kernel_tracker_cases.h. */
#include "config.h"

#include "kernel_tracker_cases.h"

#include <check.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vmtrack.h>

#include "vmt_test.h"

static atomic_long heard;
static atomic_uintptr_t heard_addr;
static atomic_size_t heard_len;

static void on_event(void *arg, const void *addr, size_t len)
{
    (void)arg;
    atomic_store(&heard_addr, (uintptr_t)addr);
    atomic_store(&heard_len, len);
    atomic_fetch_add(&heard, 1);
}

void check_changes_reach_index_and_subscribers(const char *tracker, enum heard_range heard_as)
{
    struct fixture f;
    fixture_open(&f, tracker, 0);
    atomic_store(&heard, 0);
    ck_assert_int_eq(vmt_subscribe(f.cache, on_event, NULL), 0);
    char *buf = map_filled(4 * page, 7);
    fixture_get_put(&f, buf, 4 * page);
    ck_assert_uint_eq(stats_of(f.cache).entries, 1);
    munmap(buf + page, page);
    ck_assert_int_eq(vmt_flush(f.cache), 0);  /* the tracker's news reaches the index */
    struct vmt_stats s = stats_of(f.cache);
    ck_assert_uint_eq(s.entries, 0);
    ck_assert_uint_ge(s.invalidations, 1);
    ck_assert_int_eq(atomic_load(&f.fake.live), 0);
    ck_assert_int_ge(atomic_load(&heard), 1);
    uintptr_t from = atomic_load(&heard_addr), to = from + atomic_load(&heard_len);
    uintptr_t changed = (uintptr_t)buf + page;
    if (heard_as == HEARD_THE_CHANGE) {
        ck_assert_uint_eq(from, changed);
        ck_assert_uint_eq(to, changed + page);
    } else {
        ck_assert_msg(from <= changed && to >= changed + page && from >= (uintptr_t)buf &&
                          to <= (uintptr_t)buf + 4 * page,
                      "heard [%#lx, %#lx), the change was [%#lx, %#lx) in [%p, +4 pages)",
                      (unsigned long)from, (unsigned long)to, (unsigned long)changed,
                      (unsigned long)(changed + page), (void *)buf);
    }
    ck_assert_int_eq(vmt_unsubscribe(f.cache, on_event, NULL), 0);
    munmap(buf, 4 * page);
    fixture_close(&f);
}

/* The child's side of check_fork_child_tracks_itself: its exit status says what failed. */
static int child_tracks_itself(struct vmt_cache *cache, const char *tracker, char *buf)
{
    struct fake_device mine;
    struct vmt_device *d;
    struct vmt_reg *r;

    fake_init(&mine, 0);
    if (vmt_device_attach(cache, &mine.ops, &mine, &d))
        return 10;
    if (strcmp(vmt_cache_tracker(cache), tracker))
        return 11;
    if (vmt_get(d, buf, 4 * page, VMT_ACCESS_READ, &r))
        return 12;
    void *first = vmt_reg_handle(r);
    vmt_put(r);
    if (vmt_get(d, buf, page, VMT_ACCESS_READ, &r) || vmt_reg_handle(r) != first)
        return 13;  /* the child caches too */
    vmt_put(r);
    if (atomic_load(&mine.regs) != 1)
        return 15;
    munmap(buf, 4 * page);  /* the child's change, which the child's tracker sees */
    map_filled_at(buf, 4 * page, 7);
    if (vmt_get(d, buf, page, VMT_ACCESS_READ, &r) || atomic_load(&mine.regs) != 2)
        return 14;
    vmt_put(r);
    return 0;
}

void check_fork_child_tracks_itself(const char *tracker)
{
    struct fixture f;
    fixture_open(&f, tracker, 0);
    char *buf = map_filled(4 * page, 7);
    void *h = fixture_get_put(&f, buf, 4 * page);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        _exit(child_tracks_itself(f.cache, tracker, buf));
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x", st);
    /* the child's munmap was not the parent's: still a hit */
    ck_assert_ptr_eq(fixture_get_put(&f, buf, 4 * page), h);
    ck_assert_int_eq(atomic_load(&f.fake.regs), 1);
    munmap(buf, 4 * page);
    map_filled_at(buf, 4 * page, 7);
    fixture_get_put(&f, buf, 4 * page);
    ck_assert_int_eq(atomic_load(&f.fake.regs), 2);
    munmap(buf, 4 * page);
    fixture_close(&f);
}
