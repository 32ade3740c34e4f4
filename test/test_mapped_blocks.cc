// The miss's mapped check with what it remembers of the address space
// (common/cache/mapped_blocks.h), against the kernel: it must never call a range mapped that
// was unmapped for the whole of the call, whatever forget() raced with, and it must answer
// for later misses in a block it found whole without a system call. The cache calls forget()
// at the start and at the end of each unmap (the hooks tracker's unmap_begin and unmap_end);
// these tests do the same by hand.
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <thread>

#include "cache/mapped_blocks.h"
#include "lib/check_run.h"

namespace {

constexpr uintptr_t kBlock = 2u << 20;
constexpr size_t kRegion = 64 * 1024;

// `blocks` 2 MiB blocks of fresh memory, block-aligned (the slack around them unmapped).
char *map_blocks(size_t blocks)
{
    size_t len = (blocks + 1) * kBlock;
    char *p = static_cast<char *>(mmap(nullptr, len, PROT_READ | PROT_WRITE,
                                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    ck_assert_ptr_ne(p, MAP_FAILED);
    uintptr_t a = (reinterpret_cast<uintptr_t>(p) + kBlock - 1) & ~(kBlock - 1);
    char *aligned = reinterpret_cast<char *>(a);
    if (aligned > p)
        ck_assert_int_eq(munmap(p, aligned - p), 0);
    char *end = aligned + blocks * kBlock;
    if (p + len > end)
        ck_assert_int_eq(munmap(end, p + len - end), 0);
    return aligned;
}

uintptr_t addr(const char *p) { return reinterpret_cast<uintptr_t>(p); }

// What the kernel says, under vmt::MappedBlocks's own answer.
bool kernel_mapped(const char *p, size_t len)
{
    return msync(const_cast<char *>(p), len, MS_ASYNC) == 0;
}

}  // namespace

// A hole punched in a block it found whole is refused once forget() heard of it, and so is
// each kind of range around it: in the block, across two blocks, longer than the blocks it
// remembers.
START_TEST(forgets_what_is_unmapped)
{
    static vmt::MappedBlocks blocks;
    char *p = map_blocks(8);
    ck_assert(blocks.mapped(addr(p), addr(p) + kRegion));
    ck_assert(blocks.mapped(addr(p) + kRegion, addr(p) + 2 * kRegion));
    ck_assert(blocks.mapped(addr(p) + kBlock - kRegion, addr(p) + kBlock + kRegion));
    char *hole = p + kBlock / 2;
    blocks.forget(addr(hole), addr(hole) + kRegion);
    ck_assert_int_eq(munmap(hole, kRegion), 0);
    ck_assert(!blocks.mapped(addr(hole), addr(hole) + kRegion));
    ck_assert(!blocks.mapped(addr(hole) - 4096, addr(hole) + 4096));
    ck_assert(blocks.mapped(addr(p), addr(p) + kRegion));  // the rest of the block is still there
    ck_assert(!blocks.mapped(addr(p), addr(p) + 8 * kBlock));
    // The hole mapped again: found mapped again (the block was holed: its range is checked).
    char *again = static_cast<char *>(mmap(hole, kRegion, PROT_READ | PROT_WRITE,
                                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0));
    ck_assert_ptr_eq(again, hole);
    ck_assert(blocks.mapped(addr(hole), addr(hole) + kRegion));
    // A hole in the next block, unmapped as part of a longer range.
    char *second = p + kBlock;
    blocks.forget(addr(second), addr(second) + 3 * kBlock);
    ck_assert_int_eq(munmap(second, 3 * kBlock), 0);
    ck_assert(!blocks.mapped(addr(second) + kRegion, addr(second) + 2 * kRegion));
    ck_assert(!blocks.mapped(addr(p) + kBlock - kRegion, addr(p) + kBlock + kRegion));
    // forget_all (a fork's child, a tracker that lost its hooks): nothing is known any more.
    char *fifth = p + 5 * kBlock;
    ck_assert(blocks.mapped(addr(fifth), addr(fifth) + kRegion));
    blocks.forget_all();
    ck_assert_int_eq(munmap(fifth, kRegion), 0);
    ck_assert(!blocks.mapped(addr(fifth), addr(fifth) + kRegion));
    munmap(p, 8 * kBlock);
}
END_TEST

// Forgetting a range that covers more blocks than there are slots forgets every slot.
START_TEST(forgets_a_huge_unmap)
{
    static vmt::MappedBlocks blocks;
    char *p = map_blocks(2);
    ck_assert(blocks.mapped(addr(p), addr(p) + kRegion));
    blocks.forget(addr(p) - (1ull << 32), addr(p) + (1ull << 32));
    ck_assert_int_eq(munmap(p, 2 * kBlock), 0);
    ck_assert(!blocks.mapped(addr(p), addr(p) + kRegion));
}
END_TEST

// After the first miss in a block, the others there need no system call: the block is
// unmapped behind its back (no forget), and it still says mapped. This is the saving, and
// also why only a tracker that hears every unmap may use it.
START_TEST(answers_from_a_whole_block)
{
    static vmt::MappedBlocks blocks;
    char *p = map_blocks(1);
    ck_assert(blocks.mapped(addr(p), addr(p) + kRegion));
    ck_assert_int_eq(munmap(p + kBlock / 2, kRegion), 0);  // unheard of
    ck_assert(blocks.mapped(addr(p) + kBlock / 2, addr(p) + kBlock / 2 + kRegion));
    ck_assert(!kernel_mapped(p + kBlock / 2, kRegion));
    munmap(p, kBlock);
}
END_TEST

// Misses walking forward through one mapping: from the second block on, one check answers for
// the fifteen blocks after it too. A region unmapped behind its back (no forget) ten blocks
// on is still said mapped: the look-ahead marked its block whole without a call of its own.
START_TEST(looks_ahead_from_a_whole_block)
{
    static vmt::MappedBlocks blocks;
    char *p = map_blocks(20);
    ck_assert(blocks.mapped(addr(p), addr(p) + kRegion));
    ck_assert(blocks.mapped(addr(p) + kBlock, addr(p) + kBlock + kRegion));
    char *ahead = p + 10 * kBlock;
    ck_assert_int_eq(munmap(ahead, kRegion), 0);  // unheard of
    ck_assert(blocks.mapped(addr(ahead), addr(ahead) + kRegion));
    ck_assert(!kernel_mapped(ahead, kRegion));
    munmap(p, 20 * kBlock);
}
END_TEST

// A hole ahead (there before any check, so nothing to forget): the look-ahead finds it and
// marks nothing ahead; every block before the hole is still found mapped, the hole never is,
// and the blocks past it are checked on their own.
START_TEST(looks_ahead_over_a_hole)
{
    static vmt::MappedBlocks blocks;
    char *p = map_blocks(20);
    char *hole = p + 8 * kBlock + kBlock / 2;
    ck_assert_int_eq(munmap(hole, kRegion), 0);
    for (int b = 0; b < 20; b++) {
        char *at = p + b * kBlock;
        ck_assert(blocks.mapped(addr(at), addr(at) + kRegion));
        ck_assert(blocks.mapped(addr(at) + kBlock - kRegion, addr(at) + kBlock));
    }
    ck_assert(!blocks.mapped(addr(hole), addr(hole) + kRegion));
    ck_assert(!blocks.mapped(addr(hole) - 4096, addr(hole) + 4096));
    ck_assert(!blocks.mapped(addr(p), addr(p) + 20 * kBlock));
    munmap(p, 20 * kBlock);
}
END_TEST

// One thread maps and unmaps a region over and over (forget, munmap, forget, as the hooks
// do), others check it: a check that ran wholly while the region was unmapped must say so.
// The window the slots' versions close: a check reads its slot, finds the block mapped, the
// region goes before the check marks the block whole; were the mark to land after the last
// forget, every later check would say mapped over the hole. (With one forget, before the
// munmap only, a check that starts after it marks the block whole: thousands of wrong
// answers in this test.)
START_TEST(never_mapped_while_unmapped)
{
    static vmt::MappedBlocks blocks;
    char *p = map_blocks(1);
    char *region = p + kBlock / 2;
    std::atomic<uint64_t> phase{1};   // 4k+1 mapped, 4k+2 going, 4k+3 gone, 4k+4 coming
    std::atomic<bool> stop{false};
    std::atomic<long> wrong{0}, gone_checks{0};
    auto checker = [&] {
        while (!stop.load()) {
            uint64_t before = phase.load();
            bool said = blocks.mapped(addr(region), addr(region) + kRegion);
            if (phase.load() == before && before % 4 == 3) {
                gone_checks++;
                if (said)
                    wrong++;
            }
        }
    };
    std::thread a(checker), b(checker);
    // Up to 5000 rounds, for at most 60 s: three busy threads on a loaded 2-core machine can
    // take longer than the case's timeout for all of them, and each round is a whole check.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    int rounds = 0;
    for (int round = 0; round < 5000 && std::chrono::steady_clock::now() < deadline; round++) {
        rounds++;
        phase.store(4 * round + 2);
        blocks.forget(addr(region), addr(region) + kRegion);
        ck_assert_int_eq(munmap(region, kRegion), 0);
        blocks.forget(addr(region), addr(region) + kRegion);
        phase.store(4 * round + 3);
        long seen = gone_checks.load();  // until a check has run wholly in the gap
        for (int spin = 0; spin < 100000 && gone_checks.load() == seen; spin++)
            std::this_thread::yield();
        phase.store(4 * round + 4);
        void *q = mmap(region, kRegion, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        ck_assert_ptr_eq(q, region);
        phase.store(4 * round + 5);
    }
    stop.store(true);
    a.join();
    b.join();
    printf("never_mapped_while_unmapped: %d rounds, %ld checks while the region was gone, "
           "%ld wrong\n", rounds, gone_checks.load(), wrong.load());
    ck_assert_int_eq(wrong.load(), 0);
    ck_assert_int_ge(rounds, 200);
    ck_assert_int_gt(gone_checks.load(), 0);
    munmap(p, kBlock);
}
END_TEST

int main()
{
    const TTest *const cases[] = {forgets_what_is_unmapped, forgets_a_huge_unmap,
                                  answers_from_a_whole_block, looks_ahead_from_a_whole_block,
                                  looks_ahead_over_a_hole, never_mapped_while_unmapped,
                                  nullptr};
    return check_run_cases("mapped blocks", 120, cases);
}
