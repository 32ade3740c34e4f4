// SPDX-License-Identifier: GPL-2.0
/*
 * The change log (vmtrack_log.h). Each invalidation of the address space is written when it
 * ends, after the pages changed: a caller that read the count (its mark), then pinned pages
 * that an invalidation replaced afterwards, finds that invalidation numbered at or after its
 * mark. An invalidation still under way when the caller checks is not written yet, so any
 * invalidation in flight answers "changed". mmu_notifier_register() takes the locks
 * invalidations run under (mm_take_all_locks()), so none is in flight across it and every
 * end the log sees had its start seen.
 */
#include <linux/bits.h>
#include <linux/limits.h>
#include <linux/random.h>
#include <linux/sched/mm.h>

#include "uapi/vmtrack_kmod.h"
#include "vmtrack_log.h"

static int log_range_start(struct mmu_notifier *mn, const struct mmu_notifier_range *range)
{
	struct vmtrack_log *log = container_of(mn, struct vmtrack_log, notifier);

	if (vmtrack_keeps_pages(range))
		return 0;
	spin_lock(&log->lock);
	log->in_flight++;
	spin_unlock(&log->lock);
	return 0;
}

static void log_range_end(struct mmu_notifier *mn, const struct mmu_notifier_range *range)
{
	struct vmtrack_log *log = container_of(mn, struct vmtrack_log, notifier);
	struct vmtrack_log_entry *e;

	if (vmtrack_keeps_pages(range))
		return;
	spin_lock(&log->lock);
	e = &log->entries[log->count % VMTRACK_LOG_ENTRIES];
	e->start = range->start;
	e->end = range->end;
	log->count++;
	WRITE_ONCE(*log->published, log->count);
	/*
	 * Never below zero, so that a stray end cannot hide one in flight. A start that a later
	 * notifier's failure backed out without its end keeps the log saying "changed".
	 */
	if (log->in_flight)
		log->in_flight--;
	spin_unlock(&log->lock);
}

static void log_release(struct mmu_notifier *mn, struct mm_struct *mm)
{
	struct vmtrack_log *log = container_of(mn, struct vmtrack_log, notifier);

	spin_lock(&log->lock);
	log->released = true;
	spin_unlock(&log->lock);
}

static const struct mmu_notifier_ops vmtrack_log_ops = {
	.release = log_release,
	.invalidate_range_start = log_range_start,
	.invalidate_range_end = log_range_end,
};

/*
 * Once per log, before the file publishes it: a published log is always registered.
 * published: the word of the file's header that shows the log's count to the process.
 */
int vmtrack_log_start(struct vmtrack_log *log, u64 *published, struct mm_struct *mm)
{
	spin_lock_init(&log->lock);
	log->published = published;
	/* 2^32 apart at least, and never 0: a mark of 0 is no mark */
	log->base = ((u64)get_random_u32() << 32) | BIT_ULL(63);
	log->count = log->base;
	WRITE_ONCE(*log->published, log->count);
	log->notifier.ops = &vmtrack_log_ops;
	return mmu_notifier_register(&log->notifier, mm);
}

void vmtrack_log_stop(struct vmtrack_log *log, struct mm_struct *mm)
{
	mmu_notifier_unregister(&log->notifier, mm);
}

int vmtrack_log_changed(struct vmtrack_log *log, struct vmtrack_changed *a)
{
	u64 end = a->start + a->len < a->start ? U64_MAX : a->start + a->len;
	const struct vmtrack_log_entry *e;
	u64 n;

	a->changed = 1;
	spin_lock(&log->lock);
	if (a->mark < log->base || a->mark > log->count) {
		spin_unlock(&log->lock);
		return -EINVAL;
	}
	if (log->released || log->in_flight || log->count - a->mark > VMTRACK_LOG_ENTRIES)
		goto out;
	for (n = a->mark; n < log->count; n++) {
		e = &log->entries[n % VMTRACK_LOG_ENTRIES];
		if (e->start < end && a->start < e->end)
			goto out;
	}
	a->changed = 0;
out:
	spin_unlock(&log->lock);
	return 0;
}
