// The interval index's walks (common/index/index.h), against the plain searches they stand
// for: a miss takes the entry below its start and the one above from one walk (floor_r, the
// failed hit's, or floor_w under the lock), so both must agree with floor and ceil_w
// everywhere, at every depth of the tree and across the splits and merges of inserting and
// erasing.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <map>
#include <set>
#include <vector>

#include "index/index.h"
#include "lib/check_run.h"

namespace {

constexpr uintptr_t kPage = 4096;

void *value_of(uintptr_t key) { return reinterpret_cast<void *>(key + 1); }

// Every key in the set, its neighbours and the space between them: floor_w against floor
// and ceil_w(x + 1), and all of them against the set (the greatest key <= x, the smallest
// key > x).
void check_walks(const vmt::RangeIndex &index, const std::set<uintptr_t> &keys)
{
    std::set<uintptr_t> probes = {0, 1};
    for (uintptr_t k : keys)
        for (uintptr_t x : {k - 1, k, k + 1, k + kPage / 2})
            probes.insert(x);
    for (uintptr_t x : probes) {
        void *after = reinterpret_cast<void *>(0x5a);
        void *below = index.floor_w(x, &after);
        ck_assert_ptr_eq(below, index.floor(x));
        ck_assert_ptr_eq(after, index.ceil_w(x + 1));
        // The reader's walk that a miss may take its neighbours from: with no writer running
        // it always knows the one above.
        void *after_r = reinterpret_cast<void *>(0x5a);
        bool known = false;
        const void *leaf = nullptr;
        ck_assert_ptr_eq(index.floor_r(x, &after_r, &known, &leaf), below);
        ck_assert_ptr_nonnull(leaf);
        ck_assert(known);
        ck_assert_ptr_eq(after_r, after);
        auto it = keys.upper_bound(x);
        ck_assert_ptr_eq(after, it == keys.end() ? nullptr : value_of(*it));
        ck_assert_ptr_eq(below, it == keys.begin() ? nullptr : value_of(*std::prev(it)));
    }
}

}  // namespace

START_TEST(floor_w_matches_floor_and_ceil_while_growing_and_shrinking)
{
    vmt::RangeIndex index;
    std::set<uintptr_t> keys;
    void *after = reinterpret_cast<void *>(0x5a);
    ck_assert_ptr_null(index.floor_w(12345, &after));  // empty
    ck_assert_ptr_null(after);
    unsigned seed = 7;
    // Enough keys for a tree three levels deep (14 per node), in random order.
    for (int i = 0; i < 6000; i++) {
        uintptr_t k = (uintptr_t)(rand_r(&seed) % 20000 + 1) * kPage;
        if (keys.insert(k).second)
            ck_assert(index.insert(k, value_of(k)));
        if (i % 500 == 0)
            check_walks(index, keys);
    }
    check_walks(index, keys);
    // Erase most of them, so that leaves and inner nodes empty and go.
    while (keys.size() > 3) {
        auto it = keys.begin();
        std::advance(it, rand_r(&seed) % keys.size());
        index.erase(*it);
        keys.erase(it);
        if (keys.size() % 400 == 0)
            check_walks(index, keys);
    }
    check_walks(index, keys);
}
END_TEST

// The miss benchmarks' pattern, the one a cache under its entry limit sees: fresh ranges
// at rising (or, as mmap hands them out, falling) addresses while the oldest are evicted, a
// window of 512 sliding through the key space.
static void slide_window(bool rising)
{
    vmt::RangeIndex index;
    std::set<uintptr_t> keys;
    constexpr uintptr_t kSteps = 20000, kWindow = 512;
    auto key_at = [&](uintptr_t i) { return (rising ? i + 1 : kSteps - i) * 32 * kPage; };
    for (uintptr_t i = 0; i < kSteps; i++) {
        uintptr_t k = key_at(i);
        ck_assert(index.insert(k, value_of(k)));
        keys.insert(k);
        if (i >= kWindow) {
            uintptr_t old = key_at(i - kWindow);
            index.erase(old);
            keys.erase(old);
        }
        if (i % 997 == 0)
            check_walks(index, keys);
    }
    check_walks(index, keys);
}

START_TEST(walks_match_a_sliding_window_rising)
{
    slide_window(true);
}
END_TEST

START_TEST(walks_match_a_sliding_window_falling)
{
    slide_window(false);
}
END_TEST

// Keys of a fixed set of `span` come and go at random for 40000 steps, `insert` putting each
// one in (step, key); the walks are checked against the set as it goes and at the end.
template <typename Insert>
void churn(vmt::RangeIndex &index, std::set<uintptr_t> &keys, unsigned seed, unsigned span,
           Insert insert)
{
    for (int i = 0; i < 40000; i++) {
        uintptr_t k = (uintptr_t)(rand_r(&seed) % span + 1) * 2 * kPage;
        if (keys.erase(k)) {
            index.erase(k);
        } else {
            insert(i, k);
            keys.insert(k);
        }
        if (i % 997 == 0)
            check_walks(index, keys);
    }
    check_walks(index, keys);
}

// The random miss workload's pattern: keys of a fixed set come and go in any order, so that
// nodes split and empty in the middle of the tree while it keeps its size, and searches end
// at every place of a node (first, last and between: each has its own way in last_le).
START_TEST(walks_match_random_churn)
{
    vmt::RangeIndex index;
    std::set<uintptr_t> keys;
    churn(index, keys, 11, 1024,
          [&](int, uintptr_t k) { ck_assert(index.insert(k, value_of(k))); });
    // Every key out (the tree shrinks back to one empty leaf), then in again.
    for (uintptr_t k : keys)
        index.erase(k);
    keys.clear();
    check_walks(index, keys);
    for (uintptr_t k = 1; k <= 300; k++) {
        ck_assert(index.insert(k * kPage, value_of(k * kPage)));
        keys.insert(k * kPage);
    }
    check_walks(index, keys);
}
END_TEST

// A miss inserts where its failed hit's walk ended (insert_at_walked), the whole way down
// only where that leaf is full or the walk gave none. Churn as above, with every insert
// taking that way, some with no leaf and some after the walked leaf filled: the walks must
// still match the set.
START_TEST(insert_at_walked_keeps_the_tree_right)
{
    vmt::RangeIndex index;
    std::set<uintptr_t> keys;
    void *after;
    bool known;
    const void *leaf;
    churn(index, keys, 23, 2048, [&](int i, uintptr_t k) {
        index.floor_r(k, &after, &known, &leaf);
        if (i % 50 == 0)
            leaf = nullptr;  // a walk that could not tell
        ck_assert(index.insert_at_walked(leaf, k, value_of(k)));
        ck_assert_ptr_eq(index.floor(k), value_of(k));
    });
    // Into an empty tree: its root leaf is walked to and takes the key.
    for (uintptr_t k : keys)
        index.erase(k);
    keys.clear();
    ck_assert_ptr_null(index.floor_r(kPage, &after, &known, &leaf));
    ck_assert(index.insert_at_walked(leaf, kPage, value_of(kPage)));
    keys.insert(kPage);
    check_walks(index, keys);
}
END_TEST

// Values that carry the index's LeafHint: the cache's entries. The eviction erases by the hint
// (erase_hinted), taking the key out of the hinted leaf where it can and walking down where
// not; inserts and splits keep every value's hint. Churn with every erase hinted, some hints
// spoiled on purpose (another value's leaf, a number no leaf has): the tree must still be the
// set. (That the hints save the walk is for the benchmarks to show.)
namespace {
struct Item {
    uintptr_t key;
    vmt::LeafHint hint;
};

void check_items(const vmt::RangeIndex &index, const std::map<uintptr_t, Item *> &items)
{
    for (const auto &kv : items)
        for (uintptr_t x : {kv.first - 1, kv.first, kv.first + kPage / 2}) {
            auto it = items.upper_bound(x);
            Item *want = it == items.begin() ? nullptr : std::prev(it)->second;
            ck_assert_ptr_eq(index.floor(x), want);
        }
}
}  // namespace

START_TEST(erase_hinted_keeps_the_tree_right)
{
    vmt::RangeIndex index(offsetof(Item, hint));
    std::map<uintptr_t, Item *> items;
    std::vector<Item> store(2049);
    unsigned seed = 31;
    for (int i = 0; i < 60000; i++) {
        uintptr_t n = (uintptr_t)(rand_r(&seed) % 2048 + 1);
        uintptr_t k = n * 2 * kPage;
        Item *item = &store[n];
        auto it = items.find(k);
        if (it != items.end()) {
            vmt::LeafHint hint = item->hint;
            if (i % 37 == 0)  // another value's leaf
                hint = items.begin()->second->hint;
            else if (i % 41 == 0)  // no leaf at all
                hint = vmt::LeafHint{{0xff, 0xff, 0xff}};
            index.erase_hinted(k, hint);
            items.erase(it);
        } else {
            item->key = k;
            ck_assert(index.insert(k, item));
            items[k] = item;
        }
        if (i % 997 == 0)
            check_items(index, items);
    }
    check_items(index, items);
    for (auto &kv : items)
        index.erase_hinted(kv.first, kv.second->hint);
    items.clear();
    ck_assert_ptr_null(index.floor(~uintptr_t{0}));
}
END_TEST

int main()
{
    const TTest *const cases[] = {floor_w_matches_floor_and_ceil_while_growing_and_shrinking,
                                  walks_match_a_sliding_window_rising,
                                  walks_match_a_sliding_window_falling, walks_match_random_churn,
                                  insert_at_walked_keeps_the_tree_right,
                                  erase_hinted_keeps_the_tree_right, nullptr};
    return check_run_cases("index walks", 120, cases);
}
