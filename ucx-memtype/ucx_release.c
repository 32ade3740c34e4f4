/* Which UCX runs in this process (ucx_release.h). */
#define _GNU_SOURCE
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "ucx_release.h"

/* The UCX releases the module knows: their rcache API generation and what the module does
 * under them. Facts behind the table: UCX's source of each tag (doc/ucx.md, "Which UCX"). A
 * release outside it is refused, never guessed. */
struct known_minor {
    unsigned minor;
    enum ucx_rcache_api api;
    enum ucx_support support;
};
static const struct known_minor known[] = {
    {13, UCX_RCACHE_API_113, UCX_SERVE},
    {14, UCX_RCACHE_API_113, UCX_CHECK},
    {15, UCX_RCACHE_API_113, UCX_CHECK},
    {16, UCX_RCACHE_API_113, UCX_CHECK},
    {17, UCX_RCACHE_API_117, UCX_CHECK},
    {18, UCX_RCACHE_API_118, UCX_CHECK},
    {19, UCX_RCACHE_API_118, UCX_CHECK},
    {20, UCX_RCACHE_API_118, UCX_CHECK},
    {21, UCX_RCACHE_API_118, UCX_CHECK},
    {22, UCX_RCACHE_API_118, UCX_CHECK},
    {23, UCX_RCACHE_API_118, UCX_CHECK},
};

void ucx_release_classify(unsigned major, unsigned minor, unsigned patch, struct ucx_release *r)
{
    memset(r, 0, sizeof(*r));
    r->major = major;
    r->minor = minor;
    r->patch = patch;
    snprintf(r->name, sizeof(r->name), "%u.%u.%u", major, minor, patch);
    if (major == 1)
        for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
            if (known[i].minor == minor) {
                r->api = known[i].api;
                r->support = known[i].support;
                return;
            }
    snprintf(r->why, sizeof(r->why), "UCX %s is not one of the releases this module knows "
             "(1.13 to 1.23)", r->name);
}

void ucx_release_describe(const struct ucx_release *r, char *buf, size_t len)
{
    switch (r->support) {
    case UCX_SERVE:
        snprintf(buf, len, "UCX %s: libvmtrack-ucx serves UCX's host-memory caches from "
                 "vmtrack's shared cache (its budget, vmt_stats) and feeds or watches the "
                 "others, with every tracker", r->name);
        break;
    case UCX_CHECK:
        snprintf(buf, len, "UCX %s: libvmtrack-ucx keeps UCP's own cache (UCX's registrations "
                 "stay outside vmtrack's budget) and feeds it vmtrack's events with the hooks "
                 "tracker; with kmod or uffd it watches every region UCP registers and checks "
                 "every UCP cache hit (ucs_pgtable_lookup), or, where that cannot be set up "
                 "(the module not preloaded or linked before libucs), keeps UCX from caching",
                 r->name);
        break;
    default:
        snprintf(buf, len, "%s: libvmtrack-ucx stays out of UCX's way",
                 r->why[0] ? r->why : "UCX unknown");
    }
}

/* The rest finds the running UCX; the vmtrack command uses the table above only. */
#ifndef UCX_RELEASE_TABLE_ONLY
typedef void (*ucp_version_fn)(unsigned *, unsigned *, unsigned *);

/* libucp's version call: the loaded libucp's, else that of the libucp.so.0 beside libucs
 * (loaded for good: the process is about to use it anyway, and unloading UCX is unsafe). */
static ucp_version_fn find_version_call(char *why, size_t len)
{
    ucp_version_fn fn = (ucp_version_fn)dlsym(RTLD_DEFAULT, "ucp_get_version");
    char path[PATH_MAX];
    Dl_info info;
    void *ucp;
    char *slash;

    if (fn)
        return fn;
    if (!dladdr((void *)ucs_status_string, &info) || !info.dli_fname) {
        snprintf(why, len, "cannot find where libucs was loaded from");
        return NULL;
    }
    snprintf(path, sizeof(path), "%s", info.dli_fname);
    slash = strrchr(path, '/');
    snprintf(slash ? slash + 1 : path, sizeof(path) - (size_t)(slash ? slash + 1 - path : 0),
             "libucp.so.0");
    ucp = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!ucp) {
        snprintf(why, len, "libucs has no libucp beside it to say which UCX it is (%s)",
                 dlerror());
        return NULL;
    }
    fn = (ucp_version_fn)dlsym(ucp, "ucp_get_version");
    if (!fn)
        snprintf(why, len, "%.200s has no ucp_get_version", path);
    return fn;
}

static struct ucx_release rel;
static pthread_once_t rel_once = PTHREAD_ONCE_INIT;

static void detect(void)
{
    char why[sizeof(rel.why)];
    ucp_version_fn fn = find_version_call(why, sizeof(why));
    unsigned major, minor, patch;

    if (!fn) {
        snprintf(rel.name, sizeof(rel.name), "unknown");
        snprintf(rel.why, sizeof(rel.why), "%s", why);
        return;
    }
    fn(&major, &minor, &patch);
    ucx_release_classify(major, minor, patch, &rel);
}

const struct ucx_release *ucx_release(void)
{
    pthread_once(&rel_once, detect);
    return &rel;
}

/* ucs_rcache_params_t and ucs_rcache_ops_t per API generation: 1.13-1.16 (params with
 * alignment and max_alignment; ops mem_reg, mem_dereg, dump_region), 1.17 (params without
 * them), 1.18 on (ops gain merge before dump_region). */
static const struct ucx_layout layouts[] = {
    [UCX_RCACHE_API_113] = {.params_size = 80, .region_struct_size = 0, .alignment = 8,
                            .max_alignment = 16, .ucm_events = 24, .ops = 32, .context = 40,
                            .nops = 3, .merge = -1, .dump_region = 2},
    [UCX_RCACHE_API_117] = {.params_size = 64, .region_struct_size = 0, .alignment = SIZE_MAX,
                            .max_alignment = SIZE_MAX, .ucm_events = 8, .ops = 16,
                            .context = 24, .nops = 3, .merge = -1, .dump_region = 2},
    [UCX_RCACHE_API_118] = {.params_size = 64, .region_struct_size = 0, .alignment = SIZE_MAX,
                            .max_alignment = SIZE_MAX, .ucm_events = 8, .ops = 16,
                            .context = 24, .nops = 4, .merge = 2, .dump_region = 3},
};

const struct ucx_layout *ucx_release_layout(void)
{
    const struct ucx_release *r = ucx_release();
    return r->support == UCX_UNKNOWN ? NULL : &layouts[r->api];
}

/* ucm_events sits after region_struct_size, alignment and max_alignment in 1.13-1.16, after
 * region_struct_size alone from 1.17 on. */
int ucx_release_params_events(const void *params)
{
    const struct ucx_layout *l = ucx_release_layout();
    int events;

    if (!params || !l)
        return -1;
    memcpy(&events, (const char *)params + l->ucm_events, sizeof(events));
    return events;
}

int ucx_release_lookups_reach_module(char *why, size_t len)
{
    void *found = dlsym(RTLD_DEFAULT, "ucs_pgtable_lookup");
    Dl_info at, mine;

    if (!dlsym(RTLD_NEXT, "ucs_pgtable_lookup") || !dlsym(RTLD_NEXT, "ucs_pgtable_init")) {
        snprintf(why, len, "libucs has no ucs_pgtable_lookup or ucs_pgtable_init");
        return -ENOENT;
    }
    if (!found || !dladdr(found, &at) || !dladdr((void *)ucx_release_lookups_reach_module, &mine) ||
        at.dli_fbase != mine.dli_fbase) {
        snprintf(why, len, "UCP's lookups do not reach the module, loaded after libucs "
                 "(preload it or link it first)");
        return -ENOTSUP;
    }
    return 0;
}

struct ucx_real ucx_real;

void ucx_real_resolve(void)
{
    struct ucx_real *r = &ucx_real;
    void *get;

    if (__atomic_load_n(&r->put, __ATOMIC_ACQUIRE))
        return;
    get = dlsym(RTLD_NEXT, "ucs_rcache_get");
    r->get_g1 = (__typeof__(r->get_g1))get;
    r->get_raw = (__typeof__(r->get_raw))get;
    r->create = (__typeof__(r->create))dlsym(RTLD_NEXT, "ucs_rcache_create");
    r->destroy = (__typeof__(r->destroy))dlsym(RTLD_NEXT, "ucs_rcache_destroy");
    r->hold = (__typeof__(r->hold))dlsym(RTLD_NEXT, "ucs_rcache_region_hold");
    r->invalidate = (__typeof__(r->invalidate))dlsym(RTLD_NEXT, "ucs_rcache_region_invalidate");
    __atomic_store_n(&r->put, (__typeof__(r->put))dlsym(RTLD_NEXT, "ucs_rcache_region_put"),
                     __ATOMIC_RELEASE);
}

#endif /* UCX_RELEASE_TABLE_ONLY */

/* Built against 1.13-1.16's headers, the copies are checked against UCX's own. */
#include <ucp/api/ucp_version.h>
#if UCP_API_MAJOR == 1 && UCP_API_MINOR <= 16
#include <ucs/memory/rcache.h>
#define SAME(t1, t2, f) _Static_assert(offsetof(t1, f) == offsetof(t2, f), #f)
_Static_assert(sizeof(struct ucx_g1_region) == sizeof(ucs_rcache_region_t), "region");
SAME(struct ucx_g1_region, ucs_rcache_region_t, refcount);
SAME(struct ucx_g1_region, ucs_rcache_region_t, status);
SAME(struct ucx_g1_region, ucs_rcache_region_t, prot);
SAME(struct ucx_g1_region, ucs_rcache_region_t, flags);
SAME(struct ucx_g1_region, ucs_rcache_region_t, priv);
_Static_assert(sizeof(struct ucx_g1_params) == sizeof(ucs_rcache_params_t), "params");
SAME(struct ucx_g1_params, ucs_rcache_params_t, ucm_events);
SAME(struct ucx_g1_params, ucs_rcache_params_t, ops);
SAME(struct ucx_g1_params, ucs_rcache_params_t, max_unreleased);
_Static_assert(sizeof(struct ucx_g1_ops) == sizeof(ucs_rcache_ops_t), "ops");
_Static_assert(UCX_G1_MIN_ALIGNMENT == UCS_RCACHE_MIN_ALIGNMENT, "alignment");
_Static_assert(UCX_G1_MEM_REG_HIDE_ERRORS == UCS_RCACHE_MEM_REG_HIDE_ERRORS, "hide errors");
_Static_assert(UCX_G1_FLAG_PURGE_ON_FORK == UCS_RCACHE_FLAG_PURGE_ON_FORK, "purge on fork");
#define API_NOW UCX_RCACHE_API_113
#elif UCP_API_MAJOR == 1 && UCP_API_MINOR == 17
#define API_NOW UCX_RCACHE_API_117
#elif UCP_API_MAJOR == 1 && UCP_API_MINOR <= 23
#define API_NOW UCX_RCACHE_API_118
#endif
/* Built against any known release, that release's row is checked against UCX's headers. */
#ifdef API_NOW
#include <ucs/memory/rcache.h>
#define AT(f, off) _Static_assert(offsetof(ucs_rcache_params_t, f) == (off), #f)
/* the same numbers as layouts[] above */
_Static_assert(sizeof(ucs_rcache_params_t) == (API_NOW == UCX_RCACHE_API_113 ? 80 : 64), "size");
AT(region_struct_size, 0);
AT(ucm_events, API_NOW == UCX_RCACHE_API_113 ? 24 : 8);
AT(ops, API_NOW == UCX_RCACHE_API_113 ? 32 : 16);
AT(context, API_NOW == UCX_RCACHE_API_113 ? 40 : 24);
_Static_assert(sizeof(ucs_rcache_ops_t) == (API_NOW == UCX_RCACHE_API_118 ? 4 : 3) * sizeof(void *),
               "ops");
_Static_assert(offsetof(ucs_rcache_ops_t, dump_region) ==
               (API_NOW == UCX_RCACHE_API_118 ? 3 : 2) * sizeof(void *), "dump_region");
#if UCP_API_MINOR >= 18
_Static_assert(offsetof(ucs_rcache_ops_t, merge) == 2 * sizeof(void *), "merge");
#endif
_Static_assert(offsetof(ucs_rcache_region_t, super) == 0, "pgt region first");
#endif
