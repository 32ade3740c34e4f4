/* vmtrack's hooks as the process's one memory patcher, from the rcache component's open.
 *
 * Without vmtrack.ko the component used to run with tracker "none", fed by Open MPI's patcher,
 * whose hook runs before the system call with no event after it: another thread can register
 * the old pages again in between (grdma's stale window). vmtrack's hooks see both sides of the
 * call, so the cache is never stale. Two patchers cannot share libc's entries, so when vmtrack
 * is chosen and nothing can have patched yet (Open MPI 4.1 opens the memory framework, where
 * the patcher lives, only at the first rcache module creation or in common_ucx/common_ofi, all
 * after the rcache framework opens), the component:
 *   1. creates the shared cache with the hooks tracker;
 *   2. subscribes a forwarder that calls opal_mem_hooks_release_hook for every event, so grdma,
 *      common_ucx, osc and every other opal_mem_hooks user keep their events;
 *   3. sets the "memory" selection to "^patcher" through the MCA variable system, before the
 *      framework registers (that is when it finds its components), so the patcher is never
 *      loaded into the framework and never patches;
 *   4. declares free+munmap support, as the patcher would;
 *   5. sets UCX_MEM_MMAP_HOOK_MODE=reloc if unset, so that a UCX loaded later (Open MPI 4.1's
 *      pml ucx) does not write over libc's entries and takes Open MPI's events instead. Open
 *      MPI 5 links UCX into libopen-pal: it is loaded, and patches unless told not to, before
 *      main; the mode must then come with the job's environment (vmtrack's modulefile and
 *      Open MPI settings file) or ucx.conf, and the gate reads the mode UCX acts on.
 * Any condition not met, or any step failing before the hooks are in: today's behaviour, and
 * the reason at --mca rcache_vmtrack_verbose 10. --mca memory patcher is the way out. */
#include "rcache_vmtrack.h"
#include "entry_owner.h"
#include "takeover_gate.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opal/mca/base/base.h"
#include "opal/mca/base/mca_base_framework.h"
#include "opal/mca/base/mca_base_var.h"
#include "opal/mca/memory/base/base.h"
#include "opal/memoryhooks/memory.h"
#include "opal/util/output.h"

/* UCX's public configuration structure, to read the mode of a UCX already loaded. */
#if defined(__has_include)
#if __has_include(<ucm/api/ucm.h>)
#include <ucm/api/ucm.h>
#define VMT_OMPI_HAVE_UCM_H 1
#endif
#endif

#define C mca_rcache_vmtrack_component

/* ---- the forwarder ----------------------------------------------------------------------- */

/* In the unmapping thread, before the system call, possibly inside free(): what the patcher's
 * intercepts do (from_alloc = true: the callbacks must not allocate). */
static void forward_event(void *arg, const void *addr, size_t len)
{
    (void) arg;
    opal_mem_hooks_release_hook((void *) addr, len, true);
}

/* ---- the guard: libc's entries as the takeover left them ----------------------------------- */

static const char *const guarded_names[] = {"mmap", "munmap", "mremap", "madvise", "brk",
                                            "shmat", "shmdt"};
#define N_GUARDED (sizeof(guarded_names) / sizeof(guarded_names[0]))
static const unsigned char *guarded_entry[N_GUARDED];
static unsigned char guarded_bytes[N_GUARDED][8];
static int guard_warned;

static void guard_arm(void)
{
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    for (size_t i = 0; i < N_GUARDED; i++) {
        guarded_entry[i] = libc ? (const unsigned char *) dlsym(libc, guarded_names[i]) : NULL;
        if (guarded_entry[i])
            memcpy(guarded_bytes[i], guarded_entry[i], sizeof(guarded_bytes[i]));
    }
    if (libc)
        dlclose(libc);
}

void vmt_ompi_takeover_guard(void)
{
    if (!C.took_over || __atomic_load_n(&guard_warned, __ATOMIC_RELAXED))
        return;
    for (size_t i = 0; i < N_GUARDED; i++) {
        if (!guarded_entry[i] ||
            0 == memcmp(guarded_bytes[i], guarded_entry[i], sizeof(guarded_bytes[i])))
            continue;
        if (0 != __atomic_exchange_n(&guard_warned, 1, __ATOMIC_RELAXED))
            return;
        opal_output(0, "rcache vmtrack: WARNING: libc's %s() was patched again after vmtrack "
                    "took over Open MPI's memory hooks (it now jumps to %s). Open MPI's own "
                    "registration caches (grdma, UCX through Open MPI, osc) no longer get unmap "
                    "events and may reuse stale registrations; vmtrack's cache stops caching. "
                    "Keep that library from patching libc (UCX: UCX_MEM_MMAP_HOOK_MODE=reloc), "
                    "or run with --mca memory patcher", guarded_names[i],
                    vmt_ompi_entry_owner(guarded_entry[i]));
        return;
    }
}

/* ---- gathering the facts -------------------------------------------------------------------- */

static const char *loaded_ucx_library(void)
{
    static const char *const libs[] = {"libucs.so.0", "libucm.so.0", "libuct.so.0",
                                       "libucp.so.0"};
    for (size_t i = 0; i < sizeof(libs) / sizeof(libs[0]); i++) {
        void *h = dlopen(libs[i], RTLD_NOW | RTLD_NOLOAD);
        if (h) {
            dlclose(h);
            return libs[i];
        }
    }
    return NULL;
}

/* UCX's mmap hook mode as it will act on it. A loaded UCX (Open MPI 5 links it into
 * libopen-pal, so it is loaded at exec) read its configuration, the environment and ucx.conf,
 * when libucs initialised: its ucm_global_opts hold the mode. A UCX loaded later reads
 * UCX_MEM_MMAP_HOOK_MODE first, and the takeover sets it. NULL: unset (UCX's default). */
static const char *ucx_hook_mode(void)
{
#ifdef VMT_OMPI_HAVE_UCM_H
    void *ucs = dlopen("libucs.so.0", RTLD_NOW | RTLD_NOLOAD);
    void *ucm = ucs ? dlopen("libucm.so.0", RTLD_NOW | RTLD_NOLOAD) : NULL;
    const ucm_global_config_t *opts = ucm ? dlsym(ucm, "ucm_global_opts") : NULL;
    int mode = opts ? (int) opts->mmap_hook_mode : -1;
    if (ucm)
        dlclose(ucm);
    if (ucs)
        dlclose(ucs);
    switch (mode) {
    case UCM_MMAP_HOOK_NONE: return "none";
    case UCM_MMAP_HOOK_RELOC: return "reloc";
    case UCM_MMAP_HOOK_BISTRO: return "bistro";
    default: break;   /* not loaded, or a mode this build does not know: the environment */
    }
#endif
    return getenv("UCX_MEM_MMAP_HOOK_MODE");
}

/* An entry of libc that jumps somewhere else than libc or vmtrack's hooks, as
 * "name() by owner" in buf; NULL when none does. */
static const char *foreign_patch(char *buf, size_t len)
{
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    const char *found = NULL;
    for (size_t i = 0; libc && i < N_GUARDED && !found; i++) {
        const void *entry = dlsym(libc, guarded_names[i]);
        const char *owner = entry ? vmt_ompi_entry_owner(entry) : "libc";
        if (!strstr(owner, "libc.so") && !strstr(owner, "libvmtrack")) {
            snprintf(buf, len, "%s() by %s", guarded_names[i], owner);
            found = buf;
        }
    }
    if (libc)
        dlclose(libc);
    return found;
}

static bool memory_framework_touched(void)
{
    return mca_base_framework_is_registered(&opal_memory_base_framework) ||
           mca_base_framework_is_open(&opal_memory_base_framework);
}

/* The memory framework's selection variable, registered now on the framework's own storage,
 * exactly as the framework will register it: a value set on it stays the framework's default
 * when the framework registers (Open MPI keeps what the storage holds as the default), and the
 * environment and parameter files are read the same way. */
static int memory_selection_var(void)
{
    return mca_base_var_register("opal", "memory", NULL, NULL,
                                 "Memory components to use (the vmtrack rcache leaves the "
                                 "patcher out when its hooks take over)",
                                 MCA_BASE_VAR_TYPE_STRING, NULL, 0, MCA_BASE_VAR_FLAG_SETTABLE,
                                 OPAL_INFO_LVL_2, MCA_BASE_VAR_SCOPE_ALL_EQ,
                                 &opal_memory_base_framework.framework_selection);
}

/* ---- the steps ------------------------------------------------------------------------------- */

/* The shared cache with hooks. A private hooks cache is made first: if the hooks cannot be
 * installed it fails alone, while a failed vmt_shared() would stay failed for the process. */
static struct vmt_cache *hooks_shared_cache(char *why, size_t len)
{
    struct vmt_cache_opts o = {.sz = sizeof(o), .tracker = "hooks"};
    struct vmt_cache *probe = NULL;
    int rc = vmt_cache_create(&o, &probe);
    if (0 != rc) {
        snprintf(why, len, "vmtrack's hooks tracker is unavailable here: %s (vmtrack says "
                 "why above)", vmt_strerror(rc));
        return NULL;
    }
    const char *prev = getenv("VMTRACK_TRACKER");
    char *saved = prev ? strdup(prev) : NULL;
    setenv("VMTRACK_TRACKER", "hooks", 1);
    vmt_ompi_apply_limits();
    errno = 0;
    struct vmt_cache *shared = vmt_shared();
    int err = errno;
    if (saved)
        setenv("VMTRACK_TRACKER", saved, 1);
    else
        unsetenv("VMTRACK_TRACKER");
    free(saved);
    vmt_cache_destroy(probe);   /* the hooks stay in while the shared cache uses them */
    if (NULL == shared) {
        snprintf(why, len, "vmtrack's shared cache could not be created: %s", strerror(err));
        return NULL;
    }
    if (0 != strcmp(vmt_cache_tracker(shared), "hooks")) {
        snprintf(why, len, "the process's shared vmtrack cache already exists with tracker "
                 "\"%s\"", vmt_cache_tracker(shared));
        return NULL;
    }
    return shared;
}

/* dlclose of this component could take libvmtrack with it while libc still jumps into its
 * hooks: keep it loaded for the life of the process. (glibc already keeps it on this machine,
 * measured: an mmap after MPI_Finalize works without this; it should not depend on why.) */
static void pin_libvmtrack(void)
{
    Dl_info info;
    if (dladdr((void *) vmt_shared, &info) && info.dli_fname)
        (void) dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
}

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(C.takeover_note, sizeof(C.takeover_note), fmt, ap);
    va_end(ap);
    opal_output_verbose(10, C.output, "rcache vmtrack: %s", C.takeover_note);
}

static void gather_facts(struct vmt_ompi_takeover_facts *f, char *rsel, char *msel,
                         char *patched, size_t len, int *memory_var)
{
    f->libc_patched = foreign_patch(patched, len);
    f->rcache_selection = vmt_ompi_framework_selection("rcache", rsel, len, NULL);
    f->tracker_param = vmt_ompi_tracker_param();
    f->tracker_env = getenv("VMTRACK_TRACKER");
    f->ucx_loaded = loaded_ucx_library();
    f->ucx_hook_mode = ucx_hook_mode();
    f->memory_framework_touched = memory_framework_touched();
    *memory_var = -1;
    if (!f->memory_framework_touched) {
        *memory_var = memory_selection_var();
        if (*memory_var >= 0)
            (void) vmt_ompi_framework_selection("memory", msel, len, &f->memory_set_by);
    }
    /* last: it opens /dev/vmtrack, pointless when an earlier condition already says no */
    char buf[8];
    f->kmod_usable = NULL == vmt_ompi_takeover_refusal(f, buf, sizeof(buf)) &&
                     vmt_ompi_kmod_usable();
}

void vmt_ompi_takeover(void)
{
    static bool tried;   /* the rcache framework may be opened more than once */
    if (tried)
        return;
    tried = true;

    struct vmt_ompi_takeover_facts f = {0};
    char rsel[128], msel[128], patched[128], why[512];
    int memory_var;
    gather_facts(&f, rsel, msel, patched, sizeof(rsel), &memory_var);
    const char *no = vmt_ompi_takeover_refusal(&f, why, sizeof(why));
    if (no) {
        note("Open MPI's patcher stays (tracker as before): %s", no);
        /* vmtrack was asked for by name and only the job's start can fix this: say so */
        if (f.libc_patched && strstr(f.libc_patched, "libucm"))
            opal_output(0, "rcache vmtrack: %s", C.takeover_note);
        return;
    }
    if (memory_var < 0) {
        note("Open MPI's patcher stays: the memory framework's selection variable could not "
             "be registered");
        return;
    }
    bool set_ucx = NULL == getenv("UCX_MEM_MMAP_HOOK_MODE");
    if (set_ucx)
        setenv("UCX_MEM_MMAP_HOOK_MODE", "reloc", 1);

    struct vmt_cache *cache = hooks_shared_cache(why, sizeof(why));
    if (NULL == cache) {
        if (set_ucx)
            unsetenv("UCX_MEM_MMAP_HOOK_MODE");
        note("Open MPI's patcher stays (tracker as before): %s", why);
        return;
    }
    /* From here the hooks are in libc. A failure leaves them: the modules still use the
     * hooks cache, which stops caching (never stale) once Open MPI's patcher writes over it,
     * and Open MPI keeps its own events. Said at verbosity 0: the process runs degraded. */
    pin_libvmtrack();
    C.cache = cache;
    C.tracker_in_use = vmt_cache_tracker(cache);
    int rc = vmt_subscribe(cache, forward_event, NULL);
    if (0 != rc) {
        note("cannot forward vmtrack's events to Open MPI (%s): Open MPI's patcher stays and "
             "vmtrack caches nothing once it patches", vmt_strerror(rc));
        opal_output(0, "rcache vmtrack: %s", C.takeover_note);
        return;
    }
    rc = mca_base_var_set_value(memory_var, "^patcher", 0, MCA_BASE_VAR_SOURCE_SET, NULL);
    if (OPAL_SUCCESS != rc) {
        vmt_unsubscribe(cache, forward_event, NULL);
        note("cannot leave Open MPI's patcher out (setting \"memory\": error %d): it stays "
             "and vmtrack caches nothing once it patches", rc);
        opal_output(0, "rcache vmtrack: %s", C.takeover_note);
        return;
    }
    opal_mem_hooks_set_support(OPAL_MEMORY_FREE_SUPPORT | OPAL_MEMORY_MUNMAP_SUPPORT);
    guard_arm();
    C.took_over = true;
    note("vmtrack's hooks are the process's memory patcher (%s): Open MPI's patcher is left "
         "out, its memory-hook users get vmtrack's events",
         set_ucx ? "UCX_MEM_MMAP_HOOK_MODE=reloc" : "UCX hook mode as set");
}

void vmt_ompi_takeover_close(void)
{
    if (!C.took_over)
        return;
    vmt_ompi_takeover_guard();
    /* The hooks stay (the shared cache lives as long as the process); this component's code
     * is unloaded after close, so nothing may call into it any more. */
    vmt_unsubscribe(C.cache, forward_event, NULL);
}
