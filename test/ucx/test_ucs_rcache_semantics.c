/* What a caller of UCX's public registration-cache API (ucs/memory/rcache.h, UCX 1.13) may rely
 * on, written as Check tests: merging, merging over memory that cannot be registered with the
 * asked rights, registration failures, limits by count and by size, regions released while in
 * use, fork with PURGE_ON_FORK, invalidation with completions, threads, a cache whose mem_reg
 * takes a region of another cache (stacked, as UCP's sits on UCT's), destroy while held.
 *
 * Run without arguments it is the driver: it runs itself once against stock UCX (`--config
 * ucx`, no LD_PRELOAD) and once with libvmtrack-ucx preloaded (`--config module:<tracker>`).
 * Where the module is allowed to differ, the check names a row of the table of deliberate
 * differences below (doc/ucx.md has the same table); a listed difference that is seen is
 * printed as "DIFF <row>" and does not fail, one that is not seen prints "SAME <row>" (the row
 * may be out of date). Under stock UCX every check is strict: the table is what the module
 * may do, never what UCX does. */
#define _GNU_SOURCE
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ucm/api/ucm.h>
#include <ucs/memory/rcache.h>

#include "../lib/check_run.h"
#include "ucx_rcache_params.h"
#include "vmtrack_ucx.h"

#ifndef VMT_UCX_MODULE_PATH
#error "VMT_UCX_MODULE_PATH must name the built libvmtrack-ucx.so"
#endif

/* ---- deliberate differences of the module (doc/ucx.md, "Semantics") ------------------ */
struct sem_diff {
    const char *key;
    const char *what;
};
static const struct sem_diff sem_diffs[] = {
    {"page-align", "regions are page-aligned (vmtrack's unit), UCX aligns to `alignment`"},
    {"stacked-kept", "a registration made inside another cache's mem_reg on the same range "
                     "is retired when the outer one is inserted (it stays valid while held)"},
    {"fork-child", "a child of fork() registers again what the parent cached, PURGE_ON_FORK "
                   "or not: the parent's registrations are never vmtrack's in the child"},
};
static int g_module;            /* running with libvmtrack-ucx preloaded */
static const char *g_config = "?";

static const struct sem_diff *diff_row(const char *key)
{
    for (size_t i = 0; i < sizeof(sem_diffs) / sizeof(sem_diffs[0]); i++)
        if (!strcmp(sem_diffs[i].key, key))
            return &sem_diffs[i];
    return NULL;
}

/* A check the module may fail for a documented reason. Returns whether it held. */
static int sem_check(const char *key, int ok, const char *what)
{
    const struct sem_diff *d = diff_row(key);
    ck_assert_msg(d != NULL, "no difference row \"%s\"", key);
    if (!g_module) {
        ck_assert_msg(ok, "stock UCX: %s", what);
        return 1;
    }
    printf("%s %s: %s%s%s\n", ok ? "SAME" : "DIFF", key, what, ok ? "" : ": ",
           ok ? "" : d->what);
    return ok;
}

/* ---- a test memory domain ------------------------------------------------------------ */
#define REGION_MAGIC 0x5ca1ab1eu
#define MAX_IDS 4096

struct test_region {
    ucs_rcache_region_t super;
    uint32_t magic;
    int id;
    int arg_seen;                   /* *(int *)arg given to the get that registered it */
    ucs_rcache_region_t *lower;     /* stacked: the region of the lower cache */
};

struct test_md {
    ucs_rcache_t *rcache;
    int check_prot;                 /* refuse ranges whose mapping lacks the asked rights */
    int fail;                       /* refuse every registration */
    struct test_md *lower;          /* stacked: mem_reg takes a region of this cache */
    atomic_int live, regs, deregs, hidden_failures, hide_flags_seen;
    atomic_int deregistered[MAX_IDS];
};

static atomic_int g_next_id = 1;

/* The smallest protection of the mappings covering [start, end); 0 if a byte is unmapped.
 * Parsed here, not with ucs_get_mem_prot, which is not safe from two threads. */
static int mapped_prot(uintptr_t start, uintptr_t end)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int prot = PROT_READ | PROT_WRITE | PROT_EXEC;
    uintptr_t cur = start;
    if (!f)
        return 0;
    while (cur < end && fgets(line, sizeof(line), f)) {
        unsigned long a, b;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &a, &b, perms) != 3 || b <= cur)
            continue;
        if (a > cur)
            break;
        int p = (perms[0] == 'r' ? PROT_READ : 0) | (perms[1] == 'w' ? PROT_WRITE : 0) |
                (perms[2] == 'x' ? PROT_EXEC : 0);
        prot &= p;
        cur = b;
    }
    fclose(f);
    return cur >= end ? prot : 0;
}

static ucs_status_t md_reg(void *ctx, ucs_rcache_t *rc, void *arg, ucs_rcache_region_t *r,
                           uint16_t flags)
{
    struct test_md *md = ctx;
    struct test_region *tr = (struct test_region *)r;
    (void)rc;
    if (flags & UCS_RCACHE_MEM_REG_HIDE_ERRORS)
        atomic_fetch_add(&md->hide_flags_seen, 1);
    if (tr->magic != 0 || tr->lower != NULL)
        return UCS_ERR_INVALID_PARAM;           /* the region struct must come zeroed */
    if (md->fail ||
        (md->check_prot && (r->prot & ~mapped_prot(r->super.start, r->super.end)))) {
        if (flags & UCS_RCACHE_MEM_REG_HIDE_ERRORS)
            atomic_fetch_add(&md->hidden_failures, 1);
        return UCS_ERR_IO_ERROR;
    }
    if (md->lower) {
        ucs_status_t st = ucs_rcache_get(md->lower->rcache, (void *)r->super.start,
                                         r->super.end - r->super.start, r->prot, NULL,
                                         &tr->lower);
        if (st != UCS_OK)
            return st;
    }
    tr->magic = REGION_MAGIC;
    tr->id = atomic_fetch_add(&g_next_id, 1);
    tr->arg_seen = arg ? *(int *)arg : -1;
    atomic_fetch_add(&md->live, 1);
    atomic_fetch_add(&md->regs, 1);
    return UCS_OK;
}

static void md_dereg(void *ctx, ucs_rcache_t *rc, ucs_rcache_region_t *r)
{
    struct test_md *md = ctx;
    struct test_region *tr = (struct test_region *)r;
    (void)rc;
    ck_assert_uint_eq(tr->magic, REGION_MAGIC);
    if (tr->lower)
        ucs_rcache_region_put(md->lower->rcache, tr->lower);
    tr->lower = NULL;
    tr->magic = 0;
    if (tr->id > 0 && tr->id < MAX_IDS)
        atomic_store(&md->deregistered[tr->id], 1);
    atomic_fetch_sub(&md->live, 1);
    atomic_fetch_add(&md->deregs, 1);
}

static const ucs_rcache_ops_t md_ops = {.mem_reg = md_reg, .mem_dereg = md_dereg};

static size_t page(void)
{
    return (size_t)sysconf(_SC_PAGESIZE);
}

/* npages of fresh RW memory with an unmapped guard page on each side */
static char *map_pages(size_t npages)
{
    char *g = mmap(NULL, (npages + 2) * page(), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(g, MAP_FAILED);
    char *p = mmap(g + page(), npages * page(), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    ck_assert_ptr_eq(p, g + page());
    memset(p, 0x11, npages * page());
    return p;
}

#define RW (PROT_READ | PROT_WRITE)

static ucs_rcache_params_t md_params(struct test_md *md)
{
    /* alignment 16: what UCX's ib md asks for */
    return ucx_test_rcache_params(sizeof(struct test_region), 16, &md_ops, md);
}

/* What a test changes from md_params() and the md's defaults; a zero field keeps the
 * default, so that each test names only the knob it is about. */
struct md_opts {
    unsigned long max_regions;
    size_t max_size;
    unsigned flags;                 /* UCS_RCACHE_FLAG_* */
    struct test_md *lower;          /* stacked: mem_reg takes a region of this cache */
    int check_prot;
};

static struct test_md *md_open_opts(struct md_opts o)
{
    struct test_md *md = calloc(1, sizeof(*md));
    ck_assert_ptr_nonnull(md);
    ucs_rcache_params_t p = md_params(md);
    if (o.max_regions)
        p.max_regions = o.max_regions;
    if (o.max_size)
        p.max_size = o.max_size;
    p.flags |= o.flags;
    md->lower = o.lower;
    md->check_prot = o.check_prot;
    ucs_status_t st = ucs_rcache_create(&p, "sem", NULL, &md->rcache);
    ck_assert_msg(st == UCS_OK, "ucs_rcache_create: %s", ucs_status_string(st));
    return md;
}

static struct test_md *md_open(void)
{
    return md_open_opts((struct md_opts){0});
}

static void md_close(struct test_md *md)
{
    ucs_rcache_destroy(md->rcache);
    ck_assert_int_eq(atomic_load(&md->live), 0);
    free(md);
}

static struct test_region *get_ok(struct test_md *md, void *addr, size_t len, int prot)
{
    ucs_rcache_region_t *r = NULL;
    int arg = 42;
    ucs_status_t st = ucs_rcache_get(md->rcache, addr, len, prot, &arg, &r);
    ck_assert_msg(st == UCS_OK, "get %p+%zu: %s", addr, len, ucs_status_string(st));
    ck_assert_ptr_nonnull(r);
    ck_assert_msg(((uintptr_t)r & 15) == 0, "region %p not 16-byte aligned", (void *)r);
    ck_assert_msg(r->super.start <= (uintptr_t)addr && r->super.end >= (uintptr_t)addr + len,
                  "region %#lx-%#lx does not cover %p+%zu", (unsigned long)r->super.start,
                  (unsigned long)r->super.end, addr, len);
    ck_assert_msg((r->prot & prot) == prot, "region prot %d lacks %d", r->prot, prot);
    ck_assert_uint_gt(r->refcount, 0);
    ck_assert_uint_eq(((struct test_region *)r)->magic, REGION_MAGIC);
    return (struct test_region *)r;
}

static void put(struct test_md *md, struct test_region *r)
{
    ucs_rcache_region_put(md->rcache, &r->super);
}

/* Registers the range and lets go of it at once, so that the region stays in the cache
 * unused (evictable); returns its id, to ask later whether it was deregistered. */
static int get_put(struct test_md *md, void *addr, size_t len, int prot)
{
    struct test_region *r = get_ok(md, addr, len, prot);
    int id = r->id;
    put(md, r);
    return id;
}

/* A get of the range is a hit on the cached region `id` (not a new registration). */
static void assert_hit(struct test_md *md, void *addr, size_t len, int prot, int id)
{
    struct test_region *r = get_ok(md, addr, len, prot);
    ck_assert_int_eq(r->id, id);
    put(md, r);
}

/* Some other get, so that UCX collects what it only queued for deregistration (it does that
 * at its next operation, not at the put or the unmap). */
static void nudge_cache(struct test_md *md)
{
    char *other = map_pages(1);
    get_put(md, other, 64, RW);
}

/* A get the md refuses fails with its status and leaves nothing registered behind. */
static void assert_get_fails(struct test_md *md, void *addr, size_t len, int prot)
{
    ucs_rcache_region_t *r = NULL;
    ck_assert_int_eq(ucs_rcache_get(md->rcache, addr, len, prot, NULL, &r), UCS_ERR_IO_ERROR);
    ck_assert_int_eq(atomic_load(&md->live), 0);
}

/* Fresh memory of which the first `cached` pages are registered with `prot` and left in the
 * cache, and then the first `readonly` pages lose their write permission: the region (or the
 * merge a later get attempts) claims more than the mapping now allows. */
static char *cached_then_readonly(struct test_md *md, size_t npages, size_t cached, int prot,
                                  size_t readonly)
{
    char *buf = map_pages(npages);
    get_put(md, buf, cached * page(), prot);
    ck_assert_int_eq(mprotect(buf, readonly * page(), PROT_READ), 0);
    return buf;
}

/* ---- create ---------------------------------------------------------------------------- */
START_TEST(create_rejects_bad_params)
{
    struct test_md md0;
    memset(&md0, 0, sizeof(md0));
    ucs_rcache_params_t p = md_params(&md0);
    ucs_rcache_t *rc = NULL;

    p.region_struct_size = sizeof(ucs_rcache_region_t) - 1;
    ck_assert_int_ne(ucs_rcache_create(&p, "small", NULL, &rc), UCS_OK);
    p = md_params(&md0);
    p.alignment = 24;
    ck_assert_int_ne(ucs_rcache_create(&p, "align", NULL, &rc), UCS_OK);
    p = md_params(&md0);
    p.alignment = 2 * page();
    ck_assert_int_ne(ucs_rcache_create(&p, "align>max", NULL, &rc), UCS_OK);
    p = md_params(&md0);
    p.ucm_events |= 1 << 30;                /* no such event */
    ck_assert_int_ne(ucs_rcache_create(&p, "events", NULL, &rc), UCS_OK);
}
END_TEST

/* ---- hits, arg, merge ------------------------------------------------------------------ */
START_TEST(get_put_hit)
{
    struct test_md *md = md_open();
    char *buf = map_pages(16);
    struct test_region *a = get_ok(md, buf + 100, 5000, RW);
    ck_assert_int_eq(a->arg_seen, 42);
    struct test_region *b = get_ok(md, buf + 200, 1000, PROT_READ);
    ck_assert_ptr_eq(a, b);
    ck_assert_int_eq(atomic_load(&md->regs), 1);
    put(md, b);
    put(md, a);
    struct test_region *c = get_ok(md, buf + 100, 5000, RW);
    ck_assert_ptr_eq(a, c);                 /* cached after the last put */
    ck_assert_int_eq(atomic_load(&md->live), 1);
    ucs_rcache_region_hold(md->rcache, &c->super);
    put(md, c);
    ck_assert_uint_eq(c->magic, REGION_MAGIC);
    put(md, c);
    md_close(md);
}
END_TEST

START_TEST(alignment_kept)
{
    struct test_md *md = md_open();
    char *buf = map_pages(4);
    struct test_region *r = get_ok(md, buf + 64, 64, RW);
    sem_check("page-align", r->super.super.start == (uintptr_t)buf + 64 &&
                            r->super.super.end == (uintptr_t)buf + 128,
              "a 16-byte aligned request gets a region of exactly that range");
    put(md, r);
    md_close(md);
}
END_TEST

START_TEST(merge_overlapping)
{
    struct test_md *md = md_open();
    size_t pg = page();
    char *buf = map_pages(16);
    struct test_region *a = get_ok(md, buf, 2 * pg, RW);
    struct test_region *b = get_ok(md, buf + 6 * pg, 2 * pg, RW);
    put(md, a);
    put(md, b);
    struct test_region *m = get_ok(md, buf + pg, 6 * pg, RW);
    ck_assert_msg(m->super.super.start <= (uintptr_t)buf && m->super.super.end >= (uintptr_t)buf + 8 * pg,
                  "the merged region covers both old regions and the gap");
    ck_assert_int_eq(atomic_load(&md->live), 1);    /* the two old ones went */
    ck_assert_int_gt(atomic_load(&md->hide_flags_seen), 0);
    struct test_region *again = get_ok(md, buf, 2 * pg, PROT_READ);
    ck_assert_ptr_eq(again, m);             /* the first range now gives the merged region */
    put(md, again);
    put(md, m);
    md_close(md);
}
END_TEST

START_TEST(merge_expands_prot)
{
    struct test_md *md = md_open();
    size_t pg = page();
    char *buf = map_pages(8);
    get_put(md, buf, 2 * pg, PROT_READ);
    struct test_region *w = get_ok(md, buf + pg, 2 * pg, PROT_WRITE);
    ck_assert_int_eq(w->super.prot & RW, RW);
    ck_assert_msg(w->super.super.start <= (uintptr_t)buf, "the read region was merged in");
    put(md, w);
    md_close(md);
}
END_TEST

START_TEST(touching_ranges)
{
    struct test_md *md = md_open();
    size_t pg = page();
    char *buf = map_pages(8);
    get_put(md, buf, 2 * pg, RW);
    struct test_region *b = get_ok(md, buf + 2 * pg, 2 * pg, RW);
    /* Strict for both: the module's devices merge only what overlaps
     * (VMT_DEVICE_MERGE_OVERLAPS_ONLY), as UCX does. */
    ck_assert_msg(b->super.super.start == (uintptr_t)buf + 2 * pg && atomic_load(&md->live) == 2,
                  "%s: a range that only touches a cached one is registered on its own",
                  g_config);
    put(md, b);
    md_close(md);
}
END_TEST

/* A merge over memory the asked rights do not cover: the merged registration is attempted
 * with HIDE_ERRORS, fails, and the request is registered alone. */
START_TEST(merge_with_unwritable)
{
    struct test_md *md = md_open_opts((struct md_opts){.check_prot = 1});
    size_t pg = page();
    char *buf = cached_then_readonly(md, 8, 3, PROT_READ, 1);
    struct test_region *w = get_ok(md, buf + 2 * pg, 2 * pg, RW);
    ck_assert_msg(w->super.super.start >= (uintptr_t)buf + pg, "not merged over the read-only page");
    ck_assert_int_eq(atomic_load(&md->regs), 2);
    put(md, w);
    /* the read-only page can still be had for reading */
    get_put(md, buf, pg, PROT_READ);
    md_close(md);
}
END_TEST

START_TEST(merge_unwritable_cached_region)
{
    struct test_md *md = md_open_opts((struct md_opts){.check_prot = 1});
    size_t pg = page();
    char *buf = cached_then_readonly(md, 8, 4, RW, 4);
    /* a read is still served (from the cache or a new registration) */
    get_put(md, buf + pg, pg, PROT_READ);
    md_close(md);
}
END_TEST

START_TEST(invalid_prot_refused)
{
    struct test_md *md = md_open_opts((struct md_opts){.check_prot = 1});
    size_t pg = page();
    char *buf = map_pages(4);
    ck_assert_int_eq(mprotect(buf, 4 * pg, PROT_READ), 0);
    assert_get_fails(md, buf, 2 * pg, RW);
    md_close(md);
}
END_TEST

START_TEST(register_failure)
{
    struct test_md *md = md_open();
    char *buf = map_pages(4);
    md->fail = 1;
    assert_get_fails(md, buf, 100, RW);
    assert_get_fails(md, buf, 100, RW);
    md->fail = 0;
    get_put(md, buf, 100, RW);
    md_close(md);
}
END_TEST

/* ---- unmap ----------------------------------------------------------------------------- */
START_TEST(unmap_invalidates)
{
    struct test_md *md = md_open();
    size_t pg = page();
    char *buf = map_pages(4);
    int id = get_put(md, buf, 2 * pg, RW);
    ck_assert_int_eq(munmap(buf, 4 * pg), 0);
    char *again = mmap(buf, 4 * pg, RW, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    ck_assert_ptr_eq(again, buf);
    struct test_region *b = get_ok(md, buf, 2 * pg, RW);
    ck_assert_int_ne(b->id, id);
    ck_assert_int_eq(atomic_load(&md->deregistered[id]), 1);
    put(md, b);
    md_close(md);
}
END_TEST

START_TEST(release_in_use)
{
    struct test_md *md = md_open();
    size_t pg = page();
    char *buf = map_pages(4);
    struct test_region *a = get_ok(md, buf, 2 * pg, RW);
    int id = a->id;
    ck_assert_int_eq(munmap(buf, 4 * pg), 0);
    ck_assert_uint_eq(a->magic, REGION_MAGIC);      /* held: still registered */
    ck_assert_int_eq(atomic_load(&md->deregistered[id]), 0);
    put(md, a);
    /* gone at the last put (UCX may wait for its next operation to collect it) */
    nudge_cache(md);
    ck_assert_int_eq(atomic_load(&md->deregistered[id]), 1);
    md_close(md);
}
END_TEST

/* ---- limits ---------------------------------------------------------------------------- */
START_TEST(limit_by_count)
{
    struct test_md *md = md_open_opts((struct md_opts){.max_regions = 2});
    size_t pg = page();
    char *buf = map_pages(16);
    int id1 = get_put(md, buf, pg, RW);
    int id2 = get_put(md, buf + 4 * pg, pg, RW);
    int id3 = get_put(md, buf + 8 * pg, pg, RW);
    /* exactly one evicted: the oldest */
    ck_assert_int_eq(atomic_load(&md->live), 2);
    ck_assert_int_eq(atomic_load(&md->deregistered[id1]), 1);
    assert_hit(md, buf + 8 * pg, pg, RW, id3);
    assert_hit(md, buf + 4 * pg, pg, RW, id2);
    md_close(md);
}
END_TEST

START_TEST(limit_by_size)
{
    size_t pg = page();
    struct test_md *md = md_open_opts((struct md_opts){.max_size = 3 * pg});
    char *buf = map_pages(16);
    int id1 = get_put(md, buf, 2 * pg, RW);
    get_put(md, buf + 8 * pg, 2 * pg, RW);
    /* a region past max_size evicts the unused one */
    ck_assert_int_eq(atomic_load(&md->deregistered[id1]), 1);
    ck_assert_int_eq(atomic_load(&md->live), 1);
    md_close(md);
}
END_TEST

START_TEST(limit_by_size_in_use)
{
    size_t pg = page();
    struct test_md *md = md_open_opts((struct md_opts){.max_size = 3 * pg});
    char *buf = map_pages(16);
    struct test_region *r1 = get_ok(md, buf, 2 * pg, RW);
    struct test_region *r2 = get_ok(md, buf + 8 * pg, 2 * pg, RW);
    ck_assert_uint_eq(r1->magic, REGION_MAGIC);     /* held: never evicted */
    ck_assert_int_eq(atomic_load(&md->deregistered[r1->id]), 0);
    put(md, r2);
    put(md, r1);
    md_close(md);
}
END_TEST

/* ---- invalidate ------------------------------------------------------------------------ */
struct completion {
    struct test_md *md;
    int id;                         /* the region it waits for */
    atomic_int calls;
    atomic_int dereg_before;        /* the region was deregistered when the callback ran */
};

static void on_invalidated(void *arg)
{
    struct completion *c = arg;
    if (atomic_load(&c->md->deregistered[c->id]))
        atomic_fetch_add(&c->dereg_before, 1);
    atomic_fetch_add(&c->calls, 1);
}

START_TEST(invalidate_with_completion)
{
    struct test_md *md = md_open();
    char *buf = map_pages(4);
    struct test_region *a = get_ok(md, buf, 4096, RW);
    struct test_region *a2 = get_ok(md, buf, 4096, RW);
    ck_assert_ptr_eq(a, a2);
    struct completion c1 = {.md = md, .id = a->id}, c2 = {.md = md, .id = a->id};
    ucs_rcache_region_invalidate(md->rcache, &a->super, on_invalidated, &c1);
    /* out of the cache at once: a new get gives a new registration */
    struct test_region *b = get_ok(md, buf, 4096, RW);
    ck_assert_ptr_ne(b, a);
    ck_assert_int_ne(b->id, a->id);
    ucs_rcache_region_invalidate(md->rcache, &a->super, on_invalidated, &c2);
    put(md, a);
    ck_assert_uint_eq(a->magic, REGION_MAGIC);      /* the callers' holds kept */
    ck_assert_int_eq(atomic_load(&c1.calls), 0);
    put(md, a2);
    ck_assert_int_eq(atomic_load(&c1.calls), 1);
    ck_assert_int_eq(atomic_load(&c2.calls), 1);
    ck_assert_int_eq(atomic_load(&c1.dereg_before), 1);     /* after mem_dereg */
    ck_assert_int_eq(atomic_load(&c2.dereg_before), 1);
    put(md, b);
    md_close(md);
}
END_TEST

/* Invalidating one cache's region leaves another cache's region of the same range alone. */
START_TEST(invalidate_leaves_other_caches)
{
    struct test_md *one = md_open(), *two = md_open();
    char *buf = map_pages(4);
    struct test_region *r1 = get_ok(one, buf, 4096, RW);
    int id2 = get_put(two, buf, 4096, RW);
    struct completion c = {.md = one, .id = r1->id};
    ucs_rcache_region_invalidate(one->rcache, &r1->super, on_invalidated, &c);
    put(one, r1);
    ck_assert_int_eq(atomic_load(&c.calls), 1);
    assert_hit(two, buf, 4096, RW, id2);
    ck_assert_int_eq(atomic_load(&two->regs), 1);
    md_close(one);
    md_close(two);
}
END_TEST

/* ---- threads --------------------------------------------------------------------------- */
struct worker {
    struct test_md *md;
    char *buf;
    size_t len;
    unsigned seed;
    int iters;
    int bad;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    for (int i = 0; i < w->iters; i++) {
        size_t off = (size_t)rand_r(&w->seed) % (w->len - 1);
        size_t n = 1 + (size_t)rand_r(&w->seed) % (w->len - off < 65536 ? w->len - off : 65536);
        int prot = (rand_r(&w->seed) & 1) ? RW : PROT_READ;
        ucs_rcache_region_t *r = NULL;
        if (ucs_rcache_get(w->md->rcache, w->buf + off, n, prot, NULL, &r) != UCS_OK) {
            w->bad++;
            continue;
        }
        struct test_region *tr = (struct test_region *)r;
        if (r->super.start > (uintptr_t)w->buf + off ||
            r->super.end < (uintptr_t)w->buf + off + n || (r->prot & prot) != prot ||
            r->refcount == 0 || tr->magic != REGION_MAGIC)
            w->bad++;
        ucs_rcache_region_put(w->md->rcache, r);
    }
    return NULL;
}

START_TEST(threads_share_regions)
{
    struct test_md *md = md_open_opts((struct md_opts){.check_prot = 1});
    size_t len = 64 * page();
    char *buf = map_pages(64);
    struct worker w[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (struct worker){.md = md, .buf = buf, .len = len, .seed = 7u + (unsigned)i,
                               .iters = 3000};
        ck_assert_int_eq(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(w[i].bad, 0);
    }
    md_close(md);
}
END_TEST

struct handoff {
    struct test_md *md;
    struct test_region *r;
};

static void *put_elsewhere(void *arg)
{
    struct handoff *h = arg;
    put(h->md, h->r);
    return NULL;
}

/* fn(h) in a thread of its own, to its end */
static void in_other_thread(void *(*fn)(void *), struct handoff *h)
{
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, fn, h), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
}

START_TEST(put_from_another_thread)
{
    struct test_md *md = md_open();
    struct handoff h = {.md = md, .r = get_ok(md, map_pages(4), 100, RW)};
    char *buf = (char *)h.r->super.super.start;
    in_other_thread(put_elsewhere, &h);
    struct test_region *again = get_ok(md, buf, 100, RW);
    ck_assert_ptr_eq(again, h.r);
    put(md, again);
    md_close(md);
}
END_TEST

static void *hold_elsewhere(void *arg)
{
    struct handoff *h = arg;
    ucs_rcache_region_hold(h->md->rcache, &h->r->super);
    return NULL;
}

/* A hold taken in another thread keeps an invalidated region registered after the getter's
 * put, whichever put comes first; the last put deregisters it and runs the completion. */
START_TEST(hold_from_another_thread)
{
    struct test_md *md = md_open();
    struct handoff h = {.md = md, .r = get_ok(md, map_pages(4), 4096, RW)};
    in_other_thread(hold_elsewhere, &h);
    struct completion c = {.md = md, .id = h.r->id};
    ucs_rcache_region_invalidate(md->rcache, &h.r->super, on_invalidated, &c);
    put(md, h.r);                           /* the get's hold */
    ck_assert_int_eq(atomic_load(&md->deregistered[c.id]), 0);
    ck_assert_int_eq(atomic_load(&c.calls), 0);
    in_other_thread(put_elsewhere, &h);     /* the other hold */
    ck_assert_int_eq(atomic_load(&md->deregistered[c.id]), 1);
    ck_assert_int_eq(atomic_load(&c.calls), 1);
    ck_assert_int_eq(atomic_load(&c.dereg_before), 1);
    md_close(md);
}
END_TEST

/* ---- fork ------------------------------------------------------------------------------ */
START_TEST(purge_on_fork)
{
    struct test_md *md = md_open_opts((struct md_opts){.flags = UCS_RCACHE_FLAG_PURGE_ON_FORK});
    size_t pg = page();
    char *buf = map_pages(8);
    int unused_id = get_put(md, buf, pg, RW);
    struct test_region *held = get_ok(md, buf + 4 * pg, pg, RW);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        /* the cache works in the child */
        char *cbuf = mmap(NULL, pg, RW, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        ucs_rcache_region_t *r = NULL;
        int ok = cbuf != MAP_FAILED &&
                 ucs_rcache_get(md->rcache, cbuf, 64, RW, NULL, &r) == UCS_OK &&
                 ((struct test_region *)r)->magic == REGION_MAGIC;
        _exit(ok ? 0 : 1);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "get in the child failed");
    /* before fork the unused region was deregistered, the held one kept */
    ck_assert_int_eq(atomic_load(&md->deregistered[unused_id]), 1);
    ck_assert_uint_eq(held->magic, REGION_MAGIC);
    get_put(md, buf + 4 * pg, pg, RW);
    put(md, held);
    md_close(md);
}
END_TEST

/* Without PURGE_ON_FORK, a range the parent cached and let go: UCX's child finds the parent's
 * region, the module's registers its own (the row "fork-child"), even though the parent's
 * steady hits had put the range in vmtrack's memo. The child's exit status: 0 as expected,
 * 1 a get failed, 2 the module's child was given the parent's region. */
START_TEST(fork_child_and_the_parents_regions)
{
    struct test_md *md = md_open();
    size_t pg = page();
    char *buf = map_pages(2);
    ucs_rcache_region_t *parents = NULL;
    for (int i = 0; i < 4; i++) {       /* a miss, then hits: the fast lookups */
        ck_assert_int_eq(ucs_rcache_get(md->rcache, buf, pg, RW, NULL, &parents), UCS_OK);
        ucs_rcache_region_put(md->rcache, parents);
    }
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int regs = atomic_load(&md->regs), status = 0;
        for (int i = 0; i < 3 && !status; i++) {
            ucs_rcache_region_t *r = NULL;
            if (ucs_rcache_get(md->rcache, buf, pg, RW, NULL, &r) != UCS_OK) {
                status = 1;
                break;
            }
            if (g_module && (r == parents || atomic_load(&md->regs) != regs + 1))
                status = 2;
            if (!g_module && r != parents)
                status = 3;
            ucs_rcache_region_put(md->rcache, r);
        }
        _exit(status);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st), "the child died (status %#x)", st);
    ck_assert_msg(WEXITSTATUS(st) != 1, "a get in the child failed");
    ck_assert_msg(WEXITSTATUS(st) != 2, "the module gave the child the parent's region");
    ck_assert_msg(WEXITSTATUS(st) != 3, "stock UCX's child did not find the parent's region");
    sem_check("fork-child", !g_module, "the child of fork() finds the parent's regions");
    munmap(buf, 2 * pg);
    md_close(md);
}
END_TEST

/* ---- stacked caches ------------------------------------------------------------------ */
START_TEST(stacked_caches)
{
    struct test_md *lower = md_open();
    struct test_md *upper = md_open_opts((struct md_opts){.lower = lower});
    size_t pg = page();
    char *buf = map_pages(8);

    struct test_region *u = get_ok(upper, buf, 2 * pg, RW);
    int uid = u->id;
    ck_assert_ptr_nonnull(u->lower);
    ck_assert_int_eq(atomic_load(&lower->live), 1);
    put(upper, u);
    struct test_region *u2 = get_ok(upper, buf, 2 * pg, RW);
    ck_assert_ptr_eq(u2, u);                /* the upper region is cached */
    put(upper, u2);
    struct test_region *l = get_ok(lower, buf, 2 * pg, RW);
    sem_check("stacked-kept", l == (struct test_region *)u->lower && atomic_load(&lower->regs) == 1,
              "the lower region taken inside the upper mem_reg is a hit for the lower cache");
    put(lower, l);

    /* unmap: both levels go (the lower one once the upper one lets go of it) */
    ck_assert_int_eq(munmap(buf, 8 * pg), 0);
    nudge_cache(upper);
    ck_assert_int_eq(atomic_load(&upper->deregistered[uid]), 1);
    md_close(upper);        /* the upper cache first: its deregs put lower regions */
    md_close(lower);
}
END_TEST

/* Destroy the upper cache while one of its regions is held and its memory unmapped: UCX warns
 * and carries on; it must not hang (the upper dereg puts a lower region from inside destroy). */
static void destroy_while_held_body(void);

START_TEST(destroy_while_held)
{
    /* in a child, so that a hang is seen as one */
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        destroy_while_held_body();
        _exit(0);
    }
    int st = 0, hung = 1;
    for (int ms = 0; ms < 5000 && hung; ms += 10) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        ck_assert_int_ge(w, 0);
        hung = w == 0;
        if (hung)
            usleep(10000);
    }
    if (hung) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
    }
    ck_assert_msg(!hung, "destroy did not return in 5 s while a region was held");
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "destroy while held: status %#x", st);
}
END_TEST

static void destroy_while_held_body(void)
{
    struct test_md *lower = md_open();
    struct test_md *upper = md_open_opts((struct md_opts){.lower = lower});
    size_t pg = page();
    char *buf = map_pages(4);
    struct test_region *u = get_ok(upper, buf, pg, RW);
    int cached_id = get_put(upper, buf + 2 * pg, pg, RW);
    ck_assert_int_eq(munmap(buf, 4 * pg), 0);
    (void)u;                                /* still held: the caller's bug, reported */
    ucs_rcache_destroy(upper->rcache);
    ck_assert_int_le(atomic_load(&upper->live), 1);
    ck_assert_int_eq(atomic_load(&upper->deregistered[cached_id]), 1);
    ucs_rcache_destroy(lower->rcache);
    free(upper);
    free(lower);
}

/* With the module the test's host-memory rcache must be vmtrack's, or the rows above say
 * nothing about it. */
START_TEST(served_by_vmtrack)
{
    int (*stats_get)(struct vmt_ucx_stats *) =
        (int (*)(struct vmt_ucx_stats *))dlsym(RTLD_DEFAULT, "vmt_ucx_stats_get");
    if (!g_module) {
        ck_assert_ptr_null(stats_get);
        return;
    }
    ck_assert_ptr_nonnull(stats_get);
    struct test_md *md = md_open();
    struct vmt_ucx_stats st = {.sz = sizeof(st)};
    ck_assert_int_eq(stats_get(&st), 0);
    ck_assert_uint_ge(st.native_rcaches, 1);
    md_close(md);
}
END_TEST

/* ---- runner ---------------------------------------------------------------------------- */
static Suite *semantics_suite(void)
{
    Suite *s = suite_create("ucs_rcache semantics");
    TCase *tc = tcase_create("api");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, served_by_vmtrack);
    tcase_add_test(tc, create_rejects_bad_params);
    tcase_add_test(tc, get_put_hit);
    tcase_add_test(tc, alignment_kept);
    tcase_add_test(tc, merge_overlapping);
    tcase_add_test(tc, merge_expands_prot);
    tcase_add_test(tc, touching_ranges);
    tcase_add_test(tc, merge_with_unwritable);
    tcase_add_test(tc, merge_unwritable_cached_region);
    tcase_add_test(tc, invalid_prot_refused);
    tcase_add_test(tc, register_failure);
    tcase_add_test(tc, unmap_invalidates);
    tcase_add_test(tc, release_in_use);
    tcase_add_test(tc, limit_by_count);
    tcase_add_test(tc, limit_by_size);
    tcase_add_test(tc, limit_by_size_in_use);
    tcase_add_test(tc, invalidate_with_completion);
    tcase_add_test(tc, invalidate_leaves_other_caches);
    tcase_add_test(tc, threads_share_regions);
    tcase_add_test(tc, put_from_another_thread);
    tcase_add_test(tc, hold_from_another_thread);
    tcase_add_test(tc, purge_on_fork);
    tcase_add_test(tc, fork_child_and_the_parents_regions);
    tcase_add_test(tc, stacked_caches);
    tcase_add_test(tc, destroy_while_held);
    suite_add_tcase(s, tc);
    return s;
}

static int run_config(const char *config)
{
    g_config = config;
    g_module = strncmp(config, "module:", 7) == 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("config %s\n", g_config);
    if (g_module) {
        enum vmt_ucx_mode (*mode)(char *, size_t) =
            (enum vmt_ucx_mode (*)(char *, size_t))dlsym(RTLD_DEFAULT, "vmt_ucx_mode");
        char why[256] = "libvmtrack-ucx not loaded";
        if (!mode || mode(why, sizeof(why)) == VMT_UCX_OFF) {
            printf("SKIP %s: %s\n", g_config, why);
            return 77;
        }
    }
    return check_run(semantics_suite(), CK_FORK) ? 1 : 0;
}

static int spawn(const char *config)
{
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        if (!strncmp(config, "module:", 7)) {
            setenv("LD_PRELOAD", VMT_UCX_MODULE_PATH, 1);
            setenv("VMTRACK_TRACKER", config + 7, 1);
            setenv("UCX_MEM_MMAP_HOOK_MODE", "none", 1);    /* see doc/ucx.md */
        } else {
            unsetenv("LD_PRELOAD");
            unsetenv("UCX_MEM_MMAP_HOOK_MODE");
        }
        execl("/proc/self/exe", "test_ucs_rcache_semantics", "--config", config, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--config"))
        return run_config(argv[2]);
    if (argc != 1) {
        fprintf(stderr, "usage: %s [--config ucx|module:<tracker>]\n", argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    int stock = spawn("ucx");
    printf("stock UCX: exit status %d\n", stock);
    int module = spawn("module:hooks");
    printf("libvmtrack-ucx (hooks tracker): exit status %d\n", module);
    /* uffd where the machine allows userfaultfd; hooks must run everywhere */
    int uffd = spawn("module:uffd");
    printf("libvmtrack-ucx (uffd tracker): exit status %d%s\n", uffd,
           uffd == 77 ? " (not available here)" : "");
    return stock == 0 && module == 0 && (uffd == 0 || uffd == 77) ? 0 : 1;
}
