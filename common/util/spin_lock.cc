#include "config.h"
#include "util/spin_lock.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace vmt {

namespace {
// About half a microsecond: longer than the cache's critical sections, shorter than a futex
// sleep and wake-up. Past it the holder is likely preempted: sleep. Measured by the clock,
// not by a count of pause instructions, whose length differs by more than ten times between
// cores (about 140 cycles on Intel's since Skylake, a few on older ones): the 200 pauses meant
// as a microsecond were ten there, and two threads missing together on a 2-vCPU Sapphire
// Rapids guest spun that long, at 0.76-0.85x the misses of one thread per second (0.89-0.96x
// with 0.4-2.3 us, the shortest a little ahead).
#if defined(__x86_64__) || defined(__i386__)
constexpr uint64_t kSpinTicks = 1300;  // of the time-stamp counter: 0.4-0.65 us at 2-3.5 GHz
inline uint64_t spin_clock() noexcept { return __builtin_ia32_rdtsc(); }
// An unlock wakes a sleeper at most once in this long (70-125 us); a sleeper not woken wakes
// itself after kSleepNs. Two threads that both missed at once used to settle into a mode where
// the one asleep was woken at every unlock of the other, found the lock taken again, and slept
// again: each unlock a futex system call and an IPI, each section moving the index's lines
// between the CPUs, 1.0-1.35 us a miss (0.2x of one thread). Woken at most this often, the
// sleeper lets the other run that long alone, with its lines at hand: 0.8-1.1x.
constexpr uint64_t kWakeGapTicks = 250000;
#else
constexpr uint64_t kSpinTicks = 64;  // steps: cpu_relax is a yield hint, a few cycles each
inline uint64_t spin_clock() noexcept
{
    static thread_local uint64_t steps;
    return steps++;
}
constexpr uint64_t kWakeGapTicks = 0;  // no clock to measure the gap by: wake at every unlock
#endif
constexpr long kSleepNs = 100000;
}  // namespace

namespace {
void futex_wait_until(std::atomic<uint32_t> *word, uint32_t expect,
                      const struct timespec *rel) noexcept
{
    syscall(SYS_futex, reinterpret_cast<uint32_t *>(word), FUTEX_WAIT_PRIVATE, expect, rel,
            nullptr, 0);
}
}  // namespace

void futex_wait(std::atomic<uint32_t> *word, uint32_t expect) noexcept
{
    futex_wait_until(word, expect, nullptr);
}

void futex_wait_for(std::atomic<uint32_t> *word, uint32_t expect, long ns) noexcept
{
    struct timespec rel = {ns / 1000000000L, ns % 1000000000L};
    futex_wait_until(word, expect, &rel);
}

void futex_wake(std::atomic<uint32_t> *word, int count) noexcept
{
    syscall(SYS_futex, reinterpret_cast<uint32_t *>(word), FUTEX_WAKE_PRIVATE, count, nullptr,
            nullptr, 0);
}

bool SpinLock::spin_to_take(uint32_t state) noexcept
{
    uint64_t start = spin_clock();
    do {
        cpu_relax();
        if (state_.load(std::memory_order_relaxed) == kFree && take_as(state))
            return true;
    } while (spin_clock() - start < kSpinTicks);
    return false;
}

void SpinLock::lock_contended() noexcept
{
    if (spin_to_take(kHeld))
        return;
    // From here on the state says "maybe sleepers" whenever this thread holds or waits for it:
    // an unlock that frees it wakes the next sleeper (wake_one), or the sleeper wakes itself.
    // A woken thread spins again before it sleeps again: the lock is often free for a moment.
    while (state_.exchange(kSleepers, std::memory_order_acquire) != kFree) {
        futex_wait_for(&state_, kSleepers, kSleepNs);
        if (spin_to_take(kSleepers))
            return;
    }
}

void SpinLock::wake_one() noexcept
{
    uint64_t now = spin_clock();
    if (now - last_wake_.load(std::memory_order_relaxed) < kWakeGapTicks)
        return;  // the sleeper wakes itself within kSleepNs
    last_wake_.store(now, std::memory_order_relaxed);
    futex_wake(&state_, 1);
}

}  // namespace vmt
