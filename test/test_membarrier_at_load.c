/* libvmtrack registers the process for membarrier when it is loaded into a process of one
 * thread, so that the first vmt_get of a threaded process does not wait for the registration
 * (an RCU grace period once the process has two threads: 5-14 ms measured). Seen from the
 * kernel: a private expedited barrier works before this program calls vmtrack at all, which it
 * refuses (EPERM) in a process that never registered. */
#include "config.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <vmtrack.h>

#include "lib/skip.h"

/* num_threads of /proc/self/stat: 18 fields after the command name's closing parenthesis */
static long threads_now(void)
{
    FILE *f = fopen("/proc/self/stat", "r");
    char buf[1024];
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    for (int field = 0; p && field < 18; field++)
        p = strchr(p + 1, ' ');
    return p ? strtol(p + 1, NULL, 10) : -1;
}

int main(void)
{
    long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    if (cmds < 0 || !(cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED))
        return test_skip("this kernel has no private expedited membarrier");
    /* A runtime that starts a thread before the libraries' constructors run (some sanitizers
     * do) makes the library leave the registration to its first reader, as designed. */
    long threads = threads_now();
    if (threads < 0)
        return test_skip("cannot read num_threads from /proc/self/stat");
    if (threads != 1)
        return test_skip("%ld threads in this process before main: the registration is then "
                         "left to the first reader", threads);
    if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0) {
        printf("FAIL: a private expedited barrier before any vmtrack call: %s (libvmtrack %s "
               "did not register the process when it was loaded)\n",
               strerror(errno), vmt_version());
        return 1;
    }
    printf("PASS: the process was registered for membarrier when libvmtrack %s was loaded\n",
           vmt_version());
    return 0;
}
