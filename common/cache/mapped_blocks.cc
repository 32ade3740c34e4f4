// The mapped check of a miss (mapped_blocks.h).
#include "config.h"
#include "cache/mapped_blocks.h"

#include <sys/mman.h>

namespace vmt {

bool range_mapped(uintptr_t a0, uintptr_t a1) noexcept
{
    return msync(reinterpret_cast<void *>(a0), a1 - a0, MS_ASYNC) == 0;
}

bool MappedBlocks::mapped(uintptr_t a0, uintptr_t a1) noexcept
{
    const uint64_t b0 = a0 >> kBlockShift, b1 = (a1 - 1) >> kBlockShift;
    // Past 57-bit addresses a block number does not fit its slot's word: a failed check there
    // (no user memory is there) would mark the user block that shares the slot holed.
    if (b1 - b0 >= kMaxBlocks || b1 >> (64 - kBlockPos))
        return range_mapped(a0, a1);
    uint64_t seen[kMaxBlocks];
    bool whole = true, holed = false;
    for (uint64_t b = b0; b <= b1; b++) {
        uint64_t w = slot(b).load(std::memory_order_acquire);
        seen[b - b0] = w;
        bool ours = block_of(w) == b;
        whole &= ours && state_of(w) == kWhole;
        holed |= ours && state_of(w) == kHoled;
    }
    if (whole)
        return true;
    if (holed) {
        for (uint64_t b = b0; b <= b1; b++)
            if (block_of(seen[b - b0]) == b && state_of(seen[b - b0]) == kHoled)
                retry_later(b, seen[b - b0]);
        return range_mapped(a0, a1);
    }
    if (mapped_ahead(b0, b1))
        return true;
    // One system call for the blocks instead of the range: as cheap, and it answers for the
    // misses that follow in the same blocks.
    if (range_mapped(b0 << kBlockShift, (b1 + 1) << kBlockShift)) {
        mark(b0, b1, seen, kWhole);
        return true;
    }
    mark(b0, b1, seen, kHoled);
    return range_mapped(a0, a1);
}

// Buffers handed out one after another walk forward through memory mapped in one piece: a
// check of 2 MiB each cost a system call every 16 misses of 128 KiB buffers (UCX's rcache,
// which checks nothing, then missed in 212 ns where the module took 313). From a whole block
// on, the next check covers kAhead blocks more, one call for 32 MiB. Where that finds a hole
// (the end of a mapping), it costs a second call, and the next misses there do not look
// ahead again until they are past the blocks it covered.
bool MappedBlocks::mapped_ahead(uint64_t b0, uint64_t b1) noexcept
{
    const uint64_t last = b1 + kAhead;
    if (b0 == 0 || !whole(b0 - 1) || last >> (64 - kBlockPos))
        return false;
    if (b0 - ahead_failed_.load(std::memory_order_relaxed) <= kAhead)
        return false;  // past the start of the last failed look-ahead, not past its end
    uint64_t seen[kMaxBlocks + kAhead];
    for (uint64_t b = b0; b <= last; b++)
        seen[b - b0] = slot(b).load(std::memory_order_acquire);
    if (!range_mapped(b0 << kBlockShift, (last + 1) << kBlockShift)) {
        ahead_failed_.store(b0, std::memory_order_relaxed);
        return false;
    }
    mark(b0, last, seen, kWhole);
    return true;
}

void MappedBlocks::mark(uint64_t b0, uint64_t b1, const uint64_t *seen, State s) noexcept
{
    for (uint64_t b = b0; b <= b1; b++) {
        uint64_t w = seen[b - b0];
        // Fails if a forget ran since the load: what it forgot stays forgotten.
        if (slot(b).compare_exchange_strong(w, word(b, s, version_of(w) + 1),
                                            std::memory_order_acq_rel) &&
            s == kHoled)
            retry_[b % kSlots].store(kHoledRetry, std::memory_order_relaxed);
    }
}

void MappedBlocks::retry_later(uint64_t block, uint64_t seen) noexcept
{
    std::atomic<uint8_t> &left = retry_[block % kSlots];
    uint8_t n = left.load(std::memory_order_relaxed);
    if (n) {
        left.store(uint8_t(n - 1), std::memory_order_relaxed);  // a lost count costs nothing
        return;
    }
    // What was mapped around the hole may have changed: the next miss checks the block again.
    slot(block).compare_exchange_strong(seen, word(block, kUnknown, version_of(seen) + 1),
                                        std::memory_order_acq_rel);
}

void MappedBlocks::bump(std::atomic<uint64_t> &s, uint64_t block, bool any_block) noexcept
{
    uint64_t w = s.load(std::memory_order_relaxed);
    for (;;) {
        uint64_t b = block_of(w);
        State st = state_of(w);
        if (st == kWhole && (b == block || any_block))
            st = kUnknown;  // a hole can only stay a hole: holed blocks stay holed
        if (s.compare_exchange_weak(w, word(b, st, version_of(w) + 1), std::memory_order_acq_rel))
            return;
    }
}

void MappedBlocks::forget(uintptr_t start, uintptr_t end) noexcept
{
    if (end <= start)
        return;
    const uint64_t b0 = start >> kBlockShift, b1 = (end - 1) >> kBlockShift;
    if (b1 - b0 >= kSlots) {
        forget_all();
        return;
    }
    for (uint64_t b = b0; b <= b1; b++)
        bump(slot(b), b, false);
}

void MappedBlocks::forget_all() noexcept
{
    for (std::atomic<uint64_t> &s : slots_)
        bump(s, 0, true);
}

}  // namespace vmt
