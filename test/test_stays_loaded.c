/* libvmtrack is never unloaded once loaded: it patches libc to jump into it (the hooks
 * tracker) and runs threads of its own (the uffd tracker's monitor), so a dlclose of whatever
 * loaded it must leave it in place. Open MPI closes its components at MPI_Finalize: an MPI
 * singleton whose rcache component had loaded libvmtrack with the uffd tracker segfaulted
 * (7-10 times in 150 runs on a loaded machine) when the monitor, left running in the
 * unloaded library, woke for the next unmap. This program does not link libvmtrack: it loads
 * it by path, starts a cache (uffd where it works, else hooks, else none), closes its handle,
 * and asks the dynamic loader whether the library is still there, then unmaps memory the
 * cache watched. */
#define _GNU_SOURCE
#include "config.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vmtrack.h>

#include "../bench/null_device.h"
#include "lib/skip.h"

#ifndef VMT_LIBVMTRACK_PATH
#error "VMT_LIBVMTRACK_PATH must name the built libvmtrack.so.0"
#endif

typedef int (*cache_create_fn)(const struct vmt_cache_opts *, struct vmt_cache **);
typedef int (*attach_fn)(struct vmt_cache *, const struct vmt_device_ops *, void *,
                         struct vmt_device **);
typedef int (*get_fn)(struct vmt_device *, const void *, size_t, unsigned, struct vmt_reg **);
typedef void (*put_fn)(struct vmt_reg *);

/* A cache with the first tracker of these that works, and buf cached through a miss (uffd
 * then watches it: its monitor has an unmap to wake for). The cache is left alive, as a
 * process's shared cache is. 0, or -1 with the reason printed. */
static int start_cache(void *lib, char *buf, size_t len)
{
    cache_create_fn create = (cache_create_fn)dlsym(lib, "vmt_cache_create");
    attach_fn attach = (attach_fn)dlsym(lib, "vmt_device_attach");
    get_fn get = (get_fn)dlsym(lib, "vmt_get");
    put_fn put = (put_fn)dlsym(lib, "vmt_put");
    if (!create || !attach || !get || !put) {
        printf("FAIL: libvmtrack lacks its API: %s\n", dlerror());
        return -1;
    }
    static const char *const trackers[] = {"uffd", "hooks", "none"};
    struct vmt_cache *c = NULL;
    for (unsigned i = 0; i < sizeof trackers / sizeof trackers[0] && !c; i++) {
        struct vmt_cache_opts o;
        memset(&o, 0, sizeof o);
        o.sz = sizeof o;
        o.tracker = trackers[i];
        if (create(&o, &c) == 0)
            printf("a cache with tracker %s\n", trackers[i]);
    }
    if (!c) {
        printf("FAIL: no tracker works here, not even none\n");
        return -1;
    }
    struct vmt_device_ops ops;
    memset(&ops, 0, sizeof ops);
    ops.sz = sizeof ops;
    ops.name = "stays-loaded";
    ops.reg = null_reg;
    ops.dereg = null_dereg;
    struct vmt_device *dev;
    struct vmt_reg *r;
    if (attach(c, &ops, NULL, &dev) != 0 || get(dev, buf, len, VMT_ACCESS_READ, &r) != 0) {
        printf("FAIL: could not cache a buffer\n");
        return -1;
    }
    put(r);
    return 0;
}

int main(void)
{
    if (access(VMT_LIBVMTRACK_PATH, R_OK) != 0)
        return test_skip("no shared libvmtrack built (a static-only build)");
    size_t len = 1 << 16;
    char *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    void *lib = dlopen(VMT_LIBVMTRACK_PATH, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        printf("FAIL: dlopen %s: %s\n", VMT_LIBVMTRACK_PATH, dlerror());
        return 1;
    }
    if (buf == MAP_FAILED || start_cache(lib, buf, len) < 0)
        return 1;
    dlclose(lib);
    void *again = dlopen(VMT_LIBVMTRACK_PATH, RTLD_NOW | RTLD_NOLOAD);
    if (!again) {
        printf("FAIL: libvmtrack was unloaded by the dlclose of its one handle, its trackers "
               "still in the process\n");
        return 1;
    }
    munmap(buf, len);  /* what the tracker hears next runs in the library, still loaded */
    dlclose(again);
    printf("PASS: libvmtrack stays loaded after the dlclose of the handle that loaded it\n");
    return 0;
}
