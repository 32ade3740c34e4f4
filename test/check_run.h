/* How every Check program here runs its suite: one place for the runner's setup. */
#ifndef VMTRACK_TEST_CHECK_RUN_H
#define VMTRACK_TEST_CHECK_RUN_H
#include <check.h>

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

#endif
