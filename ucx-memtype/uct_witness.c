/* What UCT registers: a witness for a range a job names, so that a stale-page test can prove
 * its buffer was registered (zero-copy) and not sent through UCX's bounce buffers.
 *
 * libucp registers memory through uct_md_mem_reg (every release) and uct_md_mem_reg_v2 (1.14
 * on; 1.18's v1 calls v2 through the PLT), both reached through the PLT from libucp and
 * libuct, so interposing them sees every registration. The module only counts and forwards
 * with the caller's arguments: the signatures of both are the same in every release that has
 * them, and the v2 parameter struct is never read. */
#define _GNU_SOURCE
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "uct_witness.h"
#include "ucx_release.h"
#include "vmtrack_ucx.h"

typedef ucs_status_t (*reg_v1_fn)(void *md, void *address, size_t length, unsigned flags,
                                  void **memh_p);
typedef ucs_status_t (*reg_v2_fn)(void *md, void *address, size_t length, const void *params,
                                  void **memh_p);

static struct {
    _Atomic(reg_v1_fn) v1;
    _Atomic(reg_v2_fn) v2;
    _Atomic uintptr_t start, end;   /* the named range; end 0: none */
    _Atomic uint64_t all, covering;
} w;

/* 1.18's v1 calls v2 through the PLT: one registration, counted once */
static __thread int t_in_v1;

static void count(void *address, size_t length)
{
    uintptr_t a = (uintptr_t)address, end = atomic_load_explicit(&w.end, memory_order_acquire);

    atomic_fetch_add_explicit(&w.all, 1, memory_order_relaxed);
    if (end && a <= atomic_load_explicit(&w.start, memory_order_relaxed) && a + length >= end)
        atomic_fetch_add_explicit(&w.covering, 1, memory_order_relaxed);
}

VMT_UCX_EXPORT ucs_status_t uct_md_mem_reg(void *md, void *address, size_t length,
                                           unsigned flags, void **memh_p)
{
    reg_v1_fn real = atomic_load_explicit(&w.v1, memory_order_acquire);
    ucs_status_t st;

    if (!real) {
        real = (reg_v1_fn)dlsym(RTLD_NEXT, "uct_md_mem_reg");
        if (!real)
            return UCS_ERR_UNSUPPORTED;
        atomic_store_explicit(&w.v1, real, memory_order_release);
    }
    t_in_v1++;
    st = real(md, address, length, flags, memh_p);
    t_in_v1--;
    if (st == UCS_OK)
        count(address, length);
    return st;
}

VMT_UCX_EXPORT ucs_status_t uct_md_mem_reg_v2(void *md, void *address, size_t length,
                                              const void *params, void **memh_p)
{
    reg_v2_fn real = atomic_load_explicit(&w.v2, memory_order_acquire);
    ucs_status_t st;

    if (!real) {
        real = (reg_v2_fn)dlsym(RTLD_NEXT, "uct_md_mem_reg_v2");
        if (!real)
            return UCS_ERR_UNSUPPORTED;
        atomic_store_explicit(&w.v2, real, memory_order_release);
    }
    st = real(md, address, length, params, memh_p);
    if (st == UCS_OK && !t_in_v1)
        count(address, length);
    return st;
}

VMT_UCX_EXPORT int vmt_ucx_witness(const void *addr, size_t len)
{
    uintptr_t a = (uintptr_t)addr;

    if (len && a + len < a)
        return -EINVAL;
    atomic_store_explicit(&w.end, 0, memory_order_release);
    atomic_store_explicit(&w.covering, 0, memory_order_relaxed);
    atomic_store_explicit(&w.start, a, memory_order_relaxed);
    if (len)
        atomic_store_explicit(&w.end, a + len, memory_order_release);
    return 0;
}

void ucx_witness_counts(uint64_t *all, uint64_t *covering)
{
    *all = atomic_load(&w.all);
    *covering = atomic_load(&w.covering);
}
