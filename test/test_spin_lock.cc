// The index lock (common/util/spin_lock.h): one holder at a time under contention, try_lock's
// answers, and every waiter getting the lock in the end, those that went to sleep on the
// futex included (an unlock that finds no sleeper announced is a plain store, and a waiter
// that announced itself at that moment has to wake itself).
#include <time.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "lib/check_run.h"
#include "util/spin_lock.h"

namespace {

void pause_ns(long ns)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        vmt::cpu_relax();
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < ns);
}

struct Shared {
    vmt::SpinLock lock;
    std::atomic<int> inside{0};
    std::atomic<int> overlaps{0};
    uint64_t count = 0;  // plain: only the holder touches it
};

// Takes the lock `rounds` times, holding it `hold_ns` each time (0: just the increment).
void take_turns(Shared *s, int rounds, long hold_ns)
{
    for (int i = 0; i < rounds; i++) {
        s->lock.lock();
        if (s->inside.fetch_add(1, std::memory_order_relaxed) != 0)
            s->overlaps.fetch_add(1, std::memory_order_relaxed);
        s->count++;
        if (hold_ns)
            pause_ns(hold_ns);
        s->inside.fetch_sub(1, std::memory_order_relaxed);
        s->lock.unlock();
    }
}

void run_threads(Shared *s, int threads, int rounds, long hold_ns)
{
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; t++)
        pool.emplace_back(take_turns, s, rounds, hold_ns);
    for (auto &th : pool)
        th.join();
}

// `threads` threads taking the lock `rounds` times each, holding it hold_ns: never two
// holders, and every round counted.
void contend(int threads, int rounds, long hold_ns)
{
    Shared s;
    run_threads(&s, threads, rounds, hold_ns);
    ck_assert_int_eq(s.overlaps.load(), 0);
    ck_assert_uint_eq(s.count, (uint64_t)threads * (uint64_t)rounds);
}

}  // namespace

// Short sections back to back: the fast paths of lock and unlock, racing each other.
START_TEST(one_holder_at_a_time)
{
    contend(4, 200000, 0);
}
END_TEST

// Sections of 5 us, longer than a waiter spins (about half a microsecond): waiters announce
// themselves and sleep, and unlocks race those announcements. Every thread finishes.
START_TEST(sleeping_waiters_all_get_it)
{
    contend(3, 3000, 5000);
}
END_TEST

// Waiters asleep for long (the holder keeps it 20 ms) all get it after one unlock.
START_TEST(a_long_hold_then_everyone)
{
    Shared s;
    s.lock.lock();
    std::vector<std::thread> pool;
    for (int t = 0; t < 3; t++)
        pool.emplace_back(take_turns, &s, 1, 0);
    pause_ns(20 * 1000 * 1000);
    ck_assert_uint_eq(s.count, 0);
    s.lock.unlock();
    for (auto &th : pool)
        th.join();
    ck_assert_uint_eq(s.count, 3);
    ck_assert(s.lock.try_lock());  // and it is free after all that
    s.lock.unlock();
}
END_TEST

START_TEST(try_lock_answers)
{
    vmt::SpinLock lock;
    ck_assert(lock.try_lock());
    bool other = true;
    std::thread([&] { other = lock.try_lock(); }).join();
    ck_assert(!other);
    ck_assert(!lock.try_lock());
    lock.unlock();
    std::thread([&] {
        other = lock.try_lock();
        if (other)
            lock.unlock();
    }).join();
    ck_assert(other);
}
END_TEST

int main()
{
    const TTest *const cases[] = {one_holder_at_a_time, sleeping_waiters_all_get_it,
                                  a_long_hold_then_everyone, try_lock_answers, nullptr};
    return check_run_cases("spin_lock", 120, cases);
}
