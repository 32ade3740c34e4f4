// What a cache has learnt from its mapped checks: 2 MiB blocks of the address space seen
// wholly mapped, so that a miss inside one needs no system call, and blocks seen with a hole,
// so that a miss there checks just its own range instead of the block first.
//
// Sound only where the cache hears of every unmap (the hooks tracker: every libc entry that
// unmaps, libc's own calls included), and forget() runs at its start and again once the pages
// are gone, before the unmap stops being in flight: a check that ran while the pages were
// still there may have marked their block whole after the first forget. Until the second, a
// miss may take the block for whole; its registration is then refused at the insert, as one
// that raced the unmap (miss.cc). A raw munmap system call is what hooks do not see; it leaves cached registrations
// stale under hooks anyway (doc/trackers.md), and here also a block marked mapped that is
// not: a later get of the hole is refused by a device that checks (io_uring, verbs), not by
// the cache.
//
// Slots are lock-free: a slot's word is (block | state | version), and every forget() bumps
// the version of each slot its range maps to, whatever block the slot names. A check marks a
// block mapped with a compare-and-swap from the word it read before its msync, so a forget
// that ran in between makes the mark fail. The version has 26
// bits: for the mark to succeed wrongly, 2^26 forgets of one slot (about a minute of
// nothing but munmaps) would have to fit between a check's load and its swap.
#ifndef VMTRACK_COMMON_MAPPED_BLOCKS_H
#define VMTRACK_COMMON_MAPPED_BLOCKS_H

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace vmt {

// Whether every page of [a0, a1) is mapped: msync(MS_ASYNC) checks the VMAs without faulting
// or writing anything back. One system call.
bool range_mapped(uintptr_t a0, uintptr_t a1) noexcept;

class MappedBlocks {
public:
    // Whether [a0, a1) is wholly mapped: from what the blocks say, else with a system call.
    bool mapped(uintptr_t a0, uintptr_t a1) noexcept;
    // [start, end) is about to be unmapped or changed: no block it touches is known mapped.
    void forget(uintptr_t start, uintptr_t end) noexcept;
    void forget_all() noexcept;

private:
    static constexpr unsigned kBlockShift = 21;     // 2 MiB
    static constexpr size_t kSlots = 512;           // 1 GiB of blocks without a collision
    static constexpr uintptr_t kMaxBlocks = 4;      // longer ranges are checked as they are
    // Blocks checked ahead of a miss whose block follows a whole one (see mapped()).
    static constexpr uint64_t kAhead = 15;
    static constexpr unsigned kHoledRetry = 16;     // a holed block is tried again after this
    enum State : uint64_t { kUnknown = 0, kWhole = 1, kHoled = 2 };
    static constexpr unsigned kStateBits = 2, kVersionBits = 26;
    static constexpr unsigned kBlockPos = kStateBits + kVersionBits;  // 36 bits of block

    static uint64_t word(uint64_t block, State s, uint64_t version) noexcept
    {
        return block << kBlockPos | (version & ((1ull << kVersionBits) - 1)) << kStateBits | s;
    }
    static uint64_t block_of(uint64_t w) noexcept { return w >> kBlockPos; }
    static State state_of(uint64_t w) noexcept { return State(w & ((1u << kStateBits) - 1)); }
    static uint64_t version_of(uint64_t w) noexcept { return w >> kStateBits; }
    std::atomic<uint64_t> &slot(uint64_t block) noexcept { return slots_[block % kSlots]; }
    // Marks each block of [b0, b1] as s, from the words read before the check.
    void mark(uint64_t b0, uint64_t b1, const uint64_t *seen, State s) noexcept;
    // The look-ahead: [b0, b1] and kAhead blocks after it at once, if the block before b0 is
    // whole and no look-ahead failed just before. True if all are mapped (and marked so).
    bool mapped_ahead(uint64_t b0, uint64_t b1) noexcept;
    bool whole(uint64_t block) noexcept
    {
        uint64_t w = slot(block).load(std::memory_order_relaxed);
        return block_of(w) == block && state_of(w) == kWhole;
    }
    // A holed block: counts down its retries, and forgets it when they run out.
    void retry_later(uint64_t block, uint64_t seen) noexcept;
    // A new version of the slot; if it says `block` (any_block: any block) is whole, it no
    // longer does.
    void bump(std::atomic<uint64_t> &s, uint64_t block, bool any_block) noexcept;

    std::atomic<uint64_t> slots_[kSlots] {};
    std::atomic<uint8_t> retry_[kSlots] {};  // checks left before a holed block is tried again
    // The first block of the last look-ahead that failed; at first none (no block is this
    // far below another: block numbers have 36 bits).
    std::atomic<uint64_t> ahead_failed_{1ull << 63};
};

}  // namespace vmt

#endif
