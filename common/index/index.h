// The interval index: a B+tree from the start address of each cached range to its entry.
// Cached ranges never overlap (the cache keeps that invariant), so "which range holds addr" is
// a floor search: the entry with the greatest start <= addr.
//
// One writer at a time (the cache's index lock); readers never lock and never write. Readers
// run inside the cache's sequence-count section: every field they read is an atomic, every
// node they can reach comes from a type-stable pool, and their walk is bounded, so a reader
// racing a writer reads stale-but-valid memory and then fails its sequence check.
#ifndef VMTRACK_COMMON_INDEX_H
#define VMTRACK_COMMON_INDEX_H

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "index/pool.h"

namespace vmt {

// Where a value was put: a number of its leaf (the leaves' pool numbers them, Pool::id_of),
// three bytes, so that a value one cache line long has room for it. 0: none.
struct LeafHint {
    uint8_t bytes[3];
};
constexpr unsigned kLeafHintBits = 24;

class RangeIndex {
public:
    // 14 keys: a node's count, kind and keys fill its first two cache lines, its values the
    // next two (see Node).
    static constexpr int kFan = 14;
    static constexpr int kMaxDepth = 24;

    RangeIndex() { reset(); }
    // Values that keep a LeafHint at this offset: the index writes there, as it puts a value
    // in a leaf, which leaf that is (erase_hinted).
    explicit RangeIndex(size_t leaf_hint_offset) : hint_offset_((ptrdiff_t)leaf_hint_offset)
    {
        reset();
    }
    RangeIndex(const RangeIndex &) = delete;
    RangeIndex &operator=(const RangeIndex &) = delete;

    // Reader side. The value with the greatest key <= x, or nullptr. May be wrong if a writer
    // ran meanwhile; the caller's sequence check decides. A leaf whose keys are all above x
    // (its separator is at most its smallest key: see Node) leaves the answer to the subtree
    // just left of the path.
    void *floor(uintptr_t x) const noexcept
    {
        const Node *n = root_.load(std::memory_order_acquire);
        const Node *left = nullptr;  // the subtree just left of the path, deepest seen
        for (int depth = 0; n && depth < kMaxDepth; depth++) {
            unsigned count = n->count.load(std::memory_order_relaxed);
            if (count > kFan)
                return nullptr;
            int i = last_le(n, count, x);
            if (n->leaf.load(std::memory_order_relaxed))
                return i >= 0 ? n->ptrs[i].load(std::memory_order_relaxed)
                              : last_value_r(left, kMaxDepth - depth);
            i = i < 0 ? 0 : i;
            if (i > 0)
                left = static_cast<const Node *>(n->ptrs[i - 1].load(std::memory_order_relaxed));
            n = static_cast<const Node *>(n->ptrs[i].load(std::memory_order_relaxed));
        }
        return nullptr;
    }

    // floor() and, in *after, the value with the smallest key > x, for a reader: what a miss
    // needs next, found on the way (see floor_w). *after_known is false when the walk could
    // not tell (a node that looked torn); like floor(), right only if no writer ran meanwhile.
    // *walked_leaf: where the walk ended, for insert_at_walked.
    void *floor_r(uintptr_t x, void **after, bool *after_known,
                  const void **walked_leaf) const noexcept
    {
        *after = nullptr;
        *after_known = false;
        *walked_leaf = nullptr;
        const Node *n = root_.load(std::memory_order_acquire);
        const Node *right = nullptr;  // the subtree just right of the path, deepest seen
        const Node *left = nullptr;   // and just left of it
        for (int depth = 0; n && depth < kMaxDepth; depth++) {
            prefetch_rest(n);
            unsigned count = n->count.load(std::memory_order_relaxed);
            if (count > kFan)
                return nullptr;
            int i = last_le(n, count, x);
            if (!n->leaf.load(std::memory_order_relaxed)) {
                i = i < 0 ? 0 : i;
                if ((unsigned)i + 1 < count)
                    right = static_cast<const Node *>(n->ptrs[i + 1].load(std::memory_order_relaxed));
                if (i > 0)
                    left = static_cast<const Node *>(n->ptrs[i - 1].load(std::memory_order_relaxed));
                n = static_cast<const Node *>(n->ptrs[i].load(std::memory_order_relaxed));
                continue;
            }
            *walked_leaf = n;
            if ((unsigned)(i + 1) < count)
                *after = n->ptrs[i + 1].load(std::memory_order_relaxed);
            *after_known = (unsigned)(i + 1) < count || !right ||
                           first_value_r(right, kMaxDepth - depth, after);
            return i >= 0 ? n->ptrs[i].load(std::memory_order_relaxed)
                          : last_value_r(left, kMaxDepth - depth);
        }
        return nullptr;
    }

    // ---- writer side (index lock held); floor() serves writers too ----
    // Value with the smallest key >= x, or nullptr.
    void *ceil_w(uintptr_t x) const noexcept { return ceil_in(root(), x); }

    // The value with the greatest key <= x (or nullptr) and, in *after, the one with the
    // smallest key > x (or nullptr): a miss needs both, and one walk finds both.
    void *floor_w(uintptr_t x, void **after) const noexcept
    {
        const Node *n = root();
        const Node *right = nullptr;  // the subtree just right of the path, deepest seen
        const Node *left = nullptr;   // and just left of it
        while (!leaf(n)) {
            unsigned c = count(n);
            if (c == 0) {
                *after = nullptr;
                return nullptr;
            }
            int i = last_le(n, c, x);
            i = i < 0 ? 0 : i;
            if ((unsigned)i + 1 < c)
                right = static_cast<const Node *>(ptr(n, (unsigned)i + 1));
            if (i > 0)
                left = static_cast<const Node *>(ptr(n, (unsigned)i - 1));
            n = static_cast<const Node *>(ptr(n, (unsigned)i));
        }
        unsigned c = count(n);
        int i = last_le(n, c, x);
        if ((unsigned)(i + 1) < c) {
            *after = ptr(n, (unsigned)(i + 1));
        } else if (right) {
            while (!leaf(right))
                right = static_cast<const Node *>(ptr(right, 0));
            // Only the root leaf can be empty; should another be, the full search decides.
            *after = count(right) ? ptr(right, 0) : ceil_in(root(), x + 1);
        } else {
            *after = nullptr;
        }
        return i >= 0 ? ptr(n, (unsigned)i) : last_value_r(left, kMaxDepth);
    }

    // false only when out of memory (the tree is unchanged then). A loop down, then back up
    // for as long as nodes split.
    bool insert(uintptr_t k, void *value) noexcept
    {
        if (!reserve_nodes())
            return false;
        replace_empty_root();
        Node *path[kMaxDepth];
        unsigned at[kMaxDepth];
        int depth = 0;
        Node *n = descend(k, path, at, &depth);
        if (!n)
            return false;
        Split s = put(n, (unsigned)(last_le(n, count(n), k) + 1), k, value);
        note_leaf(value, s.node && s.key <= k ? s.node : n);
        for (int d = depth - 1; d >= 0 && s.node; d--)
            s = put(path[d], at[d] + 1, s.key, s.node);
        if (s.node) {
            Node *r = alloc_node(false);  // reserved above
            r->ptrs[0].store(root(), std::memory_order_relaxed);
            r->keys[0].store(0, std::memory_order_relaxed);
            r->ptrs[1].store(s.node, std::memory_order_relaxed);
            r->keys[1].store(s.key, std::memory_order_relaxed);
            r->count.store(2, std::memory_order_relaxed);
            root_.store(r, std::memory_order_release);
        }
        return true;
    }

    // insert(), where a reader's floor_r(k) ended at walked_leaf and no writer has run since (the
    // caller's sequence count says so): a miss walked there already, and a leaf with room
    // takes the key without a second walk down. Anything else takes the whole way: a full
    // leaf (it splits), or no leaf (a walk that could not tell). A leaf reached that way
    // holds keys, or is the root: one that is empty and not the root was freed, and is not
    // trusted.
    bool insert_at_walked(const void *walked_leaf, uintptr_t k, void *value) noexcept
    {
        Node *n = static_cast<Node *>(const_cast<void *>(walked_leaf));
        if (!n || !leaf(n))
            return insert(k, value);
        unsigned c = count(n);
        if (c >= (unsigned)kFan || (c == 0 && n != root()))
            return insert(k, value);
        insert_at(n, (unsigned)(last_le(n, c, k) + 1), k, value);
        note_leaf(value, n);
        return true;
    }

    // erase(k) for a value whose LeafHint is `hint`: the cache's eviction of its least
    // recently used range, a key no recent walk went near, spent most of its time in the walk
    // down (random workload: a sixth of each miss). Where the hinted leaf holds k, and not
    // alone (the leaf would go), k is taken out there; else the whole way. The hint is only
    // trusted that far: a number whose leaf was freed names some leaf of the pool all the
    // same, which then does not hold k (keys are unique in the tree, and a leaf is freed only
    // when empty).
    void erase_hinted(uintptr_t k, LeafHint hint) noexcept
    {
        uint32_t id = (uint32_t)hint.bytes[0] | (uint32_t)hint.bytes[1] << 8 |
                      (uint32_t)hint.bytes[2] << 16;
        Node *n = leaves_.at(id);
        unsigned c = n ? count(n) : 0;
        if (c > 1 && c <= (unsigned)kFan) {
            int i = last_le(n, c, k);
            if (i >= 0 && key(n, (unsigned)i) == k) {
                remove_at(n, (unsigned)i);
                return;
            }
        }
        erase(k);
    }

    // Removes k (which must be present). A loop down and back up, not a recursion: an
    // eviction per miss makes this a third of the index's work there.
    void erase(uintptr_t k) noexcept
    {
        Node *path[kMaxDepth];
        unsigned at[kMaxDepth];
        int depth = 0;
        Node *n = descend(k, path, at, &depth);
        if (!n)
            return;
        int i = last_le(n, count(n), k);
        if (i < 0 || key(n, (unsigned)i) != k)
            return;
        remove_at(n, (unsigned)i);
        // Up the path while a node emptied: its parent drops it. A separator stays where the
        // smallest key under it went (see Node).
        for (int d = depth - 1; d >= 0 && count(n) == 0; d--) {
            Node *p = path[d];
            remove_at(p, at[d]);
            free_node(n);
            n = p;
        }
        Node *r = root();
        while (!r->leaf.load(std::memory_order_relaxed) && r->count.load(std::memory_order_relaxed) == 1) {
            Node *child = static_cast<Node *>(r->ptrs[0].load(std::memory_order_relaxed));
            root_.store(child, std::memory_order_release);
            free_node(r);
            r = child;
        }
        replace_empty_root();
    }

    // Drop everything without touching the values (after fork in the child).
    void reset() noexcept
    {
        root_.store(alloc_node(true), std::memory_order_release);
    }
    void reset_after_fork() noexcept { reset(); }

private:
    // Every key past a node's count: above any address, so that last_le needs no count.
    static constexpr uintptr_t kNoKey = ~uintptr_t{0};
    // A walk reads a node's count, kind and keys, then one value: three cache lines, where
    // count and kind after 16 keys and 16 values, at any offset, made it five.
    struct alignas(64) Node {
        // The pool's free link lives here, not in ptrs[0], so that a reader racing a free can
        // never take a node for a value.
        std::atomic<void *> pool_link;
        std::atomic<unsigned> count;
        std::atomic<bool> leaf;
        // Inner: keys[i], i > 0, bounds ptrs[i]: every key under it is >= keys[i] and < keys[i
        // + 1]. It was the smallest key when set (a split), and stays when that key goes, so
        // that an erase never climbs to fix it: a floor walk that meets a leaf whose keys are
        // all above x finds the answer just left of the path.
        std::atomic<uintptr_t> keys[kFan];
        std::atomic<void *> ptrs[kFan];     // leaf: values; inner: children
    };
    static_assert(offsetof(Node, ptrs) == 128 && sizeof(Node) == 256,
                  "count, kind and keys in two lines, values in two more");
    struct Split {
        Node *node;
        uintptr_t key;
    };

    Node *root() const noexcept { return root_.load(std::memory_order_relaxed); }

    static void init(Node *n, bool leaf) noexcept
    {
        for (auto &k : n->keys)
            k.store(kNoKey, std::memory_order_relaxed);
        n->count.store(0, std::memory_order_relaxed);
        n->leaf.store(leaf, std::memory_order_relaxed);
    }

    // Index of the last key <= x, or -1. Inner nodes treat keys[0] as minus infinity (it is
    // not a bound: child 0 takes everything below keys[1]), so for them the answer is >= 0.
    // The last and the first place first: a cache that fills and evicts in address order (as
    // memory handed out at growing addresses makes it) looks there, and a branch that is
    // mostly right is cheap. Else a count of the keys <= x over the whole node, without a
    // branch: keys past count are kNoKey (the writers keep them so: init, remove_at, split),
    // so each key costs a compare and an add. A binary search mispredicted about half its
    // steps on lookups spread over the cache. A reader racing a writer may see keys out of
    // order; it then gets some index below count, and its sequence check fails.
    static int last_le(const Node *n, unsigned count, uintptr_t x) noexcept
    {
        bool leaf = n->leaf.load(std::memory_order_relaxed);
        if (count - 1 < (unsigned)kFan && key(n, count - 1) <= x)
            return (int)count - 1;
        if (count > 1 && key(n, 1) > x)  // the first child, or in a leaf the first key or none
            return leaf ? (key(n, 0) <= x ? 0 : -1) : 0;
        unsigned below = (unsigned)(key(n, 0) <= x) | (unsigned)!leaf;
#pragma GCC unroll 16
        for (unsigned j = 1; j < (unsigned)kFan; j++)
            below += n->keys[j].load(std::memory_order_relaxed) <= x;
        int i = (int)below - 1;
        return i < (int)count ? i : (int)count - 1;
    }

    // A node's other three lines, asked for as its first is: a walk over a large index finds
    // its lower nodes in no CPU cache, and reading count, keys and then the value's line one
    // after the other waited for memory up to three times per node (10^6 entries at random).
    static void prefetch_rest(const Node *n) noexcept
    {
        const char *p = reinterpret_cast<const char *>(n);
        __builtin_prefetch(p + 64);
        __builtin_prefetch(p + 128);
        __builtin_prefetch(p + 192);
    }

    static uintptr_t key(const Node *n, unsigned i) noexcept { return n->keys[i].load(std::memory_order_relaxed); }
    static void *ptr(const Node *n, unsigned i) noexcept { return n->ptrs[i].load(std::memory_order_relaxed); }
    static unsigned count(const Node *n) noexcept { return n->count.load(std::memory_order_relaxed); }
    static bool leaf(const Node *n) noexcept { return n->leaf.load(std::memory_order_relaxed); }

    // Enough free nodes for the deepest split chain, there before anything changes.
    // A split takes one leaf; the spare one is for replace_empty_root.
    bool reserve_nodes() noexcept { return leaves_.reserve(2) && inners_.reserve(kMaxDepth + 1); }

    // Leaves and inner nodes come from pools of their own, so that a node never changes kind:
    // a reader that races a free and a reuse still finds a leaf where it read one, and never
    // takes an entry for a node (a node is larger: read as one, an entry at the end of its
    // pool's chunk would lead the reader past the chunk).
    Node *alloc_node(bool is_leaf) noexcept
    {
        Node *n = is_leaf ? leaves_.alloc() : inners_.alloc();
        if (n)
            init(n, is_leaf);
        return n;
    }
    void free_node(Node *n) noexcept
    {
        if (leaf(n))
            leaves_.free(n);
        else
            inners_.free(n);
    }

    // Every child of the root was removed: start again from an empty leaf (reserved by the
    // last insert; should there be none, the empty inner root stays, and the next insert,
    // which reserves one, replaces it).
    void replace_empty_root() noexcept
    {
        Node *r = root();
        if (!r || leaf(r) || count(r) != 0)
            return;
        Node *l = alloc_node(true);
        if (!l)
            return;
        root_.store(l, std::memory_order_release);
        free_node(r);
    }

    static void insert_at(Node *n, unsigned pos, uintptr_t k, void *v) noexcept
    {
        unsigned c = count(n);
        for (unsigned j = c; j > pos; j--) {
            n->keys[j].store(key(n, j - 1), std::memory_order_relaxed);
            n->ptrs[j].store(ptr(n, j - 1), std::memory_order_relaxed);
        }
        n->keys[pos].store(k, std::memory_order_relaxed);
        n->ptrs[pos].store(v, std::memory_order_relaxed);
        n->count.store(c + 1, std::memory_order_relaxed);
    }

    static void remove_at(Node *n, unsigned pos) noexcept
    {
        unsigned c = count(n);
        for (unsigned j = pos; j + 1 < c; j++) {
            n->keys[j].store(key(n, j + 1), std::memory_order_relaxed);
            n->ptrs[j].store(ptr(n, j + 1), std::memory_order_relaxed);
        }
        n->keys[c - 1].store(kNoKey, std::memory_order_relaxed);
        n->count.store(c - 1, std::memory_order_relaxed);
    }

    // Split a full node: the upper part moves to a new right sibling; returns it. An insertion
    // at the very end (addresses growing, the usual way memory is handed out) leaves the left
    // node as it is, full, and starts the sibling with the new key alone: an index filled in
    // address order has every node full (it kept 13 of 14 before: 1.5 bytes an entry more).
    Node *split(Node *n, unsigned pos) noexcept
    {
        Node *r = alloc_node(leaf(n));
        unsigned half = pos == kFan ? kFan : kFan / 2;
        bool is_leaf = leaf(n);
        for (unsigned j = half; j < kFan; j++) {
            r->keys[j - half].store(key(n, j), std::memory_order_relaxed);
            r->ptrs[j - half].store(ptr(n, j), std::memory_order_relaxed);
            n->keys[j].store(kNoKey, std::memory_order_relaxed);
            if (is_leaf)
                note_leaf(ptr(n, j), r);
        }
        r->count.store(kFan - half, std::memory_order_relaxed);
        n->count.store(half, std::memory_order_relaxed);
        return r;
    }

    // The leaf where k belongs, with the inner nodes on the way (path) and the child taken in
    // each (at); nullptr if an inner node is empty or the tree is deeper than kMaxDepth.
    Node *descend(uintptr_t k, Node **path, unsigned *at, int *depth) const noexcept
    {
        Node *n = root();
        while (!leaf(n)) {
            unsigned c = count(n);
            if (c == 0 || *depth == kMaxDepth)
                return nullptr;
            unsigned i = (unsigned)last_le(n, c, k);
            path[*depth] = n;
            at[(*depth)++] = i;
            n = static_cast<Node *>(ptr(n, i));
        }
        return n;
    }

    // (k, v) at pos in n, splitting n if it is full: the new right sibling and its smallest
    // key for the parent, or {nullptr, 0}.
    Split put(Node *n, unsigned pos, uintptr_t k, void *v) noexcept
    {
        if (count(n) < kFan) {
            insert_at(n, pos, k, v);
            return {nullptr, 0};
        }
        Node *r = split(n, pos);
        unsigned left = count(n);
        if (pos <= left && pos != kFan)
            insert_at(n, pos, k, v);
        else
            insert_at(r, pos - left, k, v);
        return {r, key(r, 0)};
    }

    // The leftmost value under n for a reader (bounded); false if the walk could not tell.
    static bool first_value_r(const Node *n, int depth_left, void **first) noexcept
    {
        for (; n && depth_left > 0; depth_left--) {
            unsigned count = n->count.load(std::memory_order_relaxed);
            if (count == 0 || count > kFan)
                return false;
            void *v = n->ptrs[0].load(std::memory_order_relaxed);
            if (n->leaf.load(std::memory_order_relaxed)) {
                *first = v;
                return true;
            }
            n = static_cast<const Node *>(v);
        }
        return false;
    }

    // The rightmost value under n for a reader (bounded), or nullptr: for n nullptr, or a node
    // that looked torn (the caller's sequence check then fails).
    static void *last_value_r(const Node *n, int depth_left) noexcept
    {
        for (; n && depth_left > 0; depth_left--) {
            unsigned count = n->count.load(std::memory_order_relaxed);
            if (count == 0 || count > kFan)
                return nullptr;
            void *v = n->ptrs[count - 1].load(std::memory_order_relaxed);
            if (n->leaf.load(std::memory_order_relaxed))
                return v;
            n = static_cast<const Node *>(v);
        }
        return nullptr;
    }

    static void *ceil_in(const Node *n, uintptr_t x) noexcept
    {
        unsigned c = count(n);
        if (leaf(n)) {
            for (unsigned j = 0; j < c; j++)
                if (key(n, j) >= x)
                    return ptr(n, j);
            return nullptr;
        }
        if (c == 0)
            return nullptr;
        unsigned i = (unsigned)last_le(n, c, x);
        if (void *v = ceil_in(static_cast<const Node *>(ptr(n, i)), x))
            return v;
        for (unsigned j = i + 1; j < c; j++) {
            const Node *m = static_cast<const Node *>(ptr(n, j));
            while (!leaf(m))
                m = static_cast<const Node *>(ptr(m, 0));
            if (count(m))
                return ptr(m, 0);
        }
        return nullptr;
    }

    std::atomic<Node *> root_{nullptr};
    Pool<Node> leaves_, inners_;
    ptrdiff_t hint_offset_ = -1;  // of the values' LeafHint; -1: they have none
    // Writers only: v is in leaf now.
    void note_leaf(void *v, const Node *leaf) noexcept
    {
        if (hint_offset_ < 0 || !v)
            return;
        uint32_t id = leaves_.id_of(leaf, kLeafHintBits);
        auto *hint = reinterpret_cast<LeafHint *>(static_cast<char *>(v) + hint_offset_);
        hint->bytes[0] = (uint8_t)id;
        hint->bytes[1] = (uint8_t)(id >> 8);
        hint->bytes[2] = (uint8_t)(id >> 16);
    }
};

}  // namespace vmt

#endif
