// The C ABI: argument checks, the process-wide cache, and nothing else.
#include "config.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "cache/cache.h"
#include "trackers/tracker.h"
#include "util/env.h"
#include "util/log.h"
#include "vmtrack.h"

using vmt::Cache;
using vmt::Device;
using vmt::Reg;


namespace {

Cache *as_cache(struct vmt_cache *c) { return reinterpret_cast<Cache *>(c); }
const Cache *as_cache(const struct vmt_cache *c) { return reinterpret_cast<const Cache *>(c); }
Device *as_dev(struct vmt_device *d) { return reinterpret_cast<Device *>(d); }
const Reg *as_reg(const struct vmt_reg *r) { return reinterpret_cast<const Reg *>(r); }

static_assert(VMT_LOG_LEVEL_ERROR == (int)vmt::LogLevel::error &&
                  VMT_LOG_LEVEL_WARN == (int)vmt::LogLevel::warn &&
                  VMT_LOG_LEVEL_INFO == (int)vmt::LogLevel::info &&
                  VMT_LOG_LEVEL_DEBUG == (int)vmt::LogLevel::debug,
              "public log levels are the internal ones");

// A struct from a program built against a newer vmtrack.h may be larger than this library's:
// fine if nothing is set in the part this library does not know (its fields are then at their
// defaults); else the program asks for something this library cannot do.
bool tail_is_zero(const void *s, size_t known, size_t sz)
{
    const unsigned char *p = static_cast<const unsigned char *>(s);
    for (size_t i = known; i < sz; i++)
        if (p[i])
            return false;
    return true;
}

std::once_flag g_shared_once;
Cache *g_shared = nullptr;
int g_shared_error = 0;

void print_stats_at_exit()
{
    if (!g_shared)
        return;
    VMT_OPTS(vmt_stats, s);
    g_shared->stats(&s);
    fprintf(stderr,
            "vmtrack: shared cache (tracker %s): %llu hits (%llu from the memo), %llu misses, %llu registrations, "
            "%llu deregistrations, %llu invalidations, %llu evictions, %llu entries, "
            "%llu bytes registered, %llu uncached, %llu merges, %llu upgrades, %llu deferred\n",
            g_shared->tracker_name(), (unsigned long long)s.hits, (unsigned long long)s.memo_hits,
            (unsigned long long)s.misses,
            (unsigned long long)s.registrations, (unsigned long long)s.deregistrations,
            (unsigned long long)s.invalidations, (unsigned long long)s.evictions,
            (unsigned long long)s.entries, (unsigned long long)s.bytes_registered,
            (unsigned long long)s.uncached, (unsigned long long)s.merges,
            (unsigned long long)s.upgrades, (unsigned long long)s.deferred);
}

// VMTRACK_LOG, read once: for the shared cache, caches made with vmt_cache_create, and before
// vmt_set_log_level (which then has the last word).
// `parsed`: the environment already read by the caller (it is not read, nor warned about, twice).
void apply_log_env(const vmt::EnvConfig *parsed = nullptr)
{
    static std::once_flag once;
    std::call_once(once, [parsed] {
        vmt::EnvConfig cfg;
        std::string error;
        if (parsed)
            cfg = *parsed;
        else if (vmt::env_parse(&cfg, &error) < 0)
            return;
        vmt::log_set_level(static_cast<vmt::LogLevel>(cfg.log_level));
    });
}

// Why the tracker VMTRACK_TRACKER names cannot be used here (the cache's own report is gone
// with the cache that failed).
std::string why_tracker_unusable(const std::string &name)
{
    for (size_t i = 0; i < vmt::kAutoTrackerCount; i++) {
        std::string why;
        if (name == vmt::kAutoTrackers[i].name && vmt::kAutoTrackers[i].probe(&why) < 0)
            return why;
    }
    return std::string();
}

void make_shared()
{
    vmt::EnvConfig cfg;
    std::string error;
    int rc = vmt::env_parse(&cfg, &error);
    if (rc < 0) {
        // The caller sees only errno = EINVAL: the variable at fault is named here.
        VMT_LOG_WARN("the shared cache cannot be created: %s", error.c_str());
        g_shared_error = -rc;
        return;
    }
    apply_log_env(&cfg);
    VMT_OPTS(vmt_cache_opts, opts, .tracker = cfg.tracker.c_str(), .max_entries = cfg.max_entries,
             .max_bytes = cfg.max_bytes);
    rc = Cache::create(&opts, cfg.merge, &g_shared);
    if (rc < 0) {
        // The tracker came from the environment, not from the caller: say which and why.
        std::string why = why_tracker_unusable(cfg.tracker);
        VMT_LOG_WARN("the shared cache cannot be created with VMTRACK_TRACKER=%s: %s",
                     cfg.tracker.c_str(), why.empty() ? strerror(-rc) : why.c_str());
        g_shared_error = -rc;
        return;
    }
    if (cfg.stats_at_exit)
        atexit(print_stats_at_exit);
}

}  // namespace

extern "C" {

int vmt_cache_create(const struct vmt_cache_opts *opts, struct vmt_cache **out)
{
    if (!out || (opts && opts->sz < offsetof(struct vmt_cache_opts, flags) + sizeof(unsigned)) ||
        (opts && (opts->flags & ~(unsigned)VMT_CACHE_NO_MERGE))) {
        VMT_LOG_INFO("vmt_cache_create: invalid options (out must be set, opts->sz = sizeof, known flags)");
        return -EINVAL;
    }
    if (opts && !tail_is_zero(opts, sizeof *opts, opts->sz)) {
        VMT_LOG_INFO("vmt_cache_create: opts has %zu bytes, this library knows %zu and the rest "
                     "is not zero (built against a newer vmtrack.h?)", opts->sz, sizeof *opts);
        return -E2BIG;
    }
    apply_log_env();
    Cache *c = nullptr;
    int rc = Cache::create(opts, true, &c);
    if (rc == 0)
        *out = reinterpret_cast<struct vmt_cache *>(c);
    return rc;
}

void vmt_cache_destroy(struct vmt_cache *cache)
{
    if (!cache)
        return;
    if (as_cache(cache) == g_shared) {
        VMT_LOG_ERROR("vmt_cache_destroy: the shared cache (vmt_shared) is never destroyed");
        return;
    }
    delete as_cache(cache);
}

struct vmt_cache *vmt_shared(void)
{
    std::call_once(g_shared_once, make_shared);
    if (!g_shared) {
        errno = g_shared_error ? g_shared_error : ENOMEM;
        return nullptr;
    }
    return reinterpret_cast<struct vmt_cache *>(g_shared);
}

const char *vmt_cache_tracker(const struct vmt_cache *cache)
{
    return cache ? as_cache(cache)->tracker_name() : nullptr;
}

int vmt_cache_tracker_report(const struct vmt_cache *cache, char *buf, size_t len)
{
    if (!cache)
        return -EINVAL;
    const Cache *c = as_cache(cache);
    std::string text = c->tracker_report();
    std::string details = c->tracker_details();
    if (!details.empty())
        text += "details of " + std::string(c->tracker_name()) + ":\n" + details;
    return snprintf(buf, len, "%s", text.c_str());
}

int vmt_device_attach(struct vmt_cache *cache, const struct vmt_device_ops *ops, void *ctx,
                      struct vmt_device **out)
{
    if (!cache || !out || !ops)
        return -EINVAL;
    if (!tail_is_zero(ops, sizeof *ops, ops->sz)) {
        VMT_LOG_INFO("vmt_device_attach: ops has %zu bytes, this library knows %zu and the rest "
                     "is not zero (built against a newer vmtrack.h?)", ops->sz, sizeof *ops);
        return -E2BIG;
    }
    Device *d = nullptr;
    int rc = as_cache(cache)->attach(ops, ctx, &d);
    if (rc == 0)
        *out = reinterpret_cast<struct vmt_device *>(d);
    return rc;
}

void vmt_device_detach(struct vmt_device *dev)
{
    if (!dev)
        return;
    Device *d = as_dev(dev);
    d->cache->detach(d);
}

void *vmt_device_ctx(const struct vmt_device *dev)
{
    return dev ? reinterpret_cast<const Device *>(dev)->ctx : nullptr;
}

/* vmt_get and vmt_put are in cache/hit.cc, beside the hit path they inline. */

void *vmt_reg_handle(const struct vmt_reg *reg)
{
    return reg ? as_reg(reg)->handle.load(std::memory_order_relaxed) : nullptr;
}

void *vmt_reg_addr(const struct vmt_reg *reg)
{
    if (!reg)
        return nullptr;
    return reinterpret_cast<void *>(as_reg(reg)->entry.load(std::memory_order_relaxed)->start.load(std::memory_order_relaxed));
}

size_t vmt_reg_len(const struct vmt_reg *reg)
{
    if (!reg)
        return 0;
    const vmt::Entry *e = as_reg(reg)->entry.load(std::memory_order_relaxed);
    return e->end.load(std::memory_order_relaxed) - e->start.load(std::memory_order_relaxed);
}

unsigned vmt_reg_access(const struct vmt_reg *reg)
{
    return reg ? vmt::reg_access(as_reg(reg)) & VMT_ACCESS_ALL : 0;
}

int vmt_invalidate(struct vmt_cache *cache, const void *addr, size_t len)
{
    if (!cache || !len)
        return -EINVAL;
    return as_cache(cache)->invalidate_manual(reinterpret_cast<uintptr_t>(addr), len);
}

int vmt_flush(struct vmt_cache *cache)
{
    return cache ? as_cache(cache)->flush() : -EINVAL;
}

int vmt_reg_invalidate(struct vmt_reg *reg)
{
    if (!reg)
        return -EINVAL;
    Reg *r = reinterpret_cast<Reg *>(reg);
    return r->dev.load(std::memory_order_relaxed)->cache->invalidate_reg(r);
}

int vmt_device_flush(struct vmt_device *dev)
{
    return dev ? as_dev(dev)->cache->flush_device(as_dev(dev)) : -EINVAL;
}

int vmt_stats_get(struct vmt_cache *cache, struct vmt_stats *stats)
{
    if (!cache || !stats || stats->sz < offsetof(struct vmt_stats, bytes_registered) + sizeof(uint64_t))
        return -EINVAL;
    as_cache(cache)->stats(stats);
    if (stats->sz > sizeof *stats)  // counters of a newer vmtrack.h that this library lacks
        memset(reinterpret_cast<char *>(stats) + sizeof *stats, 0, stats->sz - sizeof *stats);
    return 0;
}

int vmt_subscribe(struct vmt_cache *cache, vmt_event_fn fn, void *arg)
{
    return cache ? as_cache(cache)->subscribe(fn, arg) : -EINVAL;
}

int vmt_unsubscribe(struct vmt_cache *cache, vmt_event_fn fn, void *arg)
{
    return cache ? as_cache(cache)->unsubscribe(fn, arg) : -EINVAL;
}

int vmt_changes_mark(struct vmt_cache *cache, uint64_t *mark)
{
    return cache && mark ? as_cache(cache)->changes_mark(mark) : -EINVAL;
}

int vmt_changed_since(struct vmt_cache *cache, uint64_t mark, const void *addr, size_t len)
{
    if (!cache || !len)
        return -EINVAL;
    return as_cache(cache)->changed_since(mark, reinterpret_cast<uintptr_t>(addr), len);
}

const char *vmt_version(void) { return PACKAGE_VERSION; }

int vmt_check_version(unsigned major, unsigned minor)
{
    // Within a major version releases only add (common/libvmtrack.map): a library serves every
    // program built against the same major version and a minor one no newer than its own.
    if (major != VMT_VERSION_MAJOR || minor > VMT_VERSION_MINOR) {
        VMT_LOG_INFO("this library is vmtrack %s; the program was built for %u.%u", PACKAGE_VERSION,
                     major, minor);
        return -ENOTSUP;
    }
    return 0;
}

int vmt_set_log_fn(vmt_log_fn fn, void *arg)
{
    vmt::log_set_sink(fn, arg);
    return 0;
}

int vmt_set_log_level(int level)
{
    if (level < VMT_LOG_LEVEL_ERROR || level > VMT_LOG_LEVEL_DEBUG)
        return -EINVAL;
    apply_log_env();  // VMTRACK_LOG first, so that it cannot undo this call later
    int before = static_cast<int>(vmt::log_level());
    vmt::log_set_level(static_cast<vmt::LogLevel>(level));
    return before;
}

const char *vmt_strerror(int negative_errno)
{
    switch (negative_errno) {
    case 0: return "success";
    case -EINVAL: return "invalid argument: a NULL pointer, a zero length, a struct whose sz is too small, or unknown bits or names";
    case -E2BIG: return "the struct is larger than this library knows and its extra bytes are not zero (built against a newer vmtrack.h)";
    case -EFAULT: return "the memory is not mapped";
    case -ENOSPC: return "no room: over the cache's or the device's limits even after eviction, or too many of something";
    case -ENODEV: return "no such device: detached, attached in the parent before fork(), or /dev/vmtrack absent";
    case -ENOMEM: return "out of memory";
    case -EBUSY: return "in use by someone else (libc patched by another library, a ring's buffer table)";
    case -ENOTSUP: return "not supported here (this kernel, this CPU, this kind of memory, or this library version)";
    case -EPROTO: return "version mismatch with the kernel module";
    case -ENOSYS: return "not available in this build or kernel";
    case -EEXIST: return "already there (subscribed twice)";
    case -ENOENT: return "not found (not subscribed)";
    case -EIO: return "I/O error: a device failed without an errno, or broke its contract";
    default: return strerror(negative_errno < 0 ? -negative_errno : negative_errno);
    }
}

}  // extern "C"
