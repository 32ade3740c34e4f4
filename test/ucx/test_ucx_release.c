/* libvmtrack-ucx under the UCX it was built with, whatever release that is (1.13 to 1.23):
 *  1. the release table: what the module makes of each UCX release (unknown ones refused);
 *  2. for the hooks and uffd trackers, a child with the module preloaded and
 *     UCX_MEM_MMAP_HOOK_MODE=none, which asserts
 *     - the release the module found is libucp's own (ucp_get_version),
 *     - the mode: hooks -> events before the system call (SYNC); uffd -> regions watched and
 *       hits checked (WATCH; from 1.14 on UCP's inline hits in ucs_pgtable_lookup),
 *     - UCP runs (ucp_init, 20 ucp_mem_map/unmap of one buffer whose pages are replaced every
 *       fifth map) with its own registration cache (the module's counters), which from 1.16
 *       on (where ucp_mem_map uses it) cached: UCT registered the buffer once per set of
 *       pages (4), not per map (20) and not less,
 *     - the same from four threads at once sharing UCP's context, each with a buffer of its
 *       own: each buffer registered exactly as often as one thread's alone,
 *     - UCX's rcache API through the module's interposers, called with this release's
 *       prototypes (ucs_rcache_get took an alignment from 1.17 on): a get registers once, hits
 *       after, and after munmap + mmap of the range registers again,
 *     - ucs_rcache_region_invalidate(NULL, ...) runs the completion (UCX's #11467 path);
 *  3. uffd again with VMTRACK_UCX_CHECK=0, the fallback where UCP's hits cannot be checked:
 *     from 1.14 on UCP's cache and the test's rcache are refused (UNCACHED) and, from 1.16 on,
 *     every map registers (20 times the first map's registrations); on 1.13 nothing changes;
 *  4. uffd with the module dlopen()ed after libucs: from 1.14 on the same fallback, saying that
 *     UCP's lookups do not reach the module.
 * A tracker that cannot run here (no userfaultfd) is reported and skipped; if none can, the
 * test skips (77). */
#define _GNU_SOURCE
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ucm/api/ucm.h>
#include <ucp/api/ucp.h>
#include <ucs/memory/rcache.h>

#include "../lib/skip.h"
#include "ucx_release.h"
#include "vmtrack_ucx.h"

#ifndef VMT_UCX_MODULE_PATH
#error "VMT_UCX_MODULE_PATH must name the built libvmtrack-ucx.so"
#endif

#define CHECK(cond, ...)                                                                    \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                          \
            printf(__VA_ARGS__);                                                            \
            putchar('\n');                                                                  \
            return 1;                                                                       \
        }                                                                                   \
    } while (0)

#define LEN (64u << 10)

/* The module under test: the one built here, or VMT_UCX_MODULE (test/ucx/release-matrix.sh
 * runs this release's test with a module built against another UCX release). */
static const char *module_path(void)
{
    const char *p = getenv("VMT_UCX_MODULE");

    return p && *p ? p : VMT_UCX_MODULE_PATH;
}

/* ---- 1. the table ----------------------------------------------------------------------- */
static int check_table(void)
{
    static const struct {
        unsigned major, minor, patch;
        enum ucx_support support;
        enum ucx_rcache_api api;
    } rows[] = {
        {1, 12, 1, UCX_UNKNOWN, UCX_RCACHE_API_NONE}, {1, 13, 1, UCX_SERVE, UCX_RCACHE_API_113},
        {1, 16, 0, UCX_CHECK, UCX_RCACHE_API_113},     {1, 17, 0, UCX_CHECK, UCX_RCACHE_API_117},
        {1, 18, 1, UCX_CHECK, UCX_RCACHE_API_118},     {1, 23, 0, UCX_CHECK, UCX_RCACHE_API_118},
        {1, 24, 0, UCX_UNKNOWN, UCX_RCACHE_API_NONE}, {2, 0, 0, UCX_UNKNOWN, UCX_RCACHE_API_NONE},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct ucx_release r;
        ucx_release_classify(rows[i].major, rows[i].minor, rows[i].patch, &r);
        CHECK(r.support == rows[i].support && r.api == rows[i].api, "UCX %s: support %d api %d",
              r.name, r.support, r.api);
        CHECK((r.support == UCX_UNKNOWN) == (r.why[0] != 0), "UCX %s: why \"%s\"", r.name,
              r.why);
    }
    printf("release table: ok\n");
    return 0;
}

/* ---- 2. in the child -------------------------------------------------------------------- */
static int nreg;

static ucs_status_t count_reg(void *ctx, ucs_rcache_t *rc, void *arg, ucs_rcache_region_t *r,
                              uint16_t flags)
{
    (void)ctx; (void)rc; (void)arg; (void)r; (void)flags;
    nreg++;
    return UCS_OK;
}

static void count_dereg(void *ctx, ucs_rcache_t *rc, ucs_rcache_region_t *r)
{
    (void)ctx; (void)rc; (void)r;
}

#if UCP_API_MINOR >= 18
static void no_merge(void *ctx, ucs_rcache_t *rc, void *arg, ucs_rcache_region_t *r)
{
    (void)ctx; (void)rc; (void)arg; (void)r;
}
#endif

static ucs_status_t rcache_get(ucs_rcache_t *rc, void *addr, ucs_rcache_region_t **r)
{
#if UCP_API_MINOR >= 17
    return ucs_rcache_get(rc, addr, LEN, 1, PROT_READ | PROT_WRITE, NULL, r);
#else
    return ucs_rcache_get(rc, addr, LEN, PROT_READ | PROT_WRITE, NULL, r);
#endif
}

static ucs_status_t rcache_create(ucs_rcache_t **rc)
{
    static ucs_rcache_ops_t ops = {
        .mem_reg = count_reg,
        .mem_dereg = count_dereg,
#if UCP_API_MINOR >= 18
        .merge = no_merge,
#endif
    };
    ucs_rcache_params_t p;
    memset(&p, 0, sizeof(p));
    p.region_struct_size = sizeof(ucs_rcache_region_t);
#if UCP_API_MINOR < 17
    p.alignment = UCS_RCACHE_MIN_ALIGNMENT;
    p.max_alignment = (size_t)sysconf(_SC_PAGESIZE);
#endif
    p.ucm_events = UCM_EVENT_VM_UNMAPPED;
    p.ucm_event_priority = 1000;
    p.ops = &ops;
    p.max_regions = ULONG_MAX;
    p.max_size = SIZE_MAX;
    p.max_unreleased = SIZE_MAX;
    return ucs_rcache_create(&p, "test_ucx_release", NULL, rc);
}

static void *map_pages(void *at)
{
    void *p = mmap(at, LEN, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | (at ? MAP_FIXED : 0), -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    memset(p, 1, LEN);
    return p;
}

/* A get, two hits, and (when the module feeds events) a get after the pages were replaced. */
static int check_rcache_api(enum vmt_ucx_mode mode)
{
    ucs_rcache_t *rc = NULL;
    ucs_rcache_region_t *r;
    ucs_status_t st = rcache_create(&rc);
    void *buf;

    if (mode == VMT_UCX_UNCACHED) {
        CHECK(st == UCS_ERR_UNSUPPORTED, "an rcache on unmap events was created: %s",
              ucs_status_string(st));
        printf("  rcache needing unmap events: refused\n");
        return 0;
    }

    CHECK(st == UCS_OK, "ucs_rcache_create: %s", ucs_status_string(st));
    buf = map_pages(NULL);
    CHECK(buf != NULL, "mmap: %s", strerror(errno));
    for (int i = 0; i < 3; i++) {
        st = rcache_get(rc, buf, &r);
        CHECK(st == UCS_OK, "ucs_rcache_get: %s", ucs_status_string(st));
        CHECK(r->super.start <= (uintptr_t)buf && r->super.end >= (uintptr_t)buf + LEN,
              "region %#lx-%#lx does not cover %p+%u", (unsigned long)r->super.start,
              (unsigned long)r->super.end, buf, LEN);
        ucs_rcache_region_put(rc, r);
    }
    CHECK(nreg == 1, "3 gets of one range registered %d times", nreg);
    CHECK(munmap(buf, LEN) == 0, "munmap: %s", strerror(errno));
    CHECK(map_pages(buf) == buf, "mmap at %p: %s", buf, strerror(errno));
    st = rcache_get(rc, buf, &r);
    CHECK(st == UCS_OK, "ucs_rcache_get after munmap: %s", ucs_status_string(st));
    ucs_rcache_region_put(rc, r);
    CHECK(nreg == 2, "the replaced pages were %s", nreg == 1 ? "not registered again (stale)"
                                                             : "registered more than once");
    ucs_rcache_destroy(rc);
    munmap(buf, LEN);
    printf("  rcache API through the module: registered once, hits, new pages re-registered\n");
    return 0;
}

static int completed;
static void on_complete(void *arg)
{
    (void)arg;
    completed++;
}

static int (*witness_of)(const void *, size_t);
static int (*stats_of)(struct vmt_ucx_stats *);

/* UCP with its registration cache: memory maps of a buffer whose pages are replaced; UCT's
 * registrations of the buffer in *regs. */
static int check_ucp(unsigned long *regs, unsigned long *first)
{
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                           .features = UCP_FEATURE_TAG | UCP_FEATURE_RMA};
    ucp_context_h ctx;
    ucs_status_t st = ucp_init(&params, NULL, &ctx);
    void *buf = map_pages(NULL);

    struct vmt_ucx_stats s = {.sz = sizeof(s)};
    CHECK(st == UCS_OK, "ucp_init: %s", ucs_status_string(st));
    CHECK(buf != NULL, "mmap: %s", strerror(errno));
    CHECK(witness_of(buf, LEN) == 0, "vmt_ucx_witness");
    for (int i = 0; i < 20; i++) {
        ucp_mem_map_params_t mp = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                                                 UCP_MEM_MAP_PARAM_FIELD_LENGTH,
                                   .address = buf, .length = LEN};
        ucp_mem_h memh;
        st = ucp_mem_map(ctx, &mp, &memh);
        CHECK(st == UCS_OK, "ucp_mem_map: %s", ucs_status_string(st));
        ucp_mem_unmap(ctx, memh);
        if (i == 0) {
            CHECK(stats_of(&s) == 0, "vmt_ucx_stats_get");
            *first = (unsigned long)s.witness_registrations;    /* one per memory domain */
        }
        if (i % 5 == 4) {
            CHECK(munmap(buf, LEN) == 0, "munmap: %s", strerror(errno));
            CHECK(map_pages(buf) == buf, "mmap at %p: %s", buf, strerror(errno));
        }
    }
    CHECK(stats_of(&s) == 0, "vmt_ucx_stats_get");
    *regs = (unsigned long)s.witness_registrations;
    witness_of(NULL, 0);
    ucp_cleanup(ctx);
    munmap(buf, LEN);
    return 0;
}

/* The same from several threads at once, each on a buffer of its own (UCP shares the context
 * between them): the module's watches and checks under concurrent maps, unmaps and page
 * replacements. Each thread's buffer must be registered exactly as often as one thread's
 * alone (`alone`: once per set of pages where ucp_mem_map caches, per map on 1.13); fewer
 * registrations would be a stale hit. */
#define UCP_THREADS 4
struct ucp_thread {
    ucp_context_h ctx;
    void *buf;
    pthread_barrier_t *start;
    int failed;
};

static void *ucp_thread_maps(void *arg)
{
    struct ucp_thread *t = arg;

    pthread_barrier_wait(t->start);
    for (int i = 0; i < 20 && !t->failed; i++) {
        ucp_mem_map_params_t mp = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                                                 UCP_MEM_MAP_PARAM_FIELD_LENGTH,
                                   .address = t->buf, .length = LEN};
        ucp_mem_h memh;
        if (ucp_mem_map(t->ctx, &mp, &memh) != UCS_OK) {
            t->failed = 1;
            break;
        }
        ucp_mem_unmap(t->ctx, memh);
        if (i % 5 == 4 && (munmap(t->buf, LEN) != 0 || map_pages(t->buf) != t->buf))
            t->failed = 1;
    }
    return NULL;
}

/* The module hears of an unmap after the system call with uffd (its monitor thread), before
 * it with hooks. Whatever it makes UCX do then must not map memory into the range: a program
 * may map the same address again (MAP_FIXED) and would overwrite it - UCX's pool, which grows
 * with mmap when the first invalidation is queued. A fresh UCP context has an empty pool. */
static int check_hole_stays_free(void)
{
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                           .features = UCP_FEATURE_TAG | UCP_FEATURE_RMA};
    struct vmt_ucx_stats s = {.sz = sizeof(s)};
    ucp_context_h ctx;
    ucp_mem_h memh;
    ucs_status_t st = ucp_init(&params, NULL, &ctx);
    void *buf = map_pages(NULL), *again;
    uint64_t before;

    CHECK(st == UCS_OK, "ucp_init: %s", ucs_status_string(st));
    CHECK(buf != NULL, "mmap: %s", strerror(errno));
    ucp_mem_map_params_t mp = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                                             UCP_MEM_MAP_PARAM_FIELD_LENGTH,
                               .address = buf, .length = LEN};
    st = ucp_mem_map(ctx, &mp, &memh);          /* registered, so watched */
    CHECK(st == UCS_OK, "ucp_mem_map: %s", ucs_status_string(st));
    ucp_mem_unmap(ctx, memh);
    CHECK(stats_of(&s) == 0, "vmt_ucx_stats_get");
    before = s.reported;
    CHECK(munmap(buf, LEN) == 0, "munmap: %s", strerror(errno));
    for (int ms = 0; s.reported == before; ms++) {
        CHECK(ms < 10000, "the unmap of a registered buffer was not reported in 10 s");
        usleep(1000);
        CHECK(stats_of(&s) == 0, "vmt_ucx_stats_get");
    }
    again = mmap(buf, LEN, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    CHECK(again == buf, "after the unmap was reported, %p+%u is no longer free (%s): the "
          "module or UCX mapped memory into it", buf, LEN,
          again == MAP_FAILED ? strerror(errno) : "mapped elsewhere");
    munmap(buf, LEN);
    ucp_cleanup(ctx);
    printf("  the range of an unmapped registered buffer stays free after the report\n");
    return 0;
}

static int check_ucp_threads(unsigned long alone)
{
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES |
                                         UCP_PARAM_FIELD_MT_WORKERS_SHARED,
                           .features = UCP_FEATURE_TAG | UCP_FEATURE_RMA,
                           .mt_workers_shared = 1};
    struct vmt_ucx_stats s = {.sz = sizeof(s)};
    struct ucp_thread t[UCP_THREADS];
    pthread_t tid[UCP_THREADS];
    pthread_barrier_t start;
    size_t span = 2 * LEN * UCP_THREADS;   /* a gap after each buffer: no region merges */
    ucp_context_h ctx;
    ucs_status_t st = ucp_init(&params, NULL, &ctx);
    char *area = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    CHECK(st == UCS_OK, "ucp_init (workers shared): %s", ucs_status_string(st));
    CHECK(area != MAP_FAILED, "mmap: %s", strerror(errno));
    pthread_barrier_init(&start, NULL, UCP_THREADS);
    for (int i = 0; i < UCP_THREADS; i++) {
        t[i] = (struct ucp_thread){.ctx = ctx, .buf = area + 2 * LEN * i, .start = &start};
        CHECK(map_pages(t[i].buf) == t[i].buf, "mmap: %s", strerror(errno));
    }
    CHECK(stats_of(&s) == 0, "vmt_ucx_stats_get");
    unsigned long before = (unsigned long)s.uct_registrations;   /* UCT's, of any range */
    for (int i = 0; i < UCP_THREADS; i++)
        CHECK(pthread_create(&tid[i], NULL, ucp_thread_maps, &t[i]) == 0, "pthread_create");
    for (int i = 0; i < UCP_THREADS; i++) {
        pthread_join(tid[i], NULL);
        CHECK(!t[i].failed, "thread %d: ucp_mem_map or the page replacement failed", i);
    }
    CHECK(stats_of(&s) == 0, "vmt_ucx_stats_get");
    unsigned long regs = (unsigned long)s.uct_registrations - before;
    unsigned long want = UCP_THREADS * alone;
    printf("  UCP, %d threads, 20 maps each of 4 sets of pages: UCT registered the buffers %lu "
           "times (expected %lu)\n", UCP_THREADS, regs, want);
    CHECK(regs == want, "%s", regs < want ? "replaced pages were not registered again (stale)"
                                          : "registered more than once per set of pages");
    ucp_cleanup(ctx);
    pthread_barrier_destroy(&start);
    munmap(area, span);
    return 0;
}

/* The module's API, from the preloaded module (the test does not link it). */
static const char *(*release_of)(void);
static enum vmt_ucx_mode (*mode_of)(char *, size_t);
static const char *(*tracker_of)(void);

static int run_one(const char *tracker, int fallback)
{
    unsigned major, minor, patch;
    char name[32], why[256];
    struct vmt_ucx_stats s = {.sz = sizeof(s)};
    enum vmt_ucx_mode mode, want;

    release_of = (const char *(*)(void))dlsym(RTLD_DEFAULT, "vmt_ucx_release");
    mode_of = (enum vmt_ucx_mode (*)(char *, size_t))dlsym(RTLD_DEFAULT, "vmt_ucx_mode");
    tracker_of = (const char *(*)(void))dlsym(RTLD_DEFAULT, "vmt_ucx_tracker");
    stats_of = (int (*)(struct vmt_ucx_stats *))dlsym(RTLD_DEFAULT, "vmt_ucx_stats_get");
    witness_of = (int (*)(const void *, size_t))dlsym(RTLD_DEFAULT, "vmt_ucx_witness");
    CHECK(release_of && mode_of && tracker_of && stats_of && witness_of,
          "the module is not preloaded");
    ucp_get_version(&major, &minor, &patch);
    snprintf(name, sizeof(name), "%u.%u.%u", major, minor, patch);
    CHECK(!strcmp(release_of(), name), "module found UCX %s, libucp says %s",
          release_of(), name);
    mode = mode_of(why, sizeof(why));
    printf("UCX %s, tracker %s: mode %d (%s)\n", name, tracker, mode, why);
    if (mode == VMT_UCX_OFF && strcmp(tracker, "hooks") && strstr(why, "vmt_shared"))
        return VMT_TEST_SKIP;   /* this tracker cannot run here: the parent says so */
    want = !strcmp(tracker, "hooks") ? VMT_UCX_SYNC
           : fallback && minor >= 14 ? VMT_UCX_UNCACHED : VMT_UCX_WATCH;
    CHECK(mode == want, "mode %d, expected %d", mode, want);
    CHECK(!strcmp(tracker_of(), tracker), "tracker %s", tracker_of());

    /* first: the process has few holes yet, so the kernel places new mappings next to the
     * buffer, and in its range once freed */
    if (mode != VMT_UCX_UNCACHED && check_hole_stays_free())
        return 1;
    unsigned long regs = 0, first = 0;
    if (check_ucp(&regs, &first))
        return 1;
    CHECK(stats_of(&s) == 0, "vmt_ucx_stats_get");
    printf("  UCP: rcaches forwarded %lu, native %lu, refused %lu; 20 maps of 4 sets of pages: "
           "UCT registered the buffer %lu times (%lu at the first map); %lu hits found stale (%lu "
           "in UCP's inline lookup)\n", (unsigned long)s.forwarded_rcaches,
           (unsigned long)s.native_rcaches, (unsigned long)s.refused_rcaches, regs, first,
           (unsigned long)s.stale, (unsigned long)s.stale_lookups);
    if (mode == VMT_UCX_UNCACHED) {
        CHECK(s.refused_rcaches >= 1, "UCP's registration cache was not refused");
        if (minor >= 16)
            CHECK(regs == 20 * first, "without a cache every map registers: %lu, not %lu",
                  regs, 20 * first);
        return check_rcache_api(mode);
    }
    CHECK(s.forwarded_rcaches + s.native_rcaches >= 1 && s.refused_rcaches == 0,
          "UCP's registration cache was not created");
    /* Fewer registrations than one per set of pages are a stale hit on any release. UCP's
     * ucp_mem_map goes through its cache from 1.16 on (its mem_reg callback registers: exactly
     * once per set); 1.14.1 and 1.15.0 cache it too (test/ucx/release-matrix.sh), 1.13
     * registers every map. */
    CHECK(first >= 1 && regs >= 4 * first, "the registrations of the first map (%lu) not "
          "repeated for each of the 4 sets of pages: replaced pages were not registered again "
          "(stale)", first);
    if (minor >= 16)
        CHECK(regs == 4 * first, "expected the registrations of the first map (%lu) once per "
              "set of pages (4): not cached", first);
    if (check_ucp_threads(regs))
        return 1;

    if (check_rcache_api(mode))
        return 1;
    ucs_rcache_region_invalidate(NULL, NULL, on_complete, NULL);
    CHECK(completed == 1, "invalidate without an rcache ran its completion %d times",
          completed);
    printf("  tracker %s: ok\n", tracker);
    return 0;
}

/* The module loaded after libucs (dlopen, uffd): from 1.14 on UCP's lookups bind to libucs's,
 * so the module must fall back to refusing UCP's cache, and say why. */
static int run_late(void)
{
    unsigned major, minor, patch;
    char why[256];
    void *m;

    ucp_get_version(&major, &minor, &patch);
    m = dlopen(module_path(), RTLD_NOW | RTLD_GLOBAL);
    CHECK(m != NULL, "dlopen: %s", dlerror());
    mode_of = (enum vmt_ucx_mode (*)(char *, size_t))dlsym(m, "vmt_ucx_mode");
    CHECK(mode_of != NULL, "no vmt_ucx_mode");
    enum vmt_ucx_mode mode = mode_of(why, sizeof(why));
    printf("UCX %u.%u.%u, module loaded after libucs: mode %d (%s)\n", major, minor, patch, mode,
           why);
    if (mode == VMT_UCX_OFF && strstr(why, "vmt_shared"))
        return VMT_TEST_SKIP;
    if (minor >= 14)
        CHECK(mode == VMT_UCX_UNCACHED && strstr(why, "do not reach"),
              "expected the fallback (uncached) because the lookups do not reach the module");
    printf("  module loaded late: ok\n");
    return 0;
}

/* ---- the parent ------------------------------------------------------------------------- */
static int spawn(const char *tracker, int fallback)
{
    pid_t pid = fork();
    if (pid == 0 && fallback == 2) {
        /* not preloaded: the child loads the module itself, after libucs */
        setenv("UCX_MEM_MMAP_HOOK_MODE", "none", 1);
        setenv("VMTRACK_TRACKER", tracker, 1);
        unsetenv("LD_PRELOAD");
        execl("/proc/self/exe", "test_ucx_release", "--late", (char *)NULL);
        _exit(127);
    }
    if (pid == 0) {
        setenv("LD_PRELOAD", module_path(), 1);
        setenv("UCX_MEM_MMAP_HOOK_MODE", "none", 1);
        setenv("VMTRACK_TRACKER", tracker, 1);
        setenv("UCX_TLS", "self,tcp", 1);
        setenv("UCX_WARN_UNUSED_ENV_VARS", "n", 1);
        if (fallback)
            setenv("VMTRACK_UCX_CHECK", "0", 1);
        execl("/proc/self/exe", "test_ucx_release", "--one", tracker, fallback ? "0" : "1",
              (char *)NULL);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

int main(int argc, char **argv)
{
    /* uffd thrice: checking UCP's hits, the fallback that refuses UCP's cache when asked
     * (1), and when the module is loaded after libucs (2) */
    static const struct {
        const char *tracker;
        int fallback;
    } runs[] = {{"hooks", 0}, {"uffd", 0}, {"uffd", 1}, {"uffd", 2}};
    int fail = 0, ran = 0;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 4 && !strcmp(argv[1], "--one"))
        return run_one(argv[2], !strcmp(argv[3], "0"));
    if (argc == 2 && !strcmp(argv[1], "--late"))
        return run_late();
    if (access(module_path(), R_OK) != 0)
        return test_skip("%s not built: %s", module_path(), strerror(errno));
    fail |= check_table();
    for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
        int rc = spawn(runs[i].tracker, runs[i].fallback);
        if (rc == VMT_TEST_SKIP) {
            printf("tracker %s: cannot run here (see above), not tested\n", runs[i].tracker);
            continue;
        }
        ran++;
        if (rc) {
            printf("tracker %s%s: FAIL (status %d)\n", runs[i].tracker,
                   runs[i].fallback == 1 ? " (VMTRACK_UCX_CHECK=0)"
                   : runs[i].fallback == 2 ? " (loaded after libucs)" : "", rc);
            fail = 1;
        }
    }
    if (!ran && !fail)
        return test_skip("no tracker could run here");
    return fail;
}
