// Type-stable object pools. T must begin with a pointer-sized std::atomic: a free object keeps
// the free-list link there (stored atomically, since racing readers may still load it). Objects
// are carved from mmap'ed chunks that are never returned while the pool lives, so a reader that
// raced with a free reads a valid object of the same type (and then fails its sequence check)
// instead of unmapped memory. Growth uses mmap, never malloc, so it is safe while the cache's
// index lock is held and inside hooks.
//
// Objects are carved from a chunk as they are first needed, not all at once: a fresh chunk
// faults its pages in one at a time, as the cache grows, instead of 64 page faults (about
// 150 us on a VM) in the first miss. The chunks of a pool that goes (a cache destroyed) wait
// in a small process-wide stash for the next pool, as freed memory waits in malloc: a program
// that creates caches again and again does not fault their memory in each time.
#ifndef VMTRACK_COMMON_POOL_H
#define VMTRACK_COMMON_POOL_H

#include <sys/mman.h>

#include <atomic>
#include <cstddef>
#include <mutex>
#include <new>

#include "util/spin_lock.h"

namespace vmt {

// Chunks of every pool are this size, so any pool can take any stashed chunk.
constexpr size_t kPoolChunkBytes = 256 * 1024;

// The stash of chunks left by pools that went. Only ever try-locked: a thread that finds it
// busy maps or unmaps as if there were no stash, so it never waits, and a child forked while
// another thread held it just does without.
class ChunkStash {
public:
    static void *take() noexcept
    {
        if (busy_.exchange(true, std::memory_order_acquire))
            return nullptr;
        void *c = count_ ? chunks_[--count_] : nullptr;
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
        std::lock_guard<SpinLock> g(lock_);
        if (free_) {
            T *obj = free_;
            free_ = link(obj)->load(std::memory_order_relaxed);
            free_count_--;
            return obj;
        }
        if (carve_left() == 0 && !grow())
            return nullptr;
        T *obj = new (carve_) T();
        carve_ += sizeof(T);
        return obj;
    }

    // Whether at least `count` objects are free now, growing if need be: a caller that must
    // not fail halfway through a change (the index's splits) asks once, under one lock, not
    // once per object.
    bool reserve(size_t count) noexcept
    {
        std::lock_guard<SpinLock> g(lock_);
        // What is left of the current chunk counts; a new chunk replaces it (the rest of the
        // old one goes on the free list first, so nothing is lost).
        while (free_count_ + carve_left() < count) {
            while (carve_left()) {
                T *obj = new (carve_) T();
                carve_ += sizeof(T);
                link(obj)->store(free_, std::memory_order_relaxed);
                free_ = obj;
                free_count_++;
            }
            if (!grow())
                return false;
        }
        return true;
    }

    void free(T *obj) noexcept
    {
        std::lock_guard<SpinLock> g(lock_);
        link(obj)->store(free_, std::memory_order_relaxed);
        free_ = obj;
        free_count_++;
    }

    // After fork in the child: forget what the parent had in use (its objects stay mapped and
    // are simply never handed out again); the lock may have been held by a vanished thread.
    void reset_after_fork() noexcept
    {
        new (&lock_) SpinLock();
    }

private:
    static_assert(sizeof(T) >= sizeof(void *), "pool objects hold the free link");
    static std::atomic<T *> *link(T *obj) { return reinterpret_cast<std::atomic<T *> *>(obj); }
    struct Chunk {
        Chunk *next;
    };
    static constexpr size_t kChunkBytes = kPoolChunkBytes;

    // Objects that the current chunk can still give.
    size_t carve_left() const noexcept
    {
        return carve_ ? (size_t)(carve_end_ - carve_) / sizeof(T) : 0;
    }

    // A new current chunk (the old one must be carved out).
    bool grow() noexcept
    {
        void *mem = ChunkStash::take();
        if (!mem) {
            mem = mmap(nullptr, kChunkBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
            if (mem == MAP_FAILED)
                return false;
        }
        Chunk *c = static_cast<Chunk *>(mem);
        c->next = chunks_list_;
        chunks_list_ = c;
        carve_ = static_cast<char *>(mem) + ((sizeof(Chunk) + alignof(T) - 1) / alignof(T)) * alignof(T);
        carve_end_ = static_cast<char *>(mem) + kChunkBytes;
        return true;
    }

    void release_all() noexcept
    {
        while (chunks_list_) {
            Chunk *next = chunks_list_->next;
            if (!ChunkStash::give(chunks_list_))
                munmap(chunks_list_, kChunkBytes);
            chunks_list_ = next;
        }
        carve_ = carve_end_ = nullptr;
    }

    SpinLock lock_;
    T *free_ = nullptr;
    size_t free_count_ = 0;  // objects on free_
    Chunk *chunks_list_ = nullptr;
    char *carve_ = nullptr;      // the next object of the current chunk
    char *carve_end_ = nullptr;
};

}  // namespace vmt

#endif
