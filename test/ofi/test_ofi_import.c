/* libvmtrack-ofi's import against the real libfabric (Debian 12's 1.17), on any machine:
 *   imported      loaded into a process, the constructor imports: libfabric then refuses a
 *                 second monitor with -FI_EBUSY
 *   env           FI_MR_CACHE_MONITOR set: refused with that reason, libfabric's monitor kept
 *   busy          another monitor imported first: refused with -FI_EBUSY and the reason
 *   early events  address-space changes before libfabric initialised and before any domain
 *                 (start) are dropped: no notify reaches libfabric (which would crash), then
 *                 fi_getinfo works
 * (start/stop by a real domain needs a provider with an MR cache: test_ofi_rdma, in the guest.)
 * Each case runs in its own child, because the library imports when it is loaded. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_ext.h>

#include "vmtrack_ofi.h"

#ifndef VMT_OFI_MODULE_PATH
#error "VMT_OFI_MODULE_PATH must name the built libvmtrack-ofi.so"
#endif

static int failures;

#define EXPECT(cond, ...)                                                                   \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                 \
            fprintf(stderr, __VA_ARGS__);                                                   \
            fputc('\n', stderr);                                                            \
            return 1;                                                                       \
        }                                                                                   \
    } while (0)

struct module {
    int (*import)(void);
    int (*state)(char *, size_t);
    int (*stats)(struct vmt_ofi_stats *);
};

static int load(struct module *m)
{
    void *h = dlopen(VMT_OFI_MODULE_PATH, RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        fprintf(stderr, "dlopen %s: %s\n", VMT_OFI_MODULE_PATH, dlerror());
        return -1;
    }
    m->import = (int (*)(void))dlsym(h, "vmt_ofi_import");
    m->state = (int (*)(char *, size_t))dlsym(h, "vmt_ofi_state");
    m->stats = (int (*)(struct vmt_ofi_stats *))dlsym(h, "vmt_ofi_stats_get");
    return m->import && m->state && m->stats ? 0 : -1;
}

/* A monitor that does nothing, to see whether libfabric takes an import. */
static int nop_start(struct fid_mem_monitor *m) { (void)m; return 0; }
static void nop_stop(struct fid_mem_monitor *m) { (void)m; }
static int nop_sub(struct fid_mem_monitor *m, const void *a, size_t l)
{
    (void)m; (void)a; (void)l;
    return 0;
}
static void nop_unsub(struct fid_mem_monitor *m, const void *a, size_t l) { (void)m; (void)a; (void)l; }
static bool nop_valid(struct fid_mem_monitor *m, const void *a, size_t l)
{
    (void)m; (void)a; (void)l;
    return false;
}
static struct fi_ops_mem_monitor nop_ops = {
    .size = sizeof(nop_ops), .start = nop_start, .stop = nop_stop, .subscribe = nop_sub,
    .unsubscribe = nop_unsub, .valid = nop_valid,
};
static struct fid_mem_monitor nop_mon = {.fid.fclass = FI_CLASS_MEM_MONITOR,
                                         .export_ops = &nop_ops};

static int import_nop(void)
{
    struct fid *cache;
    int ret = fi_open(FI_VERSION(1, 13), "mr_cache", NULL, 0, 0, &cache, NULL);
    if (ret)
        return ret;
    ret = fi_import_fid(cache, &nop_mon.fid, 0);
    fi_close(cache);
    return ret;
}

static int case_imported(void)
{
    struct module m;
    char why[320];
    EXPECT(load(&m) == 0, "module did not load");
    EXPECT(m.state(why, sizeof(why)) == 1, "state: %s", why);
    int ret = import_nop();
    EXPECT(ret == -FI_EBUSY, "a second import got %d, not -FI_EBUSY: libfabric did not take "
           "vmtrack's", ret);
    EXPECT(m.import() == 0, "vmt_ofi_import after the constructor's import");
    printf("  imported: %s; a second monitor gets -FI_EBUSY\n", why);
    return 0;
}

static int case_env(void)
{
    struct module m;
    char why[320];
    setenv("FI_MR_CACHE_MONITOR", "memhooks", 1);
    EXPECT(load(&m) == 0, "module did not load");
    int st = m.state(why, sizeof(why));
    EXPECT(st == -ECANCELED, "state %d: %s", st, why);
    EXPECT(strstr(why, "FI_MR_CACHE_MONITOR=memhooks"), "reason: %s", why);
    EXPECT(import_nop() == 0, "libfabric's default slot should still be free");
    printf("  FI_MR_CACHE_MONITOR set: refused: %s\n", why);
    return 0;
}

static int case_busy(void)
{
    struct module m;
    char why[320];
    setenv("VMTRACK_OFI", "0", 1);
    EXPECT(import_nop() == 0, "the first import");
    EXPECT(load(&m) == 0, "module did not load");
    EXPECT(m.state(why, sizeof(why)) == 0, "VMTRACK_OFI=0: %s", why);
    int ret = m.import();
    EXPECT(ret == -EBUSY, "vmt_ofi_import: %d", ret);
    EXPECT(m.state(why, sizeof(why)) == -EBUSY && strstr(why, "-FI_EBUSY"), "reason: %s", why);
    struct vmt_ofi_stats s = {.sz = sizeof(s)};
    EXPECT(m.stats(&s) == -ENODEV, "stats of a monitor that was not imported");
    printf("  another monitor first: refused: %s\n", why);
    return 0;
}

static int case_early_events(void)
{
    struct module m;
    char why[320];
    EXPECT(load(&m) == 0, "module did not load");
    EXPECT(m.state(why, sizeof(why)) == 1, "state: %s", why);
    for (int i = 0; i < 200; i++) {   /* libfabric not initialised: a notify would crash it */
        void *p = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        EXPECT(p != MAP_FAILED, "mmap");
        memset(p, 1, 1 << 16);
        munmap(p, 1 << 16);
        free(malloc(1 << 20));
    }
    struct fi_info *info = NULL;
    int ret = fi_getinfo(FI_VERSION(1, 13), NULL, NULL, 0, NULL, &info);
    if (ret == 0)
        fi_freeinfo(info);
    struct vmt_ofi_stats s = {.sz = sizeof(s)};
    EXPECT(m.stats(&s) == 0, "stats");
    EXPECT(s.starts == 0 && s.notifies == 0, "starts %llu notifies %llu before any domain",
           (unsigned long long)s.starts, (unsigned long long)s.notifies);
    printf("  early events: none reached libfabric (no domain yet), fi_getinfo fine\n");
    return 0;
}

static int run(const char *name, int (*fn)(void))
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(60);
        _exit(fn());
    }
    int status;
    waitpid(pid, &status, 0);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    printf("%s: %s\n", name, code == 0 ? "ok" : code == 77 ? "skipped" : "FAILED");
    if (code != 0 && code != 77)
        failures++;
    return code;
}

int main(void)
{
    unsetenv("FI_MR_CACHE_MONITOR");
    unsetenv("VMTRACK_OFI");
    run("imported", case_imported);
    run("FI_MR_CACHE_MONITOR", case_env);
    run("busy", case_busy);
    run("early events", case_early_events);
    return failures ? 1 : 0;
}
