// The uffd tracker: every cached range is registered with one userfaultfd (MISSING mode) that
// asks for the non-cooperative events UNMAP, REMAP and REMOVE. The kernel then makes every
// thread that unmaps, moves or discards pages of a watched range wait until a monitor thread
// has read the event; the monitor pauses the cache's hits, reads every pending event,
// invalidates, resumes. It sees raw system calls too, which libc hooks cannot.
//
// Costs and limits (also in describe()): each unmap of a watched range costs the unmapping
// thread a round trip to the monitor thread; missing-page faults in watched ranges go to the
// monitor, which fills them with zero pages (what the kernel would have done); shmdt sends no
// event; only anonymous, shmem and hugetlb memory can be registered (others: -ENOTSUP, the
// cache serves them uncached). Without privilege the fd is UFFD_USER_MODE_ONLY: then a kernel
// access (read(2) into the buffer) to a watched page that is not present fails with EFAULT
// instead of waiting, so the plain mode is tried first.
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <new>

#include "trackers/tracker.h"

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
#ifndef USERFAULTFD_IOC_NEW
#define USERFAULTFD_IOC_NEW _IO(0xAA, 0x00)
#endif

namespace vmt {

namespace {

constexpr uint64_t kFeatures =
    UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMAP | UFFD_FEATURE_EVENT_REMOVE;
constexpr size_t kHuge = 2u << 20;

// A userfaultfd with our events: plain if allowed (kernel-mode faults are then served too),
// else UFFD_USER_MODE_ONLY, else through /dev/userfaultfd. fd or -errno; *umo, *why.
int open_uffd(bool *umo, std::string *why)
{
    int flags = O_CLOEXEC | O_NONBLOCK;
    *umo = false;
    int fd = (int)syscall(SYS_userfaultfd, flags);
    int err = fd < 0 ? errno : 0;
    if (fd < 0 && (err == EPERM || err == EACCES)) {
        fd = (int)syscall(SYS_userfaultfd, flags | UFFD_USER_MODE_ONLY);
        *umo = fd >= 0;
        if (fd < 0 && errno != EINVAL)
            err = errno;
    }
    if (fd < 0) {
        int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
        if (dev >= 0) {
            fd = ioctl(dev, USERFAULTFD_IOC_NEW, flags);
            close(dev);
        }
    }
    if (fd < 0) {
        if (err == ENOSYS)
            *why = "the kernel has no userfaultfd";
        else if (err == EPERM || err == EACCES)
            *why = "userfaultfd not permitted (vm.unprivileged_userfaultfd=0, no "
                   "CAP_SYS_PTRACE, UFFD_USER_MODE_ONLY refused, /dev/userfaultfd not usable)";
        else
            *why = std::string("userfaultfd: ") + strerror(err);
        return -(err ? err : EPERM);
    }
    struct uffdio_api api;
    memset(&api, 0, sizeof api);
    api.api = UFFD_API;
    api.features = kFeatures;
    if (ioctl(fd, UFFDIO_API, &api) < 0) {
        int e = errno;
        close(fd);
        *why = e == EINVAL ? "the kernel's userfaultfd lacks the UNMAP/REMAP/REMOVE events"
                           : std::string("UFFDIO_API: ") + strerror(e);
        return -(e == EINVAL ? ENOTSUP : e);
    }
    if (!(api.ioctls & (1ull << _UFFDIO_REGISTER))) {
        close(fd);
        *why = "userfaultfd cannot register ranges";
        return -ENOTSUP;
    }
    return fd;
}

double now_ns()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

class UffdTracker final : public Tracker {
public:
    explicit UffdTracker(TrackerSink *sink) : sink_(sink) {}
    ~UffdTracker() override;
    int start(std::string *why);

    const char *name() const noexcept override { return "uffd"; }
    int watch(uintptr_t start, size_t len, WatchToken *token) noexcept override;
    void unwatch(uintptr_t start, size_t len, WatchToken token) noexcept override;
    int after_fork_child() noexcept override;
    std::string describe() const override;

private:
    struct Watched {
        uintptr_t s, e;
        uint32_t count;
    };

    static void *monitor_main(void *arg);
    void monitor();
    void drain();
    void resolve_fault(uintptr_t addr);
    void stop();
    void unregister_uncovered(uintptr_t s, uintptr_t e);
    static uintptr_t mapping_end(uintptr_t addr);
    static void wait_zapped(const uintptr_t (*r)[2], int n);

    TrackerSink *sink_;
    int uffd_ = -1;
    int wake_ = -1;
    bool umo_ = false;
    bool running_ = false;
    pid_t pid_ = 0;  // the process the monitor runs in (after fork, not this one)
    pthread_t thread_;
    void *zeros_ = nullptr;  // kHuge of zeros for UFFDIO_COPY into hugetlb ranges

    pthread_mutex_t mu_ = PTHREAD_MUTEX_INITIALIZER;  // the watch list
    Watched *w_ = nullptr;
    size_t n_ = 0, cap_ = 0;

    std::atomic<uint64_t> events_{0}, faults_{0};
};

int UffdTracker::start(std::string *why)
{
    int fd = open_uffd(&umo_, why);
    if (fd < 0)
        return fd;
    uffd_ = fd;
    wake_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_ < 0) {
        *why = std::string("eventfd: ") + strerror(errno);
        return -errno;
    }
    // the monitor takes no signals: they would only interrupt poll()
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&thread_, nullptr, monitor_main, this);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (rc) {
        *why = std::string("cannot start the monitor thread: ") + strerror(rc);
        return -rc;
    }
    running_ = true;
    pid_ = getpid();
    return 0;
}

void UffdTracker::stop()
{
    if (running_ && pid_ != getpid())
        running_ = false;  // a fork child that never called after_fork_child: no thread here
    if (running_) {
        uint64_t one = 1;
        while (write(wake_, &one, sizeof one) < 0 && errno == EINTR) {
        }
        pthread_join(thread_, nullptr);
        running_ = false;
    }
    if (uffd_ >= 0)
        close(uffd_);  // the kernel drops every registration of this fd
    if (wake_ >= 0)
        close(wake_);
    uffd_ = wake_ = -1;
}

UffdTracker::~UffdTracker()
{
    stop();
    if (zeros_)
        munmap(zeros_, kHuge);
    free(w_);
}

void *UffdTracker::monitor_main(void *arg)
{
    static_cast<UffdTracker *>(arg)->monitor();
    return nullptr;
}

void UffdTracker::monitor()
{
    struct pollfd p[2];
    p[0].fd = uffd_;
    p[0].events = POLLIN;
    p[1].fd = wake_;
    p[1].events = POLLIN;
    for (;;) {
        p[0].revents = p[1].revents = 0;
        int r = ::poll(p, 2, -1);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (p[1].revents)
            break;
        if (p[0].revents & POLLIN)
            drain();
        else if (p[0].revents & (POLLERR | POLLHUP | POLLNVAL))
            break;
    }
}

// Pause hits, read every pending message, invalidate, resume; then serve page faults.
// Unmapping threads are released by the read itself, so hits are paused before it.
// The kernel sends REMOVE (madvise DONTNEED/FREE/REMOVE) *before* it zaps the pages, and the
// madvising thread zaps only after this read: a miss that registered the range between
// resume_hits() and that zap would pin pages about to leave the mapping. So REMOVE ranges stay
// "unmap in flight" until the zap looks done (wait_zapped: a bounded heuristic). UNMAP and
// REMAP are sent after the change and have no such window.
void UffdTracker::drain()
{
    constexpr int kBatch = 32;
    struct uffd_msg msg[kBatch];
    uintptr_t faults[kBatch];
    int nfaults = 0;
    uintptr_t moved_to[kBatch];
    int nmoved = 0;
    uintptr_t removed[kBatch][2];
    int nremoved = 0;
    bool changed = false;
    sink_->pause_hits();
    for (;;) {
        ssize_t got = read(uffd_, msg, sizeof msg);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            break;  // EAGAIN: all read
        }
        for (size_t i = 0; i < (size_t)got / sizeof msg[0]; i++) {
            const struct uffd_msg &m = msg[i];
            switch (m.event) {
            case UFFD_EVENT_UNMAP:
            case UFFD_EVENT_REMOVE:
                events_.fetch_add(1, std::memory_order_relaxed);
                sink_->invalidate(m.arg.remove.start, m.arg.remove.end - m.arg.remove.start);
                if (m.event == UFFD_EVENT_REMOVE && nremoved < kBatch) {
                    removed[nremoved][0] = m.arg.remove.start;
                    removed[nremoved][1] = m.arg.remove.end;
                    nremoved++;
                }
                changed = true;
                break;
            case UFFD_EVENT_REMAP:
                events_.fetch_add(1, std::memory_order_relaxed);
                sink_->invalidate(m.arg.remap.from, m.arg.remap.len);
                sink_->invalidate(m.arg.remap.to, m.arg.remap.len);
                if (nmoved < kBatch)
                    moved_to[nmoved++] = m.arg.remap.to;
                changed = true;
                break;
            case UFFD_EVENT_PAGEFAULT:
                if (nfaults < kBatch)
                    faults[nfaults++] = m.arg.pagefault.address;
                else
                    resolve_fault(m.arg.pagefault.address);
                break;
            default:
                break;
            }
        }
        if ((size_t)got < sizeof msg)
            break;
    }
    sink_->resume_hits();
    // REMOVE came before the zap (see above): keep those ranges "unmap in flight" (misses on
    // them wait, anything cached since resume_hits is dropped again) until the zap looks done.
    // (Not inside the paused section: pause_hits holds the lock unmap_begin takes.)
    uint64_t tokens[kBatch];
    for (int i = 0; i < nremoved; i++)
        tokens[i] = sink_->unmap_begin(removed[i][0], removed[i][1] - removed[i][0]);
    for (int i = 0; i < nfaults; i++)
        resolve_fault(faults[i]);
    if (nremoved) {
        wait_zapped(removed, nremoved);
        for (int i = 0; i < nremoved; i++)
            sink_->unmap_end(removed[i][0], removed[i][1] - removed[i][0], tokens[i]);
    }
    // No sink_->reap() here (it would unwatch dropped ranges sooner): a device's dereg may
    // unmap a watched range, and that thread would then wait for this one while this one
    // waits for the cache's reclaim lock.
    if (!changed)
        return;
    // A moved mapping keeps its registration at the new address, where nothing is cached:
    // drop it there (all of the mapping, which may have grown), except what live watches
    // cover.
    for (int i = 0; i < nmoved; i++) {
        uintptr_t end = mapping_end(moved_to[i]);
        if (end <= moved_to[i])
            continue;
        pthread_mutex_lock(&mu_);
        unregister_uncovered(moved_to[i], end);
        pthread_mutex_unlock(&mu_);
    }
}

// Wait (at most kZapWaitNs) until sampled pages of each removed range read non-resident in
// mincore(): the madvising thread has zapped them. Pages that were never present give no
// signal, so wait at least kZapMinNs as well. A heuristic: userspace cannot see the zap.
void UffdTracker::wait_zapped(const uintptr_t (*r)[2], int n)
{
    constexpr double kZapWaitNs = 10e6, kZapMinNs = 50e3;
    constexpr int kSamples = 32;
    double t0 = now_ns();
    for (;;) {
        bool done = true;
        for (int i = 0; i < n && done; i++) {
            uintptr_t pages = (r[i][1] - r[i][0]) / 4096;
            for (int k = 0; k < kSamples && done; k++) {
                uintptr_t pg = pages <= 1 ? 0 : (uintptr_t)k * (pages - 1) / (kSamples - 1);
                unsigned char v = 0;
                if (mincore((void *)(r[i][0] + pg * 4096), 4096, &v) == 0 && (v & 1))
                    done = false;
                if (pages <= 1)
                    break;
            }
        }
        double t = now_ns() - t0;
        if ((done && t >= kZapMinNs) || t >= kZapWaitNs)
            return;
        sched_yield();
    }
}

// The end of the mapping (VMA) that contains addr, from /proc/self/maps; 0 if none. Only for
// the monitor thread, on the rare REMAP event.
uintptr_t UffdTracker::mapping_end(uintptr_t addr)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f)
        return 0;
    char line[512];
    uintptr_t end = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long s, e;
        if (sscanf(line, "%lx-%lx", &s, &e) == 2 && s <= addr && addr < e) {
            end = e;
            break;
        }
    }
    fclose(f);
    return end;
}

// A thread touched a watched page that is not present: give it a zero page, as the kernel
// would have; if someone else already did, just wake it.
void UffdTracker::resolve_fault(uintptr_t addr)
{
    faults_.fetch_add(1, std::memory_order_relaxed);
    struct uffdio_zeropage z;
    memset(&z, 0, sizeof z);
    z.range.start = addr & ~(uintptr_t)4095;
    z.range.len = 4096;
    if (ioctl(uffd_, UFFDIO_ZEROPAGE, &z) == 0)
        return;
    if (errno == EINVAL) {  // hugetlb: copy a whole huge page of zeros
        if (!zeros_) {
            void *p = mmap(nullptr, kHuge, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            zeros_ = p == MAP_FAILED ? nullptr : p;
        }
        if (zeros_) {
            struct uffdio_copy c;
            memset(&c, 0, sizeof c);
            c.dst = addr & ~(uintptr_t)(kHuge - 1);
            c.src = (uintptr_t)zeros_;
            c.len = kHuge;
            if (ioctl(uffd_, UFFDIO_COPY, &c) == 0)
                return;
        }
    }
    struct uffdio_range r = {addr & ~(uintptr_t)4095, 4096};
    ioctl(uffd_, UFFDIO_WAKE, &r);
}

int UffdTracker::watch(uintptr_t start, size_t len, WatchToken *token) noexcept
{
    *token = WatchToken{};
    if (!len || start + len < start)
        return -EINVAL;
    uintptr_t end = start + len;
    // room for one more, allocated outside the lock
    for (;;) {
        pthread_mutex_lock(&mu_);
        if (n_ < cap_)
            break;
        size_t want = cap_ ? cap_ * 2 : 64;
        pthread_mutex_unlock(&mu_);
        Watched *nw = (Watched *)malloc(want * sizeof *nw);
        if (!nw)
            return -ENOMEM;
        pthread_mutex_lock(&mu_);
        Watched *old = nullptr;
        if (cap_ < want) {
            if (n_)
                memcpy(nw, w_, n_ * sizeof *nw);
            old = w_;
            w_ = nw;
            cap_ = want;
            nw = nullptr;
        }
        pthread_mutex_unlock(&mu_);
        free(old);
        free(nw);
    }
    // Always register: an address we watched before may be a new mapping now (the kernel
    // dropped the old registration with the old mapping); registering twice is harmless.
    // MISSING mode: first touches of pages not present in the range go to the monitor, which
    // fills them with zero pages. (Write-protect mode, never write-protecting anything, would
    // spare those faults, but was seen stale under the stress: doc/trackers.md.)
    struct uffdio_register reg;
    memset(&reg, 0, sizeof reg);
    reg.range.start = start;
    reg.range.len = len;
    reg.mode = UFFDIO_REGISTER_MODE_MISSING;
    int rc = ioctl(uffd_, UFFDIO_REGISTER, &reg);
    if (rc < 0) {
        int e = errno;
        pthread_mutex_unlock(&mu_);
        if (e == EINVAL || e == EBUSY || e == EPERM)
            return -ENOTSUP;  // file-backed, VM_PFNMAP, another uffd, ...: serve uncached
        if (e == ENOMEM)  // not (wholly) mapped, or no room for more VMAs (max_map_count)
            return msync((void *)start, len, MS_ASYNC) == 0 ? -ENOTSUP : -EFAULT;
        return -e;
    }
    size_t i;
    for (i = 0; i < n_; i++)
        if (w_[i].s == start && w_[i].e == end)
            break;
    if (i < n_)
        w_[i].count++;
    else
        w_[n_++] = Watched{start, end, 1};
    pthread_mutex_unlock(&mu_);
    return 0;
}

// Unregister the parts of [s, e) that no other watched range covers (caller holds mu_).
void UffdTracker::unregister_uncovered(uintptr_t s, uintptr_t e)
{
    uintptr_t cur = s;
    while (cur < e) {
        uintptr_t covered_to = cur, next = e;
        for (size_t i = 0; i < n_; i++) {
            if (w_[i].s <= cur && w_[i].e > covered_to)
                covered_to = w_[i].e;
            else if (w_[i].s > cur && w_[i].s < next)
                next = w_[i].s;
        }
        if (covered_to > cur) {
            cur = covered_to;
            continue;
        }
        struct uffdio_range r = {cur, next - cur};
        ioctl(uffd_, UFFDIO_UNREGISTER, &r);  // holes (already unmapped) are fine
        cur = next;
    }
}

void UffdTracker::unwatch(uintptr_t start, size_t len, WatchToken) noexcept
{
    uintptr_t end = start + len;
    pthread_mutex_lock(&mu_);
    for (size_t i = 0; i < n_; i++) {
        if (w_[i].s != start || w_[i].e != end)
            continue;
        if (--w_[i].count == 0) {
            w_[i] = w_[--n_];
            unregister_uncovered(start, end);
        }
        break;
    }
    pthread_mutex_unlock(&mu_);
}

int UffdTracker::after_fork_child() noexcept
{
    // The child has no monitor thread, and the inherited fd belongs to the parent's address
    // space; the child's mappings lost their registrations at fork (no EVENT_FORK).
    if (uffd_ >= 0)
        close(uffd_);
    if (wake_ >= 0)
        close(wake_);
    uffd_ = wake_ = -1;
    running_ = false;
    pthread_mutex_init(&mu_, nullptr);
    n_ = 0;
    events_ = 0;
    faults_ = 0;
    std::string why;
    return start(&why);
}

std::string UffdTracker::describe() const
{
    std::string d;
    d += umo_ ? "mode: userfaultfd, UFFD_USER_MODE_ONLY (unprivileged): a kernel access to a "
                "watched page that is not present fails with EFAULT\n"
              : "mode: userfaultfd (kernel-mode faults are served too)\n";
    d += "events: UNMAP REMAP REMOVE, read by one monitor thread that pauses hits while it "
         "invalidates\n";
    d += "registration: MISSING mode: first touches of pages not present in a cached range "
         "are served by the monitor (zero page)\n";
    d += "catches: munmap, mremap, madvise(DONTNEED/FREE/REMOVE), mmap(MAP_FIXED) over, brk "
         "shrink, free()/realloc inside libc, raw system calls\n";
    d += "misses: shmat(SHM_REMAP) over a cached range (no event from the kernel); cannot "
         "watch file-backed (non-shmem), SysV shm or device mappings: those are served "
         "uncached\n";
    char b[256];
    pthread_mutex_lock(const_cast<pthread_mutex_t *>(&mu_));
    size_t n = n_;
    pthread_mutex_unlock(const_cast<pthread_mutex_t *>(&mu_));
    snprintf(b, sizeof b, "watched ranges: %zu; events read: %llu; page faults served: %llu\n",
             n, (unsigned long long)events_.load(), (unsigned long long)faults_.load());
    d += b;
    d += "cost: each munmap of a watched range waits for the monitor thread to read the "
         "event; unwatched memory costs nothing (`vmtrack info --measure` measures it)\n";
    return d;
}

}  // namespace

int uffd_tracker_probe(std::string *why)
{
    bool umo;
    int fd = open_uffd(&umo, why);
    if (fd < 0)
        return fd;
    close(fd);
    *why = umo ? "ok (UFFD_USER_MODE_ONLY)" : "ok";
    return 0;
}

int uffd_tracker_create(TrackerSink *sink, std::unique_ptr<Tracker> *out, std::string *why)
{
    return start_tracker<UffdTracker>(sink, out, why);
}

}  // namespace vmt
