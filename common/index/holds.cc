#include "config.h"
#include "index/holds.h"

#include <fcntl.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

namespace vmt {

__attribute__((visibility("hidden"))) std::atomic<bool> g_readers_fence{false};
__attribute__((visibility("hidden"))) std::atomic<long> g_retiring_caches{0};
__attribute__((visibility("hidden"))) std::atomic<uint64_t> g_grace_period{1};
__thread ThreadRecord *t_record __attribute__((tls_model("initial-exec"))) = nullptr;

namespace {

std::mutex g_records_lock;                       // guards adding records
std::atomic<ThreadRecord *> g_records{nullptr};  // all records ever made, newest first
pthread_key_t g_exit_key;
pthread_once_t g_once = PTHREAD_ONCE_INIT;
std::atomic<int> g_membarrier_state{0};  // 0 unknown, 1 registered, -1 unavailable

void on_thread_exit(void *p)
{
    // Holds the thread still has stay counted (another thread may put them); the record is
    // reused only once they are gone.
    static_cast<ThreadRecord *>(p)->owned.store(false, std::memory_order_release);
    // A later destructor that calls into vmtrack takes a new record: a thread must never read
    // the index through a record it no longer owns (reader_barrier skips such records).
    t_record = nullptr;
}

void make_key() { pthread_key_create(&g_exit_key, on_thread_exit); }

// From here on readers fence themselves. This is decided when the first thread record is made,
// before any memo slot can be filled: the memo is never filled in this mode, which is how
// vmt_get's memo path knows nothing of it. The fast put checks only g_retiring_caches, so it gets
// a permanent bias of one: every put then takes the slow path, which fences.
void readers_must_fence()
{
    if (!g_readers_fence.exchange(true))
        g_retiring_caches.fetch_add(1);
}

bool record_empty(const ThreadRecord *r)
{
    for (const auto &s : r->slots)
        if (slot_count(s.load(std::memory_order_relaxed)) != 0)
            return false;
    return true;
}

}  // namespace

void note_new_period(ThreadRecord *t, uint64_t seen) noexcept
{
    // After the period's load (the caller's acquire): nothing retired before it began can be
    // found from here on, and nothing is held now.
    if (record_empty(t))
        t->quiet_since.store(seen, std::memory_order_release);
    t->grace_seen.store(seen, std::memory_order_release);
}

namespace {

void membarrier_setup()
{
    if (g_membarrier_state.load() != 0)
        return;
    long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    bool ok = cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
              syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
    if (!ok)
        readers_must_fence();
    g_membarrier_state.store(ok ? 1 : -1);
}

// Whether this process runs one thread, from /proc/self/stat (num_threads is the 18th field
// after the command name, which may itself hold spaces and parentheses). false if unknown.
bool single_threaded()
{
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    char buf[1024];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    for (int field = 0; p && field < 18; field++)
        p = strchr(p + 1, ' ');
    return p && strtol(p + 1, nullptr, 10) == 1;
}

// The registration for membarrier costs a few microseconds in a process of one thread and
// 5-14 ms in one of two (the kernel then waits for an RCU grace period): made lazily, it
// stalled the first vmt_get of a threaded process (UCX's and Open MPI's have helper threads
// by then) for that long. A library loaded before main, or linked in, registers here while
// the process is still alone; one loaded later leaves it to its first reader, as before.
__attribute__((constructor)) void membarrier_setup_at_load()
{
    if (single_threaded())
        membarrier_setup();
}

}  // namespace

ThreadRecord *thread_record_slow() noexcept
{
    if (t_record)
        return t_record;
    pthread_once(&g_once, make_key);
    membarrier_setup();
    ThreadRecord *r = nullptr;
    for (ThreadRecord *c = g_records.load(std::memory_order_acquire); c; c = c->next) {
        bool expect = false;
        if (!c->owned.load(std::memory_order_relaxed) && record_empty(c) &&
            c->owned.compare_exchange_strong(expect, true)) {
            r = c;
            break;
        }
    }
    if (!r) {
        // mmap rather than malloc: records must never be freed or moved (readers of other
        // threads scan them), and this may run while the allocator is busy.
        void *mem = mmap(nullptr, sizeof(ThreadRecord), PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (mem == MAP_FAILED)
            return nullptr;
        r = new (mem) ThreadRecord();
        r->owned.store(true, std::memory_order_relaxed);
        std::lock_guard<std::mutex> g(g_records_lock);
        r->next = g_records.load(std::memory_order_relaxed);
        g_records.store(r, std::memory_order_seq_cst);
    }
    // A retirer that found no other thread owning a record skipped the barrier (see
    // reader_barrier): its epoch or sequence move precedes that look in the single total
    // order, so it precedes this fence, and every hit this thread makes from now on sees it.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    note_reader_progress(r);  // after the fence: no hold of its own from before
    pthread_setspecific(g_exit_key, r);
    t_record = r;
    return r;
}

int64_t holds_in_threads(HoldKey id) noexcept
{
    int64_t sum = 0;
    unsigned h = slot_home(id);
    for (ThreadRecord *r = g_records.load(std::memory_order_acquire); r; r = r->next) {
        for (unsigned k = 0; k < kHoldProbe; k++) {
            uint64_t s = r->slots[(h + k) & (kHoldSlots - 1)].load(kHoldSumOrder);
            if (slot_id(s) == id)
                sum += slot_count(s);
        }
    }
    return sum;
}

void holds_in_threads_many(const HoldKey *ids, int64_t *sums, size_t n,
                           uint64_t quiet_bound) noexcept
{
    for (size_t i = 0; i < n; i++)
        sums[i] = 0;
    for (ThreadRecord *r = g_records.load(std::memory_order_acquire); r; r = r->next) {
        if (quiet_bound && r->quiet_since.load(std::memory_order_acquire) >= quiet_bound)
            continue;
        uint64_t slots[kHoldSlots];
        bool any = false;
        for (unsigned k = 0; k < kHoldSlots; k++) {
            slots[k] = r->slots[k].load(kHoldSumOrder);
            any |= slot_count(slots[k]) != 0;
        }
        for (size_t i = 0; any && i < n; i++) {
            unsigned h = slot_home(ids[i]);
            for (unsigned k = 0; k < kHoldProbe; k++) {
                uint64_t s = slots[(h + k) & (kHoldSlots - 1)];
                if (slot_id(s) == ids[i])
                    sums[i] += slot_count(s);
            }
        }
    }
}

namespace {
// A full barrier on every CPU that runs a thread of this process, without membarrier: taking
// write permission away from a page this process has written makes the kernel shoot down its
// TLB entries on every such CPU with an interrupt, which serialises each of them.
bool protection_barrier()
{
    static std::mutex lock;
    static char *page = nullptr;
    std::lock_guard<std::mutex> g(lock);
    if (!page) {
        void *p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            return false;
        page = static_cast<char *>(p);
    }
    if (mprotect(page, 4096, PROT_READ | PROT_WRITE) != 0)
        return false;
    *reinterpret_cast<volatile char *>(page) = 1;  // a present, dirty page: the shootdown is real
    return mprotect(page, 4096, PROT_READ) == 0;
}
}  // namespace

namespace {
// Whether a thread other than the caller owns a record. Only threads with a record hold
// registrations or read the index for a hit; a thread that takes a record after this look
// fences first (thread_record_slow), so it sees what the caller changed before looking.
// Holds left in the records of threads that have exited are counted, and nobody writes them.
bool other_readers() noexcept
{
    std::atomic_thread_fence(std::memory_order_seq_cst);
    for (ThreadRecord *r = g_records.load(std::memory_order_seq_cst); r; r = r->next)
        if (r != t_record && r->owned.load(std::memory_order_seq_cst))
            return true;
    return false;
}
}  // namespace

bool reader_barrier_is_free() noexcept
{
    return g_readers_fence.load(std::memory_order_relaxed) || !other_readers();
}

bool reader_barrier_if_free() noexcept
{
    if (g_readers_fence.load(std::memory_order_relaxed)) {
        std::atomic_thread_fence(std::memory_order_seq_cst);
        return true;
    }
    return !other_readers();  // which fences before it looks, as reader_barrier's test does
}

bool reader_barrier() noexcept
{
    membarrier_setup();
    if (g_readers_fence.load(std::memory_order_relaxed) || !other_readers()) {
        // Readers fence themselves in this mode (decided once, before any hit could skip the
        // fence), or no other thread can be reading: this side needs only its own fence.
        std::atomic_thread_fence(std::memory_order_seq_cst);
        return false;
    }
    // Readers rely on this barrier: it must not fail. membarrier fails only when the kernel
    // cannot allocate a CPU mask; the protection barrier is the fallback; both are retried.
    for (unsigned attempt = 0;; attempt++) {
        if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0)
            return true;
        if (protection_barrier())
            return true;
        usleep(attempt < 10 ? 100 : 10000);
    }
}

uint64_t begin_grace_period() noexcept
{
    return g_grace_period.fetch_add(1, std::memory_order_seq_cst) + 1;
}

uint64_t grace_seen_by_all() noexcept
{
    // As other_readers: a thread that takes a record after this look fences first and notes
    // the period then.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    uint64_t oldest = UINT64_MAX;
    for (ThreadRecord *r = g_records.load(std::memory_order_seq_cst); r; r = r->next) {
        if (r == t_record || !r->owned.load(std::memory_order_seq_cst))
            continue;
        uint64_t seen = r->grace_seen.load(std::memory_order_acquire);
        oldest = seen < oldest ? seen : oldest;
    }
    return oldest;
}

void holds_lock_for_fork() noexcept { g_records_lock.lock(); }
void holds_unlock_after_fork_parent() noexcept { g_records_lock.unlock(); }

void holds_after_fork_child() noexcept
{
    // Taken by this very thread in holds_lock_for_fork: unlocked, not rebuilt, so that tools
    // that follow mutexes (TSan) see it released.
    g_records_lock.unlock();
    for (ThreadRecord *r = g_records.load(); r; r = r->next) {
        for (auto &s : r->slots)
            s.store(0, std::memory_order_relaxed);
        for (auto &h : r->hits)
            h.store(0, std::memory_order_relaxed);
        for (auto &h : r->tree_hits)
            h.store(0, std::memory_order_relaxed);
        if (r != t_record)
            r->owned.store(false);
    }
    g_retiring_caches.store(g_readers_fence.load() ? 1 : 0);
    // membarrier registration belongs to the parent's mm.
    g_membarrier_state.store(0);
    membarrier_setup();
}

uint64_t hits_in_threads(unsigned slot, bool tree) noexcept
{
    uint64_t sum = 0;
    for (ThreadRecord *r = g_records.load(std::memory_order_acquire); r; r = r->next)
        sum += (tree ? r->tree_hits : r->hits)[slot].load(std::memory_order_relaxed);
    return sum;
}

void hits_clear_slot(unsigned slot) noexcept
{
    for (ThreadRecord *r = g_records.load(std::memory_order_acquire); r; r = r->next) {
        r->hits[slot].store(0, std::memory_order_relaxed);
        r->tree_hits[slot].store(0, std::memory_order_relaxed);
    }
}

}  // namespace vmt
