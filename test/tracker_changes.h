/* The cases every user-space tracker must pass (test_tracker_changes.c, compiled once per
 * tracker) and the helpers they share with each tracker's own cases. */
#ifndef VMTRACK_TEST_TRACKER_CHANGES_H
#define VMTRACK_TEST_TRACKER_CHANGES_H

#include <check.h>

#include "lib/vmt_test.h"

/* The tracker this program tests (TRACKER at compile time). */
extern const char *const tracker_under_test;

/* The suite "<tracker> tracker" with one test case "changes" (60 s per case) holding the cases
 * every tracker must pass; *changes (if not NULL) is that test case, for the tracker's own. */
Suite *tracker_changes_suite(TCase **changes);

/* A cache on the tracker under test with a fake device attached, asserting it opened. */
void tracker_open(struct fixture *fx);

/* tracker_open, then a mapping of `len` bytes (all 0x5a) cached (and put); returns it. */
char *tracker_open_cached(struct fixture *fx, size_t len);

/* Caches [p, p+len) (one registration, held in *held if non-NULL, else put at once). */
void cache_it(struct fixture *fx, void *p, size_t len, struct vmt_reg **held);

/* The entry is gone from the cache; dereg has run (after a flush for deferred reaping). */
void assert_dropped(struct fixture *fx, const char *what);

/* The entry is still cached and nothing was invalidated. */
void assert_kept(struct fixture *fx, const char *what);

#endif
