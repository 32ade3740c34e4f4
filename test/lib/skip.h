/* How a test says that it did not run: for every test program, Check programs (through
 * check_run.h) and the others (test/kmod/kmod_util.h, test/ucx/test_ucp_rxe.c). */
#ifndef VMTRACK_TEST_SKIP_H
#define VMTRACK_TEST_SKIP_H

#include <stdarg.h>
#include <stdio.h>

/* Automake's exit status for a skipped test: what a test that cannot run here exits with,
 * after it has printed why. Never 0: a test that did not run did not pass. */
#define VMT_TEST_SKIP 77

/* Prints "SKIP: <reason>" (the line the test log and scripts/test show) and returns
 * VMT_TEST_SKIP, for `return test_skip(...)` from main. */
static inline int test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline int test_skip(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("SKIP: ", stdout);
    vprintf(fmt, ap);
    fputc('\n', stdout);
    va_end(ap);
    fflush(stdout);
    return VMT_TEST_SKIP;
}

#endif
