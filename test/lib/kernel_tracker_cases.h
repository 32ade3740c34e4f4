/* Cases that every tracker fed by the kernel (kmod, bpf) must pass in the same way, for the
 * tests of each (test/kmod/test_kmod_tracker.c, test/bpf/test_bpf_tracker.c). Each opens its
 * own fixture on `tracker` and checks with ck_assert, so a failure names the case that
 * called it. Link test/lib/libvmttest.la. */
#ifndef VMTRACK_TEST_KERNEL_TRACKER_CASES_H
#define VMTRACK_TEST_KERNEL_TRACKER_CASES_H

/* What a tracker tells subscribers of a change inside a cached range: the changed pages
 * themselves (kmod's notifier sees them), or a range within the cached one that holds them
 * (bpf's daemon reports the watched range whose word it moved). */
enum heard_range { HEARD_THE_CHANGE, HEARD_THE_CACHED_RANGE };

/* An unmap of one page inside a cached range drops the entry at the next flush, counted as an
 * invalidation, and subscribers hear a range that holds the unmapped page, as heard_as says. */
void check_changes_reach_index_and_subscribers(const char *tracker, enum heard_range heard_as);

/* A forked child attaches its own device to the inherited cache, caches, and sees its own
 * changes; the parent's entries are not the child's business: the child's munmap leaves the
 * parent's range a hit, the parent's own munmap makes it a miss. */
void check_fork_child_tracks_itself(const char *tracker);

#endif
