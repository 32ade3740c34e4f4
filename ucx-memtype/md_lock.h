/* The lock that serialises one UCX rcache's mem_reg and mem_dereg (rcache_native.c), as
 * UCX's page-table lock does: MD code may rely on it, and UCX's own ucs_get_mem_prot answers
 * wrong from two threads at once. The thread that holds it may take it again (an md whose
 * callbacks come back to its rcache).
 *
 * Only misses take it, twice (the registration, and the deregistration of what the miss
 * evicts), and most rcaches are only ever used by one thread (an MPI rank's main thread). So
 * the lock belongs to the first thread that takes it: that thread takes and releases it with
 * plain stores, no atomic read-modify-write (whose wait for the miss's stores to drain was
 * 7% of a module miss). The first other thread to want it withdraws that bias for good, with
 * one process-wide memory barrier (membarrier), after which every thread takes it with a
 * compare-and-swap and releases it with a store; a waiter spins a little, then yields, since
 * an md call may take milliseconds (ibv_reg_mr of a large buffer). Where membarrier cannot be
 * used the lock is never biased. */
#ifndef VMTRACK_UCX_MD_LOCK_H
#define VMTRACK_UCX_MD_LOCK_H

#include <stdatomic.h>
#include <stdint.h>

struct md_lock {
    _Atomic uintptr_t owner;        /* the holder's md_lock_me() once unbiased, 0 when free */
    _Atomic uintptr_t bias;         /* the thread it is biased to, 0 nobody yet, MD_UNBIASED */
    _Atomic int bias_inside;        /* the biased thread holds it */
    _Atomic int revoking;           /* set for good by the first other thread */
    unsigned depth;                 /* written by the holder only */
};

/* A free lock; biased to its first user where membarrier works in this process. */
void md_lock_init(struct md_lock *l);

/* The calling thread's name for the lock: the address of a thread-local byte, one
 * instruction, where pthread_self() is a call into libc. */
extern __thread char md_lock_t_me __attribute__((tls_model("initial-exec")));
static inline uintptr_t md_lock_me(void) { return (uintptr_t)&md_lock_t_me; }

/* The biased thread's way in: a store and a load, the fence between them left to the
 * withdrawal's barrier (the compiler's part of it is here). The load is an acquire so that the
 * section's own loads stay after it. 0 if the bias is being withdrawn. */
static inline int md_lock_enter_biased(struct md_lock *l)
{
    atomic_store_explicit(&l->bias_inside, 1, memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst);
    if (!atomic_load_explicit(&l->revoking, memory_order_acquire))
        return 1;
    atomic_store_explicit(&l->bias_inside, 0, memory_order_release);
    return 0;
}

/* Everything md_lock does but its common case. */
void md_lock_slow(struct md_lock *l);

/* Inline, both: a miss takes and releases the lock twice, and the calls were as much as the
 * biased thread's loads and stores themselves. */
static inline void md_lock(struct md_lock *l)
{
    if (atomic_load_explicit(&l->bias, memory_order_acquire) == md_lock_me() &&
        !atomic_load_explicit(&l->bias_inside, memory_order_relaxed) &&
        md_lock_enter_biased(l)) {
        l->depth = 1;
        return;
    }
    md_lock_slow(l);
}

static inline void md_unlock(struct md_lock *l)
{
    if (--l->depth)
        return;
    /* while the biased thread holds it so, the bias stays (a withdrawal waits) */
    if (atomic_load_explicit(&l->bias, memory_order_relaxed) == md_lock_me() &&
        atomic_load_explicit(&l->bias_inside, memory_order_relaxed))
        atomic_store_explicit(&l->bias_inside, 0, memory_order_release);
    else
        atomic_store_explicit(&l->owner, 0, memory_order_release);
}
/* In the child of fork(), for each lock: the one thread there may take a bias the parent's
 * threads had. */
void md_lock_after_fork_child(struct md_lock *l);

#endif
