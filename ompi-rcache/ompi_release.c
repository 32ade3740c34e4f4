/* See ompi_release.h. */
#include "ompi_release.h"

#include <stdio.h>

static int major_minor(const char *v, int *major, int *minor)
{
    return v && 2 == sscanf(v, "%d.%d", major, minor) && *major >= 0 && *minor >= 0;
}

const char *vmt_ompi_release_refusal(const char *built, const char *running, char *buf,
                                     size_t len)
{
    int bmaj, bmin, rmaj, rmin;
    if (!major_minor(built, &bmaj, &bmin))
        snprintf(buf, len, "the Open MPI release it was built for (\"%s\") is unreadable",
                 built ? built : "");
    else if (!major_minor(running, &rmaj, &rmin))
        snprintf(buf, len, "built for Open MPI %s, running in an Open MPI whose release "
                 "(\"%s\") is unreadable: rebuild vmtrack against this Open MPI", built,
                 running ? running : "");
    else if (bmaj != rmaj || bmin != rmin)
        snprintf(buf, len, "built for Open MPI %s, running in Open MPI %s: their structures "
                 "differ; rebuild vmtrack against Open MPI %s", built, running, running);
    else
        return NULL;
    return buf;
}
