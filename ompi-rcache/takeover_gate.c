/* See takeover_gate.h. */
#include "takeover_gate.h"

#include <stdio.h>
#include <string.h>

/* Walk "a,b,c" (after an optional '^'): is `name` one of the items? */
static bool listed(const char *p, const char *name)
{
    size_t n = strlen(name);
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        while (len && ' ' == *p) {
            p++;
            len--;
        }
        while (len && ' ' == p[len - 1])
            len--;
        if (len == n && 0 == strncmp(p, name, n))
            return true;
        if (!comma)
            break;
        p = comma + 1;
    }
    return false;
}

bool vmt_ompi_selection_allows(const char *sel, const char *name)
{
    if (NULL == sel || '\0' == *sel)
        return true;
    if ('^' == *sel)
        return !listed(sel + 1, name);
    return listed(sel, name);
}

bool vmt_ompi_selection_names(const char *sel, const char *name)
{
    return NULL != sel && '^' != *sel && listed(sel, name);
}

const char *vmt_ompi_takeover_refusal(const struct vmt_ompi_takeover_facts *f, char *buf,
                                      size_t len)
{
    const char *param = f->tracker_param ? f->tracker_param : "auto";
    const char *env = f->tracker_env && *f->tracker_env ? f->tracker_env : NULL;
    bool asked_hooks = (env && 0 == strcmp(env, "hooks")) || 0 == strcmp(param, "hooks");

    if (!vmt_ompi_selection_names(f->rcache_selection, "vmtrack"))
        snprintf(buf, len, "vmtrack is not chosen by name (--mca rcache %s): Open MPI may use "
                 "other registration caches, which keep relying on its patcher",
                 f->rcache_selection && *f->rcache_selection ? f->rcache_selection : "<unset>");
    else if (env && 0 != strcmp(env, "hooks") && 0 != strcmp(env, "auto"))
        snprintf(buf, len, "VMTRACK_TRACKER=%s asks for another tracker", env);
    else if (0 != strcmp(param, "auto") && 0 != strcmp(param, "hooks"))
        snprintf(buf, len, "rcache_vmtrack_tracker=%s asks for another tracker", param);
    else if (f->kmod_usable && !asked_hooks)
        snprintf(buf, len, "vmtrack.ko is usable: kmod is the tracker, nothing to patch");
    else if (f->memory_set_by)
        snprintf(buf, len, "the memory framework selection was set (%s): that choice stands",
                 f->memory_set_by);
    else if (f->memory_framework_touched)
        snprintf(buf, len, "Open MPI's memory framework is already registered or open: its "
                 "patcher may be in place");
    else if (f->libc_patched)
        snprintf(buf, len, "libc is already patched: %s%s", f->libc_patched,
                 strstr(f->libc_patched, "libucm")
                     ? " (UCX does it when it loads, before main, unless told not to: start the "
                       "job with UCX_MEM_MMAP_HOOK_MODE=reloc: mpirun --tune with vmtrack's "
                       "openmpi-vmtrack.tune, or -x, or the variable in ucx.conf)"
                     : "");
    else if (f->ucx_hook_mode && 0 != strcmp(f->ucx_hook_mode, "reloc") &&
             0 != strcmp(f->ucx_hook_mode, "none"))
        snprintf(buf, len, "UCX_MEM_MMAP_HOOK_MODE=%s asks UCX to patch libc itself",
                 f->ucx_hook_mode);
    else if (f->ucx_loaded && !f->ucx_hook_mode)
        /* loaded with its default (bistro on x86-64): it may patch when it initialises */
        snprintf(buf, len, "UCX (%s) is already loaded without UCX_MEM_MMAP_HOOK_MODE=reloc "
                 "or none: its ucm patches libc", f->ucx_loaded);
    else
        return NULL;
    return buf;
}
