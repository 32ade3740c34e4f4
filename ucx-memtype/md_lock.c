/* A recursive lock biased to its first user (md_lock.h). */
#define _GNU_SOURCE
#include "config.h"

#include "md_lock.h"

#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>

/* No thread's name: they are addresses of a thread-local byte. */
#define MD_UNBIASED ((uintptr_t)1)

__thread char md_lock_t_me __attribute__((tls_model("initial-exec")));

static pthread_once_t barrier_once = PTHREAD_ONCE_INIT;
static int barrier_ok;
static pthread_mutex_t revoke_lock = PTHREAD_MUTEX_INITIALIZER;

static long membarrier_call(int cmd)
{
    return syscall(SYS_membarrier, cmd, 0, 0);
}

/* libvmtrack registers the process at load; registering again costs nothing then. */
static void barrier_setup(void)
{
    long cmds = membarrier_call(MEMBARRIER_CMD_QUERY);
    barrier_ok = cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
                 membarrier_call(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
}

void md_lock_init(struct md_lock *l)
{
    pthread_once(&barrier_once, barrier_setup);
    atomic_init(&l->owner, 0);
    atomic_init(&l->bias, barrier_ok ? 0 : MD_UNBIASED);
    atomic_init(&l->bias_inside, 0);
    atomic_init(&l->revoking, 0);
    l->depth = 0;
}

static void pause_or_yield(unsigned *spins)
{
    if (++*spins < 128) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    } else {
        sched_yield();
    }
}

/* Every CPU that runs a thread of this process fences before this returns. */
static void barrier_all_threads(void)
{
    if (membarrier_call(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0)
        return;
    /* registered when the lock was biased; a child of fork() may need to again */
    if (membarrier_call(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0 &&
        membarrier_call(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0)
        return;
    /* without the barrier the biased thread could be inside unseen: two md calls at once */
    fprintf(stderr, "vmtrack-ucx: membarrier failed (%s) after it had worked: cannot take an "
            "rcache's lock from a second thread safely\n", strerror(errno));
    abort();
}

/* The first other thread that wants the lock withdraws the bias, for good: it says so, makes
 * every thread of the process fence (the biased thread's store of bias_inside and its load of
 * revoking are then ordered as a full fence would order them), and waits for the biased
 * thread to leave. */
static void revoke_bias(struct md_lock *l)
{
    unsigned spins = 0;

    pthread_mutex_lock(&revoke_lock);
    if (atomic_load(&l->bias) != MD_UNBIASED) {
        atomic_store(&l->revoking, 1);
        barrier_all_threads();
        while (atomic_load_explicit(&l->bias_inside, memory_order_acquire))
            pause_or_yield(&spins);
        atomic_store_explicit(&l->bias, MD_UNBIASED, memory_order_release);
    }
    pthread_mutex_unlock(&revoke_lock);
}

static void lock_unbiased(struct md_lock *l, uintptr_t me)
{
    unsigned spins = 0;

    if (atomic_load_explicit(&l->owner, memory_order_relaxed) == me) {
        l->depth++;                 /* only this thread ever stores me there */
        return;
    }
    for (;;) {
        uintptr_t expect = 0;
        if (atomic_load_explicit(&l->owner, memory_order_relaxed) == 0 &&
            atomic_compare_exchange_weak_explicit(&l->owner, &expect, me, memory_order_acquire,
                                                  memory_order_relaxed))
            break;
        pause_or_yield(&spins);
    }
    l->depth = 1;
}

void md_lock_slow(struct md_lock *l)
{
    uintptr_t me = md_lock_me();
    uintptr_t bias = atomic_load_explicit(&l->bias, memory_order_acquire);
    unsigned spins = 0;

    if (bias == 0) {                /* the first user takes the bias */
        uintptr_t expect = 0;
        bias = atomic_compare_exchange_strong(&l->bias, &expect, me) ? me : expect;
    }
    if (bias == me) {
        if (atomic_load_explicit(&l->bias_inside, memory_order_relaxed)) {
            l->depth++;             /* only this thread sets it */
            return;
        }
        if (md_lock_enter_biased(l)) {
            l->depth = 1;
            return;
        }
        while (atomic_load_explicit(&l->bias, memory_order_acquire) == me)
            pause_or_yield(&spins); /* another thread is withdrawing the bias */
    } else if (bias != MD_UNBIASED) {
        revoke_bias(l);
    }
    lock_unbiased(l, me);
}

void md_lock_after_fork_child(struct md_lock *l)
{
    /* Only this thread exists. A bias to a thread of the parent that was not inside, or a
     * withdrawal it was in, goes to this one; a thread that was inside holds it for good, as it
     * would hold an unbiased lock. The parent's revokers are gone with their mutex. */
    pthread_mutex_t unlocked = PTHREAD_MUTEX_INITIALIZER;
    uintptr_t bias = atomic_load(&l->bias);

    memcpy(&revoke_lock, &unlocked, sizeof(unlocked));
    if (bias != MD_UNBIASED && bias != 0 && !atomic_load(&l->bias_inside)) {
        atomic_store(&l->revoking, 0);
        atomic_store(&l->bias, md_lock_me());
    }
}
