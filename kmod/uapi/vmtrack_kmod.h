/* SPDX-License-Identifier: ((GPL-2.0 WITH Linux-syscall-note) OR MIT) */
/*
 * vmtrack_kmod.h: the interface of /dev/vmtrack (kmod/vmtrack.ko), shared by the module and
 * libvmtrack. Plain C, usable from C++.
 *
 * An open file watches the address space (mm) of the process that opened it, and only that:
 * every ioctl, read and mmap from another address space fails with -EBADF (a child after
 * fork opens its own file).
 *
 * The file's words: mmap(NULL, info.map_bytes, PROT_READ, MAP_SHARED, fd, 0) maps an array of
 * __u32 read-only (PROT_WRITE is refused, and so is a later mprotect to writable; the mapping
 * is not inherited by fork). Words 0..VMTRACK_FIRST_INDEX-1 are the header below; every watch
 * owns one word from VMTRACK_FIRST_INDEX on, its generation. When pages of a watched range may
 * be freed, replaced or moved, the module increments the range's word and the change counter
 * before the change completes, then queues an event. A cached entry is valid while
 * words[index] == the gen returned by WATCH.
 */
#ifndef VMTRACK_KMOD_H
#define VMTRACK_KMOD_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define VMTRACK_DEVICE		"/dev/vmtrack"
#define VMTRACK_ABI_VERSION	1

/* Header words (indexes into the mapped __u32 array). */
#define VMTRACK_W_CHANGES	0	/* +1 on every invalidation of any watched range */
#define VMTRACK_W_MAGIC		1	/* VMTRACK_MAGIC */
#define VMTRACK_W_ABI		2	/* VMTRACK_ABI_VERSION */
#define VMTRACK_W_EVENTS	3	/* events queued, not yet read (+1 if overflowed) */
#define VMTRACK_W_LOG		4	/* words 4-5: the change log's count, a __u64 */
#define VMTRACK_FIRST_INDEX	16	/* words of watches start here */
#define VMTRACK_MAGIC		0x4b544d56u	/* "VMTK" */

/* VMTRACK_IOC_INFO: the module's version and limits. */
struct vmtrack_info {
	__u32 abi_version;	/* VMTRACK_ABI_VERSION */
	__u32 first_index;	/* VMTRACK_FIRST_INDEX */
	__u64 map_bytes;	/* length to mmap */
	__u32 max_watches;	/* per open file */
	__u32 max_events;	/* event queue length per open file */
	__u32 nr_watches;	/* watches of this file now */
	__u32 event_size;	/* sizeof(struct vmtrack_event) */
	__u64 watch_bytes;	/* kernel memory per watch (approximate) */
	char version[32];	/* module version, NUL-terminated */
	__u64 features;		/* VMTRACK_FEATURE_*: what this module does beyond ABI 1 */
	__u64 reserved[3];	/* zero */
};

/* VMTRACK_IOC_WATCH takes VMTRACK_WATCH_MAPPED (a module without it: zero, and EINVAL). */
#define VMTRACK_FEATURE_WATCH_MAPPED	(1ull << 0)
/* VMTRACK_IOC_LOG_START and VMTRACK_IOC_CHANGED (a module without them: ENOTTY). */
#define VMTRACK_FEATURE_CHANGE_LOG	(1ull << 1)

/* VMTRACK_IOC_WATCH: watch [start, start+len). start and len must be page aligned, len > 0,
 * the range inside the user address space; flags 0 or VMTRACK_WATCH_MAPPED, reserved 0.
 * Ranges may overlap. On return every change of the range that started earlier has completed;
 * every later change increments words[index] (it is gen now). With VMTRACK_WATCH_MAPPED the
 * watch is made only if VMAs cover the whole range once it is in place (else EFAULT, and
 * nothing is watched): a word that has not moved then also says the range is still mapped,
 * and the caller needs no mapped check of its own. Errors: EINVAL (bad argument), ENOSPC
 * (max_watches reached), ENOMEM, EBADF (not the opener's address space), EFAULT.
 */
struct vmtrack_watch {
	__u64 start;
	__u64 len;
	__u64 cookie;		/* returned in events */
	__u32 flags;		/* 0 or VMTRACK_WATCH_MAPPED */
	__u32 reserved;		/* 0 */
	/* out */
	__u64 handle;		/* for UNWATCH: ((__u64)gen << 32) | index */
	__u32 index;		/* the watch's word */
	__u32 gen;		/* its value now */
};

/* VMTRACK_IOC_UNWATCH: stop watching. The handle must be one WATCH returned to this file and
 * not yet unwatched (else ENOENT). flags and reserved must be 0. The word is incremented.
 */
struct vmtrack_unwatch {
	__u64 handle;
	__u32 flags;
	__u32 reserved;
};

/* read() returns whole events (at least one fits in the buffer, else EINVAL); EAGAIN when
 * none is queued and the file is non-blocking; poll() says POLLIN when one is. One event per
 * watch at most (the first change; later ones only increment the word).
 */
struct vmtrack_event {
	__u64 cookie;		/* the watch's cookie (0 for OVERFLOW) */
	__u64 start;		/* the part of the watched range that changed */
	__u64 len;
	__u64 handle;		/* the watch's handle */
	__u32 reason;		/* VMTRACK_EV_* */
	__u32 flags;		/* 0 */
};

enum {
	VMTRACK_EV_UNMAP = 1,	/* munmap, mremap (old range) */
	VMTRACK_EV_CLEAR,	/* pages dropped or replaced: madvise, truncate, MAP_FIXED, ... */
	VMTRACK_EV_RELEASE,	/* the address space is going away */
	VMTRACK_EV_MIGRATE,	/* pages moved */
	VMTRACK_EV_EXCLUSIVE,	/* pages taken for exclusive device access (Linux 5.14+) */
	VMTRACK_EV_OTHER,	/* an event this version does not know (treated as a change) */
	VMTRACK_EV_OVERFLOW = 0x100,	/* events were lost: everything is suspect */
};

/* VMTRACK_IOC_LOG_START: from now on the file logs every change of its address space (each
 * invalidation that may free, replace or move pages, watched or not; the last `entries`
 * of them), counted in the __u64 at header words VMTRACK_W_LOG (native byte order, 8-byte
 * aligned). A caller reads that count as its mark, and later asks VMTRACK_IOC_CHANGED
 * whether a range changed since. Starting again changes nothing. flags and reserved must be
 * 0. Errors: EINVAL, ENOMEM, EINTR, EBADF.
 */
struct vmtrack_log_start {
	__u32 flags;		/* 0 */
	__u32 entries;		/* out: changes kept */
	__u64 base;		/* out: the count's first value (never 0) */
	__u64 reserved[2];	/* 0 */
};

/* VMTRACK_IOC_CHANGED: whether [start, start+len) changed since `mark` (a count read from the
 * header after LOG_START). changed = 0 only if no change overlapping the range was logged
 * since the mark, none is under way, and the log still holds every change since the mark;
 * else 1. Pages pinned after the mark and still in place when a WATCH of the range has
 * returned are then the pages the watch covers. flags and reserved must be 0, len > 0.
 * Errors: EINVAL (a bad argument, a mark this file's log never counted, no LOG_START), EBADF.
 */
struct vmtrack_changed {
	__u64 mark;
	__u64 start;
	__u64 len;
	__u32 flags;		/* 0 */
	__u32 changed;		/* out */
	__u64 reserved;		/* 0 */
};

#define VMTRACK_IOC_MAGIC	0xB9
#define VMTRACK_IOC_INFO	_IOR(VMTRACK_IOC_MAGIC, 0, struct vmtrack_info)
#define VMTRACK_WATCH_MAPPED	(1u << 0)
#define VMTRACK_IOC_WATCH	_IOWR(VMTRACK_IOC_MAGIC, 1, struct vmtrack_watch)
#define VMTRACK_IOC_UNWATCH	_IOW(VMTRACK_IOC_MAGIC, 2, struct vmtrack_unwatch)
#define VMTRACK_IOC_LOG_START	_IOWR(VMTRACK_IOC_MAGIC, 3, struct vmtrack_log_start)
#define VMTRACK_IOC_CHANGED	_IOWR(VMTRACK_IOC_MAGIC, 4, struct vmtrack_changed)

#endif /* VMTRACK_KMOD_H */
