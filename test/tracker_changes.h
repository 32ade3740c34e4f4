/* The cases every user-space tracker must pass (test_tracker_changes.c, compiled once per
 * tracker) and the helpers they share with each tracker's own cases. */
#ifndef VMTRACK_TEST_TRACKER_CHANGES_H
#define VMTRACK_TEST_TRACKER_CHANGES_H

#include <check.h>

#include "lib/vmt_test.h"

/* The tracker this program tests (TRACKER at compile time). */
extern const char *const tracker_under_test;

/* Adds the cases every tracker must pass to `tc`. */
void tracker_changes_add(TCase *tc);

/* A cache on the tracker under test with a fake device attached, asserting it opened. */
void tracker_open(struct fixture *fx);

/* Caches [p, p+len) (one registration, held in *held if non-NULL, else put at once). */
void cache_it(struct fixture *fx, void *p, size_t len, struct vmt_reg **held);

/* The entry is gone from the cache; dereg has run (after a flush for deferred reaping). */
void assert_dropped(struct fixture *fx, const char *what);

/* The entry is still cached and nothing was invalidated. */
void assert_kept(struct fixture *fx, const char *what);

#endif
