// A mutex for short critical sections: a contended lock() spins a little (with pause) before
// it sleeps on a futex. The cache's locks are held for a few hundred nanoseconds, while a
// futex sleep and wake-up costs microseconds and a context switch on each side (more on
// paravirtualised machines, where the wake-up is an IPI); glibc's default mutex sleeps at once.
// Under steady contention an unlock wakes a sleeper at most once per ~100 us and the sleeper
// otherwise wakes itself (spin_lock.cc: kWakeGapTicks), so that the threads take turns in
// stretches rather than at every section. An unlock with no sleeper announced is a plain
// store: a sleeper that announces itself just then wakes itself, like one the gap left.
//
// BasicLockable and Lockable, so std::lock_guard and std::unique_lock work with it. The state
// is two words, so the child of a fork rebuilds it with a placement new, as it would a
// std::mutex. Waiting for an event under the lock: FutexEvent.
#ifndef VMTRACK_COMMON_SPIN_LOCK_H
#define VMTRACK_COMMON_SPIN_LOCK_H

#include <atomic>
#include <cstdint>

namespace vmt {

// One step of a spin-wait: tells the CPU (and a hypervisor) that this thread only waits.
inline void cpu_relax() noexcept
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

// Sleeps while *word == expect (or until woken, or a signal): the caller re-checks.
void futex_wait(std::atomic<uint32_t> *word, uint32_t expect) noexcept;
// The same, for at most `ns` nanoseconds.
void futex_wait_for(std::atomic<uint32_t> *word, uint32_t expect, long ns) noexcept;
// Wakes up to `count` threads sleeping on word.
void futex_wake(std::atomic<uint32_t> *word, int count) noexcept;

class SpinLock {
public:
    SpinLock() = default;
    SpinLock(const SpinLock &) = delete;
    SpinLock &operator=(const SpinLock &) = delete;

    void lock() noexcept
    {
        if (__builtin_expect(!take_as(kHeld), 0))
            lock_contended();
    }
    bool try_lock() noexcept { return take_as(kHeld); }
    void unlock() noexcept
    {
        // Nobody announced a sleep: a plain store, not an exchange, whose locked instruction
        // waited for every store of the section to drain (8 ns of a 121 ns miss). A thread
        // that announces itself between the load and the store sleeps until its timeout
        // (kSleepNs) at worst, as it may under the wake-up gap anyway.
        if (__builtin_expect(state_.load(std::memory_order_relaxed) == kHeld, 1)) {
            state_.store(kFree, std::memory_order_release);
            return;
        }
        if (state_.exchange(kFree, std::memory_order_release) == kSleepers)
            wake_one();
    }

private:
    // kSleepers: held, and some thread may sleep on the futex (its unlock must wake one, or
    // leave it to wake itself: wake_one).
    static constexpr uint32_t kFree = 0, kHeld = 1, kSleepers = 2;
    void lock_contended() noexcept;
    // Free to `state`: true if this thread took it so.
    bool take_as(uint32_t state) noexcept
    {
        uint32_t expect = kFree;
        return state_.compare_exchange_strong(expect, state, std::memory_order_acquire,
                                              std::memory_order_relaxed);
    }
    bool spin_to_take(uint32_t state) noexcept;
    void wake_one() noexcept;

    std::atomic<uint32_t> state_{kFree};
    std::atomic<uint64_t> last_wake_{0};  // when an unlock last woke a sleeper (wake_one)
};

// "Something changed": a thread that holds `lock` and waits for a change (an unmap's end) lets
// go of the lock, sleeps until notify_all, and takes the lock again. Like a condition variable,
// the waiter re-checks its condition; unlike std::condition_variable it works with SpinLock,
// allocates nothing and is rebuilt after fork by a placement new.
class FutexEvent {
public:
    // Under `lock`: returns with it held again, after a notify_all or spuriously.
    template <typename Lock>
    void wait(Lock &lock) noexcept
    {
        uint32_t seen = generation_.load(std::memory_order_relaxed);
        lock.unlock();
        futex_wait(&generation_, seen);
        lock.lock();
    }
    // Under the lock the waiters hold, or after it (a change made under it is then visible).
    void notify_all() noexcept
    {
        generation_.fetch_add(1, std::memory_order_release);
        futex_wake(&generation_, INT32_MAX);
    }

private:
    std::atomic<uint32_t> generation_{0};
};

}  // namespace vmt

#endif
