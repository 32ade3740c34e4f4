/* Fault injection: a device whose registration fails at random (-ENOMEM, -ENOSPC, -EFAULT,
 * -EIO, -EAGAIN) or is slow, under threads that get, put, unmap and map again interleaved
 * buffers (neighbours merge across threads). Every error vmt_get returns must be one the
 * device returned during that call, or -EFAULT for memory that is not mapped; no registration
 * may predate the mapping it is handed out for; at the end every registration is deregistered.
 *
 * Staleness without real pinning: every registration records a global count read when the
 * device's reg begins, and a buffer records that count as it was right after its old mapping
 * was gone. A registration that began earlier may hold the old pages. */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <vmtrack.h>

#include "lib/check_run.h"
#include "lib/vmt_test.h"

#define PAGE 4096u
#define THREADS 4
#define SLOTS_PER_THREAD 16
#define SLOT_PAGES 2u
#define MAX_INJECTED 16

static const int injected_errors[] = {-ENOMEM, -ENOSPC, -EFAULT, -EIO, -EAGAIN};

struct fault_reg {
    uintptr_t start, end;
    uint64_t began;  /* g_clock when reg began */
    int live;
};

static atomic_uint_fast64_t g_clock;
static atomic_long g_live, g_regs, g_deregs;

/* What the device did during the calling thread's current vmt_get. */
static __thread int t_injected[MAX_INJECTED];
static __thread int t_ninjected;
static __thread unsigned t_seed;

static int fault_reg(void *ctx, void *addr, size_t len, unsigned access, void **handle)
{
    (void)access;
    uint64_t began = atomic_fetch_add(&g_clock, 1) + 1;
    /* A device that says VMT_DEVICE_CHECKS_MAPPED (ctx non-NULL) fails on a hole itself, as
     * pinning does: the cache then makes no mapped check of its own. */
    if (ctx && msync(addr, len, MS_ASYNC) != 0) {
        if (t_ninjected < MAX_INJECTED)
            t_injected[t_ninjected++] = -EFAULT;
        return -EFAULT;
    }
    unsigned roll = (unsigned)rand_r(&t_seed);
    if (roll % 6 == 0) {
        int err = injected_errors[(roll / 6) % (sizeof injected_errors / sizeof injected_errors[0])];
        if (t_ninjected < MAX_INJECTED)
            t_injected[t_ninjected++] = err;
        return err;
    }
    if (roll % 11 == 0) {
        struct timespec ts = {0, 20000 + (long)(roll % 100) * 1000};  /* 20-120 us: pinning */
        nanosleep(&ts, NULL);
    }
    struct fault_reg *r = malloc(sizeof *r);
    if (!r) {
        if (t_ninjected < MAX_INJECTED)
            t_injected[t_ninjected++] = -ENOMEM;
        return -ENOMEM;
    }
    r->start = (uintptr_t)addr;
    r->end = (uintptr_t)addr + len;
    r->began = began;
    r->live = 1;
    atomic_fetch_add(&g_live, 1);
    atomic_fetch_add(&g_regs, 1);
    *handle = r;
    return 0;
}

static void fault_dereg(void *ctx, void *handle)
{
    (void)ctx;
    struct fault_reg *r = handle;
    if (!r->live)
        abort();  /* deregistered twice */
    r->live = 0;
    free(r);
    atomic_fetch_sub(&g_live, 1);
    atomic_fetch_add(&g_deregs, 1);
}

struct slot {
    char *addr;
    int mapped;       /* only its owner changes it */
    int lost;         /* another mapping took its hole: never used again */
    uint64_t fresh;   /* g_clock right after its previous mapping was gone */
};

struct stress {
    struct vmt_device *dev;
    char *arena;
    struct slot slots[THREADS * SLOTS_PER_THREAD];
    atomic_int stop;
    atomic_long gets, failures, stale, wrong_errors, unmaps, taken;
    atomic_int noted;  /* the first thread to find something writes detail */
    char detail[256];
};

static void note(struct stress *s, const char *fmt, int a, void *b)
{
    if (!atomic_exchange(&s->noted, 1))
        snprintf(s->detail, sizeof s->detail, fmt, a, b);
}

static int was_injected(int rc)
{
    for (int i = 0; i < t_ninjected; i++)
        if (t_injected[i] == rc)
            return 1;
    return 0;
}

static void check_get(struct stress *s, struct slot *sl)
{
    size_t len = SLOT_PAGES * PAGE;
    struct vmt_reg *r = NULL;
    t_ninjected = 0;
    int rc = vmt_get(s->dev, sl->addr, len, VMT_ACCESS_READ | VMT_ACCESS_WRITE, &r);
    atomic_fetch_add(&s->gets, 1);
    if (rc) {
        atomic_fetch_add(&s->failures, 1);
        if (!(rc == -EFAULT && !sl->mapped) && !was_injected(rc)) {
            atomic_fetch_add(&s->wrong_errors, 1);
            note(s, "vmt_get returned %d, not an error of the device's, at %p", rc, sl->addr);
        }
        return;
    }
    struct fault_reg *h = vmt_reg_handle(r);
    if (!sl->mapped) {
        /* The hole can be taken by another mapping (an allocator's, ASan's): then the get was
         * of that, made after our unmap, and the slot is not ours any more. A registration that
         * began before the unmap, or a get while nothing is mapped there, is wrong. */
        if (h->began > sl->fresh && msync(sl->addr, len, MS_ASYNC) == 0) {
            sl->lost = 1;
            atomic_fetch_add(&s->taken, 1);
        } else {
            atomic_fetch_add(&s->stale, 1);
            note(s, "vmt_get succeeded (%d) on unmapped memory at %p", 0, sl->addr);
        }
    } else {
        uintptr_t a = (uintptr_t)sl->addr;
        if (!h->live || h->start > a || h->end < a + len) {
            atomic_fetch_add(&s->stale, 1);
            note(s, "a registration that does not cover the request (live %d) at %p", h->live,
                 sl->addr);
        } else if (h->began <= sl->fresh) {
            atomic_fetch_add(&s->stale, 1);
            note(s, "a registration older than the mapping (%d) at %p", 0, sl->addr);
        }
        memset(sl->addr, 0x5a, len);  /* the memory the registration says it covers */
    }
    vmt_put(r);
}

static void remap(struct stress *s, struct slot *sl, int map_again)
{
    size_t len = SLOT_PAGES * PAGE;
    if (sl->mapped) {
        if (munmap(sl->addr, len) != 0)
            return;  /* still mapped (the VMA limit, say): nothing changed */
        sl->mapped = 0;
        sl->fresh = atomic_load(&g_clock);
        atomic_fetch_add(&s->unmaps, 1);
    }
    if (!map_again)
        return;
    /* NOREPLACE: the hole may have been taken by another mapping (a thread's malloc). */
    void *p = mmap(sl->addr, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == sl->addr) {
        sl->mapped = 1;
    } else {
        sl->lost = 1;
        if (p != MAP_FAILED)
            munmap(p, len);  /* an old kernel without NOREPLACE placed it elsewhere */
    }
}

struct worker {
    struct stress *s;
    int id;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct stress *s = w->s;
    t_seed = 777u + 31u * (unsigned)w->id;
    unsigned seed = 99u + (unsigned)w->id;
    while (!atomic_load(&s->stop)) {
        /* slots are interleaved: slot k belongs to thread k % THREADS */
        int k = (rand_r(&seed) % SLOTS_PER_THREAD) * THREADS + w->id;
        struct slot *sl = &s->slots[k];
        if (sl->lost)
            continue;
        unsigned roll = (unsigned)rand_r(&seed) % 16;
        if (roll == 0)
            remap(s, sl, 1);
        else if (roll == 1)
            remap(s, sl, 0);
        else if (roll == 2 && !sl->mapped)
            remap(s, sl, 1);
        else
            check_get(s, sl);
    }
    return NULL;
}

/* tracks: the tracker sees unmaps (else the run is the positive control: it must see stale). */
static void run_stress(const char *tracker, int tracks, int checks_mapped)
{
    struct vmt_cache_opts o;
    memset(&o, 0, sizeof o);
    o.sz = sizeof o;
    o.tracker = tracker;
    o.max_entries = 24;  /* below the slots: eviction runs all the time */
    struct vmt_cache *c = NULL;
    int rc = vmt_cache_create(&o, &c);
    if (rc == -ENOTSUP || rc == -ENODEV || rc == -EPERM) {
        printf("SKIP tracker %s: %s\n", tracker, vmt_strerror(rc));
        return;
    }
    ck_assert_int_eq(rc, 0);
    struct vmt_device_ops ops;
    device_ops_init(&ops, "faulty", fault_reg, fault_dereg, 40);
    ops.flags = checks_mapped ? VMT_DEVICE_CHECKS_MAPPED : 0;
    static struct stress s;
    memset(&s, 0, sizeof s);
    static int device_ctx;
    ck_assert_int_eq(vmt_device_attach(c, &ops, checks_mapped ? &device_ctx : NULL, &s.dev), 0);
    size_t slot_bytes = SLOT_PAGES * PAGE, n = THREADS * SLOTS_PER_THREAD;
    s.arena = mmap(NULL, n * slot_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(s.arena, MAP_FAILED);
    for (size_t i = 0; i < n; i++)
        s.slots[i] = (struct slot){s.arena + i * slot_bytes, 1, 0, 0};

    pthread_t t[THREADS];
    struct worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){&s, i};
        ck_assert_int_eq(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
    }
    const char *ms = getenv("FAULTS_MS");
    usleep((useconds_t)(ms ? atoi(ms) : 1500) * 1000);
    atomic_store(&s.stop, 1);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);

    printf("%-6s %ld gets, %ld failed, %ld unmaps, %ld stale, %ld wrong errors, %ld holes taken "
           "by other mappings; device: %ld registrations\n", tracker, atomic_load(&s.gets),
           atomic_load(&s.failures), atomic_load(&s.unmaps), atomic_load(&s.stale),
           atomic_load(&s.wrong_errors), atomic_load(&s.taken), atomic_load(&g_regs));
    fflush(stdout);
    ck_assert_msg(atomic_load(&s.wrong_errors) == 0, "tracker %s: %s", tracker, s.detail);
    if (tracks)
        ck_assert_msg(atomic_load(&s.stale) == 0, "tracker %s: %s", tracker, s.detail);
    else
        ck_assert_msg(atomic_load(&s.stale) > 0, "nothing tracks unmaps, yet no stale found");
    ck_assert_int_gt(atomic_load(&s.gets), 100);
    ck_assert_int_gt(atomic_load(&s.failures), 0);  /* the faults did happen */
    ck_assert_int_gt(atomic_load(&s.unmaps), 0);

    ck_assert_int_eq(vmt_flush(c), 0);
    struct vmt_stats st;
    memset(&st, 0, sizeof st);
    st.sz = sizeof st;
    ck_assert_int_eq(vmt_stats_get(c, &st), 0);
    ck_assert_uint_eq(st.entries, 0);
    ck_assert_uint_eq(st.bytes_registered, 0);
    ck_assert_uint_eq(st.registrations, st.deregistrations);
    ck_assert_uint_eq(st.retired_waiting, 0);  /* the flush reclaimed every batch */
    vmt_device_detach(s.dev);
    vmt_cache_destroy(c);
    ck_assert_int_eq(atomic_load(&g_live), 0);
    ck_assert_int_eq(atomic_load(&g_regs), atomic_load(&g_deregs));
    for (size_t i = 0; i < n; i++)
        if (s.slots[i].mapped)
            munmap(s.slots[i].addr, slot_bytes);
}

START_TEST(faults_hooks) { run_stress("hooks", 1, 0); }
END_TEST
START_TEST(faults_hooks_device_checks) { run_stress("hooks", 1, 1); }
END_TEST
START_TEST(faults_uffd) { run_stress("uffd", 1, 0); }
END_TEST
START_TEST(faults_uffd_device_checks) { run_stress("uffd", 1, 1); }
END_TEST
START_TEST(faults_pass) { run_stress("pass", 1, 1); }
END_TEST
START_TEST(faults_none_finds_stale) { run_stress("none", 0, 0); }
END_TEST

int main(void)
{
    Suite *s = suite_create("faults");
    TCase *tc = tcase_create("faults");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, faults_hooks);
    tcase_add_test(tc, faults_hooks_device_checks);
    tcase_add_test(tc, faults_uffd);
    tcase_add_test(tc, faults_uffd_device_checks);
    tcase_add_test(tc, faults_pass);
    tcase_add_test(tc, faults_none_finds_stale);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK) ? 1 : 0;
}
