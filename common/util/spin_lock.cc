#include "config.h"
#include "util/spin_lock.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace vmt {

namespace {
// About a microsecond of pause instructions: longer than the cache's critical sections, shorter
// than a futex sleep and wake-up. Past it the holder is likely preempted: sleep.
constexpr int kSpins = 200;
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
    for (int i = 0; i < kSpins; i++) {
        cpu_relax();
        if (state_.load(std::memory_order_relaxed) == kFree && try_lock())
            return;
    }
    // From here on the state says "maybe sleepers" whenever this thread holds or waits for it:
    // the unlock that frees it for us wakes the next sleeper, if any.
    while (state_.exchange(kSleepers, std::memory_order_acquire) != kFree)
        futex_wait(&state_, kSleepers);
}

}  // namespace vmt
