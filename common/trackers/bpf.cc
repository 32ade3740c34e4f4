// "bpf": the client of vmtrackd (bpf/vmtrackd.c, doc/trackers.md), kernel-grade tracking
// without an out-of-tree module.
//
// The daemon's BPF programs sit on the kernel functions every change of a process's pages
// goes through (the zap, move_page_tables, ptep_clear_flush) and bump the word of each slot
// of this process's ranges map that the change overlaps, at entry and again at exit: the word
// changes before the system call that changed the pages returns, whoever asked for it (raw
// system calls, io_uring, another process punching a hole in a shared file, a COW copy after
// fork). The daemon gave this process two maps of its own: the ranges (mapped writable here)
// and the words (frozen by the daemon, mapped read-only here). The hit path is one load, as
// with kmod.
//
// A watch writes its slot, then (after a full fence) reads the word: a change whose entry
// program ran before the slot was visible is seen by its exit program, which runs after the
// pages changed; the cache's check after registering then finds the word moved. The alive
// word drops (after every word was bumped) when the daemon lets this process go (stop,
// restart): from then on watches are refused (served uncached) until the daemon is back.
// The next poll (a miss, vmt_flush) after that tries to connect again, at most every
// kRetryNs: once a daemon answers, every entry is dropped (all were watched through the old
// maps), the new words are mapped where the old ones were (the cache reads words() once, at
// start) and watches use the new maps. A slot an old entry still holds stays taken until its
// unwatch, so that a late unwatch cannot free a slot a new watch has.
#include "config.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "../../bpf/vmtrack_bpf_abi.h"
#include "util/log.h"
#include "trackers/tracker.h"

namespace vmt {
namespace {

constexpr uint32_t kSlots = VMTRACK_BPF_SLOTS;
constexpr uint32_t kAliveWord = offsetof(vmtrack_bpf_words, alive) / sizeof(uint32_t);
constexpr uint32_t kChangesWord = offsetof(vmtrack_bpf_words, changes) / sizeof(uint32_t);
static_assert(offsetof(vmtrack_bpf_words, gen) == 0, "a slot's handle is its word's index");
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t),
              "the daemon's words are read as std::atomic<uint32_t>");
// Between two tries to reach a daemon that let this process go: a try that finds none is a
// failed connect (microseconds), so a miss pays it at most this often.
constexpr int64_t kRetryNs = 200 * 1000 * 1000;
// The longest a connect, the hello or the daemon's answer may take. Under an emulated guest
// finding the address space takes the daemon seconds; a daemon that stopped serving never
// answers, and a miss must not wait for it for ever.
constexpr int kAnswerS = 20;

int64_t monotonic_ns()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

size_t page_round(size_t n)
{
    size_t pg = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    return (n + pg - 1) / pg * pg;
}

// Why there is no daemon to talk to: its own reason if it refused to start.
std::string no_daemon_reason(int e)
{
    char line[400] = "";
    FILE *f = fopen(VMTRACK_BPF_WHYFILE, "re");
    if (f) {
        if (!fgets(line, sizeof line, f))
            line[0] = 0;
        fclose(f);
        line[strcspn(line, "\n")] = 0;
    }
    if (line[0])
        return std::string("vmtrackd refused to start: ") + line;
    if (e == ENOENT || e == ECONNREFUSED)
        return "no daemon (" VMTRACK_BPF_SOCKET " missing or not served: start vmtrackd, "
               "e.g. systemctl start vmtrackd)";
    return std::string("cannot reach vmtrackd at " VMTRACK_BPF_SOCKET ": ") + strerror(e);
}

struct Maps {
    int sock = -1;
    vmtrack_bpf_ranges *ranges = nullptr;
    const std::atomic<uint32_t> *words = nullptr;
};

// The reply and its two fds; 0 or a negative errno and *why.
int read_reply(int s, vmtrack_bpf_reply *r, int fds[2], std::string *why)
{
    union {
        char buf[CMSG_SPACE(2 * sizeof(int))];
        cmsghdr align;
    } c;
    iovec iov = {r, sizeof *r};
    msghdr m = {};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = c.buf;
    m.msg_controllen = sizeof c.buf;
    ssize_t n = recvmsg(s, &m, MSG_CMSG_CLOEXEC);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        *why = "vmtrackd did not answer within " + std::to_string(kAnswerS) +
               " s (a daemon that stopped serving?)";
        return -ETIMEDOUT;
    }
    if (n < 0) {
        int e = errno;
        *why = std::string("no answer from vmtrackd: ") + strerror(e);
        return -e;
    }
    for (cmsghdr *h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h))
        if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS &&
            h->cmsg_len == CMSG_LEN(2 * sizeof(int)))
            memcpy(fds, CMSG_DATA(h), 2 * sizeof(int));
    if (static_cast<size_t>(n) != sizeof *r || r->magic != VMTRACK_BPF_MAGIC ||
        r->abi != VMTRACK_BPF_ABI) {
        *why = "vmtrackd answered in a form this library does not know (another ABI?)";
        return -EPROTO;
    }
    r->why[sizeof r->why - 1] = 0;
    if (r->status < 0) {
        *why = std::string("vmtrackd refused: ") + r->why;
        return r->status;
    }
    if (fds[0] < 0 || fds[1] < 0 || r->slots != kSlots ||
        r->ranges_bytes != sizeof(vmtrack_bpf_ranges) ||
        r->words_bytes != sizeof(vmtrack_bpf_words)) {
        *why = "vmtrackd's maps are not of the layout this library knows";
        return -EPROTO;
    }
    return 0;
}

int map_both(const int fds[2], Maps *out, std::string *why)
{
    void *r = mmap(nullptr, page_round(sizeof(vmtrack_bpf_ranges)), PROT_READ | PROT_WRITE,
                   MAP_SHARED, fds[0], 0);
    void *w = mmap(nullptr, page_round(sizeof(vmtrack_bpf_words)), PROT_READ, MAP_SHARED,
                   fds[1], 0);
    if (r == MAP_FAILED || w == MAP_FAILED) {
        int e = errno;
        *why = std::string("cannot map vmtrackd's maps: ") + strerror(e);
        if (r != MAP_FAILED)
            munmap(r, page_round(sizeof(vmtrack_bpf_ranges)));
        if (w != MAP_FAILED)
            munmap(w, page_round(sizeof(vmtrack_bpf_words)));
        return -e;
    }
    out->ranges = static_cast<vmtrack_bpf_ranges *>(r);
    out->words = static_cast<const std::atomic<uint32_t> *>(w);
    const auto *wl = static_cast<const vmtrack_bpf_words *>(w);
    if (wl->magic != VMTRACK_BPF_MAGIC || wl->abi != VMTRACK_BPF_ABI ||
        out->ranges->abi != VMTRACK_BPF_ABI || out->words[kAliveWord].load() != 1) {
        *why = "vmtrackd's maps lack the magic number or the alive word";
        return -EPROTO;
    }
    return 0;
}

void unmap_both(Maps *m)
{
    if (m->ranges)
        munmap(m->ranges, page_round(sizeof(vmtrack_bpf_ranges)));
    if (m->words)
        munmap(const_cast<std::atomic<uint32_t> *>(m->words),
               page_round(sizeof(vmtrack_bpf_words)));
    m->ranges = nullptr;
    m->words = nullptr;
}

void close_both(int fds[2])
{
    for (int i = 0; i < 2; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

// Connect and say hello: the socket and the two maps' fds, or a negative errno and *why.
int hello_daemon(int *sock, int fds[2], std::string *why)
{
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s < 0) {
        int e = errno;
        *why = std::string("socket: ") + strerror(e);
        return -e;
    }
    sockaddr_un a = {};
    a.sun_family = AF_UNIX;
    snprintf(a.sun_path, sizeof a.sun_path, "%s", VMTRACK_BPF_SOCKET);
    // Every call here is bounded: connect waits while the daemon's backlog is full (a daemon
    // that stopped accepting), send while its queue is, and the answer may never come.
    timeval tv = {kAnswerS, 0};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    vmtrack_bpf_hello h = {VMTRACK_BPF_MAGIC, VMTRACK_BPF_ABI, 0, 0};
    if (connect(s, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0 ||
        send(s, &h, sizeof h, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof h)) {
        int e = errno;
        close(s);
        if (e == EAGAIN || e == EWOULDBLOCK) {
            *why = "vmtrackd did not take the connection within " + std::to_string(kAnswerS) +
                   " s (a daemon that stopped serving?)";
            return -ETIMEDOUT;
        }
        *why = no_daemon_reason(e);
        return e == ENOENT || e == ECONNREFUSED ? -ENODEV : -e;
    }
    vmtrack_bpf_reply r = {};
    fds[0] = fds[1] = -1;
    int rc = read_reply(s, &r, fds, why);
    if (rc < 0) {
        close_both(fds);
        close(s);
        return rc;
    }
    *sock = s;
    return 0;
}

// Connect, say hello, map the two maps the daemon passes. 0 or a negative errno and *why.
// With words_fd, the words map's fd stays open there (a reconnect maps it again elsewhere).
int connect_daemon(Maps *out, std::string *why, int *words_fd = nullptr)
{
    int s = -1, fds[2];
    int rc = hello_daemon(&s, fds, why);
    if (rc < 0)
        return rc;
    rc = map_both(fds, out, why);
    if (rc == 0 && words_fd) {
        *words_fd = fds[1];
        fds[1] = -1;
    }
    close_both(fds);
    if (rc < 0) {
        unmap_both(out);
        close(s);
        return rc;
    }
    out->sock = s;
    return 0;
}

class BpfTracker final : public Tracker {
public:
    explicit BpfTracker(TrackerSink *sink) : sink_(sink) {}
    ~BpfTracker() override { shut(); }

    int start(std::string *why)
    {
        if (access("/sys/kernel/btf/vmlinux", R_OK) != 0) {
            *why = "kernel without BTF (/sys/kernel/btf/vmlinux): vmtrackd cannot load its "
                   "programs here";
            return -ENOTSUP;
        }
        reset_slots();
        return connect_daemon(&maps_, why);
    }

    const char *name() const noexcept override { return "bpf"; }
    const std::atomic<uint32_t> *words() const noexcept override
    {
        return maps_.words ? maps_.words : always_valid_words();
    }

    int watch(uintptr_t start, size_t len, WatchToken *token) noexcept override
    {
        if (!maps_.words || gone_.load(std::memory_order_acquire))
            return -ENOTSUP;
        Guard g(busy_);
        if (nfree_ == 0) {
            if (!full_warned_.exchange(true))
                VMT_LOG_WARN("bpf: %u ranges watched, the daemon's limit per cache: more "
                             "are served uncached", kSlots);
            return -ENOTSUP;
        }
        uint32_t i = free_[--nfree_];
        vmtrack_bpf_slot &slot = maps_.ranges->slot[i];
        if (i + 1 > used_) {
            used_ = i + 1;
            __atomic_store_n(&maps_.ranges->used, used_, __ATOMIC_RELEASE);
        }
        __atomic_store_n(&slot.start, static_cast<uint64_t>(start), __ATOMIC_RELAXED);
        __atomic_store_n(&slot.end, static_cast<uint64_t>(start + len), __ATOMIC_RELEASE);
        // The slot must be visible before the word is read (a store then a load).
        std::atomic_thread_fence(std::memory_order_seq_cst);
        uint32_t expect = maps_.words[i].load(std::memory_order_seq_cst);
        // Read after the word: alive drops before the daemon's last bump, so a word read
        // while alive still reads 1 is one the programs will still bump.
        if (maps_.words[kAliveWord].load(std::memory_order_seq_cst) != 1) {
            release_slot(i);
            note_gone();
            return -ENOTSUP;
        }
        local_[i] = Local{start, len, expect, true, false};
        token->handle = i;
        token->expect = expect;
        return 0;
    }

    void unwatch(uintptr_t, size_t, WatchToken token) noexcept override
    {
        if (!maps_.words || token.handle >= kSlots)
            return;
        Guard g(busy_);
        if (local_[token.handle].used)
            release_slot(token.handle);
    }

    void poll() noexcept override
    {
        // One load when nothing changed (and the daemon serves this process).
        if (!maps_.words)
            return;
        if (gone_.load(std::memory_order_relaxed) && try_reconnect())
            return;
        uint32_t c = maps_.words[kChangesWord].load(std::memory_order_acquire);
        if (c == seen_changes_.load(std::memory_order_relaxed))
            return;
        // Letting a process go bumps every word, this one too.
        if (maps_.words[kAliveWord].load(std::memory_order_acquire) != 1) {
            note_gone();
            if (try_reconnect())
                return;
        }
        struct Range {
            uintptr_t start;
            size_t len;
        } out[64];
        size_t n = 0;
        bool all = false;
        {
            Guard g(busy_);
            seen_changes_.store(c, std::memory_order_relaxed);
            for (uint32_t i = 0; i < used_; i++) {
                Local &l = local_[i];
                if (!l.used || l.orphan || l.reported ||
                    maps_.words[i].load(std::memory_order_acquire) == l.expect)
                    continue;
                l.reported = true;
                if (n < sizeof out / sizeof out[0])
                    out[n++] = Range{l.start, l.len};
                else
                    all = true;
            }
        }
        changed_.fetch_add(n, std::memory_order_relaxed);
        if (all)
            sink_->invalidate(0, UINTPTR_MAX);
        else
            for (size_t i = 0; i < n; i++)
                sink_->invalidate(out[i].start, out[i].len);
    }

    int after_fork_child() noexcept override
    {
        // The mappings and the socket are the parent's: its maps watch its address space.
        // Unmap them here (the parent's stay), and ask the daemon for the child's own.
        unmap_both(&maps_);
        if (maps_.sock >= 0)
            close(maps_.sock);
        maps_.sock = -1;
        busy_.store(false);  // another thread of the parent may have held it
        reconnecting_.store(false);
        gone_.store(false);
        reset_slots();
        std::string why;
        int rc = connect_daemon(&maps_, &why);
        if (rc < 0)
            VMT_LOG_ERROR("bpf: after fork: %s (ranges are served uncached)", why.c_str());
        return rc;
    }

    std::string describe() const override
    {
        char b[600];
        bool alive = maps_.words && !gone_.load() && maps_.words[kAliveWord].load() == 1;
        snprintf(b, sizeof b,
                 "daemon: vmtrackd at " VMTRACK_BPF_SOCKET " (ABI %u), %s\n"
                 "limits: %u watched ranges per cache, %u caches per process (more are "
                 "served uncached / refused)\n"
                 "watched ranges: %u; changes seen: %llu; reconnections: %llu\n",
                 VMTRACK_BPF_ABI,
                 alive ? "serving this process"
                       : "let this process go (stopped or restarted): ranges served uncached "
                         "until it is back",
                 kSlots, VMTRACK_BPF_PER_MM, kSlots - nfree_,
                 (unsigned long long)changed_.load(), (unsigned long long)reconnections_.load());
        std::string d = b;
        d += "catches: every change of a watched range's pages that goes through the zap "
             "(munmap, MAP_FIXED, madvise DONTNEED/REMOVE, hole punch, io_uring, mremap "
             "shrink), move_page_tables (mremap move) or ptep_clear_flush (COW after fork), "
             "however asked for, before the system call returns; not mprotect (same pages), "
             "not MADV_FREE (pages stay until reclaim, which spares pinned pages)\n";
        d += "hit check: one load of the range's word, no system call; subscribers hear of "
             "changes on the next miss or vmt_flush (after the change)\n";
        return d;
    }

private:
    struct Local {
        uintptr_t start = 0;
        size_t len = 0;
        uint32_t expect = 0;
        bool used = false;
        bool reported = false;
        bool orphan = false;  // watched through a daemon that let this process go
    };

    class Guard {
    public:
        explicit Guard(std::atomic<bool> &busy) noexcept : busy_(busy)
        {
            while (busy_.exchange(true, std::memory_order_acquire))
                sched_yield();
        }
        ~Guard() { busy_.store(false, std::memory_order_release); }
        Guard(const Guard &) = delete;
        Guard &operator=(const Guard &) = delete;

    private:
        std::atomic<bool> &busy_;
    };

    void reset_slots() noexcept
    {
        nfree_ = 0;
        for (uint32_t i = kSlots; i-- > 0;)
            free_[nfree_++] = static_cast<uint16_t>(i);
        for (Local &l : local_)
            l = Local{};
        used_ = 0;
        seen_changes_.store(0);
    }

    // With busy_ held.
    void release_slot(uint32_t i) noexcept
    {
        vmtrack_bpf_slot &slot = maps_.ranges->slot[i];
        __atomic_store_n(&slot.end, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&slot.start, 0, __ATOMIC_RELEASE);
        local_[i].used = false;
        local_[i].orphan = false;
        free_[nfree_++] = static_cast<uint16_t>(i);
        while (used_ > 0 && !local_[used_ - 1].used)
            used_--;
        __atomic_store_n(&maps_.ranges->used, used_, __ATOMIC_RELEASE);
    }

    void note_gone() noexcept
    {
        gone_.store(true, std::memory_order_release);
        if (!gone_warned_.exchange(true))
            VMT_LOG_WARN("bpf: vmtrackd let this process go (stopped or restarted): ranges are "
                         "served uncached until it is back");
    }

    // At most one thread, at most every kRetryNs: whether a daemon serves this process again.
    bool try_reconnect() noexcept
    {
        int64_t now = monotonic_ns();
        if (now < next_try_ns_.load(std::memory_order_relaxed) ||
            reconnecting_.exchange(true, std::memory_order_acquire))
            return false;
        next_try_ns_.store(now + kRetryNs, std::memory_order_relaxed);
        int words_fd = -1;
        Maps fresh;
        std::string why;
        int rc = connect_daemon(&fresh, &why, &words_fd);
        if (rc == 0) {
            // Every entry was watched through the old maps: none may outlive them. Misses
            // planned before this see it in the cache's invalidation log and plan again.
            sink_->invalidate(0, UINTPTR_MAX);
            Guard g(busy_);
            rc = adopt(fresh, words_fd);
            close(words_fd);
        }
        // From the end of this try: one that waited kAnswerS for a daemon that does not answer
        // must not make the next miss wait as long straight away.
        next_try_ns_.store(monotonic_ns() + kRetryNs, std::memory_order_relaxed);
        reconnecting_.store(false, std::memory_order_release);
        if (rc == 0)
            VMT_LOG_INFO("bpf: vmtrackd serves this process again: ranges are cached");
        else if (rc == -ETIMEDOUT)
            VMT_LOG_WARN("bpf: reconnecting: %s", why.c_str());
        return rc == 0;
    }

    // With busy_ held: the new daemon's maps in place of the old ones, the words where the
    // old words were. A slot an old entry holds stays taken (orphan) until its unwatch.
    int adopt(Maps &fresh, int words_fd) noexcept
    {
        size_t words_len = page_round(sizeof(vmtrack_bpf_words));
        void *at = const_cast<std::atomic<uint32_t> *>(maps_.words);
        if (mmap(at, words_len, PROT_READ, MAP_SHARED | MAP_FIXED, words_fd, 0) == MAP_FAILED) {
            int e = errno;
            // A failed MAP_FIXED may have unmapped the old words, which hits still read:
            // zeros there, and no watch until a later try succeeds (gone_ stays set).
            mmap(at, words_len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
            VMT_LOG_WARN("bpf: cannot map the new vmtrackd's words: %s", strerror(e));
            unmap_both(&fresh);
            close(fresh.sock);
            return -e;
        }
        munmap(const_cast<std::atomic<uint32_t> *>(fresh.words), words_len);
        munmap(maps_.ranges, page_round(sizeof(vmtrack_bpf_ranges)));
        maps_.ranges = fresh.ranges;
        if (maps_.sock >= 0)
            close(maps_.sock);
        maps_.sock = fresh.sock;
        nfree_ = 0;
        for (uint32_t i = kSlots; i-- > 0;) {
            if (local_[i].used)
                local_[i].orphan = true;
            else
                free_[nfree_++] = static_cast<uint16_t>(i);
        }
        __atomic_store_n(&maps_.ranges->used, used_, __ATOMIC_RELEASE);
        seen_changes_.store(maps_.words[kChangesWord].load(std::memory_order_acquire));
        reconnections_.fetch_add(1, std::memory_order_relaxed);
        gone_warned_.store(false);
        gone_.store(false, std::memory_order_release);
        return 0;
    }

    void shut() noexcept
    {
        unmap_both(&maps_);
        if (maps_.sock >= 0)
            close(maps_.sock);
        maps_.sock = -1;
    }

    TrackerSink *sink_;
    Maps maps_;
    // A flag, not a mutex: held for a few stores, and a fork child can simply clear it.
    std::atomic<bool> busy_{false};
    uint16_t free_[kSlots];
    uint32_t nfree_ = 0;
    uint32_t used_ = 0;
    Local local_[kSlots];
    std::atomic<uint32_t> seen_changes_{0};
    std::atomic<uint64_t> changed_{0};
    std::atomic<bool> full_warned_{false};
    std::atomic<bool> gone_warned_{false};
    std::atomic<bool> gone_{false};          // the daemon let this process go
    std::atomic<bool> reconnecting_{false};  // a thread is trying to reach a daemon
    std::atomic<int64_t> next_try_ns_{0};
    std::atomic<uint64_t> reconnections_{0};
};

}  // namespace

int bpf_tracker_probe(std::string *why)
{
    if (access("/sys/kernel/btf/vmlinux", R_OK) != 0) {
        *why = "kernel without BTF (/sys/kernel/btf/vmlinux): vmtrackd cannot load its "
               "programs here";
        return -ENOTSUP;
    }
    struct stat st;
    if (stat(VMTRACK_BPF_SOCKET, &st) != 0) {
        int e = errno;
        *why = no_daemon_reason(e);
        return -ENODEV;
    }
    return 0;
}

int bpf_tracker_create(TrackerSink *sink, std::unique_ptr<Tracker> *out, std::string *why)
{
    return start_tracker<BpfTracker>(sink, out, why);
}

}  // namespace vmt
