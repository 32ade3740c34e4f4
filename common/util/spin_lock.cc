#include "config.h"
#include "util/spin_lock.h"

#include <linux/futex.h>
#include <sys/syscall.h>
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
#else
constexpr uint64_t kSpinTicks = 64;  // steps: cpu_relax is a yield hint, a few cycles each
inline uint64_t spin_clock() noexcept
{
    static thread_local uint64_t steps;
    return steps++;
}
#endif
}  // namespace

void futex_wait(std::atomic<uint32_t> *word, uint32_t expect) noexcept
{
    syscall(SYS_futex, reinterpret_cast<uint32_t *>(word), FUTEX_WAIT_PRIVATE, expect, nullptr,
            nullptr, 0);
}

void futex_wake(std::atomic<uint32_t> *word, int count) noexcept
{
    syscall(SYS_futex, reinterpret_cast<uint32_t *>(word), FUTEX_WAKE_PRIVATE, count, nullptr,
            nullptr, 0);
}

void SpinLock::lock_contended() noexcept
{
    uint64_t start = spin_clock();
    do {
        cpu_relax();
        if (state_.load(std::memory_order_relaxed) == kFree && try_lock())
            return;
    } while (spin_clock() - start < kSpinTicks);
    // From here on the state says "maybe sleepers" whenever this thread holds or waits for it:
    // the unlock that frees it for us wakes the next sleeper, if any.
    while (state_.exchange(kSleepers, std::memory_order_acquire) != kFree)
        futex_wait(&state_, kSleepers);
}

}  // namespace vmt
