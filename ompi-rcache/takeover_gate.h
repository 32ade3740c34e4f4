/* When the vmtrack rcache component may make vmtrack's hooks the process's one memory patcher
 * (see rcache_vmtrack_takeover.c): the decision alone, on facts the component gathered, so
 * that each condition can be tested without an MPI process per case. No Open MPI headers. */
#ifndef OMPI_RCACHE_VMTRACK_TAKEOVER_GATE_H
#define OMPI_RCACHE_VMTRACK_TAKEOVER_GATE_H

#include <stdbool.h>
#include <stddef.h>

struct vmt_ompi_takeover_facts {
    const char *rcache_selection;  /* the "rcache" framework selection (NULL: unset) */
    const char *tracker_param;     /* rcache_vmtrack_tracker: "auto", "hooks", "none", ... */
    const char *tracker_env;       /* VMTRACK_TRACKER (NULL: unset) */
    bool kmod_usable;              /* /dev/vmtrack answers */
    const char *memory_set_by;     /* where the user set the "memory" selection (NULL: nowhere) */
    bool memory_framework_touched; /* the memory framework is registered or open already */
    const char *libc_patched;      /* "munmap() by /x/libucm.so.0": an entry already patched
                                    * by someone else than vmtrack (NULL: none) */
    const char *ucx_loaded;        /* a UCX library already in the process (NULL: none) */
    const char *ucx_hook_mode;     /* UCX's mmap hook mode: the loaded UCX's effective one
                                    * (environment and ucx.conf as it read them), else
                                    * UCX_MEM_MMAP_HOOK_MODE (NULL: unset) */
};

/* NULL when every condition holds, else why the takeover is not done (one sentence). */
const char *vmt_ompi_takeover_refusal(const struct vmt_ompi_takeover_facts *f, char *buf,
                                      size_t len);

/* Is component `name` allowed by a framework selection string ("a,b", "^a,b", or empty)?
 * ..._names: is it chosen by name, in a list that is not an exclusion ("^a")? */
bool vmt_ompi_selection_allows(const char *sel, const char *name);
bool vmt_ompi_selection_names(const char *sel, const char *name);

#endif
