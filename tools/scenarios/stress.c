/* Concurrency stress: worker threads get/fill/WRITE_FIXED/read back/put buffers through the
 * provider while mutator threads unmap, remap, free and malloc the same buffers.
 *
 * Each buffer (a "slot") has a mutex. A worker holds it from filling the buffer to reading the
 * file back; a mutator holds it for changes that move or remove the buffer (munmap then mmap,
 * mremap away, free then malloc). Changes that keep the range mapped (mmap(MAP_FIXED) of new
 * pages, MADV_DONTNEED) are also made WITHOUT the mutex, racing with the worker's get: that is
 * the window where a cache can register the old pages after the tracker's invalidation. Those
 * racing changes bump the slot's generation (odd while in progress); a write is judged (must
 * come back exactly) when no racing change overlapped it, and a stale registration left behind
 * by a race shows up in the next judged write of that buffer. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <liburing.h>

#include "scenario.h"
#include "scn_internal.h"

#define MAX_LEN (1024u * 1024)

enum { K_MMAP, K_MALLOC };

struct sslot {
    pthread_mutex_t mu;
    pthread_rwlock_t shape;  /* read: a racing change; write: addr/len/kind may change */
    atomic_uint gen;         /* racing changes: odd while one is in progress */
    void *addr;
    size_t len;
    int kind;
    uint64_t seed;        /* what the buffer was last filled with (0: never) */
};

struct stress {
    const struct scn_provider *p;
    void *ctx;
    struct io_uring ring;
    pthread_mutex_t ring_mu;
    int fd;
    struct sslot *slots;
    unsigned nslots;
    atomic_int stop;
    atomic_ulong seed;
    atomic_ulong writes, judged, stale, errors, mutations;
    pthread_mutex_t detail_mu;
    char detail[240];
};

struct wargs {
    struct stress *s;
    unsigned id;
    unsigned rng;
};

static unsigned rnd(unsigned *st)
{
    *st = *st * 1103515245u + 12345u;
    return (*st >> 8) & 0xffffff;
}

static void note(struct stress *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(struct stress *s, const char *fmt, ...)
{
    pthread_mutex_lock(&s->detail_mu);
    if (!s->detail[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->detail, sizeof(s->detail), fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&s->detail_mu);
}

static size_t pick_len(int kind, unsigned *st)
{
    if (kind == K_MMAP)
        return (size_t)(16 + rnd(st) % 49) * 4096;           /* 64 KiB .. 256 KiB */
    return (size_t)(256 * 1024 + rnd(st) % (768 * 1024));    /* 256 KiB .. 1 MiB, unaligned */
}

static void *worker(void *arg)
{
    struct wargs *w = arg;
    struct stress *s = w->s;
    unsigned char *rb = malloc(MAX_LEN);
    if (!rb) {
        note(s, "worker: out of memory");
        atomic_fetch_add(&s->errors, 1);
        return NULL;
    }
    off_t off = (off_t)w->id * MAX_LEN;
    while (!atomic_load(&s->stop)) {
        struct sslot *sl = &s->slots[rnd(&w->rng) % s->nslots];
        pthread_mutex_lock(&sl->mu);
        unsigned g0 = atomic_load(&sl->gen);
        uint64_t old = sl->seed;
        uint64_t seed = atomic_fetch_add(&s->seed, 1);
        scn_fill(sl->addr, sl->len, seed);
        sl->seed = seed;
        int idx = -1;
        void *tok = NULL;
        int ret = s->p->get(s->ctx, sl->addr, sl->len, &idx, &tok);
        if (ret < 0) {
            pthread_mutex_unlock(&sl->mu);
            note(s, "get(%p, %zu): %s", sl->addr, sl->len, strerror(-ret));
            atomic_fetch_add(&s->errors, 1);
            continue;
        }
        pthread_mutex_lock(&s->ring_mu);
        ret = scn_write_fixed(&s->ring, s->fd, sl->addr, sl->len, idx, off);
        pthread_mutex_unlock(&s->ring_mu);
        s->p->put(s->ctx, tok);
        if (ret == 0)
            ret = scn_read_back(s->fd, rb, sl->len, off);
        unsigned g1 = atomic_load(&sl->gen);
        if (g0 != g1 || (g0 & 1)) {
            /* a racing change replaced the pages while we used them: cannot be judged (an
             * I/O error cannot either: the pages may have gone mid-way) */
            atomic_fetch_add(&s->writes, 1);
            pthread_mutex_unlock(&sl->mu);
            continue;
        }
        atomic_fetch_add(&s->judged, 1);
        if (ret < 0) {
            note(s, "WRITE_FIXED/read back of %zu bytes at %p (index %d): %s", sl->len,
                 sl->addr, idx, strerror(-ret));
            atomic_fetch_add(&s->errors, 1);
        } else if (!scn_matches(rb, sl->len, seed)) {
            if (old && scn_matches(rb, sl->len, old)) {
                note(s, "stale: %zu bytes at %p reached the file with their old contents",
                     sl->len, sl->addr);
                atomic_fetch_add(&s->stale, 1);
            } else {
                note(s, "wrong bytes: %zu bytes at %p (index %d)", sl->len, sl->addr, idx);
                atomic_fetch_add(&s->errors, 1);
            }
        }
        atomic_fetch_add(&s->writes, 1);
        pthread_mutex_unlock(&sl->mu);
    }
    free(rb);
    return NULL;
}

static int map_hint(struct sslot *sl, void *hint, size_t len)
{
    void *a = mmap(hint, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED)
        return -errno;
    sl->addr = a;
    sl->len = len;
    return 0;
}

static int mutate(struct sslot *sl, unsigned *st)
{
    int ret = 0;
    if (sl->kind == K_MALLOC) {
        free(sl->addr);
        size_t len = pick_len(K_MALLOC, st);
        sl->addr = malloc(len);
        if (!sl->addr)
            return -ENOMEM;
        sl->len = len;
        return 0;
    }
    void *a = sl->addr;
    size_t len = sl->len;
    switch (rnd(st) % 4) {
    case 0:  /* munmap, then mmap again (maybe elsewhere, maybe another size) */
        if (munmap(a, len) < 0)
            return -errno;
        ret = map_hint(sl, a, pick_len(K_MMAP, st));
        break;
    case 1:  /* new pages over the buffer */
        if (mmap(a, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
                 0) == MAP_FAILED)
            return -errno;
        break;
    case 2:  /* fresh zero pages */
        if (madvise(a, len, MADV_DONTNEED) < 0)
            return -errno;
        break;
    case 3: {  /* move the pages away, map new ones at the address, drop the old ones */
        void *dst = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (dst == MAP_FAILED)
            return -errno;
        void *r = mremap(a, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, dst);
        if (r == MAP_FAILED) {
            ret = -errno;
            munmap(dst, len);
            return ret;
        }
        ret = map_hint(sl, a, len);
        munmap(r, len);
        break;
    }
    }
    /* sl->seed stays: a stale registration still holds the bytes last written before. */
    return ret;
}

/* New pages at the same address, without the slot's mutex: races with a worker's get. */
static int mutate_racing(struct sslot *sl, unsigned *st)
{
    pthread_rwlock_rdlock(&sl->shape);
    int ret = 0;
    atomic_fetch_add(&sl->gen, 1);
    if (rnd(st) % 2) {
        if (mmap(sl->addr, sl->len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
            ret = -errno;
    } else if (madvise(sl->addr, sl->len, MADV_DONTNEED) < 0) {
        ret = -errno;
    }
    atomic_fetch_add(&sl->gen, 1);
    pthread_rwlock_unlock(&sl->shape);
    return ret;
}

static void *mutator(void *arg)
{
    struct wargs *w = arg;
    struct stress *s = w->s;
    while (!atomic_load(&s->stop)) {
        struct sslot *sl = &s->slots[rnd(&w->rng) % s->nslots];
        int ret;
        if (sl->kind == K_MMAP && rnd(&w->rng) % 2) {
            ret = mutate_racing(sl, &w->rng);
            /* leave most writes unraced, so that most can be judged */
            struct timespec ts = {0, (long)(rnd(&w->rng) % 400) * 1000};
            nanosleep(&ts, NULL);
        } else {
            pthread_mutex_lock(&sl->mu);
            pthread_rwlock_wrlock(&sl->shape);
            ret = mutate(sl, &w->rng);
            pthread_rwlock_unlock(&sl->shape);
            pthread_mutex_unlock(&sl->mu);
        }
        if (ret < 0) {
            note(s, "mutator: %s", strerror(-ret));
            atomic_fetch_add(&s->errors, 1);
            break;
        }
        atomic_fetch_add(&s->mutations, 1);
        if (rnd(&w->rng) % 4 == 0)
            sched_yield();
    }
    return NULL;
}

/* The slots' buffers: every other one malloc'ed, the rest mmapped. 0 or a negative errno (the
 * buffers allocated so far stay for free_slots). */
static int alloc_slots(struct stress *s, unsigned ns, struct scn_stress_result *res)
{
    s->nslots = ns;
    s->slots = calloc(ns, sizeof(*s->slots));
    if (!s->slots)
        return -ENOMEM;
    unsigned st = 12345;
    for (unsigned i = 0; i < ns; i++) {
        struct sslot *sl = &s->slots[i];
        int ret = 0;
        pthread_mutex_init(&sl->mu, NULL);
        pthread_rwlock_init(&sl->shape, NULL);
        atomic_init(&sl->gen, 0);
        sl->kind = i % 2 ? K_MALLOC : K_MMAP;
        if (sl->kind == K_MALLOC) {
            sl->len = pick_len(K_MALLOC, &st);
            sl->addr = malloc(sl->len);
            if (!sl->addr)
                ret = -ENOMEM;
        } else {
            ret = map_hint(sl, NULL, pick_len(K_MMAP, &st));
        }
        if (ret < 0) {
            snprintf(res->detail, sizeof(res->detail), "allocating buffers: %s", strerror(-ret));
            return ret;
        }
    }
    return 0;
}

static void free_slots(struct stress *s)
{
    for (unsigned i = 0; s->slots && i < s->nslots; i++) {
        struct sslot *sl = &s->slots[i];
        if (!sl->addr)
            continue;
        if (sl->kind == K_MALLOC)
            free(sl->addr);
        else
            munmap(sl->addr, sl->len);
    }
    free(s->slots);
}

/* Run nw workers and nm mutators for ms (longer, up to max_ms, until min_writes; shorter on
 * the first stale with stop_on_stale), then fill in res. 0 or -EAGAIN (threads missing). */
static int run_threads(struct stress *s, unsigned nw, unsigned nm, unsigned ms,
                       const struct scn_stress_opts *opts, struct scn_stress_result *res)
{
    pthread_t th[128];
    struct wargs wa[128];
    unsigned nt = 0;
    int ret = 0;
    for (unsigned i = 0; i < nw + nm; i++) {
        wa[i].s = s;
        wa[i].id = i;
        wa[i].rng = 7919u * (i + 1);
        if (pthread_create(&th[i], NULL, i < nw ? worker : mutator, &wa[i]) != 0) {
            atomic_store(&s->stop, 1);
            break;
        }
        nt++;
    }
    unsigned long min_writes = opts ? opts->min_writes : 0;
    unsigned max_ms = opts && opts->max_ms ? opts->max_ms : 10 * ms;
    int stop_on_stale = opts && opts->stop_on_stale;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        struct timespec ts = {0, 10 * 1000000};
        nanosleep(&ts, NULL);
        clock_gettime(CLOCK_MONOTONIC, &now);
        long el = (now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000;
        if (stop_on_stale && atomic_load(&s->stale) + atomic_load(&s->errors) > 0)
            break;
        if (el >= (long)max_ms)
            break;
        if (el >= (long)ms && atomic_load(&s->writes) >= min_writes)
            break;
    }
    atomic_store(&s->stop, 1);
    for (unsigned i = 0; i < nt; i++)
        pthread_join(th[i], NULL);
    if (nt != nw + nm) {
        ret = -EAGAIN;
        snprintf(res->detail, sizeof(res->detail), "could not start %u threads", nw + nm);
    }
    res->writes = atomic_load(&s->writes);
    res->judged = atomic_load(&s->judged);
    res->stale = atomic_load(&s->stale);
    res->errors = atomic_load(&s->errors);
    res->mutations = atomic_load(&s->mutations);
    if (!res->detail[0])
        memcpy(res->detail, s->detail, sizeof(res->detail));
    return ret;
}

int scn_stress(const struct scn_provider *p, const char *variant,
               const struct scn_stress_opts *opts, struct scn_stress_result *res)
{
    if (!p || !res)
        return -EINVAL;
    memset(res, 0, sizeof(*res));
    unsigned nw = opts && opts->workers ? opts->workers : 2;
    unsigned nm = opts && opts->mutators ? opts->mutators : 2;
    unsigned ns = opts && opts->slots ? opts->slots : 16;
    unsigned ms = opts && opts->duration_ms ? opts->duration_ms : 2000;
    if (nw > 64 || nm > 64 || ns > 4096)
        return -EINVAL;
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);  /* large blocks are mmapped, free unmaps them */

    struct stress *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->p = p;
    s->fd = -1;
    pthread_mutex_init(&s->ring_mu, NULL);
    pthread_mutex_init(&s->detail_mu, NULL);
    atomic_store(&s->seed, 1);
    int ret = io_uring_queue_init(8, &s->ring, 0);
    if (ret < 0) {
        snprintf(res->detail, sizeof(res->detail), "io_uring_queue_init: %s", strerror(-ret));
        free(s);
        return ret;
    }
    s->fd = scn_tmpfile();
    if (s->fd < 0) {
        ret = s->fd;
        snprintf(res->detail, sizeof(res->detail), "temporary file: %s", strerror(-ret));
        goto out_ring;
    }
    ret = p->setup(&s->ctx, &s->ring, variant, res->detail, sizeof(res->detail));
    if (ret < 0)
        goto out_fd;
    ret = alloc_slots(s, ns, res);
    if (ret == 0)
        ret = run_threads(s, nw, nm, ms, opts, res);
    free_slots(s);
    p->teardown(s->ctx);
out_fd:
    close(s->fd);
out_ring:
    io_uring_queue_exit(&s->ring);
    free(s);
    return ret;
}

unsigned scn_stress_scenario_ms = 2000;

static enum scn_result stress_run(const struct scn_provider *p, const char *variant,
                                  struct scn_outcome *out)
{
    struct scn_stress_opts o;
    memset(&o, 0, sizeof(o));
    o.duration_ms = scn_stress_scenario_ms;
    o.min_writes = 100;
    o.max_ms = 10 * scn_stress_scenario_ms;
    struct scn_stress_result r;
    int ret = scn_stress(p, variant, &o, &r);
    if (ret == -ENOTSUP || ret == -ENODEV) {
        snprintf(out->detail, sizeof(out->detail), "%s", r.detail);
        return SCN_UNAVAILABLE;
    }
    if (ret < 0) {
        snprintf(out->detail, sizeof(out->detail), "%s (%.180s)", strerror(-ret), r.detail);
        return SCN_ERROR;
    }
    snprintf(out->detail, sizeof(out->detail),
             "%lu writes (%lu judged), %lu changes, %lu stale, %lu wrong%s%.140s", r.writes,
             r.judged, r.mutations, r.stale, r.errors, r.detail[0] ? ": " : "", r.detail);
    if (r.stale)
        return SCN_STALE;
    if (r.errors || r.judged == 0)
        return SCN_ERROR;
    return SCN_CAUGHT;
}

const struct scn_scenario scn_stress_scenario = {
    "stress", "threads get/write/check while others unmap, remap, free and malloc the buffers",
    stress_run,
};
