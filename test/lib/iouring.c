/* The test library (vmt_test.h): whether io_uring is usable here (its own object, so that only
 * the tests that ask link liburing). */
#include "vmt_test.h"

#include <liburing.h>
#include <string.h>

int skip_unless_iouring(const char *prog)
{
    struct io_uring probe;
    int rc = io_uring_queue_init(2, &probe, 0);
    if (rc < 0)
        return test_skip("%s: io_uring is not usable here (io_uring_queue_init: %s)", prog,
                         strerror(-rc));
    io_uring_queue_exit(&probe);
    return 0;
}
