/* The test library (vmt_test.h): what does not need libvmtrack (mappings, the clock, children),
 * so that a test of code compiled in (test_hooks_engine) links it alone. */
#define _GNU_SOURCE
#include "vmt_test.h"

#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

size_t page;

__attribute__((constructor)) static void set_page_size(void)
{
    page = (size_t)sysconf(_SC_PAGESIZE);
}

/* ---- memory, time, processes ------------------------------------------------------------- */

void *map_anon_at(void *addr, size_t len)
{
    int flags = MAP_PRIVATE | MAP_ANONYMOUS | (addr ? MAP_FIXED_NOREPLACE : 0);
    void *p = mmap(addr, len, PROT_READ | PROT_WRITE, flags, -1, 0);
    ck_assert_msg(p != MAP_FAILED, "mmap of %zu bytes: %s", len, strerror(errno));
    if (addr)
        ck_assert_ptr_eq(p, addr);
    return p;
}

void *map_anon(size_t len)
{
    return map_anon_at(NULL, len);
}

void *map_filled_at(void *addr, size_t len, int byte)
{
    void *p = map_anon_at(addr, len);
    memset(p, byte, len);
    return p;
}

void *map_filled(size_t len, int byte)
{
    return map_filled_at(NULL, len, byte);
}

static double clock_ns(clockid_t which)
{
    struct timespec ts;
    clock_gettime(which, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

double now_ns(void)
{
    return clock_ns(CLOCK_MONOTONIC);
}

double thread_cpu_ns(void)
{
    return clock_ns(CLOCK_THREAD_CPUTIME_ID);
}

int wait_child_within(int pid, int seconds, const char *what)
{
    int status = 0;
    for (int waited_ms = 0; waitpid(pid, &status, WNOHANG) == 0; waited_ms += 10) {
        if (waited_ms > seconds * 1000) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            ck_abort_msg("the child hung %s", what);
        }
        usleep(10000);
    }
    return status;
}

int run_in_child(void (*fn)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        fn();
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return st;
}
