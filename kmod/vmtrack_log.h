/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The change log of an open file: every invalidation of its address space, for a caller that
 * learns of a range only after something pinned it (libfabric's monitor) and must prove that
 * the pages did not change since an earlier moment (VMTRACK_IOC_LOG_START, VMTRACK_IOC_CHANGED).
 */
#ifndef VMTRACK_LOG_H
#define VMTRACK_LOG_H

#include <linux/mmu_notifier.h>
#include <linux/spinlock.h>
#include <linux/types.h>

#define VMTRACK_LOG_ENTRIES	256

struct vmtrack_log_entry {
	u64 start;
	u64 end;
};

struct vmtrack_log {
	struct mmu_notifier notifier;	/* registered at start, for the whole address space */
	spinlock_t lock;
	u64 base;			/* the first number, random: marks of other files miss */
	u64 count;			/* the next number */
	u64 *published;		/* count, as the opener reads it (header words) */
	u32 in_flight;			/* invalidations started and not yet ended */
	bool released;			/* the address space is going away */
	struct vmtrack_log_entry entries[VMTRACK_LOG_ENTRIES];
};

/*
 * Whether an invalidation leaves the same pages mapped (protection, soft-dirty): no change for
 * a watch or the log. Everything else is one, EXCLUSIVE included: since 6.15 it means a
 * device took the pages (the same pages; taking them back reports CLEAR), before that it also
 * reported the CPU's fault that took them back. A spurious change costs a registration, a
 * missed one a stale registration.
 */
static inline bool vmtrack_keeps_pages(const struct mmu_notifier_range *range)
{
	switch (range->event) {
	case MMU_NOTIFY_PROTECTION_VMA:
	case MMU_NOTIFY_PROTECTION_PAGE:
	case MMU_NOTIFY_SOFT_DIRTY:
		return true;
	default:
		return false;
	}
}

struct vmtrack_changed;

/*
 * Start once per log (zeroed), before anything else can reach it; stop only a started log,
 * once. mm is the opener's and current's.
 */
int vmtrack_log_start(struct vmtrack_log *log, u64 *published, struct mm_struct *mm);
void vmtrack_log_stop(struct vmtrack_log *log, struct mm_struct *mm);
int vmtrack_log_changed(struct vmtrack_log *log, struct vmtrack_changed *a);

#endif /* VMTRACK_LOG_H */
