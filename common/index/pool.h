// Type-stable object pools. T must begin with a pointer-sized std::atomic: a free object keeps
// the free-list link there (stored atomically, since racing readers may still load it). Objects
// are carved from mmap'ed chunks that are never returned while the pool lives, so a reader that
// raced with a free reads a valid object of the same type (and then fails its sequence check)
// instead of unmapped memory. Growth uses mmap, never malloc, so it is safe while the cache's
// index lock is held and inside hooks.
//
// A pool has no lock of its own: every alloc and free of a cache's pools (its entries, its
// registrations, its index's nodes) happens under the cache's index lock, which a miss takes
// anyway; a lock per pool cost each miss five more atomic exchanges.
//
// A chunk is carved as objects are needed, not when it is mapped: carving a whole chunk cost
// its 64 page faults (about 150 us on a VM) in the one miss that grew the pool, three times
// over in a new cache's first miss (entries, registrations, index nodes), where a cache of a
// few hundred entries touches a few pages of each. A fresh chunk's objects are its zero
// pages (carve). The chunks of a pool that goes (a cache destroyed) wait in a small
// process-wide stash for the next pool, as freed memory waits in malloc. Each chunk says
// which type it holds and how far it was ever carved (Chunk): a pool that takes one of its
// own type carves it again from the start, its objects valid already below that mark and zero
// pages above it, so taking it writes nothing. Building the whole chunk into the free list
// instead touched all 64 pages of a chunk its last pool had carved a few pages of: about 240
// page faults and 10000 constructions in a new cache's first misses, the cost of every
// new cache but the first in a process (a bench that makes a cache per run, or a test).
#ifndef VMTRACK_COMMON_POOL_H
#define VMTRACK_COMMON_POOL_H

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>

namespace vmt {

// Chunks of every pool are this size, so any pool can take any stashed chunk. They are
// mapped at an address that is a multiple of their size, so that an object's chunk is its
// address rounded down (Pool::id_of).
constexpr size_t kPoolChunkBytes = 256 * 1024;

// The head of every chunk. type: the pool type whose objects the chunk holds (Pool<T>::
// type_tag); carved: the offset below which its objects were ever handed out (valid objects of
// that type); above it the chunk is the zero pages mmap gave. number: its place in its pool's
// table of chunks, from 1 (Pool::id_of), given by each pool that takes it.
struct PoolChunk {
    PoolChunk *next;
    const void *type;
    size_t carved;
    uint32_t number;
};

// A chunk of kPoolChunkBytes at a multiple of that size, or nullptr: twice the size mapped,
// the ends cut off. Cut by the system call itself, not libc's munmap: a pool grows under its
// cache's index lock, and the hooks tracker's munmap would take that lock (a deadlock).
inline void *map_pool_chunk() noexcept
{
    void *raw = mmap(nullptr, 2 * kPoolChunkBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return nullptr;
    uintptr_t start = reinterpret_cast<uintptr_t>(raw);
    uintptr_t aligned = (start + kPoolChunkBytes - 1) & ~(uintptr_t)(kPoolChunkBytes - 1);
    if (aligned > start)
        syscall(SYS_munmap, raw, aligned - start);
    uintptr_t end = start + 2 * kPoolChunkBytes;
    if (aligned + kPoolChunkBytes < end)
        syscall(SYS_munmap, aligned + kPoolChunkBytes, end - aligned - kPoolChunkBytes);
    return reinterpret_cast<void *>(aligned);
}

// Chunks for large pools, carved from 2 MiB regions advised for huge pages. A lookup over a
// large cache reads a leaf, an entry and a registration, each in a page of its own: with 4 KiB
// pages each also missed the TLB (a two-dimensional walk in a VM), about a quarter of a
// random hit over 10^6 entries. One arena for every pool of the process, so that only its
// newest region is ever partly used (a region per pool left three of them resident but
// half empty: 4-5 bytes an entry at 10^6). Small pools (kHugeAfterChunks) never come here:
// a cache of a few hundred entries would be resident 2 MiB for them.
class HugeArena {
public:
    static constexpr size_t kRegionBytes = 2 * 1024 * 1024;
    // A chunk of kPoolChunkBytes at a multiple of that size, or nullptr (busy, or no memory:
    // the caller maps an ordinary chunk). Only ever try-locked, like ChunkStash.
    static void *take() noexcept
    {
        if (busy_.exchange(true, std::memory_order_acquire))
            return nullptr;
        if (next_ == end_)
            map_region();
        void *c = nullptr;
        if (next_ != end_) {
            c = next_;
            next_ += kPoolChunkBytes;
        }
        busy_.store(false, std::memory_order_release);
        return c;
    }

private:
    // mmap and madvise by system call: a pool grows under its cache's index lock, and a
    // patcher in front of libc's (the hooks tracker) may take that lock.
    static void map_region() noexcept
    {
        long raw = syscall(SYS_mmap, nullptr, 2 * kRegionBytes, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (raw < 0 && raw > -4096)
            return;
        uintptr_t start = (uintptr_t)raw;
        uintptr_t aligned = (start + kRegionBytes - 1) & ~(uintptr_t)(kRegionBytes - 1);
        if (aligned > start)
            syscall(SYS_munmap, start, aligned - start);
        if (aligned + kRegionBytes < start + 2 * kRegionBytes)
            syscall(SYS_munmap, aligned + kRegionBytes, start + kRegionBytes - aligned);
        syscall(SYS_madvise, aligned, kRegionBytes, MADV_HUGEPAGE);  // a hint; fine if refused
        next_ = reinterpret_cast<char *>(aligned);
        end_ = next_ + kRegionBytes;
    }
    static inline std::atomic<bool> busy_{false};
    static inline char *next_ = nullptr, *end_ = nullptr;
};

// The stash of chunks left by pools that went. Only ever try-locked: a thread that finds it
// busy maps or unmaps as if there were no stash, so it never waits, and a child forked while
// another thread held it just does without.
class ChunkStash {
public:
    // A chunk of `type` if there is one, else any, else nullptr.
    static PoolChunk *take(const void *type) noexcept
    {
        if (busy_.exchange(true, std::memory_order_acquire))
            return nullptr;
        PoolChunk *c = nullptr;
        if (count_) {
            size_t pick = count_ - 1;
            for (size_t i = count_; i-- > 0;)
                if (static_cast<PoolChunk *>(chunks_[i])->type == type) {
                    pick = i;
                    break;
                }
            c = static_cast<PoolChunk *>(chunks_[pick]);
            chunks_[pick] = chunks_[--count_];
        }
        busy_.store(false, std::memory_order_release);
        return c;
    }
    // false: no room (or busy); the caller unmaps the chunk.
    static bool give(void *chunk) noexcept
    {
        if (busy_.exchange(true, std::memory_order_acquire))
            return false;
        bool kept = count_ < kMax;
        if (kept)
            chunks_[count_++] = chunk;
        busy_.store(false, std::memory_order_release);
        return kept;
    }

private:
    static constexpr size_t kMax = 16;  // 4 MiB: a few caches' worth of small pools
    static inline std::atomic<bool> busy_{false};
    static inline void *chunks_[kMax];
    static inline size_t count_ = 0;
};

template <typename T>
class Pool {
public:
    Pool() = default;
    Pool(const Pool &) = delete;
    Pool &operator=(const Pool &) = delete;
    ~Pool() { release_all(); }

    // nullptr only when the system refuses memory.
    T *alloc() noexcept
    {
        if (!free_ && uncarved() == 0 && !grow())
            return nullptr;
        if (!free_)
            return carve();  // a fresh chunk's (grow built a stashed one into free_)
        T *obj = free_;
        free_ = link(obj)->load(std::memory_order_relaxed);
        free_count_--;
        return obj;
    }

    // Whether at least `count` objects can be had now, growing if need be: a caller that must
    // not fail halfway through a change (the index's splits) asks once. (A chunk holds far
    // more objects than any caller asks for, so one new chunk does; what the old one had left
    // uncarved is given to the free list first.)
    bool reserve(size_t count) noexcept
    {
        if (free_count_ + uncarved() >= count)
            return true;
        while (uncarved())
            free(carve());
        return grow() && free_count_ + uncarved() >= count;
    }

    void free(T *obj) noexcept
    {
        link(obj)->store(free_, std::memory_order_relaxed);
        free_ = obj;
        free_count_++;
    }

    // A number for an object of this pool, below 2^bits, that at() turns back into the object
    // while the pool lives; 0 (no number) for one of a chunk past what `bits` can name. For
    // a caller that keeps a reference to an object in fewer bits than a pointer (the index's
    // leaf hints): at() of a number whose object was freed meanwhile gives an object of this
    // pool all the same, so such a reference is a hint, checked by its user.
    uint32_t id_of(const T *obj, unsigned bits) const noexcept
    {
        uintptr_t at = reinterpret_cast<uintptr_t>(obj);
        auto *c = reinterpret_cast<const Chunk *>(at & ~(uintptr_t)(kChunkBytes - 1));
        if (c->number == 0)
            return 0;  // a chunk the table had no room for
        uint64_t id = (uint64_t)c->number << kIndexBits |
                      (at - reinterpret_cast<uintptr_t>(c) - kFirstObject) / sizeof(T);
        return id < (1ull << bits) ? (uint32_t)id : 0;
    }
    // The object numbered id, or nullptr for 0 or a number no chunk of this pool has.
    T *at(uint32_t id) const noexcept
    {
        uint32_t number = id >> kIndexBits, index = id & ((1u << kIndexBits) - 1);
        if (number == 0 || number > chunk_count_ || index >= kPerChunk)
            return nullptr;
        char *c = reinterpret_cast<char *>(table_[number - 1]);
        return std::launder(reinterpret_cast<T *>(c + kFirstObject + index * sizeof(T)));
    }

private:
    static_assert(sizeof(T) >= sizeof(void *), "pool objects hold the free link");
    static std::atomic<T *> *link(T *obj) { return reinterpret_cast<std::atomic<T *> *>(obj); }
    using Chunk = PoolChunk;
    static constexpr size_t kChunkBytes = kPoolChunkBytes;
    static constexpr size_t kFirstObject =
        ((sizeof(Chunk) + alignof(T) - 1) / alignof(T)) * alignof(T);
    static constexpr size_t kPerChunk = (kChunkBytes - kFirstObject) / sizeof(T);
    static constexpr unsigned index_bits(size_t n)
    {
        return n <= 1 ? 0 : 1 + index_bits((n + 1) / 2);
    }
    static constexpr unsigned kIndexBits = index_bits(kPerChunk);
    // The table of chunks for at(): chunk number n at table_[n - 1]; mapped when the first
    // chunk comes (its zero pages cost nothing until written: 8 bytes a chunk).
    static constexpr size_t kTableChunks = 1 << 16;
    // A pool of this many chunks (2 MiB) takes its next ones from the huge-page arena.
    static constexpr size_t kHugeAfterChunks = 8;
    static const void *type_tag() noexcept
    {
        static const char tag = 0;  // one per T: its address names the type
        return &tag;
    }

    bool grow() noexcept
    {
        close_newest();
        if (!table_) {
            void *t = mmap(nullptr, kTableChunks * sizeof(Chunk *), PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (t == MAP_FAILED)
                return false;
            table_ = static_cast<Chunk **>(t);
        }
        Chunk *c = ChunkStash::take(type_tag());
        if (!c) {
            void *mem = chunk_count_ >= kHugeAfterChunks ? HugeArena::take() : nullptr;
            if (!mem)
                mem = map_pool_chunk();
            if (!mem)
                return false;
            c = static_cast<Chunk *>(mem);
            c->type = type_tag();
            c->carved = kFirstObject;
        }
        c->next = chunks_list_;
        chunks_list_ = c;
        // Numbered while the table has room; later chunks' objects have no number (id_of).
        c->number = chunk_count_ < kTableChunks ? (uint32_t)chunk_count_ + 1 : 0;
        if (c->number) {
            table_[chunk_count_] = c;
            chunk_count_++;
        }
        char *p = reinterpret_cast<char *>(c) + kFirstObject;
        char *end = reinterpret_cast<char *>(c) + kChunkBytes;
        if (!zero_is_default()) {  // zero pages are no T: every object built, at once
            carve_ = carve_end_ = nullptr;
            for (char *q = p; q + sizeof(T) <= end; q += sizeof(T))
                free(new (q) T());
            c->type = type_tag();
            c->carved = kChunkBytes;
            return true;
        }
        if (c->type != type_tag()) {
            // Another type's objects where it was carved: built as T; above, zero pages.
            char *carved_end = reinterpret_cast<char *>(c) + c->carved;
            for (char *q = p; q < carved_end && q + sizeof(T) <= end; q += sizeof(T))
                new (q) T();
            c->type = type_tag();
        }
        carve_ = p;
        carve_end_ = end;
        return true;
    }

    // The newest chunk's carved mark, before it stops being the newest or goes to the stash.
    void close_newest() noexcept
    {
        if (!chunks_list_ || !carve_)
            return;
        size_t at = size_t(carve_ - reinterpret_cast<char *>(chunks_list_));
        if (at > chunks_list_->carved)
            chunks_list_->carved = at;
    }

    // An object of a fresh chunk is its zero pages, which are a T() (zero_is_default), and one
    // of a stashed chunk of T's below its carved mark a T its last pool left, so carving writes
    // nothing. Constructing it here instead, under the index lock and just
    // before the object is published, left no happens-before between those stores and a
    // lock-free reader that races the publication (TSan saw it): such a reader only reads
    // and then fails its sequence check, and now it reads what the kernel zeroed.
    T *carve() noexcept
    {
        T *obj = std::launder(reinterpret_cast<T *>(carve_));
        carve_ += sizeof(T);
        return obj;
    }

    // Whether T() is all zero bytes (so a zero page is one): computed once per type.
    static bool zero_is_default() noexcept
    {
        static const bool zero = [] {
            alignas(T) static unsigned char buf[sizeof(T)];  // zero, as static storage is
            new (buf) T();
            for (unsigned char b : buf)
                if (b)
                    return false;
            return true;
        }();
        return zero;
    }

    // Objects the newest chunk can still give without touching what it gave.
    size_t uncarved() const noexcept
    {
        return carve_ ? size_t(carve_end_ - carve_) / sizeof(T) : 0;
    }

    void release_all() noexcept
    {
        close_newest();
        while (chunks_list_) {
            Chunk *next = chunks_list_->next;
            if (!ChunkStash::give(chunks_list_))
                munmap(chunks_list_, kChunkBytes);
            chunks_list_ = next;
        }
        if (table_)
            munmap(table_, kTableChunks * sizeof(Chunk *));
        table_ = nullptr;
        chunk_count_ = 0;
    }

    Chunk **table_ = nullptr;
    size_t chunk_count_ = 0;
    T *free_ = nullptr;
    size_t free_count_ = 0;  // objects on free_
    Chunk *chunks_list_ = nullptr;
    char *carve_ = nullptr, *carve_end_ = nullptr;  // the newest chunk's part not handed out
};

}  // namespace vmt

#endif
