/* The hooks tracker through the public API: every change libc makes is caught (including
 * libc's own munmap inside free()), a raw system call is not; patching while other threads run
 * the patched functions; conflict with another patcher; unpatching. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <time.h>

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

static unsigned char *libc_munmap(void)
{
    void *h = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    ck_assert_ptr_nonnull(h);
    unsigned char *f = dlsym(h, "munmap");
    ck_assert_ptr_nonnull(f);
    return f;
}

START_TEST(auto_reports_hooks_available)
{
    struct vmt_cache *c;
    struct vmt_cache_opts o = {.sz = sizeof o, .tracker = "auto"};
    ck_assert_int_eq(vmt_cache_create(&o, &c), 0);
    char buf[2048];
    vmt_cache_tracker_report(c, buf, sizeof buf);
    ck_assert_msg(strstr(buf, "hooks: in use") || strstr(buf, "hooks: available"),
                  "hooks not available on a clean libc: %s", buf);
    vmt_cache_destroy(c);
}
END_TEST

/* The patch goes in with the cache and comes out with the last hooks cache. */
START_TEST(unpatch_restores_libc)
{
    unsigned char *f = libc_munmap(), before[16], during[16];
    memcpy(before, f, 16);
    struct fixture a, b;
    tracker_open(&a);
    memcpy(during, f, 16);
    ck_assert_int_eq(during[0], 0xe9); /* jmp rel32 */
    ck_assert_int_eq(memcmp(before + 5, during + 5, 11), 0); /* nothing beyond 5 bytes */
    tracker_open(&b);
    fixture_close(&a);
    ck_assert_int_eq(memcmp(f, during, 16), 0); /* b still uses it */
    fixture_close(&b);
    ck_assert_int_eq(memcmp(f, before, 16), 0);
    /* and again */
    tracker_open(&a);
    ck_assert_int_eq(f[0], 0xe9);
    void *p = map_filled(MB, 0x5a);
    cache_it(&a, p, MB, NULL);
    munmap(p, MB);
    assert_dropped(&a, "munmap after re-patch");
    fixture_close(&a);
    ck_assert_int_eq(memcmp(f, before, 16), 0);
}
END_TEST

/* Writes n bytes over libc's munmap entry `f` (its page made writable for the copy). */
static void write_entry(unsigned char *f, const void *bytes, size_t n)
{
    uintptr_t code_page = (uintptr_t)f & ~4095ul;
    ck_assert_int_eq(mprotect((void *)code_page, 8192, PROT_READ | PROT_WRITE | PROT_EXEC), 0);
    memcpy(f, bytes, n);
    ck_assert_int_eq(mprotect((void *)code_page, 8192, PROT_READ | PROT_EXEC), 0);
}

/* Where another patcher's entry patch leads. */
static int foreign_munmap(void *addr, size_t len)
{
    return (int)syscall(SYS_munmap, addr, len);
}

/* Writes what another patcher (UCX ucm, Open MPI) leaves at an entry over `f`: movabs
 * $target,%r11; jmp *%r11 (the bytes also go to code[], to compare with later). */
static void write_foreign_patch(unsigned char *f, unsigned char code[13])
{
    static const unsigned char movabs_jmp[13] = {0x49, 0xbb, 0, 0, 0, 0, 0, 0, 0, 0,
                                                 0x41, 0xff, 0xe3};
    void *target = (void *)foreign_munmap;
    memcpy(code, movabs_jmp, sizeof movabs_jmp);
    memcpy(code + 2, &target, 8);
    write_entry(f, code, 13);
}

START_TEST(refuses_a_foreign_patch)
{
    unsigned char *f = libc_munmap(), saved[16], code[13];
    memcpy(saved, f, 16);
    write_foreign_patch(f, code);

    struct fixture e;
    int rc = fixture_try_open(&e, "hooks", 0);
    ck_assert_int_eq(rc, -EBUSY);
    /* auto passes over hooks and says why */
    struct vmt_cache *c;
    struct vmt_cache_opts o = {.sz = sizeof o, .tracker = "auto"};
    ck_assert_int_eq(vmt_cache_create(&o, &c), 0);
    ck_assert_str_ne(vmt_cache_tracker(c), "hooks");
    char buf[2048];
    vmt_cache_tracker_report(c, buf, sizeof buf);
    ck_assert_msg(strstr(buf, "munmap") && strstr(buf, "already patched by"), "report: %s", buf);
    ck_assert_msg(strstr(buf, "test_hooks"), "owner not named: %s", buf);
    vmt_cache_destroy(c);
    /* our bytes were not written: the foreign patch is intact */
    ck_assert_int_eq(memcmp(f, code, sizeof code), 0);

    write_entry(f, saved, 16);
    ck_assert_int_eq(fixture_try_open(&e, "hooks", 0), 0);
    fixture_close(&e);
}
END_TEST

/* Another patcher writes over our entry later (UCX loaded after vmtrack): the next miss
 * notices, drops everything cached and caches nothing more. */
START_TEST(overwritten_patch_drops_everything)
{
    struct fixture e;
    tracker_open(&e);
    void *p = map_filled(MB, 0x5a), *q = map_filled(MB, 0x5a);
    cache_it(&e, p, MB, NULL);
    unsigned char *f = libc_munmap(), ours[16], code[13];
    memcpy(ours, f, 16);
    write_foreign_patch(f, code);

    struct vmt_reg *r;
    ck_assert_int_eq(vmt_get(e.dev, q, MB, VMT_ACCESS_READ, &r), 0);
    vmt_put(r);
    struct vmt_stats s = stats_of(e.cache);
    ck_assert_uint_eq(s.entries, 0);      /* p dropped: it may be stale now */
    ck_assert_uint_ge(s.uncached, 1);     /* q served uncached */
    struct fixture e2;
    ck_assert_int_eq(fixture_try_open(&e2, "hooks", 0), -EBUSY); /* no new hooks caches either */

    write_entry(f, ours, 16);
    munmap(p, MB);
    munmap(q, MB);
    fixture_close(&e);
}
END_TEST

/* fork() while another thread patches and unpatches: no child may be born with an entry
 * half written (it would spin at `jmp .` for ever). */
static atomic_int g_forks_stop;

static void *forker(void *arg)
{
    int *bad = arg;
    while (!atomic_load(&g_forks_stop)) {
        pid_t pid = fork();
        if (pid == 0) {
            void *p = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            munmap(p, 65536);
            _exit(0);
        }
        if (pid < 0)
            continue;
        int st = 0, waited = 0;
        while (waitpid(pid, &st, WNOHANG) == 0 && waited < 5000) {
            usleep(1000);
            waited++;
        }
        if (waited >= 5000) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            (*bad)++;
        }
    }
    return NULL;
}

START_TEST(fork_while_patching)
{
    int bad = 0;
    pthread_t t;
    atomic_store(&g_forks_stop, 0);
    ck_assert_int_eq(pthread_create(&t, NULL, forker, &bad), 0);
    for (int i = 0; i < 30; i++) {
        struct fixture e;
        tracker_open(&e);
        fixture_close(&e);
    }
    atomic_store(&g_forks_stop, 1);
    pthread_join(t, NULL);
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* mmap64 and brk are the same code paths; brk shrink through brk() itself. */
START_TEST(change_brk_shrink)
{
    struct fixture e;
    tracker_open(&e);
    free(malloc(64));
    char *cur = sbrk(0);
    char *base = (char *)(((uintptr_t)cur + 4095) & ~4095ul);
    ck_assert_int_eq(brk(base + 2 * MB), 0);
    memset(base, 1, 2 * MB);
    cache_it(&e, base, 2 * MB, NULL);
    if (sbrk(0) == base + 2 * MB) {
        ck_assert_int_eq(brk(base), 0);
        ck_assert_ptr_eq(sbrk(0), base);
        assert_dropped(&e, "brk shrink");
    }
    fixture_close(&e);
}
END_TEST

/* shmat(SHM_REMAP) over a cached anonymous range */
START_TEST(change_shmat_remap)
{
    struct fixture e;
    char *p = tracker_open_cached(&e, MB);
    int id = shmget(IPC_PRIVATE, MB, IPC_CREAT | 0600);
    ck_assert_int_ge(id, 0);
    void *s = shmat(id, p, SHM_REMAP);
    shmctl(id, IPC_RMID, NULL);
    ck_assert_ptr_eq(s, p);
    assert_dropped(&e, "shmat(SHM_REMAP) over");
    ck_assert_int_eq(shmdt(s), 0);
    fixture_close(&e);
}
END_TEST

START_TEST(errno_preserved)
{
    struct fixture e;
    tracker_open(&e);
    errno = 0;
    ck_assert_int_eq(munmap((void *)1, 4096), -1);
    ck_assert_int_eq(errno, EINVAL);
    errno = 0;
    ck_assert_ptr_eq(mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 1), MAP_FAILED);
    ck_assert_int_eq(errno, EINVAL);
    errno = 0;
    ck_assert_int_eq(madvise((void *)1, 4096, MADV_DONTNEED), -1);
    ck_assert_int_eq(errno, EINVAL);
    ck_assert_int_eq(shmdt((void *)4096), -1);
    ck_assert_int_eq(errno, EINVAL);
    fixture_close(&e);
}
END_TEST

/* A miss on a range that another thread is unmapping waits until that unmap ends, and then
 * finds the range gone: nothing registered from the pages being unmapped survives the munmap. */
struct unmap_race {
    struct fixture *e;
    char *range;
    atomic_int stop, started;
    atomic_long ok_after, failed_after, straddled;
    _Atomic double unmap_start_ns, unmap_end_ns;
};

static void *get_in_a_loop(void *arg)
{
    struct unmap_race *u = arg;
    while (!atomic_load(&u->stop)) {
        double t0 = now_ns();
        struct vmt_reg *r;
        int rc = vmt_get(u->e->dev, u->range, 64 << 10, VMT_ACCESS_READ, &r);
        double t1 = now_ns();
        atomic_store(&u->started, 1);
        if (rc == 0)
            vmt_put(r);
        else
            ck_assert_int_eq(rc, -EFAULT);
        double us = atomic_load(&u->unmap_start_ns), ue = atomic_load(&u->unmap_end_ns);
        if (ue > 0 && t0 > ue) {
            if (rc == 0)
                atomic_fetch_add(&u->ok_after, 1);
            else
                atomic_fetch_add(&u->failed_after, 1);
        } else if (us > 0 && t0 >= us && t1 > ue && ue > 0) {
            atomic_fetch_add(&u->straddled, 1);
        }
    }
    return NULL;
}

START_TEST(get_during_unmap)
{
    struct fixture e;
    tracker_open(&e);
    const size_t len = 128 * MB;  /* populated: its munmap takes milliseconds */
    char *p = map_filled(len, 0x5a);
    struct unmap_race u = {.e = &e, .range = p + len / 2};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, get_in_a_loop, &u), 0);
    while (!atomic_load(&u.started))
        sched_yield();
    usleep(1000);
    atomic_store(&u.unmap_start_ns, now_ns());
    ck_assert_int_eq(munmap(p, len), 0);
    atomic_store(&u.unmap_end_ns, now_ns());
    while (atomic_load(&u.failed_after) < 100)
        sched_yield();
    atomic_store(&u.stop, 1);
    pthread_join(th, NULL);
    printf("get during unmap: %ld gets started during the %.1f ms munmap and returned after it; "
           "%ld after it, all -EFAULT\n", atomic_load(&u.straddled),
           (atomic_load(&u.unmap_end_ns) - atomic_load(&u.unmap_start_ns)) / 1e6,
           atomic_load(&u.failed_after));
    ck_assert_int_eq(atomic_load(&u.ok_after), 0);
    vmt_flush(e.cache);
    ck_assert_int_eq(atomic_load(&e.fake.deregs), atomic_load(&e.fake.regs));
    ck_assert_uint_eq(stats_of(e.cache).entries, 0);
    fixture_close(&e);
}
END_TEST

/* A miss registering a range while another thread unmaps it, nothing of it cached yet (the
 * unmap may then skip the cache's lock): the registration must not stay cached after the
 * munmap returns. The device takes 20 us per registration, so that unmaps land inside misses. */
struct miss_race {
    struct fixture *e;
    _Atomic(char *) range;
    atomic_int stop;
    atomic_long gets_ok;
};

static void *miss_in_a_loop(void *arg)
{
    struct miss_race *m = arg;
    while (!atomic_load(&m->stop)) {
        struct vmt_reg *r;
        char *x = atomic_load(&m->range);
        if (vmt_get(m->e->dev, x, 64 << 10, VMT_ACCESS_READ, &r) == 0) {
            atomic_fetch_add(&m->gets_ok, 1);
            vmt_put(r);
        }
    }
    return NULL;
}

START_TEST(unmap_races_a_miss)
{
    struct fixture e;
    tracker_open(&e);
    atomic_store(&e.fake.reg_delay_us, 20);
    const size_t len = 64 << 10;
    char *x = map_filled(len, 0x5a);
    ck_assert_int_eq(munmap(x, len), 0);  /* each round maps it again */
    struct miss_race m = {.e = &e, .range = x};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, miss_in_a_loop, &m), 0);
    int stale = 0, reused = 0, rounds = 1000;
    unsigned seed = 7;
    for (int i = 0; i < rounds; i++) {
        /* Never MAP_FIXED: while x was unmapped, the library may have put a pool there. */
        char *again = mmap(x, len, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (again != x) {
            ck_assert_msg(again == MAP_FAILED && errno == EEXIST, "mmap: %s", strerror(errno));
            x = map_filled(len, 0x5a);
            atomic_store(&m.range, x);
        }
        memset(x, i, len);
        usleep((unsigned)(rand_r(&seed) % 40));
        ck_assert_int_eq(munmap(x, len), 0);
        usleep(200);  /* a miss that was registering has finished by now */
        struct vmt_reg *r;
        int rc = vmt_get(e.dev, x, len, VMT_ACCESS_READ, &r);
        if (rc == 0) {
            vmt_put(r);
            if (msync(x, len, MS_ASYNC) != 0)
                stale++;  /* cached, though nothing is mapped there */
            else
                reused++;  /* the library mapped something there: not ours any more */
            vmt_invalidate(e.cache, x, len);
        } else {
            ck_assert_int_eq(rc, -EFAULT);
        }
    }
    atomic_store(&m.stop, 1);
    pthread_join(th, NULL);
    printf("unmap races a miss: %d rounds, %ld gets succeeded while mapped, %d stale entries "
           "(%d rounds found the range mapped again by someone else)\n",
           rounds, atomic_load(&m.gets_ok), stale, reused);
    ck_assert_int_eq(stale, 0);
    ck_assert_int_gt(atomic_load(&m.gets_ok), 0);
    vmt_flush(e.cache);
    ck_assert_int_eq(atomic_load(&e.fake.deregs), atomic_load(&e.fake.regs));
    fixture_close(&e);
}
END_TEST

/* fork() of a process whose cache has two lanes in use: the child starts with both empty and
 * its unmaps reach both through the hooks (test_cache_lanes has the fork handler's own
 * madvise under a patcher that invalidates). */
static void *get_one_page(void *arg)
{
    struct fixture *e = arg;
    vmt_put(get_ok(e->dev, (char *)e->fake.watched, page, VMT_ACCESS_READ));
    return NULL;
}

START_TEST(fork_with_two_lanes)
{
    setenv("VMTRACK_LANES", "2", 1);
    struct fixture e;
    fixture_open_limited(&e, "hooks", 0, 1ul << 40, 0, 0);
    unsetenv("VMTRACK_LANES");
    ck_assert_uint_eq(stats_of(e.cache).lanes, 2);
    /* Two threads, each its own lane, each in a 64 MiB granule of its own. */
    size_t len = 256 * MB;
    char *buf = map_anon(len);
    for (int t = 0; t < 2; t++) {
        pthread_t th;
        atomic_store(&e.fake.watched, buf + (size_t)t * 128 * MB);
        ck_assert_int_eq(pthread_create(&th, NULL, get_one_page, &e), 0);
        ck_assert_int_eq(pthread_join(th, NULL), 0);
    }
    atomic_store(&e.fake.watched, NULL);
    ck_assert_uint_eq(stats_of(e.cache).entries, 2);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        munmap(buf, len);  /* through the hooks, into both lanes */
        _exit(stats_of(e.cache).entries == 0 ? 0 : 2);
    }
    int status = wait_child_within(pid, 20, "after fork()");
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %#x", status);
    munmap(buf, len);
    fixture_close(&e);
}
END_TEST

/* The change log (vmt_changes_mark, vmt_changed_since): every change libc makes is in it from
 * the mark on, changes elsewhere are not the range's, more than the log keeps answer
 * "changed"; a tracker without it says so. */
/* A change numbered before a thread's mark whose system call runs after that thread pinned
 * the pages must still count: the unmapping thread is held (by a subscriber, which hears of the
 * change between its number and the system call) while the other thread takes its mark and
 * reads the pages it "pins"; then the pages are replaced. */
struct held_unmap {
    sem_t in_change, let_go;
    atomic_int calls;
    struct vmt_cache *cache;
    char *page;
};

static void hold_the_unmap(void *arg, const void *addr, size_t len)
{
    struct held_unmap *h = arg;
    if ((const char *)addr > h->page || (const char *)addr + len <= h->page ||
        atomic_fetch_add(&h->calls, 1) != 0)
        return;
    sem_post(&h->in_change);
    while (sem_wait(&h->let_go) != 0)
        ;
}

static void *replace_page(void *arg)
{
    struct held_unmap *h = arg;
    ck_assert_int_eq(madvise(h->page, 4096, MADV_DONTNEED), 0);
    return NULL;
}

START_TEST(change_counts_after_its_system_call)
{
    struct fixture fx;
    tracker_open(&fx);
    struct held_unmap h = {.cache = fx.cache};
    sem_init(&h.in_change, 0, 0);
    sem_init(&h.let_go, 0, 0);
    h.page = map_filled(MB, 0x5a);
    uint64_t mark;
    ck_assert_int_eq(vmt_changes_mark(fx.cache, &mark), 0);   /* the log exists from here */
    ck_assert_int_eq(vmt_subscribe(fx.cache, hold_the_unmap, &h), 0);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, replace_page, &h), 0);
    while (sem_wait(&h.in_change) != 0)
        ;
    /* The change has its number; its madvise has not run. Mark, then "pin" the old page. */
    ck_assert_int_eq(vmt_changes_mark(fx.cache, &mark), 0);
    ck_assert_int_eq(h.page[0], 0x5a);
    sem_post(&h.let_go);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_int_eq(h.page[0], 0);   /* replaced after the pin */
    /* subscribe's order: the watch, then the log since the mark. */
    struct vmt_reg *watch = get_ok(fx.dev, h.page, 4096, VMT_ACCESS_WRITE);
    ck_assert_msg(vmt_changed_since(fx.cache, mark, h.page, 4096) == 1,
                  "pages replaced after the mark were reported unchanged");
    vmt_put(watch);
    ck_assert_int_eq(vmt_unsubscribe(fx.cache, hold_the_unmap, &h), 0);
    sem_destroy(&h.in_change);
    sem_destroy(&h.let_go);
    munmap(h.page, MB);
    fixture_close(&fx);
}
END_TEST

START_TEST(changes_since_a_mark)
{
    struct fixture fx;
    tracker_open(&fx);
    char *p = map_filled(MB, 0x5a), *q = map_filled(MB, 0x5a);
    uint64_t mark;
    ck_assert_int_eq(vmt_changes_mark(fx.cache, NULL), -EINVAL);
    ck_assert_int_eq(vmt_changes_mark(fx.cache, &mark), 0);
    ck_assert_int_eq(vmt_changed_since(fx.cache, mark, p, MB), 0);
    ck_assert_int_eq(vmt_changed_since(fx.cache, mark + 1, p, MB), -EINVAL);   /* no such mark */
    ck_assert_ptr_eq(mmap(q, MB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                          -1, 0), q);
    ck_assert_int_eq(vmt_changed_since(fx.cache, mark, p, MB), 0);   /* another range */
    ck_assert_int_eq(vmt_changed_since(fx.cache, mark, q, MB), 1);
    ck_assert_int_eq(madvise(p + MB / 2, 4096, MADV_DONTNEED), 0);
    ck_assert_int_eq(vmt_changed_since(fx.cache, mark, p, 4096), 0);   /* not that page */
    ck_assert_int_eq(vmt_changed_since(fx.cache, mark, p, MB), 1);
    /* A new mark after them: nothing since. More changes than the log keeps: "changed". */
    ck_assert_int_eq(vmt_changes_mark(fx.cache, &mark), 0);
    ck_assert_int_eq(vmt_changed_since(fx.cache, mark, p, MB), 0);
    for (int i = 0; i < 300; i++)
        ck_assert_int_eq(munmap(q, MB), 0);
    ck_assert_int_eq(vmt_changed_since(fx.cache, mark, p, MB), 1);
    munmap(p, MB);
    fixture_close(&fx);
    /* A tracker that hears only watched ranges, or after the change, keeps no log. */
    struct fixture none;
    ck_assert_int_eq(fixture_try_open(&none, "none", 0), 0);
    ck_assert_int_eq(vmt_changes_mark(none.cache, &mark), -ENOTSUP);
    fixture_close(&none);
}
END_TEST

int main(void)
{
    int rc = skip_unless_tracker("test_hooks", tracker_under_test);
    if (rc)
        return rc;
    TCase *tc;
    Suite *s = tracker_changes_suite(&tc);
    tcase_add_test(tc, change_brk_shrink);
    tcase_add_test(tc, change_shmat_remap);
    tcase_add_test(tc, errno_preserved);
    tcase_add_test(tc, get_during_unmap);
    tcase_add_test(tc, unmap_races_a_miss);
    tcase_add_test(tc, changes_since_a_mark);
    tcase_add_test(tc, change_counts_after_its_system_call);
    TCase *tp = tcase_create("patching");
    tcase_set_timeout(tp, 60);
    tcase_add_test(tp, auto_reports_hooks_available);
    tcase_add_test(tp, fork_while_patching);
    tcase_add_test(tp, fork_with_two_lanes);
#if defined(__SANITIZE_THREAD__)
    /* these read and write libc's code directly: TSan keeps no shadow for code */
    printf("(TSan build: the byte-level patching tests are left out)\n");
    (void)unpatch_restores_libc;
    (void)refuses_a_foreign_patch;
    (void)overwritten_patch_drops_everything;
#else
    tcase_add_test(tp, unpatch_restores_libc);
    tcase_add_test(tp, refuses_a_foreign_patch);
    tcase_add_test(tp, overwritten_patch_drops_everything);
#endif
    suite_add_tcase(s, tp);
    return check_run(s, CK_FORK) ? 1 : 0;
}
