// The hooks tracker: libc's mmap/munmap/mremap/madvise/brk/sbrk/shmat/shmdt entries jump into
// the functions below, which issue the system call themselves and bracket it with
// TrackerSink::unmap_begin / unmap_end for every cache registered here, so no thread can hit or
// re-register the old pages while they change. The entry patch is in hooks_patch.cc.
//
// Rules the hooks follow (they run inside glibc, maybe with malloc's locks held):
//  - no allocation, no locks of our own on the hooked path; the sinks take only their index
//    lock;
//  - the list of sinks is a fixed array readable without locks; removing a sink waits until no
//    hook uses its slot;
//  - reap() only for calls from the main program's own code, never from inside vmtrack
//    (t_depth: a hook that is already calling the caches) or from a library (libc's malloc
//    locks, a driver's locks).
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <new>

#include "trackers/hooks_patch.h"
#include "util/log.h"
#include "trackers/tracker.h"

#ifndef MADV_DONTNEED_LOCKED
#define MADV_DONTNEED_LOCKED 24
#endif
#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

namespace vmt {

namespace {

constexpr int kMaxSinks = 16;
constexpr uintptr_t kPageMask = 4095;

struct alignas(64) SinkSlot {
    std::atomic<TrackerSink *> sink{nullptr};
    std::atomic<uint32_t> users{0};
};
SinkSlot g_slots[kMaxSinks];
std::atomic<int> g_high{0};  // slots [0, g_high) may be in use

pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;  // create / destroy only

// Held while entries are being written. fork() waits for it: a child born while an entry holds
// `jmp .` would spin there for ever (the patching thread does not exist in the child).
pthread_mutex_t g_patch_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;
void fork_prepare() { pthread_mutex_lock(&g_patch_mu); }
void fork_parent() { pthread_mutex_unlock(&g_patch_mu); }
void fork_child() { pthread_mutex_init(&g_patch_mu, nullptr); }
void install_atfork() { pthread_atfork(fork_prepare, fork_parent, fork_child); }

int g_trackers = 0;
bool g_patched = false;

// How deep this thread is in the hooks' own calls into the caches (begin/end): a munmap that a
// cache or device makes from there is still reported, but does not reap (no re-entry).
__thread int t_depth __attribute__((tls_model("initial-exec")));

void **g_curbrk = nullptr;  // glibc's __curbrk

// ---- notifications ---------------------------------------------------------------------

struct Notice {
    uintptr_t start = 0;
    size_t len = 0;
    TrackerSink *got[kMaxSinks];
    uint64_t token[kMaxSinks];  // each sink's unmap_begin answer, for its unmap_end
    uint32_t mask = 0;
};

inline bool page_range(const void *addr, size_t len, uintptr_t *s, size_t *l)
{
    uintptr_t a = (uintptr_t)addr & ~kPageMask;
    uintptr_t e = (uintptr_t)addr + len;
    if (len == 0 || e < (uintptr_t)addr)
        return false;
    e = (e + kPageMask) & ~kPageMask;
    if (e == 0)
        e = ~kPageMask;
    *s = a;
    *l = e - a;
    return true;
}

void begin(Notice *n, const void *addr, size_t len)
{
    n->mask = 0;
    int high = g_high.load(std::memory_order_acquire);
    if (!high || !page_range(addr, len, &n->start, &n->len))
        return;
    t_depth++;
    for (int i = 0; i < high; i++) {
        if (!g_slots[i].sink.load(std::memory_order_relaxed))
            continue;
        g_slots[i].users.fetch_add(1, std::memory_order_seq_cst);
        TrackerSink *s = g_slots[i].sink.load(std::memory_order_seq_cst);
        if (!s) {
            g_slots[i].users.fetch_sub(1, std::memory_order_release);
            continue;
        }
        n->got[i] = s;
        n->mask |= 1u << i;
        n->token[i] = s->unmap_begin(n->start, n->len);
    }
    t_depth--;
}

void end(Notice *n, bool may_reap)
{
    if (!n->mask)
        return;
    may_reap = may_reap && t_depth == 0;
    t_depth++;
    for (uint32_t left = n->mask; left; left &= left - 1) {
        int i = __builtin_ctz(left);
        n->got[i]->unmap_end(n->start, n->len, n->token[i]);
        if (may_reap)
            n->got[i]->reap();
        g_slots[i].users.fetch_sub(1, std::memory_order_release);
    }
    t_depth--;
}

// Reaping runs device code: only when the hooked call came from the main program itself (not
// from libc, where malloc's locks may be held, nor from a library such as a driver that may
// hold locks its dereg needs) and not from inside vmtrack (t_depth). Otherwise the
// deregistration waits for the cache's next vmt_get / vmt_put / vmt_flush.
#define CALLER_MAY_REAP() (pc_in_main_program((uintptr_t)__builtin_return_address(0)))

// ---- SysV shm bookkeeping (shmdt needs the segment size) -------------------------------

constexpr int kShmSlots = 256;
struct ShmSlot {
    std::atomic<uintptr_t> addr{0};  // 0 free, 1 being filled
    std::atomic<size_t> size{0};
};
ShmSlot g_shm[kShmSlots];

void shm_note(uintptr_t addr, size_t size)
{
    for (int i = 0; i < kShmSlots; i++) {
        uintptr_t z = 0;
        if (g_shm[i].addr.load(std::memory_order_relaxed) == 0 &&
            g_shm[i].addr.compare_exchange_strong(z, 1)) {
            g_shm[i].size.store(size, std::memory_order_relaxed);
            g_shm[i].addr.store(addr, std::memory_order_release);
            return;
        }
    }
}

size_t shm_forget(uintptr_t addr)
{
    for (int i = 0; i < kShmSlots; i++) {
        uintptr_t a = addr;
        if (g_shm[i].addr.load(std::memory_order_acquire) == addr) {
            size_t sz = g_shm[i].size.load(std::memory_order_relaxed);
            if (g_shm[i].addr.compare_exchange_strong(a, 0))
                return sz;
        }
    }
    return 0;
}

unsigned long parse_num(const char **p, int base)
{
    unsigned long v = 0;
    for (;; ++*p) {
        char c = **p;
        int d = c >= '0' && c <= '9' ? c - '0'
                : base == 16 && c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return v;
        v = v * base + d;
    }
}

// "start-end perms offset maj:min inode ..." -> start, end, inode (no allocation, no stdio)
bool parse_maps_line(const char *p, unsigned long *s, unsigned long *e, unsigned long *ino)
{
    *s = parse_num(&p, 16);
    if (*p++ != '-')
        return false;
    *e = parse_num(&p, 16);
    for (int field = 0; field < 3; field++) {  // perms, offset, dev
        if (*p != ' ')
            return false;
        while (*p == ' ')
            p++;
        while (*p && *p != ' ')
            p++;
    }
    while (*p == ' ')
        p++;
    *ino = parse_num(&p, 10);
    return true;
}

// Fallback for segments attached before the hooks were in place: the extent of the mapping
// that starts at addr (contiguous lines with the same inode), from /proc/self/maps, with a
// stack buffer and raw system calls.
size_t shm_size_from_maps(uintptr_t addr)
{
    int fd = (int)syscall(SYS_open, "/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char buf[4096 + 512];
    size_t have = 0, total = 0;
    uintptr_t want = addr;
    unsigned long inode = 0;
    bool done = false;
    while (!done) {
        long n = syscall(SYS_read, fd, buf + have, sizeof buf - have - 1);
        if (n <= 0)
            break;
        have += (size_t)n;
        buf[have] = 0;
        char *line = buf;
        char *nl;
        while ((nl = strchr(line, '\n'))) {
            *nl = 0;
            unsigned long s, e, ino;
            if (parse_maps_line(line, &s, &e, &ino)) {
                if (s == want && (total == 0 || ino == inode)) {
                    inode = ino;
                    total += e - s;
                    want = e;
                } else if (total) {
                    done = true;
                    break;
                }
            }
            line = nl + 1;
        }
        have = (size_t)(buf + have - line);
        memmove(buf, line, have);
        if (have > 512)  // an absurdly long line: drop it
            have = 0;
    }
    syscall(SYS_close, fd);
    return total;
}

// ---- the hooks -----------------------------------------------------------------------

void *hk_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    if (off & (off_t)kPageMask) {
        errno = EINVAL;
        return MAP_FAILED;
    }
    if (!(flags & MAP_FIXED) || (flags & MAP_FIXED_NOREPLACE))
        return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
    Notice n;
    begin(&n, addr, len);
    void *r = (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
    int e = errno;
    end(&n, CALLER_MAY_REAP());
    errno = e;
    return r;
}

int hk_munmap(void *addr, size_t len)
{
    Notice n;
    begin(&n, addr, len);
    int r = (int)syscall(SYS_munmap, addr, len);
    int e = errno;
    end(&n, CALLER_MAY_REAP());
    errno = e;
    return r;
}

void *hk_mremap(void *old, size_t oldlen, size_t newlen, int flags, ...)
{
    void *target = nullptr;
    if (flags & MREMAP_FIXED) {
        va_list ap;
        va_start(ap, flags);
        target = va_arg(ap, void *);
        va_end(ap);
    }
    Notice a, b;
    begin(&a, old, oldlen);
    b.mask = 0;
    if (flags & MREMAP_FIXED)
        begin(&b, target, newlen);
    void *r = (void *)syscall(SYS_mremap, old, oldlen, newlen, flags, target);
    int e = errno;
    bool reap = CALLER_MAY_REAP();
    end(&b, false);
    end(&a, reap);
    errno = e;
    return r;
}

int hk_madvise(void *addr, size_t len, int advice)
{
    if (advice != MADV_DONTNEED && advice != MADV_FREE && advice != MADV_REMOVE &&
        advice != MADV_DONTNEED_LOCKED)
        return (int)syscall(SYS_madvise, addr, len, advice);
    Notice n;
    begin(&n, addr, len);
    int r = (int)syscall(SYS_madvise, addr, len, advice);
    int e = errno;
    end(&n, CALLER_MAY_REAP());
    errno = e;
    return r;
}

void *cur_brk()
{
    if (!*g_curbrk)
        *g_curbrk = (void *)syscall(SYS_brk, 0);
    return *g_curbrk;
}

// Move the break to `want`, bracketing a shrink; 0 or -1 (ENOMEM) like brk().
int set_brk(void *want, bool may_reap)
{
    void *old = cur_brk();
    Notice n;
    n.mask = 0;
    if ((uintptr_t)want < (uintptr_t)old) {
        // pages wholly above the new break go away
        uintptr_t from = ((uintptr_t)want + kPageMask) & ~kPageMask;
        uintptr_t to = ((uintptr_t)old + kPageMask) & ~kPageMask;
        if (to > from)
            begin(&n, (void *)from, to - from);
    }
    void *nb = (void *)syscall(SYS_brk, want);
    *g_curbrk = nb;
    end(&n, may_reap);
    if ((uintptr_t)nb < (uintptr_t)want) {
        errno = ENOMEM;
        return -1;
    }
    return 0;
}

int hk_brk(void *addr)
{
    return set_brk(addr, CALLER_MAY_REAP());
}

void *hk_sbrk(intptr_t incr)
{
    bool reap = CALLER_MAY_REAP();
    void *old = cur_brk();
    if (incr == 0)
        return old;
    uintptr_t o = (uintptr_t)old;
    if (incr > 0 ? o + (uintptr_t)incr < o : o < (uintptr_t)-incr) {
        errno = ENOMEM;
        return (void *)-1;
    }
    if (set_brk((void *)(o + incr), reap) < 0)
        return (void *)-1;
    return old;
}

void *hk_shmat(int id, const void *addr, int flg)
{
    struct shmid_ds ds;
    size_t size = 0;
    if (syscall(SYS_shmctl, id, IPC_STAT, &ds) == 0)
        size = ds.shm_segsz;
    Notice n;
    n.mask = 0;
    if (addr && (flg & SHM_REMAP) && size) {
        uintptr_t a = (uintptr_t)addr;
        if (flg & SHM_RND)
            a &= ~(uintptr_t)(SHMLBA - 1);
        begin(&n, (void *)a, size);
    }
    void *r = (void *)syscall(SYS_shmat, id, addr, flg);
    int e = errno;
    end(&n, CALLER_MAY_REAP());
    if (r != (void *)-1 && size)
        shm_note((uintptr_t)r, size);
    errno = e;
    return r;
}

int hk_shmdt(const void *addr)
{
    size_t size = shm_forget((uintptr_t)addr);
    if (!size)
        size = shm_size_from_maps((uintptr_t)addr);
    Notice n;
    n.mask = 0;
    if (size)
        begin(&n, addr, size);
    int r = (int)syscall(SYS_shmdt, addr);
    int e = errno;
    end(&n, CALLER_MAY_REAP());
    errno = e;
    return r;
}

PatchSite g_sites[] = {
    {"mmap", (void *)hk_mmap},     {"mmap64", (void *)hk_mmap},   {"munmap", (void *)hk_munmap},
    {"mremap", (void *)hk_mremap}, {"madvise", (void *)hk_madvise}, {"brk", (void *)hk_brk},
    {"sbrk", (void *)hk_sbrk},     {"shmat", (void *)hk_shmat},   {"shmdt", (void *)hk_shmdt},
};
constexpr size_t kNumSites = sizeof g_sites / sizeof g_sites[0];
static_assert(kNumSites <= IntactSet::kMax, "every site fits the quick intact check");
// Set while patched, under g_patch_mu, before any tracker of the patch checks it.
IntactSet g_intact;

// Signals are blocked while patching: a handler on this thread that called munmap would wait
// at `jmp .` for this very thread.
int patch_in(std::string *why)
{
    pthread_once(&g_atfork_once, install_atfork);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_mutex_lock(&g_patch_mu);
    int rc = patch_install(g_sites, kNumSites, why);
    patch_intact_set(g_sites, kNumSites, &g_intact);
    pthread_mutex_unlock(&g_patch_mu);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return rc;
}

void patch_out()
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_mutex_lock(&g_patch_mu);
    patch_remove(g_sites, kNumSites);
    patch_intact_set(g_sites, kNumSites, &g_intact);
    pthread_mutex_unlock(&g_patch_mu);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

// ASan, TSan, MSan and HWASan replace malloc and map/unmap its memory with raw system calls:
// free() of a large block would never reach libc's munmap, so hooks would serve stale pages.
const char *sanitizer_runtime()
{
    static const char *const names[] = {"__asan_init", "__tsan_init", "__msan_init",
                                        "__hwasan_init"};
    for (const char *n : names)
        if (dlsym(RTLD_DEFAULT, n))
            return n;
    return nullptr;
}

int locate(std::string *why)
{
    if (const char *san = sanitizer_runtime()) {
        *why = std::string("a sanitizer runtime (") + san + ") replaces malloc and unmaps "
               "with raw system calls that libc hooks cannot see; use uffd or kmod";
        return -ENOTSUP;
    }
    int rc = patch_locate(g_sites, kNumSites, why);
    if (rc)
        return rc;
    g_curbrk = (void **)libc_symbol("__curbrk");
    if (!g_curbrk) {
        *why = "libc does not export __curbrk (needed to hook brk/sbrk)";
        return -ENOENT;
    }
    return 0;
}

// Who else defines the symbol that PLT calls reach first (LD_PRELOAD, ucm's reloc mode).
std::string interposers()
{
    std::string out;
    for (size_t i = 0; i < kNumSites; i++) {
        void *first = dlsym(RTLD_DEFAULT, g_sites[i].name);
        Dl_info info;
        if (first && first != (void *)g_sites[i].entry && dladdr(first, &info) &&
            info.dli_fname) {
            if (!out.empty())
                out += ", ";
            out += std::string(g_sites[i].name) + " -> " + info.dli_fname;
        }
    }
    return out;
}

// Set once another patcher has written over one of our entries (UCX ucm or Open MPI loaded
// after us): from then on changes may go unseen, so nothing more is cached.
std::atomic<bool> g_overridden{false};
std::string g_override_who;  // written once, under g_lock

class HooksTracker final : public Tracker {
public:
    HooksTracker(int slot, TrackerSink *sink) : slot_(slot), sink_(sink) {}
    ~HooksTracker() override;
    const char *name() const noexcept override { return "hooks"; }
    int watch(uintptr_t, size_t, WatchToken *token) noexcept override
    {
        *token = WatchToken{};
        // The miss that watches has just polled (check_intact): a patcher that writes over us
        // after that is found by the next miss, which drops everything cached by then, this
        // range too, as it does for ranges cached just before the patcher came.
        if (__builtin_expect(g_overridden.load(std::memory_order_relaxed), 0))
            return -ENOTSUP;  // served uncached: never stale
        return 0;
    }
    void unwatch(uintptr_t, size_t, WatchToken) noexcept override {}
    bool watches_ranges() const noexcept override { return false; }
    // Every libc entry that unmaps tells the sinks first; once another patcher has taken
    // them over, watch() refuses and the sinks were told to drop everything (check_intact).
    bool hears_every_unmap() const noexcept override { return true; }
    void poll() noexcept override { check_intact(); }
    std::string describe() const override;

private:
    // Someone patched over us: say so once, drop everything cached (it may be stale), and
    // cache nothing from now on (watch() says -ENOTSUP).
    bool check_intact() noexcept
    {
        if (g_overridden.load(std::memory_order_relaxed)) {
            return false;
        }
        if (patch_intact_quick(g_intact) || patch_intact(g_sites, kNumSites, nullptr))
            return true;
        pthread_mutex_lock(&g_lock);
        if (!g_overridden.load()) {
            std::string who;
            patch_intact(g_sites, kNumSites, &who);
            g_override_who = who;
            g_overridden.store(true);
            VMT_LOG_ERROR("hooks tracker: %s; vmtrack does not stack patchers: caching is off "
                          "for caches using the hooks tracker", who.c_str());
        }
        pthread_mutex_unlock(&g_lock);
        sink_->invalidate(0, ~(uintptr_t)4095);
        return false;
    }

    int slot_;
    TrackerSink *sink_;
};

HooksTracker::~HooksTracker()
{
    pthread_mutex_lock(&g_lock);
    g_slots[slot_].sink.store(nullptr, std::memory_order_seq_cst);
    while (g_slots[slot_].users.load(std::memory_order_acquire))
        sched_yield();
    if (--g_trackers == 0 && g_patched) {
        patch_out();
        g_patched = false;
        g_overridden.store(false);
    }
    pthread_mutex_unlock(&g_lock);
}

std::string HooksTracker::describe() const
{
    std::string d;
    d += "functions: mmap(MAP_FIXED) mmap64 munmap mremap madvise(DONTNEED,FREE,REMOVE,"
         "DONTNEED_LOCKED) brk sbrk shmat(SHM_REMAP) shmdt, patched in libc itself\n";
    d += "patch: " + patch_method() + "\n";
    d += "catches: calls through libc, including libc's own (free/realloc/malloc trim)\n";
    d += "misses: raw system calls (syscall(SYS_munmap), inline asm), statically linked or "
         "other libcs, changes made by the kernel or another process\n";
    std::string ip = interposers();
    d += "interposed (PLT calls reach these first, then libc): " + (ip.empty() ? "none" : ip) +
         "\n";
    if (g_overridden.load())
        d += "conflicts: " + g_override_who + " after vmtrack patched it: nothing is cached "
             "any more with this tracker\n";
    else
        d += "conflicts: none (vmtrack is the only patcher of these entries)\n";
    d += "cost: the hooked call issues the system call itself, with no extra thread and no "
         "context switch; `vmtrack info --measure` measures it\n";
    return d;
}

__attribute__((destructor)) void hooks_unload()
{
    pthread_mutex_lock(&g_lock);
    if (g_patched) {
        patch_out();
        g_patched = false;
    }
    pthread_mutex_unlock(&g_lock);
}

}  // namespace

int hooks_tracker_probe(std::string *why)
{
#if !defined(__x86_64__)
    *why = "libc entry patching is implemented for x86-64 only";
    return -ENOTSUP;
#else
    pthread_mutex_lock(&g_lock);
    int rc = locate(why);
    if (!rc && !g_patched) {
        for (size_t i = 0; i < kNumSites; i++) {
            std::string owner;
            if (!g_sites[i].alias && patch_entry_foreign(g_sites[i].entry, &owner)) {
                *why = std::string("libc's ") + g_sites[i].name +
                       "() entry is already patched by " + owner +
                       "; vmtrack does not stack patchers";
                rc = -EBUSY;
                break;
            }
        }
    }
    if (!rc && g_overridden.load()) {
        *why = "libc's " + g_override_who + "; vmtrack does not stack patchers";
        rc = -EBUSY;
    }
    if (!rc)
        *why = g_patched ? "ok (active)" : "ok";
    pthread_mutex_unlock(&g_lock);
    return rc;
#endif
}

int hooks_tracker_create(TrackerSink *sink, std::unique_ptr<Tracker> *out, std::string *why)
{
#if !defined(__x86_64__)
    return hooks_tracker_probe(why);
#else
    pthread_mutex_lock(&g_lock);
    int slot = -1;
    for (int i = 0; i < kMaxSinks; i++) {
        if (!g_slots[i].sink.load(std::memory_order_relaxed) &&
            !g_slots[i].users.load(std::memory_order_relaxed)) {
            slot = i;
            break;
        }
    }
    if (slot < 0) {
        pthread_mutex_unlock(&g_lock);
        *why = "too many caches use the hooks tracker (16)";
        return -ENOSPC;
    }
    if (g_patched && g_overridden.load()) {
        *why = "libc's " + g_override_who + "; vmtrack does not stack patchers";
        pthread_mutex_unlock(&g_lock);
        return -EBUSY;
    }
    if (!g_patched) {
        int rc = locate(why);
        if (!rc)
            rc = patch_in(why);
        if (rc) {
            pthread_mutex_unlock(&g_lock);
            return rc;
        }
        g_patched = true;
    }
    g_trackers++;
    g_slots[slot].sink.store(sink, std::memory_order_seq_cst);
    if (slot >= g_high.load(std::memory_order_relaxed))
        g_high.store(slot + 1, std::memory_order_release);
    pthread_mutex_unlock(&g_lock);
    out->reset(new (std::nothrow) HooksTracker(slot, sink));
    if (!*out) {  // undo: the destructor path, by hand
        HooksTracker t(slot, sink);
        *why = "out of memory";
        return -ENOMEM;
    }
    return 0;
#endif
}

}  // namespace vmt
