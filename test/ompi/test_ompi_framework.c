/* The vmtrack rcache component through Open MPI's own framework: MPI_Init (singleton), then
 * mca_rcache_base_module_create("vmtrack", ...) with a fake BTL's register_mem/deregister_mem,
 * and what a BTL relies on: base/bound/access of the registration it filled, its own fields,
 * reference counts, cache hits (leave_pinned), CACHE_BYPASS and BTL-specific flags uncached,
 * bad arguments refused, and one memory event reaching every cache in the process once.
 * Each test runs in a child forked by Check after MPI_Init. */
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <mpi.h>

#include "opal_config.h"
#include "opal/mca/base/base.h"
#include "opal/mca/base/mca_base_var.h"
#include "opal/mca/memory/base/base.h"
#include "opal/mca/rcache/base/base.h"
#include "opal/memoryhooks/memory.h"
#include "opal/mca/rcache/rcache.h"
#include "opal/runtime/opal_params.h"

#include "ompi-rcache/entry_owner.h"
#include "ompi-rcache/ompi_compat.h"
#include "ompi-rcache/rcache_vmtrack.h"
#include "ompi-rcache/takeover_gate.h"
#include "ompi_testenv.h"
#include "vmtrack.h"
#include "../lib/check_run.h"

/* ---- a fake BTL ------------------------------------------------------------------------ */
struct fake_reg {
    mca_rcache_base_registration_t base;
    uint64_t cookie;          /* what a BTL keeps in its registration (an lkey, an mr...) */
    void *reg_base;
    size_t reg_len;
};

struct fake_btl {
    int nreg, ndereg, live;
    int32_t last_access;
    uint32_t last_flags;
    int fail_with;            /* register_mem returns this once when nonzero */
    int bad_fields;           /* register_mem saw base/bound/rcache it did not expect */
};

static int fake_register(void *reg_data, void *base, size_t size,
                         mca_rcache_base_registration_t *reg)
{
    struct fake_btl *b = reg_data;
    struct fake_reg *f = (struct fake_reg *) reg;
    if (b->fail_with) {
        int rc = b->fail_with;
        b->fail_with = 0;
        return rc;
    }
    /* like a real device: memory that is not mapped cannot be registered */
    if (0 != msync((void *) ((uintptr_t) base & ~4095ul), size, MS_ASYNC))
        return OPAL_ERR_BAD_PARAM;
    if (reg->base != base || reg->bound != (unsigned char *) base + size - 1 || !reg->rcache)
        b->bad_fields++;
    b->nreg++;
    b->live++;
    b->last_access = reg->access_flags;
    b->last_flags = reg->flags;
    f->cookie = 0xC0FFEE0000ull + (uint64_t) b->nreg;
    f->reg_base = base;
    f->reg_len = size;
    return OPAL_SUCCESS;
}

static int fake_deregister(void *reg_data, mca_rcache_base_registration_t *reg)
{
    struct fake_btl *b = reg_data;
    struct fake_reg *f = (struct fake_reg *) reg;
    if (f->cookie < 0xC0FFEE0000ull)
        b->bad_fields++;
    f->cookie = 0;
    b->ndereg++;
    b->live--;
    return OPAL_SUCCESS;
}

static mca_rcache_base_module_t *make(const char *comp, const char *name, struct fake_btl *b)
{
    mca_rcache_base_resources_t res = {
        .cache_name = (char *) name,
        .reg_data = b,
        .sizeof_reg = sizeof(struct fake_reg),
        .register_mem = fake_register,
        .deregister_mem = fake_deregister,
    };
    return mca_rcache_base_module_create(comp, NULL, &res);
}

static void *map_pages(size_t n)
{
    void *p = mmap(NULL, n * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(p, MAP_FAILED);
    memset(p, 1, n * 4096);
    return p;
}

#define REG(m, a, l, fl, acc, out) ((m)->rcache_register((m), (a), (l), (fl), (acc), (out)))
#define DEREG(m, r) ((m)->rcache_deregister((m), (r)))

/* ---- tests ------------------------------------------------------------------------------ */

START_TEST(t_component_selected)
{
    /* (mca_rcache_base_component_lookup/module_lookup are declared but not exported in 4.1.4:
     * walk the framework's lists.) */
    mca_base_component_list_item_t *cli;
    int found = 0;
    OPAL_LIST_FOREACH(cli, &opal_rcache_base_framework.framework_components,
                      mca_base_component_list_item_t) {
        if (0 == strcmp(cli->cli_component->mca_component_name, "vmtrack"))
            found++;
    }
    ck_assert_int_eq(found, 1);
    struct fake_btl b = {0};
    mca_rcache_base_module_t *m = make("vmtrack", "fake.0", &b);
    ck_assert_ptr_nonnull(m);
    ck_assert_str_eq(m->rcache_component->rcache_version.mca_component_name, "vmtrack");
    mca_rcache_base_selected_module_t *sm;
    found = 0;
    OPAL_LIST_FOREACH(sm, &mca_rcache_base_modules, mca_rcache_base_selected_module_t) {
        if (sm->rcache_module == m)
            found++;
    }
    ck_assert_int_eq(found, 1);
    ck_assert_int_eq(mca_rcache_base_module_destroy(m), OPAL_SUCCESS);
}
END_TEST

START_TEST(t_register_hit_refcount)
{
    struct fake_btl b = {0};
    mca_rcache_base_module_t *m = make("vmtrack", "fake.0", &b);
    ck_assert_ptr_nonnull(m);
    mca_rcache_vmtrack_module_t *vm = (mca_rcache_vmtrack_module_t *) m;
    ck_assert_int_ne(vm->mode, VMT_OMPI_MODE_UNCACHED);   /* leave_pinned in a singleton */

    unsigned char *buf = map_pages(4);
    mca_rcache_base_registration_t *r1 = NULL, *r2 = NULL, *r3 = NULL;
    ck_assert_int_eq(REG(m, buf + 100, 1000, 0, MCA_RCACHE_ACCESS_LOCAL_WRITE, &r1), OPAL_SUCCESS);
    ck_assert_ptr_nonnull(r1);
    ck_assert_int_eq(b.nreg, 1);
    ck_assert_int_eq(b.bad_fields, 0);
    ck_assert(r1->base <= buf + 100);
    ck_assert(r1->bound >= buf + 1099);
    ck_assert_ptr_eq(r1->rcache, m);
    ck_assert(r1->access_flags & MCA_RCACHE_ACCESS_LOCAL_WRITE);
    struct fake_reg *f = (struct fake_reg *) r1;
    ck_assert_uint_eq(f->cookie, 0xC0FFEE0001ull);             /* the BTL's own field */
    ck_assert_ptr_eq(f->reg_base, r1->base);

    /* a hit inside the registered range: the same registration, no BTL call */
    ck_assert_int_eq(REG(m, buf + 200, 500, 0, 0, &r2), OPAL_SUCCESS);
    ck_assert_ptr_eq(r2, r1);
    ck_assert_int_eq(b.nreg, 1);

    ck_assert_int_eq(DEREG(m, r2), OPAL_SUCCESS);
    ck_assert_int_eq(DEREG(m, r1), OPAL_SUCCESS);
    ck_assert_int_eq(b.ndereg, 0);                              /* leave_pinned: still cached */

    ck_assert_int_eq(REG(m, buf + 100, 1000, 0, MCA_RCACHE_ACCESS_LOCAL_WRITE, &r3), OPAL_SUCCESS);
    ck_assert_ptr_eq(r3, r1);
    ck_assert_int_eq(b.nreg, 1);
    ck_assert_int_eq(DEREG(m, r3), OPAL_SUCCESS);

    /* finalizing the module deregisters what it cached */
    ck_assert_int_eq(mca_rcache_base_module_destroy(m), OPAL_SUCCESS);
    ck_assert_int_eq(b.ndereg, 1);
    ck_assert_int_eq(b.live, 0);
    munmap(buf, 4 * 4096);
}
END_TEST

START_TEST(t_access_upgrade)
{
    struct fake_btl b = {0};
    mca_rcache_base_module_t *m = make("vmtrack", "fake.0", &b);
    unsigned char *buf = map_pages(2);
    mca_rcache_base_registration_t *r1 = NULL, *r2 = NULL;
    ck_assert_int_eq(REG(m, buf, 4096, 0, MCA_RCACHE_ACCESS_LOCAL_WRITE, &r1), OPAL_SUCCESS);
    ck_assert_int_eq(b.last_access & MCA_RCACHE_ACCESS_REMOTE_WRITE, 0);
    int32_t want = MCA_RCACHE_ACCESS_REMOTE_WRITE | MCA_RCACHE_ACCESS_REMOTE_READ;
    ck_assert_int_eq(REG(m, buf, 4096, 0, want, &r2), OPAL_SUCCESS);
    ck_assert_int_eq(r2->access_flags & want, want);           /* BTL registered with them */
    ck_assert_int_eq(b.last_access & want, want);
    ck_assert_int_eq(b.nreg, 2);
    ck_assert_int_eq(DEREG(m, r1), OPAL_SUCCESS);
    ck_assert_int_eq(DEREG(m, r2), OPAL_SUCCESS);
    mca_rcache_base_module_destroy(m);
    ck_assert_int_eq(b.live, 0);
    munmap(buf, 2 * 4096);
}
END_TEST

START_TEST(t_bypass_and_btl_flags_uncached)
{
    struct fake_btl b = {0};
    mca_rcache_base_module_t *m = make("vmtrack", "fake.0", &b);
    unsigned char *buf = map_pages(2);
    mca_rcache_base_registration_t *r1 = NULL, *r2 = NULL;
    ck_assert_int_eq(REG(m, buf, 4096, MCA_RCACHE_FLAGS_CACHE_BYPASS, 0, &r1), OPAL_SUCCESS);
    ck_assert_int_eq(REG(m, buf, 4096, MCA_RCACHE_FLAGS_CACHE_BYPASS, 0, &r2), OPAL_SUCCESS);
    ck_assert_ptr_ne(r1, r2);
    ck_assert_int_eq(b.nreg, 2);
    ck_assert(r1->flags & MCA_RCACHE_FLAGS_CACHE_BYPASS);
    ck_assert_int_eq(DEREG(m, r1), OPAL_SUCCESS);
    ck_assert_int_eq(b.ndereg, 1);                              /* not kept */
    ck_assert_int_eq(DEREG(m, r2), OPAL_SUCCESS);
    ck_assert_int_eq(b.ndereg, 2);

    /* a flag the BTL interprets in register_mem reaches it, unshared */
    ck_assert_int_eq(REG(m, buf, 4096, MCA_RCACHE_FLAGS_SO_MEM, 0, &r1), OPAL_SUCCESS);
    ck_assert(b.last_flags & MCA_RCACHE_FLAGS_SO_MEM);
    ck_assert_int_eq(DEREG(m, r1), OPAL_SUCCESS);
    ck_assert_int_eq(b.ndereg, 3);

    /* PERSIST: cached and held like any registration */
    ck_assert_int_eq(REG(m, buf, 4096, MCA_RCACHE_FLAGS_PERSIST, 0, &r1), OPAL_SUCCESS);
    ck_assert_int_eq(REG(m, buf, 4096, 0, 0, &r2), OPAL_SUCCESS);
    ck_assert_ptr_eq(r1, r2);
    ck_assert_int_eq(DEREG(m, r1), OPAL_SUCCESS);
    ck_assert_int_eq(DEREG(m, r2), OPAL_SUCCESS);
    mca_rcache_base_module_destroy(m);
    ck_assert_int_eq(b.live, 0);
    munmap(buf, 2 * 4096);
}
END_TEST

START_TEST(t_bad_arguments)
{
    struct fake_btl b = {0};
    mca_rcache_base_module_t *m = make("vmtrack", "fake.0", &b);
    unsigned char *buf = map_pages(1);
    mca_rcache_base_registration_t *r = (void *) 1;
    ck_assert_int_eq(REG(m, NULL, 4096, 0, 0, &r), OPAL_ERR_BAD_PARAM);
    ck_assert_ptr_null(r);
    ck_assert_int_eq(REG(m, buf, 0, 0, 0, &r), OPAL_ERR_BAD_PARAM);
    ck_assert_int_eq(REG(m, buf, 4096, MCA_RCACHE_FLAGS_INVALID, 0, &r), OPAL_ERR_BAD_PARAM);
    ck_assert_int_eq(REG(m, buf, 4096, 0, 0x100, &r), OPAL_ERR_BAD_PARAM);
    ck_assert_int_eq(b.nreg, 0);

    /* unmapped memory: an error reaches the caller, nothing stays registered */
    ck_assert_int_eq(REG(m, buf, 4096, 0, 0, &r), OPAL_SUCCESS);   /* warm the cache up */
    ck_assert_int_eq(DEREG(m, r), OPAL_SUCCESS);
    int live = b.live;
    size_t hole_len = 256 * 4096;
    unsigned char *hole = mmap(NULL, hole_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    munmap(hole, hole_len);
    ck_assert_int_ne(REG(m, hole + hole_len / 2, 4096, 0, 0, &r), OPAL_SUCCESS);
    ck_assert_int_eq(b.live, live);

    /* the BTL's own error comes back unchanged */
    unsigned char *other = map_pages(1);
    b.fail_with = OPAL_ERR_NOT_AVAILABLE;
    ck_assert_int_eq(REG(m, other, 4096, 0, 0, &r), OPAL_ERR_NOT_AVAILABLE);
    ck_assert_int_eq(b.live, live);
    munmap(other, 4096);

    /* a registration this module never handed out is refused, not a crash */
    struct fake_btl other_btl = {0};
    mca_rcache_base_module_t *m2 = make("vmtrack", "fake.other", &other_btl);
    ck_assert_int_eq(REG(m2, buf, 4096, 0, 0, &r), OPAL_SUCCESS);
    ck_assert_int_eq(DEREG(m, r), OPAL_ERR_BAD_PARAM);
    ck_assert_int_eq(DEREG(m2, r), OPAL_SUCCESS);
    ck_assert_int_eq(DEREG(m, NULL), OPAL_ERR_BAD_PARAM);
    mca_rcache_base_module_destroy(m2);
    mca_rcache_base_module_destroy(m);
    ck_assert_int_eq(b.live, 0);
    munmap(buf, 4096);
}
END_TEST

START_TEST(t_leave_pinned_off_uncached)
{
    int saved = opal_leave_pinned;
    opal_leave_pinned = 0;                                      /* --mca mpi_leave_pinned 0 */
    struct fake_btl b = {0};
    mca_rcache_base_module_t *m = make("vmtrack", "fake.lp0", &b);
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(((mca_rcache_vmtrack_module_t *) m)->mode, VMT_OMPI_MODE_UNCACHED);
    unsigned char *buf = map_pages(1);
    mca_rcache_base_registration_t *r = NULL;
    ck_assert_int_eq(REG(m, buf, 4096, 0, 0, &r), OPAL_SUCCESS);
    ck_assert_int_eq(DEREG(m, r), OPAL_SUCCESS);
    ck_assert_int_eq(b.ndereg, 1);                              /* nothing left pinned */
    mca_rcache_base_module_destroy(m);
    opal_leave_pinned = saved;
    munmap(buf, 4096);
}
END_TEST

static int events_in_range, opal_events_in_range;
static unsigned char *watched;
static size_t watched_len;
static bool in_watched(const void *addr, size_t len)
{
    const unsigned char *a = addr;
    return a < watched + watched_len && a + len > watched;
}
static void count_event(void *arg, const void *addr, size_t len)
{
    (void) arg;
    if (in_watched(addr, len))
        __atomic_fetch_add(&events_in_range, 1, __ATOMIC_RELAXED);
}
/* an opal_mem_hooks user like grdma, common_ucx or osc */
static void count_opal_event(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) cbdata;
    (void) from_alloc;
    if (in_watched(buf, len))
        __atomic_fetch_add(&opal_events_in_range, 1, __ATOMIC_RELAXED);
}

/* grdma and two vmtrack modules register the same buffer; munmap through libc. Every cache
 * must drop it (the next registration of the same range reaches each BTL again), and the
 * shared vmtrack cache must see the event exactly once although Open MPI's hook calls every
 * vmtrack module's invalidate_range. */
START_TEST(t_event_reaches_every_cache_once)
{
    struct fake_btl bg = {0}, b1 = {0}, b2 = {0};
    mca_rcache_base_module_t *g = make("grdma", "fake.g", &bg);
    mca_rcache_base_module_t *v1 = make("vmtrack", "fake.v1", &b1);
    mca_rcache_base_module_t *v2 = make("vmtrack", "fake.v2", &b2);
    ck_assert_ptr_nonnull(g);
    ck_assert_ptr_nonnull(v1);
    ck_assert_ptr_nonnull(v2);
    const char *tracker = vmt_cache_tracker(vmt_shared());
    fprintf(stderr, "[events] vmtrack tracker: %s\n", tracker);

    watched_len = 16 * 4096;
    watched = map_pages(16);
    ck_assert_int_eq(vmt_subscribe(vmt_shared(), count_event, NULL), 0);
    ck_assert_int_eq(opal_mem_hooks_register_release(count_opal_event, NULL), OPAL_SUCCESS);
    mca_rcache_base_registration_t *rg, *r1, *r2;
    ck_assert_int_eq(REG(g, watched, watched_len, 0, 0, &rg), OPAL_SUCCESS);
    ck_assert_int_eq(REG(v1, watched, watched_len, 0, 0, &r1), OPAL_SUCCESS);
    ck_assert_int_eq(REG(v2, watched, watched_len, 0, 0, &r2), OPAL_SUCCESS);
    ck_assert_int_eq(DEREG(g, rg), OPAL_SUCCESS);
    ck_assert_int_eq(DEREG(v1, r1), OPAL_SUCCESS);
    ck_assert_int_eq(DEREG(v2, r2), OPAL_SUCCESS);
    ck_assert_int_eq(bg.nreg + b1.nreg + b2.nreg, 3);
    ck_assert_int_eq(bg.ndereg + b1.ndereg + b2.ndereg, 0);   /* all cached */

    struct vmt_stats s0 = {.sz = sizeof(s0)}, s1 = {.sz = sizeof(s1)};
    vmt_stats_get(vmt_shared(), &s0);
    ck_assert_int_eq(munmap(watched, watched_len), 0);
    /* whoever patches libc (Open MPI's patcher, or vmtrack's hooks forwarding to Open MPI),
     * every opal_mem_hooks user sees the unmap once */
    ck_assert_int_eq(opal_events_in_range, 1);
    mca_rcache_vmtrack_module_t *m1 = (mca_rcache_vmtrack_module_t *) v1;
    mca_rcache_vmtrack_module_t *m2 = (mca_rcache_vmtrack_module_t *) v2;
    ck_assert_int_eq(m1->mode, m2->mode);
    if (VMT_OMPI_MODE_OPAL == m1->mode) {
        /* Open MPI's hook called both modules' invalidate_range; one forwarded it */
        ck_assert_int_eq(events_in_range, 1);                   /* once, not once per module */
        ck_assert_uint_eq(m1->n_forwarded + m2->n_forwarded, 1);
        vmt_stats_get(vmt_shared(), &s1);
        ck_assert_uint_ge(s1.invalidations - s0.invalidations, 1);
    } else if (0 == strcmp(tracker, "hooks")) {
        /* vmtrack's hooks: seen in the unmapping thread, once; the forwarder gave it to Open
         * MPI (counted above), and nothing came back to the modules to forward */
        ck_assert_int_eq(events_in_range, 1);
        ck_assert_uint_eq(m1->n_forwarded + m2->n_forwarded, 0);
    } else {
        /* vmtrack's own tracker (kmod) reports it; Open MPI's hook events are not forwarded
         * (they would count it twice). kmod reports asynchronously: checked below. */
        ck_assert_uint_eq(m1->n_forwarded + m2->n_forwarded, 0);
    }

    /* the same address again: every cache must register anew */
    void *again = mmap(watched, watched_len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    ck_assert_ptr_eq(again, watched);
    ck_assert_int_eq(REG(g, watched, watched_len, 0, 0, &rg), OPAL_SUCCESS);
    ck_assert_int_eq(REG(v1, watched, watched_len, 0, 0, &r1), OPAL_SUCCESS);
    ck_assert_int_eq(REG(v2, watched, watched_len, 0, 0, &r2), OPAL_SUCCESS);
    ck_assert_int_eq(bg.nreg, 2);
    ck_assert_int_eq(b1.nreg, 2);
    ck_assert_int_eq(b2.nreg, 2);
    /* and the old registrations were deregistered (out of the hook, at the next call) */
    ck_assert_int_eq(bg.ndereg, 1);
    ck_assert_int_eq(b1.ndereg, 1);
    ck_assert_int_eq(b2.ndereg, 1);
    ck_assert_int_eq(bg.bad_fields + b1.bad_fields + b2.bad_fields, 0);
    ck_assert_int_le(events_in_range, 1);                       /* never twice */
    vmt_stats_get(vmt_shared(), &s1);
    ck_assert_uint_ge(s1.invalidations - s0.invalidations, 1);
    DEREG(g, rg);
    DEREG(v1, r1);
    DEREG(v2, r2);
    vmt_unsubscribe(vmt_shared(), count_event, NULL);
    opal_mem_hooks_unregister_release(count_opal_event);
    mca_rcache_base_module_destroy(v2);
    mca_rcache_base_module_destroy(v1);
    mca_rcache_base_module_destroy(g);
    ck_assert_int_eq(b1.live + b2.live, 0);
    munmap(watched, watched_len);
}
END_TEST

/* A held registration survives an unmap (no deregistration under the BTL's feet) and is
 * deregistered at its last deregister. */
START_TEST(t_held_registration_survives_unmap)
{
    struct fake_btl b = {0};
    mca_rcache_base_module_t *m = make("vmtrack", "fake.h", &b);
    unsigned char *buf = map_pages(4);
    mca_rcache_base_registration_t *r = NULL, *r2 = NULL;
    ck_assert_int_eq(REG(m, buf, 4 * 4096, 0, 0, &r), OPAL_SUCCESS);
    ck_assert_int_eq(munmap(buf, 4 * 4096), 0);                 /* no _exit, no dereg */
    ck_assert_int_eq(b.ndereg, 0);
    ck_assert_uint_eq(((struct fake_reg *) r)->cookie, 0xC0FFEE0001ull);
    void *again = mmap(buf, 4 * 4096, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    ck_assert_ptr_eq(again, buf);
    ck_assert_int_eq(REG(m, buf, 4 * 4096, 0, 0, &r2), OPAL_SUCCESS);
    ck_assert_ptr_ne(r2, r);                                    /* not the stale one */
    ck_assert_int_eq(b.nreg, 2);
    ck_assert_int_eq(DEREG(m, r), OPAL_SUCCESS);
    ck_assert_int_eq(b.ndereg, 1);                              /* dropped: freed at last put */
    ck_assert_int_eq(DEREG(m, r2), OPAL_SUCCESS);
    mca_rcache_base_module_destroy(m);
    ck_assert_int_eq(b.live, 0);
    munmap(buf, 4 * 4096);
}
END_TEST

/* Open MPI finalizes rcache modules when it closes the framework; a registration a BTL still
 * holds then is deregistered at its last deregister, not under the BTL, and the module stays
 * valid for that call. */
START_TEST(t_finalize_with_held_registration)
{
    struct fake_btl b = {0};
    mca_rcache_base_module_t *m = make("vmtrack", "fake.fin", &b);
    unsigned char *buf = map_pages(2);
    mca_rcache_base_registration_t *r = NULL, *cached = NULL;
    ck_assert_int_eq(REG(m, buf, 4096, 0, 0, &r), OPAL_SUCCESS);
    ck_assert_int_eq(REG(m, buf + 4096, 4096, MCA_RCACHE_FLAGS_CACHE_BYPASS, 0, &cached),
                     OPAL_SUCCESS);
    ck_assert_int_eq(mca_rcache_base_module_destroy(m), OPAL_SUCCESS);
    ck_assert_int_eq(b.live, 2);                                /* both still registered */
    ck_assert_uint_eq(((struct fake_reg *) r)->cookie, 0xC0FFEE0001ull);
    ck_assert_int_eq(DEREG(m, r), OPAL_SUCCESS);
    ck_assert_int_eq(DEREG(m, cached), OPAL_SUCCESS);
    ck_assert_int_eq(b.live, 0);
    ck_assert_int_eq(b.bad_fields, 0);
    munmap(buf, 2 * 4096);
}
END_TEST

static bool kmod_usable(void)
{
    return 0 == access("/dev/vmtrack", R_OK | W_OK);
}

static const char *const patched_fns[] = {"mmap", "munmap", "mremap", "madvise", "brk",
                                          "shmat", "shmdt"};

/* The default mode without vmtrack.ko: vmtrack's hooks took over at the component's open, Open
 * MPI's patcher was left out of the memory framework when a module creation opened it, the
 * memory-hook support is declared, and every entry Open MPI's patcher would patch jumps into
 * libvmtrack. */
START_TEST(t_takeover_default_mode)
{
    mca_rcache_vmtrack_component_t *comp = vmt_ompi_test_component();
    ck_assert_ptr_nonnull(comp);
    fprintf(stderr, "[takeover] %s\n", comp->takeover_note);
    if (kmod_usable()) {
        ck_assert_msg(!comp->took_over, "took over although vmtrack.ko is usable");
        ck_assert_ptr_nonnull(strstr(comp->takeover_note, "vmtrack.ko is usable"));
        return;
    }
    ck_assert_msg(comp->took_over, "no takeover: %s", comp->takeover_note);
    ck_assert_str_eq(vmt_cache_tracker(vmt_shared()), "hooks");
    ck_assert_ptr_eq(comp->cache, vmt_shared());

    struct fake_btl b = {0};
    mca_rcache_base_module_t *g = make("grdma", "fake.g", &b);   /* opens the memory framework */
    ck_assert_ptr_nonnull(g);
    ck_assert(mca_base_framework_is_open(&opal_memory_base_framework));
    mca_base_component_list_item_t *cli;
    OPAL_LIST_FOREACH(cli, &opal_memory_base_framework.framework_components,
                      mca_base_component_list_item_t) {
        ck_assert_msg(0 != strcmp(cli->cli_component->mca_component_name, "patcher"),
                      "Open MPI's patcher is in the memory framework");
    }
    int idx = mca_base_var_find("opal", "memory", NULL, NULL);
    ck_assert_int_ge(idx, 0);
    char **value = NULL;
    ck_assert_int_eq(mca_base_var_get_value(idx, &value, NULL, NULL), OPAL_SUCCESS);
    ck_assert_str_eq(*value, "^patcher");
    const int both = OPAL_MEMORY_FREE_SUPPORT | OPAL_MEMORY_MUNMAP_SUPPORT;
    ck_assert_int_eq(opal_mem_hooks_support_level() & both, both);
    ck_assert_int_eq(opal_leave_pinned, 1);                     /* grdma caches */

    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    ck_assert_ptr_nonnull(libc);
    for (size_t i = 0; i < sizeof(patched_fns) / sizeof(patched_fns[0]); i++) {
        const char *owner = vmt_ompi_entry_owner(dlsym(libc, patched_fns[i]));
        fprintf(stderr, "[takeover] %s -> %s\n", patched_fns[i], owner);
        ck_assert_msg(strstr(owner, "libvmtrack"), "%s() jumps to %s", patched_fns[i], owner);
    }
    dlclose(libc);
    mca_rcache_base_module_destroy(g);
}
END_TEST

/* What another binary patcher does to libc's munmap: an absolute jump to its own function. */
static int other_patchers_munmap(void *addr, size_t len)
{
    return (int) syscall(SYS_munmap, addr, len);
}

static void patch_munmap_elsewhere(void *libc)
{
    unsigned char *entry = dlsym(libc, "munmap");
    ck_assert_ptr_nonnull(entry);
    uintptr_t page = (uintptr_t) entry & ~(uintptr_t) 4095;
    ck_assert_int_eq(mprotect((void *) page, 8192, PROT_READ | PROT_WRITE | PROT_EXEC), 0);
    uintptr_t target = (uintptr_t) other_patchers_munmap;
    static const unsigned char jmp_rip_0[6] = {0xff, 0x25, 0, 0, 0, 0};   /* jmp *0(%rip) */
    memcpy(entry + 6, &target, sizeof(target));
    memcpy(entry, jmp_rip_0, sizeof(jmp_rip_0));
    ck_assert_int_eq(mprotect((void *) page, 8192, PROT_READ | PROT_EXEC), 0);
}

/* A library that patches libc after the takeover: the next registration miss warns, once,
 * that Open MPI's consumers are cut off. The library is UCX's ucm told to patch in bistro
 * mode where UCX is not loaded yet (Open MPI 4.1); where it is loaded at exec (Open MPI 5
 * links it into libopen-pal, started in reloc mode) its loading cannot be repeated, and the
 * test writes the same kind of jump itself. */
START_TEST(t_takeover_guard_warns_once)
{
    mca_rcache_vmtrack_component_t *comp = vmt_ompi_test_component();
    ck_assert_ptr_nonnull(comp);
    if (!comp->took_over) {
        fprintf(stderr, "[guard] not checked: no takeover here (%s)\n", comp->takeover_note);
        return;
    }
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    void *ucs = dlopen("libucs.so.0", RTLD_NOW | RTLD_NOLOAD);
    if (ucs) {
        patch_munmap_elsewhere(libc);
    } else {
        setenv("UCX_MEM_MMAP_HOOK_MODE", "bistro", 1);
        ucs = dlopen("libucs.so.0", RTLD_NOW);
#ifdef VMT_OMPI_TEST_UCX
        ck_assert_msg(ucs, "UCX was found at configure time but: %s", dlerror());
#else
        if (NULL == ucs) {   /* built without UCX: nothing here patches libc on demand */
            fprintf(stderr, "[guard] not checked (built without UCX): %s\n", dlerror());
            return;
        }
#endif
    }
    const char *owner = vmt_ompi_entry_owner(dlsym(libc, "munmap"));
    fprintf(stderr, "[guard] after the other patcher: munmap -> %s\n", owner);
    ck_assert_ptr_null(strstr(owner, "libvmtrack"));            /* ucm did patch over us */

    char log[] = "/tmp/vmt_ompi_guard.XXXXXX";
    int fd = mkstemp(log);
    ck_assert_int_ge(fd, 0);
    unlink(log);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    struct fake_btl b = {0};
    mca_rcache_base_module_t *m = make("vmtrack", "fake.guard", &b);
    unsigned char *buf = map_pages(4);
    mca_rcache_base_registration_t *r = NULL;
    for (int i = 0; i < 3; i++) {                               /* three misses */
        ck_assert_int_eq(REG(m, buf + i * 4096, 4096, MCA_RCACHE_FLAGS_CACHE_BYPASS, 0, &r),
                         OPAL_SUCCESS);
        DEREG(m, r);
        ck_assert_int_eq(REG(m, buf + i * 4096, 4096, 0, 0, &r), OPAL_SUCCESS);
        DEREG(m, r);
    }
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char text[8192] = "";
    ssize_t n = pread(fd, text, sizeof(text) - 1, 0);
    close(fd);
    ck_assert_int_gt(n, 0);
    text[n] = '\0';
    fprintf(stderr, "%s", text);
    const char *w = strstr(text, "was patched again after vmtrack took over");
    ck_assert_msg(w, "no warning");
    ck_assert_ptr_null(strstr(w + 1, "was patched again after vmtrack took over"));   /* once */
    ck_assert_ptr_nonnull(strstr(text, "--mca memory patcher"));
    mca_rcache_base_module_destroy(m);
    munmap(buf, 4 * 4096);
}
END_TEST

/* What asks for "grdma" by name (btl ofi, btl uct, smsc knem) gets: grdma where the rcache
 * selection keeps it; where it leaves it out (--mca rcache vmtrack), on Open MPI 5.0 and later
 * a vmtrack module on the one cache, on 4.1 (or with rcache_vmtrack_serve_grdma false) nothing
 * (the component warns instead). test/ompi/grdma_served.sh runs this case with
 * OMPI_MCA_rcache=vmtrack, with and without serve_grdma false. */
START_TEST(t_grdma_served)
{
    const char *sel = getenv("OMPI_MCA_rcache");
    bool grdma_selected = vmt_ompi_selection_allows(sel, "grdma");
    struct fake_btl b = {0}, bv = {0};
    mca_rcache_base_module_t *g = make("grdma", "ofi.fake", &b);
    fprintf(stderr, "[grdma] --mca rcache %s: \"grdma\" is served by %s\n", sel ? sel : "",
            g ? g->rcache_component->rcache_version.mca_component_name : "nobody");
    if (grdma_selected) {
        ck_assert_ptr_nonnull(g);
        ck_assert_str_eq(g->rcache_component->rcache_version.mca_component_name, "grdma");
        mca_rcache_base_module_destroy(g);
        return;
    }
    const char *serve = getenv("OMPI_MCA_rcache_vmtrack_serve_grdma");
    if (!VMT_OMPI_SERVES_GRDMA || (serve && (0 == strcmp(serve, "0") ||
                                             0 == strcmp(serve, "false")))) {
        ck_assert_ptr_null(g);
        return;
    }
    ck_assert_ptr_nonnull(g);
    mca_rcache_base_module_t *v = make("vmtrack", "fake.v", &bv);
    ck_assert_ptr_nonnull(v);
    ck_assert_str_eq(g->rcache_component->rcache_version.mca_component_name, "vmtrack");
    ck_assert_ptr_eq((void *) g->rcache_register, (void *) v->rcache_register);
    unsigned char *buf = map_pages(4);
    mca_rcache_base_registration_t *r1 = NULL, *r2 = NULL;
    ck_assert_int_eq(REG(g, buf, 4 * 4096, 0, MCA_RCACHE_ACCESS_ANY, &r1), OPAL_SUCCESS);
    ck_assert_int_eq(REG(g, buf + 4096, 4096, 0, MCA_RCACHE_ACCESS_ANY, &r2), OPAL_SUCCESS);
    ck_assert_int_eq(b.nreg, 1);                       /* the second one was a cache hit */
    ck_assert_ptr_eq(r1, r2);
    DEREG(g, r2);
    DEREG(g, r1);
    munmap(buf, 4 * 4096);
    mca_rcache_base_module_destroy(v);
    mca_rcache_base_module_destroy(g);
    ck_assert_int_eq(b.ndereg, 1);                     /* deregistered through the BTL */
    ck_assert_int_eq(b.bad_fields, 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("ompi-rcache");
    TCase *tc = tcase_create("framework");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, t_component_selected);
    tcase_add_test(tc, t_register_hit_refcount);
    tcase_add_test(tc, t_access_upgrade);
    tcase_add_test(tc, t_bypass_and_btl_flags_uncached);
    tcase_add_test(tc, t_bad_arguments);
    tcase_add_test(tc, t_leave_pinned_off_uncached);
    tcase_add_test(tc, t_event_reaches_every_cache_once);
    tcase_add_test(tc, t_held_registration_survives_unmap);
    tcase_add_test(tc, t_finalize_with_held_registration);
    tcase_add_test(tc, t_takeover_default_mode);
    tcase_add_test(tc, t_takeover_guard_warns_once);
    suite_add_tcase(s, tc);
    TCase *grdma = tcase_create("grdma");
    tcase_set_timeout(grdma, 60);
    tcase_add_test(grdma, t_grdma_served);
    suite_add_tcase(s, grdma);
    return s;
}

int main(int argc, char **argv)
{
    if (0 != vmt_ompi_test_mpi_init(&argc, &argv))
        return 99;
    int failed = check_run(suite(), CK_FORK);
    MPI_Finalize();
    return failed ? 1 : 0;
}
