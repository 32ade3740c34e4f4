// Type-stable object pools. T must begin with a pointer-sized std::atomic: a free object keeps
// the free-list link there (stored atomically, since racing readers may still load it). Objects are carved from mmap'ed chunks that are never returned to
// the system while the pool lives, so a reader that raced with a free reads a valid object of
// the same type (and then fails its sequence check) instead of unmapped memory. Growth uses
// mmap, never malloc, so it is safe while the cache's index lock is held and inside hooks.
#ifndef VMTRACK_COMMON_POOL_H
#define VMTRACK_COMMON_POOL_H

#include <sys/mman.h>

#include <atomic>
#include <cstddef>
#include <mutex>
#include <new>

#include "util/spin_lock.h"

namespace vmt {

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
        if (!free_ && !grow())
            return nullptr;
        T *obj = free_;
        free_ = link(obj)->load(std::memory_order_relaxed);
        free_count_--;
        return obj;
    }

    // Whether at least `count` objects are free now, growing if need be: a caller that must
    // not fail halfway through a change (the index's splits) asks once, under one lock, not
    // once per object.
    bool reserve(size_t count) noexcept
    {
        std::lock_guard<SpinLock> g(lock_);
        while (free_count_ < count)
            if (!grow())
                return false;
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
    static constexpr size_t kChunkBytes = 256 * 1024;

    bool grow() noexcept
    {
        void *mem = mmap(nullptr, kChunkBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                         -1, 0);
        if (mem == MAP_FAILED)
            return false;
        Chunk *c = static_cast<Chunk *>(mem);
        c->next = chunks_list_;
        chunks_list_ = c;
        char *p = static_cast<char *>(mem) + ((sizeof(Chunk) + alignof(T) - 1) / alignof(T)) * alignof(T);
        char *end = static_cast<char *>(mem) + kChunkBytes;
        for (; p + sizeof(T) <= end; p += sizeof(T)) {
            T *obj = new (p) T();
            link(obj)->store(free_, std::memory_order_relaxed);
            free_ = obj;
            free_count_++;
        }
        return true;
    }

    void release_all() noexcept
    {
        while (chunks_list_) {
            Chunk *next = chunks_list_->next;
            munmap(chunks_list_, kChunkBytes);
            chunks_list_ = next;
        }
    }

    SpinLock lock_;
    T *free_ = nullptr;
    size_t free_count_ = 0;  // objects on free_
    Chunk *chunks_list_ = nullptr;
};

}  // namespace vmt

#endif
