// SPDX-License-Identifier: GPL-2.0
/*
 * vmtrack.ko: /dev/vmtrack, validity words for a user-space memory-registration cache.
 *
 * An open file watches ranges of its opener's address space with one mmu_interval_notifier
 * per range. When pages of a watched range may be freed, replaced or moved, the invalidate
 * callback (which runs before the change completes) increments the range's generation word,
 * in pages the process maps read-only, and queues an event for read()/poll(). The cache in
 * user space compares one word per hit; no system call is needed to learn that nothing
 * changed. See kmod/uapi/vmtrack_kmod.h for the interface and doc/kmod.md for the design.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/atomic.h>
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/mmu_notifier.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/poll.h>
#include <linux/random.h>
#include <linux/sched/mm.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/uaccess.h>
#include <linux/wait.h>
#include <linux/xarray.h>

#include "uapi/vmtrack_kmod.h"
#include "vmtrack_log.h"
#include "vmtrack_version.h"

#define WORDS_PER_PAGE		(PAGE_SIZE / sizeof(u32))
#define MAX_WATCHES_LIMIT	BIT(26)
#define MAX_EVENTS_LIMIT	BIT(20)

/* kzalloc_obj() (7.0) where the kernel has it (kmod/Kbuild), the sizeof form before */
#ifndef VMTRACK_HAVE_KZALLOC_OBJ
#define kzalloc_obj(obj, gfp)	kzalloc(sizeof(obj), gfp)
#endif
#define READ_BATCH		64

static unsigned int max_watches = 1u << 20;
module_param(max_watches, uint, 0644);
MODULE_PARM_DESC(max_watches, "watched ranges per open file (default 1048576)");

static unsigned int max_events = 4096;
module_param(max_events, uint, 0644);
MODULE_PARM_DESC(max_events, "queued events per open file before overflow (default 4096)");

/* Objects alive, checked at unload. */
static atomic_long_t live_files = ATOMIC_LONG_INIT(0);
static atomic_long_t live_watches = ATOMIC_LONG_INIT(0);
static atomic_long_t live_pages = ATOMIC_LONG_INIT(0);

static struct kmem_cache *watch_cache;

struct vmtrack_file {
	struct mm_struct *mm;		/* the opener's; mmgrab'ed */
	struct mutex lock;		/* watch/unwatch/release */
	struct xarray watches;		/* index -> struct vmtrack_wk */
	struct xarray pages;		/* page number -> struct page * of words */
	u32 nr_watches;
	u32 max_watches;
	u32 max_pages;
	u32 gen_base;			/* first value of every word: handles differ per file */
	u32 *hdr;			/* words of page 0 */
	struct vmtrack_log *log;	/* from LOG_START on (f->lock; read with acquire) */

	spinlock_t evlock;		/* words, events */
	wait_queue_head_t wq;
	struct vmtrack_event *ring;
	u32 ev_head;			/* oldest queued */
	u32 ev_count;
	u32 ev_max;
	bool overflow;
};

struct vmtrack_wk {
	struct mmu_interval_notifier notifier;
	struct vmtrack_file *f;
	u32 *word;
	u64 start;
	u64 len;
	u64 cookie;
	u32 index;
	u32 gen0;
	bool fired;			/* its event is queued or read: one per watch */
};

static inline u64 wk_handle(const struct vmtrack_wk *w)
{
	return ((u64)w->gen0 << 32) | w->index;
}

/*
 * A mapping's flags, where the interface moved (kmod/Kbuild probes for it): changed through
 * vm_flags_mod() since 6.3 made vm_flags const; a bitmap tested by bit number with vma_test()
 * since 6.19, where vm_flags is only a view kept while the kernel converts.
 */
static void vmtrack_set_vm_flags(struct vm_area_struct *vma, vm_flags_t set, vm_flags_t clear)
{
#ifdef VMTRACK_HAVE_VM_FLAGS_MOD
	vm_flags_mod(vma, set, clear);
#else
	vma->vm_flags = (vma->vm_flags | set) & ~clear;
#endif
}

#ifdef VMTRACK_HAVE_VMA_TEST
#define vmtrack_vma_test(vma, flag)	vma_test(vma, VMA_##flag##_BIT)
#else
#define vmtrack_vma_test(vma, flag)	(!!((vma)->vm_flags & VM_##flag))
#endif

static inline bool events_pending(struct vmtrack_file *f)
{
	return f->ev_count || f->overflow;
}

static inline void publish_pending(struct vmtrack_file *f)
{
	WRITE_ONCE(f->hdr[VMTRACK_W_EVENTS], f->ev_count + (f->overflow ? 1 : 0));
}

/* Called with f->evlock held. */
static void queue_event(struct vmtrack_file *f, const struct vmtrack_event *ev)
{
	if (f->overflow)
		return;		/* the overflow event already covers everything */
	if (f->ev_count == f->ev_max) {
		f->ev_count = 0;
		f->ev_head = 0;
		f->overflow = true;
		return;
	}
	f->ring[(f->ev_head + f->ev_count) % f->ev_max] = *ev;
	f->ev_count++;
}

static u32 event_reason(enum mmu_notifier_event event)
{
	switch (event) {
	case MMU_NOTIFY_UNMAP:
		return VMTRACK_EV_UNMAP;
	case MMU_NOTIFY_CLEAR:
		return VMTRACK_EV_CLEAR;
	case MMU_NOTIFY_RELEASE:
		return VMTRACK_EV_RELEASE;
	case MMU_NOTIFY_MIGRATE:
		return VMTRACK_EV_MIGRATE;
#ifdef VMTRACK_HAVE_MMU_NOTIFY_EXCLUSIVE
	case MMU_NOTIFY_EXCLUSIVE:
		return VMTRACK_EV_EXCLUSIVE;
#endif
	default:
		/* whatever later kernels add: a change */
		return VMTRACK_EV_OTHER;
	}
}

static bool vmtrack_invalidate(struct mmu_interval_notifier *mni,
			       const struct mmu_notifier_range *range,
			       unsigned long cur_seq)
{
	struct vmtrack_wk *w = container_of(mni, struct vmtrack_wk, notifier);
	struct vmtrack_file *f = w->f;
	struct vmtrack_event ev;
	bool wake = false;

	if (vmtrack_keeps_pages(range))
		return true;	/* registrations remain valid */

	spin_lock(&f->evlock);
	mmu_interval_set_seq(mni, cur_seq);
	WRITE_ONCE(*w->word, *w->word + 1);
	WRITE_ONCE(f->hdr[VMTRACK_W_CHANGES], f->hdr[VMTRACK_W_CHANGES] + 1);
	if (!w->fired) {
		w->fired = true;
		memset(&ev, 0, sizeof(ev));
		ev.cookie = w->cookie;
		ev.start = max_t(u64, w->start, range->start);
		ev.len = min_t(u64, w->start + w->len, range->end) - ev.start;
		ev.handle = wk_handle(w);
		ev.reason = event_reason(range->event);
		queue_event(f, &ev);
		publish_pending(f);
		wake = true;
	}
	spin_unlock(&f->evlock);
	if (wake)
		wake_up_interruptible(&f->wq);
	return true;
}

static const struct mmu_interval_notifier_ops vmtrack_mni_ops = {
	.invalidate = vmtrack_invalidate,
};

static int vmtrack_open(struct inode *inode, struct file *file)
{
	struct vmtrack_file *f;
	struct page *page;
	unsigned int i;
	u32 mw = clamp_t(u32, READ_ONCE(max_watches), 1, MAX_WATCHES_LIMIT);
	u32 me = clamp_t(u32, READ_ONCE(max_events), 16, MAX_EVENTS_LIMIT);

	if (!current->mm)
		return -EINVAL;
	f = kzalloc_obj(*f, GFP_KERNEL_ACCOUNT);
	if (!f)
		return -ENOMEM;
	f->ring = kvcalloc(me, sizeof(*f->ring), GFP_KERNEL_ACCOUNT);
	page = alloc_page(GFP_KERNEL_ACCOUNT | __GFP_ZERO);
	if (!f->ring || !page) {
		if (page)
			__free_page(page);
		kvfree(f->ring);
		kfree(f);
		return -ENOMEM;
	}
	mutex_init(&f->lock);
	xa_init_flags(&f->watches, XA_FLAGS_ALLOC | XA_FLAGS_ACCOUNT);
	xa_init_flags(&f->pages, XA_FLAGS_ACCOUNT);
	spin_lock_init(&f->evlock);
	init_waitqueue_head(&f->wq);
	f->ev_max = me;
	f->max_watches = mw;
	f->max_pages = DIV_ROUND_UP(VMTRACK_FIRST_INDEX + (u64)mw, WORDS_PER_PAGE);
	f->gen_base = get_random_u32();
	f->hdr = page_address(page);
	for (i = VMTRACK_FIRST_INDEX; i < WORDS_PER_PAGE; i++)
		f->hdr[i] = f->gen_base;
	f->hdr[VMTRACK_W_MAGIC] = VMTRACK_MAGIC;
	f->hdr[VMTRACK_W_ABI] = VMTRACK_ABI_VERSION;
	if (xa_err(xa_store(&f->pages, 0, page, GFP_KERNEL_ACCOUNT))) {
		__free_page(page);
		kvfree(f->ring);
		kfree(f);
		return -ENOMEM;
	}
	atomic_long_inc(&live_pages);
	mmgrab(current->mm);
	f->mm = current->mm;
	file->private_data = f;
	atomic_long_inc(&live_files);
	return 0;
}

/* Stop watching and free; f->lock held, w already erased from f->watches. */
static void wk_destroy(struct vmtrack_file *f, struct vmtrack_wk *w)
{
	mmu_interval_notifier_remove(&w->notifier);
	/* no callback runs on w any more; a new watch of this word gets a fresh value */
	spin_lock(&f->evlock);
	WRITE_ONCE(*w->word, *w->word + 1);
	spin_unlock(&f->evlock);
	f->nr_watches--;
	kmem_cache_free(watch_cache, w);
	atomic_long_dec(&live_watches);
}

static int vmtrack_release(struct inode *inode, struct file *file)
{
	struct vmtrack_file *f = file->private_data;
	struct vmtrack_wk *w;
	struct page *page;
	unsigned long i;

	mutex_lock(&f->lock);
	xa_for_each(&f->watches, i, w) {
		xa_erase(&f->watches, i);
		wk_destroy(f, w);
		cond_resched();
	}
	if (f->log) {
		vmtrack_log_stop(f->log, f->mm);
		kfree(f->log);
	}
	mutex_unlock(&f->lock);
	xa_destroy(&f->watches);
	xa_for_each(&f->pages, i, page) {
		put_page(page);
		atomic_long_dec(&live_pages);
	}
	xa_destroy(&f->pages);
	mmdrop(f->mm);
	kvfree(f->ring);
	kfree(f);
	atomic_long_dec(&live_files);
	return 0;
}

static inline bool is_owner(struct vmtrack_file *f)
{
	return current->mm == f->mm;
}

/* The word page for index, allocated if needed; f->lock held. */
static u32 *word_ptr(struct vmtrack_file *f, u32 index)
{
	unsigned long pgno = index / WORDS_PER_PAGE;
	struct page *page = xa_load(&f->pages, pgno);
	unsigned int i;
	u32 *words;

	if (!page) {
		page = alloc_page(GFP_KERNEL_ACCOUNT);
		if (!page)
			return NULL;
		words = page_address(page);
		for (i = 0; i < WORDS_PER_PAGE; i++)
			words[i] = f->gen_base;
		/* the fault handler finds the page through xa_load, after this store */
		if (xa_err(xa_store(&f->pages, pgno, page, GFP_KERNEL_ACCOUNT))) {
			__free_page(page);
			return NULL;
		}
		atomic_long_inc(&live_pages);
	}
	return (u32 *)page_address(page) + index % WORDS_PER_PAGE;
}

static int unwatch_handle(struct vmtrack_file *f, u64 handle)
{
	u32 index = lower_32_bits(handle);
	struct vmtrack_wk *w;

	mutex_lock(&f->lock);
	w = xa_load(&f->watches, index);
	if (!w || wk_handle(w) != handle) {
		mutex_unlock(&f->lock);
		return -ENOENT;
	}
	xa_erase(&f->watches, index);
	wk_destroy(f, w);
	mutex_unlock(&f->lock);
	return 0;
}

/* Whether VMAs cover all of [start, start + len). */
static bool range_mapped(struct mm_struct *mm, unsigned long start, unsigned long len)
{
	unsigned long addr = start, end = start + len;
	struct vm_area_struct *vma;
	bool mapped = true;

	mmap_read_lock(mm);
	while (addr < end) {
		vma = find_vma(mm, addr);
		if (!vma || vma->vm_start > addr) {
			mapped = false;
			break;
		}
		addr = vma->vm_end;
	}
	mmap_read_unlock(mm);
	return mapped;
}

static long ioc_watch(struct vmtrack_file *f, struct vmtrack_watch __user *uarg)
{
	struct vmtrack_watch a;
	struct vmtrack_wk *w;
	u32 index;
	int ret;

	if (copy_from_user(&a, uarg, sizeof(a)))
		return -EFAULT;
	if ((a.flags & ~VMTRACK_WATCH_MAPPED) || a.reserved)
		return -EINVAL;
	if (!a.len || !PAGE_ALIGNED(a.start) || !PAGE_ALIGNED(a.len))
		return -EINVAL;
	if (a.start + a.len < a.start || a.start + a.len > TASK_SIZE)
		return -EINVAL;

	w = kmem_cache_zalloc(watch_cache, GFP_KERNEL_ACCOUNT);
	if (!w)
		return -ENOMEM;
	w->f = f;
	w->start = a.start;
	w->len = a.len;
	w->cookie = a.cookie;

	mutex_lock(&f->lock);
	if (f->nr_watches >= f->max_watches) {
		ret = -ENOSPC;
		goto out_free;
	}
	ret = xa_alloc(&f->watches, &index, NULL,
		       XA_LIMIT(VMTRACK_FIRST_INDEX, VMTRACK_FIRST_INDEX + f->max_watches - 1),
		       GFP_KERNEL_ACCOUNT);
	if (ret) {
		ret = ret == -EBUSY ? -ENOSPC : ret;
		goto out_free;
	}
	w->word = word_ptr(f, index);
	if (!w->word) {
		ret = -ENOMEM;
		goto out_erase;
	}
	w->index = index;
	w->gen0 = READ_ONCE(*w->word);
	ret = mmu_interval_notifier_insert(&w->notifier, f->mm, a.start, a.len,
					   &vmtrack_mni_ops);
	if (ret)
		goto out_erase;
	xa_store(&f->watches, index, w, GFP_KERNEL_ACCOUNT);	/* slot reserved: no alloc */
	f->nr_watches++;
	atomic_long_inc(&live_watches);
	/*
	 * If an invalidation was in progress when the notifier went in, its callback was not
	 * called for it: wait until it has completed, so that what the caller does next (pin
	 * the pages) sees the new state.
	 */
	mmu_interval_read_begin(&w->notifier);
	mutex_unlock(&f->lock);

	a.handle = wk_handle(w);
	a.index = w->index;
	a.gen = w->gen0;
	/*
	 * Checked with the notifier in place: an unmap after this look moves the word, so an
	 * unmoved word says the range is still mapped. (w may be unwatched by now only through
	 * its handle, which the caller does not have yet.)
	 */
	if ((a.flags & VMTRACK_WATCH_MAPPED) && !range_mapped(f->mm, a.start, a.len)) {
		unwatch_handle(f, a.handle);
		return -EFAULT;
	}
	if (copy_to_user(uarg, &a, sizeof(a))) {
		unwatch_handle(f, a.handle);
		return -EFAULT;
	}
	return 0;

out_erase:
	xa_erase(&f->watches, index);
out_free:
	mutex_unlock(&f->lock);
	kmem_cache_free(watch_cache, w);
	return ret;
}

static long ioc_unwatch(struct vmtrack_file *f, struct vmtrack_unwatch __user *uarg)
{
	struct vmtrack_unwatch a;

	if (copy_from_user(&a, uarg, sizeof(a)))
		return -EFAULT;
	if (a.flags || a.reserved)
		return -EINVAL;
	return unwatch_handle(f, a.handle);
}

static long ioc_info(struct vmtrack_file *f, struct vmtrack_info __user *uarg)
{
	struct vmtrack_info a;

	memset(&a, 0, sizeof(a));
	a.abi_version = VMTRACK_ABI_VERSION;
	a.first_index = VMTRACK_FIRST_INDEX;
	a.map_bytes = (u64)f->max_pages * PAGE_SIZE;
	a.max_watches = f->max_watches;
	a.max_events = f->ev_max;
	a.nr_watches = READ_ONCE(f->nr_watches);
	a.event_size = sizeof(struct vmtrack_event);
	a.watch_bytes = kmem_cache_size(watch_cache) + sizeof(u32);
	strscpy(a.version, VMTRACK_VERSION, sizeof(a.version));
	a.features = VMTRACK_FEATURE_WATCH_MAPPED | VMTRACK_FEATURE_CHANGE_LOG;
	if (copy_to_user(uarg, &a, sizeof(a)))
		return -EFAULT;
	return 0;
}

static long ioc_log_start(struct vmtrack_file *f, struct vmtrack_log_start __user *uarg)
{
	struct vmtrack_log_start a;
	struct vmtrack_log *log;
	int ret;

	if (copy_from_user(&a, uarg, sizeof(a)))
		return -EFAULT;
	if (a.flags || a.reserved[0] || a.reserved[1])
		return -EINVAL;
	mutex_lock(&f->lock);
	log = f->log;
	if (!log) {
		log = kzalloc_obj(*log, GFP_KERNEL_ACCOUNT);
		if (!log) {
			mutex_unlock(&f->lock);
			return -ENOMEM;
		}
		ret = vmtrack_log_start(log, (u64 *)&f->hdr[VMTRACK_W_LOG], f->mm);
		if (ret) {
			mutex_unlock(&f->lock);
			kfree(log);
			return ret;
		}
		/* CHANGED reads it without f->lock: after its start */
		smp_store_release(&f->log, log);
	}
	a.base = log->base;
	a.entries = VMTRACK_LOG_ENTRIES;
	mutex_unlock(&f->lock);
	return copy_to_user(uarg, &a, sizeof(a)) ? -EFAULT : 0;
}

static long ioc_changed(struct vmtrack_file *f, struct vmtrack_changed __user *uarg)
{
	/* pairs with ioc_log_start()'s release: a log seen is initialized */
	struct vmtrack_log *log = smp_load_acquire(&f->log);
	struct vmtrack_changed a;
	int ret;

	if (copy_from_user(&a, uarg, sizeof(a)))
		return -EFAULT;
	if (a.flags || a.reserved || !a.len || !log)
		return -EINVAL;
	ret = vmtrack_log_changed(log, &a);
	if (ret)
		return ret;
	return copy_to_user(uarg, &a, sizeof(a)) ? -EFAULT : 0;
}

static long vmtrack_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct vmtrack_file *f = file->private_data;
	void __user *uarg = (void __user *)arg;

	if (!is_owner(f))
		return -EBADF;
	switch (cmd) {
	case VMTRACK_IOC_INFO:
		return ioc_info(f, uarg);
	case VMTRACK_IOC_WATCH:
		return ioc_watch(f, uarg);
	case VMTRACK_IOC_UNWATCH:
		return ioc_unwatch(f, uarg);
	case VMTRACK_IOC_LOG_START:
		return ioc_log_start(f, uarg);
	case VMTRACK_IOC_CHANGED:
		return ioc_changed(f, uarg);
	default:
		return -ENOTTY;
	}
}

static ssize_t vmtrack_read(struct file *file, char __user *buf, size_t count, loff_t *ppos)
{
	struct vmtrack_file *f = file->private_data;
	struct vmtrack_event *kbuf;
	size_t n, k = 0;
	int ret;

	if (!is_owner(f))
		return -EBADF;
	if (count < sizeof(*kbuf))
		return -EINVAL;
	n = min_t(size_t, count / sizeof(*kbuf), READ_BATCH);
	kbuf = kmalloc_array(n, sizeof(*kbuf), GFP_KERNEL);
	if (!kbuf)
		return -ENOMEM;

	spin_lock(&f->evlock);
	while (!events_pending(f)) {
		spin_unlock(&f->evlock);
		if (file->f_flags & O_NONBLOCK) {
			ret = -EAGAIN;
			goto out;
		}
		ret = wait_event_interruptible(f->wq,
					       READ_ONCE(f->ev_count) || READ_ONCE(f->overflow));
		if (ret)
			goto out;
		spin_lock(&f->evlock);
	}
	if (f->overflow) {
		memset(&kbuf[0], 0, sizeof(kbuf[0]));
		kbuf[0].reason = VMTRACK_EV_OVERFLOW;
		f->overflow = false;
		k = 1;
	}
	while (k < n && f->ev_count) {
		kbuf[k++] = f->ring[f->ev_head];
		f->ev_head = (f->ev_head + 1) % f->ev_max;
		f->ev_count--;
	}
	publish_pending(f);
	spin_unlock(&f->evlock);

	if (copy_to_user(buf, kbuf, k * sizeof(*kbuf))) {
		/* the events are lost: tell the reader next time that everything is suspect */
		spin_lock(&f->evlock);
		f->overflow = true;
		f->ev_count = 0;
		publish_pending(f);
		spin_unlock(&f->evlock);
		ret = -EFAULT;
		goto out;
	}
	ret = k * sizeof(*kbuf);
out:
	kfree(kbuf);
	return ret;
}

static __poll_t vmtrack_poll(struct file *file, poll_table *wait)
{
	struct vmtrack_file *f = file->private_data;
	__poll_t mask = 0;

	if (!is_owner(f))
		return EPOLLERR;
	poll_wait(file, &f->wq, wait);
	spin_lock(&f->evlock);
	if (events_pending(f))
		mask = EPOLLIN | EPOLLRDNORM;
	spin_unlock(&f->evlock);
	return mask;
}

static vm_fault_t vmtrack_fault(struct vm_fault *vmf)
{
	struct vmtrack_file *f = vmf->vma->vm_private_data;
	struct page *page = xa_load(&f->pages, vmf->pgoff);

	if (!page)
		return VM_FAULT_SIGBUS;	/* past the words of any watch so far */
	get_page(page);
	vmf->page = page;
	return 0;
}

static const struct vm_operations_struct vmtrack_vm_ops = {
	.fault = vmtrack_fault,
};

static int vmtrack_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct vmtrack_file *f = file->private_data;

	if (!is_owner(f))
		return -EBADF;
	if (vma->vm_pgoff || vma_pages(vma) > f->max_pages)
		return -EINVAL;
	if (!vmtrack_vma_test(vma, MAYSHARE))
		return -EINVAL;
	if (vmtrack_vma_test(vma, WRITE) || vmtrack_vma_test(vma, EXEC))
		return -EPERM;
	/* read-only for good, not inherited by a child, not in core dumps */
	vmtrack_set_vm_flags(vma, VM_DONTCOPY | VM_DONTEXPAND | VM_DONTDUMP,
			     VM_MAYWRITE | VM_MAYEXEC);
	vma->vm_ops = &vmtrack_vm_ops;
	vma->vm_private_data = f;
	return 0;
}

static const struct file_operations vmtrack_fops = {
	.owner = THIS_MODULE,
	.open = vmtrack_open,
	.release = vmtrack_release,
	.unlocked_ioctl = vmtrack_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.read = vmtrack_read,
	.poll = vmtrack_poll,
	.mmap = vmtrack_mmap,
	.llseek = noop_llseek,
};

static struct miscdevice vmtrack_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "vmtrack",
	.fops = &vmtrack_fops,
	.mode = 0666,	/* a file only ever affects its opener's own address space */
};

static int __init vmtrack_init(void)
{
	int ret;

	BUILD_BUG_ON(sizeof(struct vmtrack_watch) != 48);
	BUILD_BUG_ON(sizeof(struct vmtrack_event) != 40);
	BUILD_BUG_ON(sizeof(struct vmtrack_info) != 104);
	BUILD_BUG_ON(sizeof(struct vmtrack_log_start) != 32);
	BUILD_BUG_ON(sizeof(struct vmtrack_changed) != 40);
	watch_cache = KMEM_CACHE(vmtrack_wk, SLAB_ACCOUNT);
	if (!watch_cache)
		return -ENOMEM;
	ret = misc_register(&vmtrack_misc);
	if (ret) {
		kmem_cache_destroy(watch_cache);
		return ret;
	}
	pr_info("version %s loaded (max_watches %u, max_events %u)\n", VMTRACK_VERSION,
		max_watches, max_events);
	return 0;
}

static void __exit vmtrack_exit(void)
{
	misc_deregister(&vmtrack_misc);
	if (atomic_long_read(&live_files) || atomic_long_read(&live_watches) ||
	    atomic_long_read(&live_pages))
		pr_err("leak at unload: %ld files, %ld watches, %ld pages\n",
		       atomic_long_read(&live_files), atomic_long_read(&live_watches),
		       atomic_long_read(&live_pages));
	kmem_cache_destroy(watch_cache);
	pr_info("unloaded\n");
}

module_init(vmtrack_init);
module_exit(vmtrack_exit);

MODULE_LICENSE("GPL");
MODULE_AUTHOR("vmtrack developers");
MODULE_DESCRIPTION("validity words for user-space memory-registration caches");
MODULE_VERSION(VMTRACK_VERSION);
