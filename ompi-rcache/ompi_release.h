/* The Open MPI release the component runs in against the one it was built for. Open MPI's
 * loader checks only the MCA base version, which 4.1, 5.0 and 6.0 share, while structures the
 * component fills (the registration grew in 5.0) differ; and Debian's 6.0 reuses 4.1's
 * libopen-pal.so.40, so a 4.1 build even links into a 6.0 process. No Open MPI headers. */
#ifndef OMPI_RCACHE_VMTRACK_RELEASE_H
#define OMPI_RCACHE_VMTRACK_RELEASE_H

#include <stddef.h>

/* NULL when `running` (opal_version_string, "5.0.7") has the major.minor of `built`
 * ("5.0.7"), else why the component refuses to load (one sentence, in buf). */
const char *vmt_ompi_release_refusal(const char *built, const char *running, char *buf,
                                     size_t len);

#endif
