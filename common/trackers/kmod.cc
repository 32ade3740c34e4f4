// "kmod": the client of /dev/vmtrack (kmod/vmtrack.ko, doc/kmod.md).
//
// The module watches each cached range with an mmu_interval_notifier and, before any change
// of the range's pages completes (munmap, mremap, madvise, MAP_FIXED, brk, shmdt, truncate,
// raw system calls, changes the kernel makes itself), increments the range's word in pages
// mapped read-only here. The hit path compares words()[handle] == expect: one load, no system
// call, and no window: from the moment the kernel changes the word no thread gets a hit.
// Events (one per watch) are read on the miss path (poll) to drop entries and tell
// subscribers; subscribers therefore hear of a change late, not before it.
//
// A watch the cache gives back is parked, not unwatched, while its word has not moved: a
// range registered again at the same place (evicted under a working set larger than the
// cache, or the same buffer used again after its registration was reclaimed) then reuses it
// with no system call. An unmoved word means the kernel saw no change of the range since the
// watch was set, so the parked watch is as good as a new one set now.
#include "config.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sched.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../kmod/uapi/vmtrack_kmod.h"
#include "util/log.h"
#include "trackers/tracker.h"

namespace vmt {
namespace {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                  alignof(std::atomic<uint32_t>) == alignof(uint32_t),
              "the module's words are read as std::atomic<uint32_t>");
static_assert(sizeof(std::atomic<uint64_t>) == sizeof(uint64_t) &&
                  std::atomic<uint64_t>::is_always_lock_free && VMTRACK_W_LOG % 2 == 0,
              "the change log's count is read as std::atomic<uint64_t>");

// Open the device, check its ABI, map the words. 0 or a negative errno and *why.
int open_device(int *fd_out, vmtrack_info *info, const std::atomic<uint32_t> **words,
                std::string *why)
{
    struct stat st;
    if (stat(VMTRACK_DEVICE, &st) != 0) {
        int e = errno;
        *why = e == ENOENT ? "module not loaded (" VMTRACK_DEVICE " missing; modprobe vmtrack, "
                             "see doc/kmod.md)"
                           : std::string("cannot stat " VMTRACK_DEVICE ": ") + strerror(e);
        return e == ENOENT ? -ENODEV : -e;
    }
    int fd = open(VMTRACK_DEVICE, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        *why = std::string("cannot open " VMTRACK_DEVICE ": ") + strerror(e);
        return -e;
    }
    memset(info, 0, sizeof *info);
    if (ioctl(fd, VMTRACK_IOC_INFO, info) != 0) {
        int e = errno;
        *why = std::string(VMTRACK_DEVICE " does not answer VMTRACK_IOC_INFO (") + strerror(e) +
               "): not vmtrack.ko, or a version this library does not know";
        close(fd);
        return e == ENOTTY ? -ENOTSUP : -e;
    }
    info->version[sizeof info->version - 1] = 0;
    if (info->abi_version != VMTRACK_ABI_VERSION || info->first_index != VMTRACK_FIRST_INDEX ||
        info->event_size != sizeof(vmtrack_event)) {
        char b[200];
        snprintf(b, sizeof b, "version mismatch: module %s has ABI %u, this library wants %u",
                 info->version, info->abi_version, VMTRACK_ABI_VERSION);
        *why = b;
        close(fd);
        return -EPROTO;
    }
    if (words) {
        void *p = mmap(nullptr, info->map_bytes, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            *why = std::string("cannot map the words of " VMTRACK_DEVICE ": ") + strerror(e);
            close(fd);
            return -e;
        }
        *words = static_cast<const std::atomic<uint32_t> *>(p);
        if ((*words)[VMTRACK_W_MAGIC].load() != VMTRACK_MAGIC) {
            *why = "the mapped words lack the module's magic number";
            munmap(p, info->map_bytes);
            close(fd);
            return -EPROTO;
        }
    }
    *fd_out = fd;
    return 0;
}

class KmodTracker final : public Tracker {
public:
    explicit KmodTracker(TrackerSink *sink) : sink_(sink) {}
    ~KmodTracker() override { shut(); }

    int start(std::string *why) { return open_device(&fd_, &info_, &words_, why); }

    const char *name() const noexcept override { return "kmod"; }
    const std::atomic<uint32_t> *words() const noexcept override { return words_; }
    // A module with VMTRACK_FEATURE_WATCH_MAPPED refuses to watch a range with a hole, and a
    // parked watch is reused only while its word has not moved (no unmap since its check).
    bool watch_checks_mapped() const noexcept override
    {
        return info_.features & VMTRACK_FEATURE_WATCH_MAPPED;
    }

    int watch(uintptr_t start, size_t len, WatchToken *token) noexcept override
    {
        if (unpark(start, len, token))
            return 0;
        int rc = watch_in_module(start, len, token);
        if (rc == -ENOSPC && drain_park()) // parked watches count against max_watches
            rc = watch_in_module(start, len, token);
        if (rc == -ENOSPC) {
            // The module's per-file limit: serve the range uncached rather than fail.
            if (!full_warned_.exchange(true))
                VMT_LOG_WARN("kmod: the module watches %u ranges, its limit (module "
                             "parameter max_watches): more are served uncached",
                             info_.max_watches);
            return -ENOTSUP;
        }
        return rc;
    }

    void unwatch(uintptr_t start, size_t len, WatchToken token) noexcept override
    {
        if (!unchanged(token)) {
            unwatch_in_module(token);
            return;
        }
        Parked old;
        {
            ParkGuard g(park_busy_);
            Parked &p = park_[park_slot(start, len)];
            old = p;
            p = Parked{start, len, token, true};
        }
        if (old.used)
            unwatch_in_module(old.token);
    }

    void poll() noexcept override
    {
        // One load when nothing happened.
        if (fd_ < 0 || words_[VMTRACK_W_EVENTS].load(std::memory_order_acquire) == 0)
            return;
        vmtrack_event ev[64];
        for (;;) {
            ssize_t n = read(fd_, ev, sizeof ev);
            if (n <= 0) {
                if (n < 0 && errno == EINTR)
                    continue;
                break;
            }
            size_t k = static_cast<size_t>(n) / sizeof ev[0];
            for (size_t i = 0; i < k; i++) {
                if (ev[i].reason == VMTRACK_EV_OVERFLOW) {
                    overflows_.fetch_add(1, std::memory_order_relaxed);
                    sink_->invalidate(0, UINTPTR_MAX);  // events were lost: drop everything
                } else {
                    sink_->invalidate(ev[i].start, ev[i].len);
                }
            }
            events_.fetch_add(k, std::memory_order_relaxed);
            if (k < sizeof ev / sizeof ev[0])
                break;
        }
    }

    // The module's change log (VMTRACK_IOC_LOG_START), started at the first mark: a mark is
    // then one load of the count in the header words.
    int change_mark(uint64_t *mark) noexcept override
    {
        int state = log_state_.load(std::memory_order_acquire);
        if (state == kLogUnknown)
            state = start_log();
        if (state != kLogOn)
            return state;
        *mark = log_count()->load(std::memory_order_seq_cst);
        return 0;
    }

    int changed_since(uint64_t mark, uintptr_t start, size_t len) noexcept override
    {
        if (log_state_.load(std::memory_order_acquire) != kLogOn)
            return -EINVAL;
        vmtrack_changed a;
        memset(&a, 0, sizeof a);
        a.mark = mark;
        a.start = start;
        a.len = len;
        if (ioctl(fd_, VMTRACK_IOC_CHANGED, &a) != 0)
            return -errno;
        return a.changed ? 1 : 0;
    }

    int after_fork_child() noexcept override
    {
        // The inherited fd watches the parent: close it (the parent's file lives on in the
        // parent). The parent's words were not inherited (the module maps them
        // VM_DONTCOPY), so there is nothing to unmap; whatever the child mapped since fork at
        // that address is its own.
        if (fd_ >= 0)
            close(fd_);
        fd_ = -1;
        words_ = always_valid_words();
        park_busy_.store(false);  // another thread of the parent may have held it
        for (Parked &p : park_)    // the parent's watches, gone with its file
            p.used = false;
        reused_.store(0);
        events_.store(0);
        overflows_.store(0);
        log_state_.store(kLogUnknown);  // the parent's log; the child starts its own if asked
        std::string why;
        const std::atomic<uint32_t> *w = nullptr;
        int rc = open_device(&fd_, &info_, &w, &why);
        if (rc < 0) {
            VMT_LOG_ERROR("kmod: after fork: %s", why.c_str());
            fd_ = -1;
            return rc;
        }
        words_ = w;
        return 0;
    }

    std::string describe() const override
    {
        vmtrack_info now;
        memset(&now, 0, sizeof now);
        char b[512];
        std::string d;
        if (fd_ < 0 || ioctl(fd_, VMTRACK_IOC_INFO, &now) != 0)
            now = info_;
        snprintf(b, sizeof b,
                 "module: vmtrack.ko %s (ABI %u), " VMTRACK_DEVICE "\n"
                 "limits: %u watched ranges per process (module parameter max_watches), %u "
                 "queued events (max_events; overflow drops every entry)\n"
                 "watched ranges: %u (up to %zu of them parked for reuse); watches reused: "
                 "%llu; events read: %llu; overflows: %llu; kernel memory per watched range: "
                 "about %llu bytes\n",
                 now.version, now.abi_version, now.max_watches, now.max_events,
                 now.nr_watches, kParkSlots, (unsigned long long)reused_.load(),
                 (unsigned long long)events_.load(), (unsigned long long)overflows_.load(),
                 (unsigned long long)now.watch_bytes);
        d += b;
        d += "catches: every change of a watched range's pages, however asked for (munmap, "
             "mremap, madvise, MAP_FIXED, brk, shmdt, truncate, raw system calls, the kernel's "
             "own), before it completes; not mprotect (same pages)\n";
        d += "hit check: one load of the range's word, no system call; subscribers hear of "
             "changes on the next miss or vmt_flush (after the change)\n";
        int log = log_state_.load(std::memory_order_acquire);
        d += log == kLogOn ? "change log: on (every invalidation of the process, for "
                             "libfabric's first registrations)\n"
             : log == kLogUnknown ? "change log: not started (nobody asked)\n"
             : (info_.features & VMTRACK_FEATURE_CHANGE_LOG)
                 ? "change log: the module refused it\n"
                 : "change log: none (a module older than this library)\n";
        d += watch_checks_mapped()
                 ? "mapped check of a miss: the watch itself (the module refuses a range with "
                   "a hole)\n"
                 : "mapped check of a miss: msync, for devices that do not check (a module "
                   "older than this library)\n";
        return d;
    }

private:
    struct Parked {
        uintptr_t start = 0;
        size_t len = 0;
        WatchToken token;
        bool used = false;
    };
    static constexpr size_t kParkSlots = 1024;  // a power of two

    class ParkGuard {
    public:
        explicit ParkGuard(std::atomic<bool> &busy) noexcept : busy_(busy)
        {
            while (busy_.exchange(true, std::memory_order_acquire))
                sched_yield();
        }
        ~ParkGuard() { busy_.store(false, std::memory_order_release); }
        ParkGuard(const ParkGuard &) = delete;
        ParkGuard &operator=(const ParkGuard &) = delete;

    private:
        std::atomic<bool> &busy_;
    };

    static size_t park_slot(uintptr_t start, size_t len) noexcept
    {
        uint64_t h = (static_cast<uint64_t>(start) >> 12) * 0x9e3779b97f4a7c15ull;
        h ^= static_cast<uint64_t>(len) * 0xc2b2ae3d27d4eb4full;
        return static_cast<size_t>((h ^ (h >> 31)) & (kParkSlots - 1));
    }

    bool unchanged(WatchToken t) const noexcept
    {
        return words_[t.handle].load(std::memory_order_acquire) == t.expect;
    }

    // The parked watch of exactly this range, if the kernel saw no change of it since.
    bool unpark(uintptr_t start, size_t len, WatchToken *token) noexcept
    {
        Parked p;
        {
            ParkGuard g(park_busy_);
            Parked &slot = park_[park_slot(start, len)];
            if (!slot.used || slot.start != start || slot.len != len)
                return false;
            p = slot;
            slot.used = false;
        }
        if (!unchanged(p.token)) {
            unwatch_in_module(p.token);
            return false;
        }
        *token = p.token;
        reused_.fetch_add(1, std::memory_order_relaxed);
        return true;
    }

    // Give every parked watch back to the module; true if there was one.
    bool drain_park() noexcept
    {
        bool any = false;
        for (size_t i = 0; i < kParkSlots; i++) {
            Parked p;
            {
                ParkGuard g(park_busy_);
                p = park_[i];
                park_[i].used = false;
            }
            if (p.used) {
                unwatch_in_module(p.token);
                any = true;
            }
        }
        return any;
    }

    int watch_in_module(uintptr_t start, size_t len, WatchToken *token) noexcept
    {
        vmtrack_watch a;
        memset(&a, 0, sizeof a);
        a.start = start;
        a.len = len;
        a.cookie = start;
        if (watch_checks_mapped())
            a.flags = VMTRACK_WATCH_MAPPED;
        if (ioctl(fd_, VMTRACK_IOC_WATCH, &a) != 0)
            return -errno;
        token->handle = a.index;
        token->expect = a.gen;
        return 0;
    }

    void unwatch_in_module(WatchToken token) noexcept
    {
        vmtrack_unwatch a;
        memset(&a, 0, sizeof a);
        // The handle is (gen at watch time << 32 | index): what the token holds.
        a.handle = (static_cast<uint64_t>(token.expect) << 32) | token.handle;
        if (ioctl(fd_, VMTRACK_IOC_UNWATCH, &a) != 0 && errno != ENOENT)
            VMT_LOG_WARN("kmod: unwatch of word %u: %s", token.handle, strerror(errno));
    }

    static constexpr int kLogUnknown = 1 << 30, kLogStarting = (1 << 30) + 1, kLogOn = 0;

    const std::atomic<uint64_t> *log_count() const noexcept
    {
        return reinterpret_cast<const std::atomic<uint64_t> *>(words_ + VMTRACK_W_LOG);
    }

    // kLogOn, or the negative errno for good (a module without the log: -ENOTSUP).
    int start_log() noexcept
    {
        int expect = kLogUnknown;
        if (!log_state_.compare_exchange_strong(expect, kLogStarting)) {
            while ((expect = log_state_.load(std::memory_order_acquire)) == kLogStarting)
                sched_yield();
            return expect;
        }
        int state = kLogOn;
        vmtrack_log_start a;
        memset(&a, 0, sizeof a);
        if (fd_ < 0 || !(info_.features & VMTRACK_FEATURE_CHANGE_LOG)) {
            state = -ENOTSUP;
        } else if (ioctl(fd_, VMTRACK_IOC_LOG_START, &a) != 0) {
            state = -errno;
            VMT_LOG_WARN("kmod: the module refused its change log (%s): libfabric's first "
                         "registrations stay uncached",
                         strerror(-state));
        }
        log_state_.store(state, std::memory_order_release);
        return state;
    }

    void shut() noexcept
    {
        if (words_ && words_ != always_valid_words())
            munmap(const_cast<std::atomic<uint32_t> *>(words_), info_.map_bytes);
        words_ = nullptr;
        if (fd_ >= 0)
            close(fd_);
        fd_ = -1;
    }

    TrackerSink *sink_;
    int fd_ = -1;
    vmtrack_info info_{};
    const std::atomic<uint32_t> *words_ = nullptr;
    std::atomic<uint64_t> events_{0};
    std::atomic<uint64_t> overflows_{0};
    std::atomic<bool> full_warned_{false};
    std::atomic<uint64_t> reused_{0};
    std::atomic<int> log_state_{kLogUnknown};
    // A flag, not a mutex: held for a few stores, and a fork child can simply clear it.
    std::atomic<bool> park_busy_{false};
    Parked park_[kParkSlots];
};

}  // namespace

int kmod_tracker_probe(std::string *why)
{
    int fd = -1;
    vmtrack_info info;
    int rc = open_device(&fd, &info, nullptr, why);
    if (rc < 0)
        return rc;
    close(fd);
    return 0;
}

int kmod_tracker_create(TrackerSink *sink, std::unique_ptr<Tracker> *out, std::string *why)
{
    return start_tracker<KmodTracker>(sink, out, why);
}

}  // namespace vmt
