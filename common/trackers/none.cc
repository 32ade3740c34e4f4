// "none": the cache learns of changes only through vmt_invalidate (the application promises
// to call it). "pass": nothing is cached, so there is nothing to track.
#include "config.h"

#include "trackers/tracker.h"

namespace vmt {

const std::atomic<uint32_t> *Tracker::always_valid_words() noexcept
{
    static const std::atomic<uint32_t> word{0};
    return &word;
}

namespace {

class NoneTracker final : public Tracker {
public:
    const char *name() const noexcept override { return "none"; }
    int watch(uintptr_t, size_t, WatchToken *token) noexcept override
    {
        *token = WatchToken{};
        return 0;
    }
    void unwatch(uintptr_t, size_t, WatchToken) noexcept override {}
    bool watches_ranges() const noexcept override { return false; }
    std::string describe() const override
    {
        return "catches: nothing by itself; the application reports changes with vmt_invalidate()\n";
    }
};

class PassTracker final : public Tracker {
public:
    const char *name() const noexcept override { return "pass"; }
    bool caches() const noexcept override { return false; }
    int watch(uintptr_t, size_t, WatchToken *) noexcept override { return -ENOTSUP; }
    void unwatch(uintptr_t, size_t, WatchToken) noexcept override {}
    bool watches_ranges() const noexcept override { return false; }
    std::string describe() const override
    {
        return "caching: off (every vmt_get registers, the last vmt_put deregisters)\n";
    }
};

}  // namespace

int none_tracker_create(TrackerSink *, std::unique_ptr<Tracker> *out, std::string *)
{
    out->reset(new (std::nothrow) NoneTracker());
    return *out ? 0 : -ENOMEM;
}

int pass_tracker_create(TrackerSink *, std::unique_ptr<Tracker> *out, std::string *)
{
    out->reset(new (std::nothrow) PassTracker());
    return *out ? 0 : -ENOMEM;
}

}  // namespace vmt
