// The C ABI: argument checks, the process-wide cache, and nothing else.
#include "config.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "cache/cache.h"
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

std::once_flag g_shared_once;
Cache *g_shared = nullptr;
int g_shared_error = 0;

void print_stats_at_exit()
{
    if (!g_shared)
        return;
    struct vmt_stats s;
    s.sz = sizeof s;
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

void make_shared()
{
    vmt::EnvConfig cfg;
    std::string error;
    int rc = vmt::env_parse(&cfg, &error);
    if (rc < 0) {
        VMT_LOG_ERROR("%s", error.c_str());
        g_shared_error = -rc;
        return;
    }
    vmt::log_set_level(static_cast<vmt::LogLevel>(cfg.log_level));
    struct vmt_cache_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.sz = sizeof opts;
    opts.tracker = cfg.tracker.c_str();
    opts.max_entries = cfg.max_entries;
    opts.max_bytes = cfg.max_bytes;
    rc = Cache::create(&opts, cfg.merge, &g_shared);
    if (rc < 0) {
        g_shared_error = -rc;
        return;
    }
    if (cfg.stats_at_exit)
        atexit(print_stats_at_exit);
}

// VMTRACK_LOG applies to caches made with vmt_cache_create too.
void apply_log_env()
{
    static std::once_flag once;
    std::call_once(once, [] {
        vmt::EnvConfig cfg;
        std::string error;
        if (vmt::env_parse(&cfg, &error) == 0)
            vmt::log_set_level(static_cast<vmt::LogLevel>(cfg.log_level));
    });
}

}  // namespace

extern "C" {

int vmt_cache_create(const struct vmt_cache_opts *opts, struct vmt_cache **out)
{
    if (!out || (opts && opts->sz < offsetof(struct vmt_cache_opts, flags) + sizeof(unsigned)) ||
        (opts && (opts->flags & ~(unsigned)VMT_CACHE_NO_MERGE))) {
        VMT_LOG_ERROR("vmt_cache_create: invalid options (out must be set, opts->sz = sizeof, known flags)");
        return -EINVAL;
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
    if (!cache || !out)
        return -EINVAL;
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

const char *vmt_version(void) { return PACKAGE_VERSION; }

const char *vmt_strerror(int negative_errno)
{
    switch (negative_errno) {
    case 0: return "success";
    case -EINVAL: return "invalid argument (NULL, zero length, unknown access bits or flags)";
    case -EFAULT: return "the memory is not mapped";
    case -ENOSPC: return "over the device's limits even after eviction";
    case -ENODEV: return "the device is detached, or was attached in the parent before fork()";
    case -ENOMEM: return "out of memory";
    case -ENOSYS: return "not available in this build";
    default: return strerror(negative_errno < 0 ? -negative_errno : negative_errno);
    }
}

}  // extern "C"
