// The tracker interface: how a tracker learns which ranges the cache holds, how it tells the
// cache that pages changed, and how the hit path checks validity without calling into it.
//
// A tracker never touches the cache's index itself; it reports to a TrackerSink. Every sink
// call is safe from any thread, from inside a libc hook (while glibc's malloc locks may be
// held) and from a monitor thread: sinks take only the cache's own index lock, never allocate
// and never call into a device.
#ifndef VMTRACK_COMMON_TRACKER_H
#define VMTRACK_COMMON_TRACKER_H

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string>

namespace vmt {

class TrackerSink {
public:
    // Pages of [start, start+len) may have changed (or are about to): every cached entry that
    // overlaps is dropped from the index at once and subscribers are told. Deregistration is
    // deferred (to the last vmt_put, or to reap()).
    virtual void invalidate(uintptr_t start, size_t len) noexcept = 0;

    // For trackers that see a change before it happens (libc hooks): between unmap_begin and
    // unmap_end no thread gets a hit on, or registers, pages of the range. unmap_begin
    // invalidates; misses overlapping the range wait until unmap_end. Calls nest per range
    // (count them); at most kMaxUnmapsInFlight ranges are in flight at once, more wait.
    // unmap_begin returns a token that its unmap_end must be given.
    virtual uint64_t unmap_begin(uintptr_t start, size_t len) noexcept = 0;
    virtual void unmap_end(uintptr_t start, size_t len, uint64_t token) noexcept = 0;

    // For trackers whose events arrive after the change (userfaultfd): between pause_hits and
    // resume_hits no vmt_get completes a hit or inserts an entry (they wait), so a monitor can
    // read events and invalidate before the thread that caused them can look the range up.
    // Keep the paused section short (read events, invalidate, resume); do not nest.
    // Subscribers (vmt_subscribe) hear of what was invalidated meanwhile at resume_hits.
    virtual void pause_hits() noexcept = 0;
    virtual void resume_hits() noexcept = 0;

    // Run deferred deregistrations now. Call only where a device call may run: not inside a
    // hook before the real system call, not with libc locks held.
    virtual void reap() noexcept = 0;

protected:
    ~TrackerSink() = default;
};

constexpr int kMaxUnmapsInFlight = 64;

// What the cache stores per entry so that a hit can check validity with one load:
// the entry is valid while tracker->words()[handle] == expect.
struct WatchToken {
    uint32_t handle = 0;
    uint32_t expect = 0;
};

class Tracker {
public:
    virtual ~Tracker() = default;
    virtual const char *name() const noexcept = 0;

    // Does this tracker let the cache keep registrations? false only for "pass".
    virtual bool caches() const noexcept { return true; }

    // Validity words, read on every hit. Trackers that invalidate synchronously keep the
    // default: one word that is always 0, with tokens {0, 0}.
    virtual const std::atomic<uint32_t> *words() const noexcept { return always_valid_words(); }

    // Start watching [start, start+len) (page aligned) before the cache inserts an entry for
    // it. Called outside every cache lock. 0 and *token, or -ENOTSUP (this range cannot be
    // watched: the cache serves it uncached), or another negative errno.
    virtual int watch(uintptr_t start, size_t len, WatchToken *token) noexcept = 0;
    // Stop watching (the entry left the index). Called outside the index lock, may be
    // called from a hook: must not allocate or block on the hooked thread.
    virtual void unwatch(uintptr_t start, size_t len, WatchToken token) noexcept = 0;

    // Whether unwatch does anything: false for trackers that watch nothing per range (hooks,
    // none, pass), whose entries then go back to their pool without an unwatch call.
    virtual bool watches_ranges() const noexcept { return true; }

    // Whether the sink hears of every unmap of the process (hooks), so that what a mapped
    // check found stays known until it hears otherwise (cache/mapped_blocks.h). (uffd's
    // watch is no mapped check: UFFDIO_REGISTER takes a range with holes in it.)
    virtual bool hears_every_unmap() const noexcept { return false; }
    // Whether a watch succeeds only on a wholly mapped range, and a watch whose word has not
    // moved says the range is still mapped (kmod, with a module that checks): the cache then
    // makes no mapped check of its own.
    virtual bool watch_checks_mapped() const noexcept { return false; }

    // A record of every change of the address space that the tracker keeps itself (kmod, with
    // a module that logs), for a sink that keeps none (vmt_changes_mark, vmt_changed_since):
    // the record's count now as *mark; whether a change overlapping [start, start+len) was
    // recorded since, or may be under way (1), or not (0). -ENOTSUP where there is none,
    // -EINVAL for a mark it never gave.
    virtual int change_mark(uint64_t *mark) noexcept
    {
        (void)mark;
        return -ENOTSUP;
    }
    virtual int changed_since(uint64_t mark, uintptr_t start, size_t len) noexcept
    {
        (void)mark, (void)start, (void)len;
        return -ENOTSUP;
    }

    // Called on the miss path and by vmt_flush, outside locks: handle pending events.
    virtual void poll() noexcept {}

    // In the child after fork(), before the cache is used again: drop the parent's watches
    // without touching anything the parent still uses, and start tracking the child.
    virtual int after_fork_child() noexcept { return 0; }

    // Human-readable facts for vmt_cache_tracker_report() and `vmtrack info` (mode, limits,
    // versions, counters): lines "key: value". Reads state only; measuring is the caller's
    // business (`vmtrack info --measure`), never done here.
    virtual std::string describe() const { return std::string(); }

    static const std::atomic<uint32_t> *always_valid_words() noexcept;
};

// Every tracker kind has a probe (no side effects: may it be used here, and if not, why) and
// a factory. Both return 0 or a negative errno; on failure *why says why in one line.
using TrackerProbe = int (*)(std::string *why);
using TrackerFactory = int (*)(TrackerSink *sink, std::unique_ptr<Tracker> *out,
                               std::string *why);

struct TrackerKind {
    const char *name;
    TrackerProbe probe;
    TrackerFactory create;
};

// In the order "auto" tries them: kmod, bpf, hooks, uffd. Defined in trackers/select.cc.
extern const TrackerKind kAutoTrackers[];
extern const size_t kAutoTrackerCount;

// The factory of a tracker whose constructor takes the sink and whose start(why) returns 0
// or a negative errno: nothing is handed out unless it started.
template <class T>
int start_tracker(TrackerSink *sink, std::unique_ptr<Tracker> *out, std::string *why)
{
    std::unique_ptr<T> t(new (std::nothrow) T(sink));
    if (!t) {
        *why = "out of memory";
        return -ENOMEM;
    }
    int rc = t->start(why);
    if (rc < 0)
        return rc;
    *out = std::move(t);
    return 0;
}

int none_tracker_create(TrackerSink *sink, std::unique_ptr<Tracker> *out, std::string *why);
int pass_tracker_create(TrackerSink *sink, std::unique_ptr<Tracker> *out, std::string *why);
int hooks_tracker_probe(std::string *why);
int hooks_tracker_create(TrackerSink *sink, std::unique_ptr<Tracker> *out, std::string *why);
int uffd_tracker_probe(std::string *why);
int uffd_tracker_create(TrackerSink *sink, std::unique_ptr<Tracker> *out, std::string *why);
int kmod_tracker_probe(std::string *why);
int kmod_tracker_create(TrackerSink *sink, std::unique_ptr<Tracker> *out, std::string *why);
int bpf_tracker_probe(std::string *why);
int bpf_tracker_create(TrackerSink *sink, std::unique_ptr<Tracker> *out, std::string *why);

}  // namespace vmt

#endif
