/* The UCX module's rcache lock (ucx-memtype/md_lock.c), compiled in: one holder at a time,
 * across the bias its first user takes and the withdrawal of that bias by a second thread,
 * with recursion, and in a child of fork(). Each case runs in a process of its own (Check),
 * so each starts with a lock nobody has biased. */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lib/check_run.h"
#include "md_lock.h"

#define UNBIASED ((uintptr_t)1)     /* md_lock.c's MD_UNBIASED */

static struct md_lock lock;
static atomic_int inside;           /* holders right now: never more than one */
static long counter;                /* changed only under the lock, not atomically */
static atomic_int biased_ready;

/* One section: alone in it, a non-atomic increment with a yield in the middle now and then. */
static void section(unsigned i)
{
    md_lock(&lock);
    ck_assert_int_eq(atomic_fetch_add(&inside, 1), 0);
    long c = counter;
    if (i % 64 == 0)
        sched_yield();
    counter = c + 1;
    atomic_fetch_sub(&inside, 1);
    md_unlock(&lock);
}

enum { ROUNDS = 200000 };

static void *first_user(void *arg)
{
    (void)arg;
    section(0);                     /* takes the bias */
    atomic_store(&biased_ready, 1);
    for (unsigned i = 1; i < ROUNDS; i++)
        section(i);
    return NULL;
}

static void *second_user(void *arg)
{
    (void)arg;
    while (!atomic_load(&biased_ready))
        sched_yield();
    for (unsigned i = 0; i < ROUNDS; i++)
        section(i);
    return NULL;
}

START_TEST(one_holder_across_the_bias_and_its_withdrawal)
{
    md_lock_init(&lock);
    pthread_t a, b;
    ck_assert_int_eq(pthread_create(&a, NULL, first_user, NULL), 0);
    ck_assert_int_eq(pthread_create(&b, NULL, second_user, NULL), 0);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    ck_assert_int_eq(counter, 2L * ROUNDS);
    /* biased to a first user (where membarrier works), withdrawn by the second */
    ck_assert_uint_eq(atomic_load(&lock.bias), UNBIASED);
    printf("md_lock: %ld sections of two threads, the lock %s\n", counter,
           atomic_load(&lock.revoking) ? "biased to the first, then withdrawn"
                                       : "never biased (no membarrier here)");
}
END_TEST

/* The biased thread holds it twice over: a second thread gets in only after both unlocks. */
static void *wants_it(void *arg)
{
    atomic_int *got = arg;
    md_lock(&lock);
    atomic_store(got, 1);
    md_unlock(&lock);
    return NULL;
}

START_TEST(recursion_holds_it_until_the_last_unlock)
{
    md_lock_init(&lock);
    md_lock(&lock);
    md_lock(&lock);
    atomic_int got = 0;
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, wants_it, &got), 0);
    usleep(50 * 1000);
    ck_assert_int_eq(atomic_load(&got), 0);
    md_unlock(&lock);
    usleep(50 * 1000);
    ck_assert_int_eq(atomic_load(&got), 0);
    md_unlock(&lock);
    pthread_join(t, NULL);
    ck_assert_int_eq(atomic_load(&got), 1);
    /* and again, unbiased now, recursively from this thread */
    md_lock(&lock);
    md_lock(&lock);
    md_unlock(&lock);
    md_unlock(&lock);
}
END_TEST

/* Biased to another thread of the parent, which is gone in the child: the child's thread takes
 * the bias over, without the withdrawal (and its membarrier) a second user makes. */
static void *bias_and_leave(void *arg)
{
    (void)arg;
    md_lock(&lock);
    md_unlock(&lock);
    return NULL;
}

START_TEST(a_child_of_fork_takes_the_parents_bias)
{
    md_lock_init(&lock);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, bias_and_leave, NULL), 0);
    pthread_join(t, NULL);
    int was_biased = atomic_load(&lock.bias) != UNBIASED;
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        md_lock_after_fork_child(&lock);
        for (unsigned i = 0; i < 1000; i++)
            section(i);
        _exit(counter != 1000 ? 1 : was_biased && atomic_load(&lock.revoking) ? 2 : 0);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) != 1, "child: a section was lost");
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) != 2, "child: withdrew the bias instead");
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child: status %#x", st);
    md_lock(&lock);                 /* the parent withdraws the bias as any second user */
    md_unlock(&lock);
}
END_TEST

int main(void)
{
    const TTest *const cases[] = {one_holder_across_the_bias_and_its_withdrawal,
                                  recursion_holds_it_until_the_last_unlock,
                                  a_child_of_fork_takes_the_parents_bias, NULL};
    return check_run_cases("md_lock", 60, cases);
}
