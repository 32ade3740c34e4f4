/* How every Check program here runs its suite and says that it did not run. Header only: a
 * program that does not link the test library (test/kmod/kmod_contract, test/ompi/) uses it
 * too. */
#ifndef VMTRACK_TEST_CHECK_RUN_H
#define VMTRACK_TEST_CHECK_RUN_H
#include <check.h>
#include <stdio.h>

#include "skip.h"

/* Runs `s` (forking per test unless `forking` is CK_NOFORK, for tests that share state
 * opened once in main) and returns how many of its tests failed. */
static inline int check_run(Suite *s, enum fork_status forking)
{
    SRunner *sr = srunner_create(s);
    if (forking == CK_NOFORK)
        srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed;
}

/* The main() of a program that is one suite of independent cases: runs the NULL-terminated
 * `cases` as suite `name` (each in its own process, at most `timeout_s` seconds) and returns
 * the exit status: 0 if every case passed, else 1. */
static inline int check_run_cases(const char *name, int timeout_s, const TTest *const *cases)
{
    Suite *s = suite_create(name);
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, timeout_s);
    for (; *cases; cases++)
        tcase_add_test(tc, *cases);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK) ? 1 : 0;
}

#endif
