/* Open MPI rcache component "vmtrack": component structure, MCA parameters, the release
 * check, selection checks, and the choice of the process-wide cache's tracker. See
 * rcache_vmtrack.h and doc/openmpi.md. */
#include "rcache_vmtrack.h"
#include "ompi_compat.h"
#include "ompi_release.h"
#include "takeover_gate.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "opal/mca/base/base.h"
#include "opal/mca/base/mca_base_var.h"
#include "opal/memoryhooks/memory.h"
#include "opal/runtime/opal.h"
#include "opal/runtime/opal_params.h"
#include "opal/util/output.h"

static int vmt_ompi_register(void);
static int vmt_ompi_open(void);
static int vmt_ompi_close(void);
static mca_rcache_base_module_t *vmt_ompi_init(mca_rcache_base_resources_t *resources);

mca_rcache_vmtrack_component_t mca_rcache_vmtrack_component = {
    .super = {
        .rcache_version = {
            MCA_RCACHE_BASE_VERSION_3_0_0,
            .mca_component_name = "vmtrack",
            MCA_BASE_MAKE_VERSION(component, VMT_VERSION_MAJOR, VMT_VERSION_MINOR,
                                  VMT_VERSION_PATCH),
            .mca_open_component = vmt_ompi_open,
            .mca_close_component = vmt_ompi_close,
            .mca_register_component_params = vmt_ompi_register,
        },
        .rcache_data = {
            MCA_BASE_METADATA_PARAM_CHECKPOINT
        },
        .rcache_init = vmt_ompi_init,
    },
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .output = -1,
};

#define C mca_rcache_vmtrack_component

static const mca_base_var_enum_value_t tracker_values[] = {
    {0, "auto"}, {1, "kmod"}, {2, "none"}, {3, "pass"}, {4, "uffd"}, {5, "hooks"}, {0, NULL},
};
static int tracker_index;
static bool serve_grdma;

/* First thing after the component is loaded: a build for another release fills structures
 * of another layout, so it refuses to load (Open MPI then leaves the component out). */
static bool release_matches(void)
{
    char why[256];
    const char *no = vmt_ompi_release_refusal(VMT_OMPI_BUILT_RELEASE, opal_version_string, why,
                                              sizeof(why));
    if (NULL == no)
        return true;
    opal_output(0, "rcache vmtrack: refusing to load: %s", no);
    return false;
}

static int vmt_ompi_register(void)
{
    mca_base_component_t *v = &C.super.rcache_version;
    mca_base_var_enum_t *trackers = NULL;

    if (!release_matches())
        return OPAL_ERR_NOT_SUPPORTED;

    /* An enumeration: ompi_info lists the values and Open MPI refuses others. */
    tracker_index = 0;
    (void) mca_base_var_enum_create("rcache_vmtrack_trackers", tracker_values, &trackers);
    (void) mca_base_component_var_register(v, "tracker",
        "How the process-wide vmtrack cache learns that memory was unmapped: "
        "auto (kmod if /dev/vmtrack is usable; else, when \"--mca rcache\" names vmtrack, "
        "hooks that replace Open MPI's memory patcher and feed its users; else none, fed by "
        "Open MPI's patcher), kmod (vmtrack.ko: sees every change, no patching), none (Open "
        "MPI's memory hooks only), pass (nothing cached), uffd (userfaultfd: no patching, "
        "~50 us per unmap of a registered range), hooks (as auto without kmod; refused if Open "
        "MPI's patcher is already active). --mca memory patcher keeps Open MPI's patcher. The "
        "environment variable VMTRACK_TRACKER, when set, wins.",
        MCA_BASE_VAR_TYPE_INT, trackers, 0, 0, OPAL_INFO_LVL_4,
        MCA_BASE_VAR_SCOPE_READONLY, &tracker_index);
    if (trackers)
        OBJ_RELEASE(trackers);

    C.max_entries = 0;
    (void) mca_base_component_var_register(v, "max_entries",
        "Most registrations the process-wide vmtrack cache keeps (0: vmtrack's default; "
        "VMTRACK_MAX_ENTRIES wins when set)",
        MCA_BASE_VAR_TYPE_UNSIGNED_LONG, NULL, 0, 0, OPAL_INFO_LVL_5,
        MCA_BASE_VAR_SCOPE_READONLY, &C.max_entries);

    C.max_bytes = 0;
    (void) mca_base_component_var_register(v, "max_bytes",
        "Most bytes the process-wide vmtrack cache keeps registered (0: derived from "
        "RLIMIT_MEMLOCK; VMTRACK_MAX_BYTES wins when set)",
        MCA_BASE_VAR_TYPE_UNSIGNED_LONG, NULL, 0, 0, OPAL_INFO_LVL_5,
        MCA_BASE_VAR_SCOPE_READONLY, &C.max_bytes);

    C.print_stats = false;
    (void) mca_base_component_var_register(v, "print_stats",
        "Print registration statistics (per module and of the shared vmtrack cache) when "
        "each module is finalized",
        MCA_BASE_VAR_TYPE_BOOL, NULL, 0, 0, OPAL_INFO_LVL_9,
        MCA_BASE_VAR_SCOPE_READONLY, &C.print_stats);

    C.verbose = 0;
    (void) mca_base_component_var_register(v, "verbose",
        "Verbosity of the vmtrack rcache component (0: errors only, 10: decisions, 100: every call)",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_9,
        MCA_BASE_VAR_SCOPE_LOCAL, &C.verbose);

    serve_grdma = true;
#if VMT_OMPI_SERVES_GRDMA
    (void) mca_base_component_var_register(v, "serve_grdma",
        "When the rcache selection names vmtrack and leaves grdma out (--mca rcache vmtrack), "
        "serve what btl ofi, btl uct and smsc knem ask of \"grdma\" (by name) with vmtrack, "
        "so that their registrations share vmtrack's one cache; false: they find no grdma "
        "(btl ofi aborts, the others are not used)",
        MCA_BASE_VAR_TYPE_BOOL, NULL, 0, 0, OPAL_INFO_LVL_5,
        MCA_BASE_VAR_SCOPE_READONLY, &serve_grdma);
#endif
    return OPAL_SUCCESS;
}

static const char *source_name(mca_base_var_source_t source)
{
    switch (source) {
    case MCA_BASE_VAR_SOURCE_COMMAND_LINE: return "command line";
    case MCA_BASE_VAR_SOURCE_ENV: return "environment";
    case MCA_BASE_VAR_SOURCE_FILE: return "parameter file";
    case MCA_BASE_VAR_SOURCE_SET: return "set by a program";
    case MCA_BASE_VAR_SOURCE_OVERRIDE: return "override file";
    default: return NULL;
    }
}

/* A framework's selection variable is registered when the framework is. Before that, a
 * registration of our own (the flags the framework uses: re-registration keeps them) reads it
 * from the environment, the override and the parameter files as Open MPI will, and is
 * deregistered again (Open MPI re-registers deregistered variables in place). */
const char *vmt_ompi_framework_selection(const char *name, char *buf, size_t len,
                                         const char **source_out)
{
    if (source_out)
        *source_out = NULL;
    buf[0] = '\0';
    char *early = NULL;
    int idx = mca_base_var_find("opal", name, NULL, NULL);
    bool temporary = idx < 0;
    if (temporary)
        idx = mca_base_var_register("opal", name, NULL, NULL, "Components to use (read early "
                                    "by the vmtrack rcache)", MCA_BASE_VAR_TYPE_STRING, NULL,
                                    0, MCA_BASE_VAR_FLAG_SETTABLE, OPAL_INFO_LVL_2,
                                    MCA_BASE_VAR_SCOPE_ALL_EQ, &early);
    if (idx < 0)
        return NULL;
    char **value = NULL;
    mca_base_var_source_t source = MCA_BASE_VAR_SOURCE_DEFAULT;
    if (OPAL_SUCCESS == mca_base_var_get_value(idx, &value, &source, NULL) && value && *value)
        snprintf(buf, len, "%s", *value);
    if (source_out)
        *source_out = source_name(source);
    if (temporary)
        (void) mca_base_var_deregister(idx);
    return buf[0] ? buf : NULL;
}

/* Value of an MCA string variable: the registered variable if it exists, else the
 * environment (mpirun passes --mca settings to the processes as OMPI_MCA_*). */
static const char *mca_string(const char *full_name, const char *project, const char *type,
                              const char *component, const char *param)
{
    int idx = mca_base_var_find(project, type, component, param);
    if (idx >= 0) {
        char **value = NULL;
        if (OPAL_SUCCESS == mca_base_var_get_value(idx, &value, NULL, NULL) && value && *value)
            return *value;
    }
    char env[128];
    snprintf(env, sizeof(env), "OMPI_MCA_%s", full_name);
    return getenv(env);
}

/* Is `file` in one of the directories Open MPI loads components from? */
static bool component_installed(const char *file)
{
    const char *path = mca_string("mca_base_component_path", "opal", "mca", "base",
                                  "component_path");
    if (NULL == path)
        return true;   /* cannot tell: assume it is there */
    char full[PATH_MAX];
    const char *p = path;
    while (*p) {
        const char *colon = strchr(p, ':');
        size_t len = colon ? (size_t)(colon - p) : strlen(p);
        struct stat st;
        if (len && len < sizeof(full) - 64) {
            snprintf(full, sizeof(full), "%.*s/%s", (int) len, p, file);
            if (0 == stat(full, &st))
                return true;
        }
        if (!colon)
            break;
        p = colon + 1;
    }
    return false;
}

#if VMT_OMPI_HAS_OPENIB
/* openib asks for btl_openib_rcache: if the user left that unset we point it at vmtrack (its
 * variable is registered after this framework opens, from the environment). */
static void point_openib_at_vmtrack(const char *rsel, const char *bsel)
{
    const char *openib_rcache = mca_string("btl_openib_rcache", "opal", "btl", "openib", "rcache");
    if (!vmt_ompi_selection_allows(bsel, "openib"))
        return;
    if (NULL == openib_rcache) {
        setenv("OMPI_MCA_btl_openib_rcache", "vmtrack", 0);
        opal_output_verbose(10, C.output, "rcache vmtrack: rcache selection \"%s\" leaves out "
                            "grdma; btl_openib_rcache set to vmtrack", rsel);
    } else if (!vmt_ompi_selection_allows(rsel, openib_rcache)) {
        opal_output(0, "rcache vmtrack: btl openib asks for rcache \"%s\" "
                    "(btl_openib_rcache), which \"--mca rcache %s\" leaves out, so openib "
                    "cannot register memory. Fix: --mca btl_openib_rcache vmtrack",
                    openib_rcache, rsel);
    }
}
#endif

/* `--mca rcache vmtrack` (a selection that leaves grdma out) breaks the components that ask
 * for grdma by name (ompi_compat.h). On 5.0 and later vmtrack serves them (unless
 * rcache_vmtrack_serve_grdma is false); otherwise say so, with the fix, before they fail. */
static void check_selection(void)
{
    char rbuf[128], bbuf[128];
    const char *rsel = vmt_ompi_framework_selection("rcache", rbuf, sizeof(rbuf), NULL);
    if (vmt_ompi_selection_allows(rsel, "grdma"))
        return;   /* grdma stays available for whoever asks for it */
    if (VMT_OMPI_SERVES_GRDMA && serve_grdma && vmt_ompi_selection_names(rsel, "vmtrack") &&
        vmt_ompi_serve_grdma()) {
        opal_output_verbose(10, C.output, "rcache vmtrack: rcache selection \"%s\" leaves out "
                            "grdma: vmtrack serves what asks for \"grdma\" (btl ofi, btl uct, "
                            "smsc knem)", rsel);
        return;
    }
    static bool warned;   /* the framework may be opened more than once per process */
    if (warned)
        return;
    warned = true;
    /* what each framework will use: also Debian's parameter file (btl = ^uct,openib,ofi) */
    const char *bsel = vmt_ompi_framework_selection("btl", bbuf, sizeof(bbuf), NULL);
#if VMT_OMPI_HAS_OPENIB
    point_openib_at_vmtrack(rsel, bsel);
#endif
    for (size_t i = 0; i < sizeof(vmt_ompi_grdma_users) / sizeof(vmt_ompi_grdma_users[0]); i++) {
        const struct vmt_ompi_grdma_user *u = &vmt_ompi_grdma_users[i];
        char sbuf[128];
        const char *sel = 0 == strcmp(u->framework, "btl")
                              ? bsel : vmt_ompi_framework_selection(u->framework, sbuf,
                                                                   sizeof(sbuf), NULL);
        struct stat st;
        if (!vmt_ompi_selection_allows(sel, u->name) || (u->device && 0 != stat(u->device, &st)) ||
            (u->dso && !component_installed(u->dso)))
            continue;
        opal_output(0, "rcache vmtrack: \"--mca rcache %s\" leaves out grdma, but %s %s of "
                    "Open MPI %d.%d asks for grdma by name and fails without it%s. Fix: keep "
                    "grdma for it with \"--mca rcache vmtrack,grdma%s\", or exclude it with "
                    "\"--mca %s ^%s\"", rsel, u->framework, u->name, OPAL_MAJOR_VERSION,
                    OPAL_MINOR_VERSION,
                    0 == strcmp(u->name, "ofi") ? " (it aborts: \"cannot create rcache\")" : "",
                    VMT_OMPI_HAS_OPENIB ? " --mca btl_openib_rcache vmtrack" : "",
                    u->framework, u->name);
    }
}

static int vmt_ompi_open(void)
{
    C.output = opal_output_open(NULL);
    opal_output_set_verbosity(C.output, C.verbose);
    check_selection();
    vmt_ompi_takeover();
    return OPAL_SUCCESS;
}

static int vmt_ompi_close(void)
{
    vmt_ompi_takeover_close();
    /* Modules are finalized by the framework before components close. The shared cache
     * belongs to the process (other libraries may use it): it is never destroyed here. */
    if (C.output >= 0) {
        opal_output_close(C.output);
        C.output = -1;
    }
    return OPAL_SUCCESS;
}

static mca_rcache_base_module_t *vmt_ompi_init(mca_rcache_base_resources_t *resources)
{
    vmt_ompi_takeover_guard();
    return vmt_ompi_module_create(resources);
}

/* ---- the shared cache and its tracker ---------------------------------------------------- */

static bool opal_patcher_active(void)
{
    const int both = OPAL_MEMORY_FREE_SUPPORT | OPAL_MEMORY_MUNMAP_SUPPORT;
    return both == (opal_mem_hooks_support_level() & both);
}

/* Would Open MPI's memory hooks call our modules' invalidate_range? They do exactly when
 * mca_rcache_base_module_create registered mca_rcache_base_mem_cb: leave_pinned (or the
 * pipeline variant) is not off and the memory framework offers free+munmap events. */
static bool opal_events_reach_rcache(void)
{
    return (0 != opal_leave_pinned || opal_leave_pinned_pipeline) && opal_patcher_active();
}

bool vmt_ompi_kmod_usable(void)
{
    /* Look before asking vmtrack, which logs why a tracker it was told to use is missing. */
    if (0 != access("/dev/vmtrack", R_OK | W_OK))
        return false;
    VMT_OPTS(vmt_cache_opts, o, .tracker = "kmod");
    struct vmt_cache *c = NULL;
    if (0 != vmt_cache_create(&o, &c))
        return false;
    vmt_cache_destroy(c);
    return true;
}

const char *vmt_ompi_tracker_param(void)
{
    for (size_t i = 0; tracker_values[i].string; i++)
        if (tracker_values[i].value == tracker_index)
            return tracker_values[i].string;
    return "auto";
}

static void set_env_size(const char *name, unsigned long v)
{
    if (0 == v || getenv(name))
        return;
    char buf[32];
    snprintf(buf, sizeof(buf), "%lu", v);
    setenv(name, buf, 0);
}

void vmt_ompi_apply_limits(void)
{
    set_env_size("VMTRACK_MAX_ENTRIES", C.max_entries);
    set_env_size("VMTRACK_MAX_BYTES", C.max_bytes);
}

/* Called under C.lock by the first module creation (and again by later ones, cheaply):
 * create vmt_shared() with the tracker the parameters ask for, and decide how modules keep
 * registrations. 0, or a negative errno with why[] filled. */
int vmt_ompi_shared_cache(enum vmt_ompi_mode *mode, char *why, size_t whylen)
{
    if (NULL == C.cache) {
        const char *want = getenv("VMTRACK_TRACKER");
        const char *param = vmt_ompi_tracker_param();
        if (NULL == want || '\0' == *want) {
            if (0 == strcmp(param, "auto"))
                want = vmt_ompi_kmod_usable() ? "kmod" : "none";
            else
                want = param;
            setenv("VMTRACK_TRACKER", want, 1);
        } else if (0 != strcmp(param, "auto") && 0 != strcmp(param, want)) {
            opal_output(0, "rcache vmtrack: VMTRACK_TRACKER=%s overrides rcache_vmtrack_tracker=%s",
                        want, param);
        }
        vmt_ompi_apply_limits();
        struct vmt_cache *cache = vmt_shared();
        if (NULL == cache) {
            int err = errno ? errno : EINVAL;
            snprintf(why, whylen, "vmtrack's shared cache could not be created with tracker "
                     "\"%s\": %s%s", want, strerror(err),
                     0 == strcmp(want, "hooks") && opal_patcher_active()
                         ? " (Open MPI's memory patcher already patches libc; use "
                           "--mca rcache_vmtrack_tracker kmod or none)" : "");
            return -err;
        }
        const char *in_use = vmt_cache_tracker(cache);
        if (0 == strcmp(in_use, "hooks") && opal_patcher_active()) {
            /* Two libc patchers in one process corrupt each other (ompi#8822): the shared
             * cache was created (with hooks) before Open MPI patched. */
            snprintf(why, whylen, "vmtrack's shared cache patches libc (tracker \"hooks\") and so "
                     "does Open MPI's memory patcher: two patchers in one process. Use "
                     "--mca rcache_vmtrack_tracker kmod (or none) and unset VMTRACK_TRACKER");
            return -EBUSY;
        }
        C.cache = cache;
        C.tracker_in_use = in_use;
        opal_output_verbose(10, C.output, "rcache vmtrack: shared cache uses tracker \"%s\"",
                            in_use);
    }

    if (0 == opal_leave_pinned && !opal_leave_pinned_pipeline) {
        *mode = VMT_OMPI_MODE_UNCACHED;   /* the user asked for nothing to stay pinned */
    } else if (0 == strcmp(C.tracker_in_use, "none")) {
        if (opal_events_reach_rcache()) {
            *mode = VMT_OMPI_MODE_OPAL;
            C.opal_events = true;
        } else {
            *mode = VMT_OMPI_MODE_UNCACHED;
            opal_output_verbose(10, C.output, "rcache vmtrack: tracker \"none\" and Open MPI's "
                                "memory hooks are off: registrations are not cached");
        }
    } else if (0 == strcmp(C.tracker_in_use, "pass")) {
        *mode = VMT_OMPI_MODE_UNCACHED;
    } else {
        *mode = VMT_OMPI_MODE_TRACKER;
    }
    return 0;
}
