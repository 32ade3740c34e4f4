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
void md_lock(struct md_lock *l);
void md_unlock(struct md_lock *l);
/* In the child of fork(), for each lock: the one thread there may take a bias the parent's
 * threads had. */
void md_lock_after_fork_child(struct md_lock *l);

#endif
