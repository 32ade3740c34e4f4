// SPDX-License-Identifier: GPL-2.0
/* The bpf tracker's programs (loaded by vmtrackd, doc/trackers.md): every change of a
 * process's pages reaches one of three kernel functions, and each program there bumps the
 * words of the ranges the changed address space's clients watch.
 *
 * - the zap (unmap_page_range up to 6.x, __zap_vma_range from 7.x): munmap, MAP_FIXED,
 *   madvise DONTNEED/REMOVE, hole punch, io_uring's madvise, mremap shrink, exit. fentry and
 *   fexit: a range registered while the zap runs (fentry missed its slot) is bumped at fexit,
 *   before the system call returns.
 * - move_page_tables (mremap moving pages): two argument layouts.
 * - ptep_clear_flush (kprobe; fentry refuses its pte_t return): a COW copy after fork.
 *
 * The kernel's types are declared with only the fields read, relocated by CO-RE from the
 * running kernel's BTF; the daemon loads only the variants that kernel has. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#include "vmtrack_bpf_abi.h"

char LICENSE[] SEC("license") = "GPL";

struct mm_struct;

struct vm_area_struct {
	struct mm_struct *vm_mm;
} __attribute__((preserve_access_index));

/* move_page_tables' argument from 7.x on */
struct pagetable_move_control {
	struct vm_area_struct *old;
	unsigned long old_addr;
	unsigned long len_in;
} __attribute__((preserve_access_index));

struct pt_regs {
	unsigned long di;
	unsigned long si;
} __attribute__((preserve_access_index));

struct task_struct {
	int pid;
	int tgid;
	struct mm_struct *mm;
} __attribute__((preserve_access_index));

struct bpf_iter_meta;
struct bpf_iter__task {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
} __attribute__((preserve_access_index));

/* Which caches each client address space has (bit idx of vmtrack_bpf_key): the one lookup a
 * process without vmtrack pays. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} mm_clients SEC(".maps");

/* Each client's two maps; the inner map's shape is set by the daemon (a template made like a
 * client's map). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__uint(max_entries, 8192);
	__type(key, struct vmtrack_bpf_key);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} ranges_of SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__uint(max_entries, 8192);
	__type(key, struct vmtrack_bpf_key);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} words_of SEC(".maps");

/* find_mm's argument and result (the daemon sets and reads them through .bss). */
int target_tgid;
__u64 found_mm;

/* Bump the word of every slot of one client that overlaps [start, end). Verified once (a
 * global function), whatever the number of callers. */
__attribute__((noinline)) int scan_client(struct vmtrack_bpf_ranges *r, struct vmtrack_bpf_words *w,
					  __u64 start, __u64 end)
{
	__u32 used, i;

	if (!r || !w)
		return 0;
	used = r->used;
	for (i = 0; i < VMTRACK_BPF_SLOTS; i++) {
		__u64 s, e;

		if (i >= used)
			break;
		s = r->slot[i].start;
		e = r->slot[i].end;
		if (s < end && start < e && s < e) {
			/* no count carried across iterations: the verifier's states then
			 * converge and each slot is checked once */
			__sync_fetch_and_add(&w->gen[i], 1);
			__sync_fetch_and_add(&w->changes, 1);
		}
	}
	return 0;
}

static __always_inline void *client_value(void *outer, struct vmtrack_bpf_key *key)
{
	__u32 zero = 0;
	void *inner = bpf_map_lookup_elem(outer, key);

	return inner ? bpf_map_lookup_elem(inner, &zero) : (void *)0;
}

static __always_inline int changed(struct mm_struct *mm, __u64 start, __u64 end)
{
	struct vmtrack_bpf_key key = {};
	__u64 mmkey = (__u64)mm;
	__u32 *mask, m, k;

	mask = bpf_map_lookup_elem(&mm_clients, &mmkey);
	if (!mask)
		return 0;
	m = *mask;
	key.mm = mmkey;
	for (k = 0; k < VMTRACK_BPF_PER_MM; k++) {
		if (!(m & (1u << k)))
			continue;
		key.idx = k;
		scan_client(client_value(&ranges_of, &key), client_value(&words_of, &key), start,
			    end);
	}
	return 0;
}

/* unmap_page_range(tlb, vma, addr, end, details) and 7.x's __zap_vma_range (same arguments) */
static __always_inline int zap(unsigned long long *ctx)
{
	struct vm_area_struct *vma = (void *)ctx[1];

	return changed(vma->vm_mm, ctx[2], ctx[3]);
}

SEC("fentry/unmap_page_range")
int zap_enter(unsigned long long *ctx)
{
	return zap(ctx);
}

SEC("fexit/unmap_page_range")
int zap_exit(unsigned long long *ctx)
{
	return zap(ctx);
}

SEC("fentry/__zap_vma_range")
int zap7_enter(unsigned long long *ctx)
{
	return zap(ctx);
}

SEC("fexit/__zap_vma_range")
int zap7_exit(unsigned long long *ctx)
{
	return zap(ctx);
}

/* move_page_tables(vma, old_addr, new_vma, new_addr, len, ...) up to 6.x */
static __always_inline int move6(unsigned long long *ctx)
{
	struct vm_area_struct *vma = (void *)ctx[0];

	return changed(vma->vm_mm, ctx[1], ctx[1] + ctx[4]);
}

SEC("fentry/move_page_tables")
int move_enter(unsigned long long *ctx)
{
	return move6(ctx);
}

SEC("fexit/move_page_tables")
int move_exit(unsigned long long *ctx)
{
	return move6(ctx);
}

/* move_page_tables(struct pagetable_move_control *) from 7.x */
static __always_inline int move7(unsigned long long *ctx)
{
	struct pagetable_move_control *pmc = (void *)ctx[0];
	unsigned long addr = pmc->old_addr;

	return changed(pmc->old->vm_mm, addr, addr + pmc->len_in);
}

SEC("fentry/move_page_tables")
int move7_enter(unsigned long long *ctx)
{
	return move7(ctx);
}

SEC("fexit/move_page_tables")
int move7_exit(unsigned long long *ctx)
{
	return move7(ctx);
}

/* ptep_clear_flush(vma, address, ptep): a COW copy replaces the page at address. */
SEC("kprobe/ptep_clear_flush")
int cow(struct pt_regs *regs)
{
	struct vm_area_struct *vma = (void *)BPF_CORE_READ(regs, di);
	__u64 addr = BPF_CORE_READ(regs, si) & ~4095ull;

	return changed(BPF_CORE_READ(vma, vm_mm), addr, addr + 4096);
}

/* Run by the daemon (BPF_PROG_TEST_RUN, args: mm, idx) when it lets a client go: every word
 * changes and alive drops, so the client trusts nothing it registered while served. */
SEC("raw_tp")
int release_client(struct bpf_raw_tracepoint_args *ctx)
{
	struct vmtrack_bpf_key key = {};
	struct vmtrack_bpf_words *w;
	__u32 i;

	key.mm = ctx->args[0];
	key.idx = (__u32)ctx->args[1];
	w = client_value(&words_of, &key);
	if (!w)
		return 1;
	w->alive = 0;
	for (i = 0; i < VMTRACK_BPF_SLOTS; i++)
		__sync_fetch_and_add(&w->gen[i], 1);
	__sync_fetch_and_add(&w->changes, 1);
	return 0;
}

/* Run by the daemon through an iterator: the address space of process target_tgid. */
SEC("iter/task")
int find_mm(struct bpf_iter__task *ctx)
{
	struct task_struct *t = ctx->task;

	if (t && t->tgid == target_tgid && t->pid == target_tgid)
		found_mm = (__u64)t->mm;
	return 0;
}
