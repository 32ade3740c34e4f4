/* What the bpf tracker's three parts share: the BPF programs (vmtrack.bpf.c), the daemon that
 * loads them (vmtrackd.c) and the client in libvmtrack (common/trackers/bpf.cc). The layouts
 * of a client's two maps and the messages on the daemon's socket. Plain C with fixed-size
 * types: it is compiled for the BPF target, by gcc and by g++. */
#ifndef VMTRACK_BPF_ABI_H
#define VMTRACK_BPF_ABI_H

#include <linux/types.h>

#define VMTRACK_BPF_ABI 1
#define VMTRACK_BPF_MAGIC 0x564d5442u /* "VMTB" */

/* Ranges one client watches at once; watches beyond it are served uncached. */
#define VMTRACK_BPF_SLOTS 512
/* Caches (connections) of one address space at once. */
#define VMTRACK_BPF_PER_MM 8

#define VMTRACK_BPF_RUNDIR "/run/vmtrack"
#define VMTRACK_BPF_SOCKET VMTRACK_BPF_RUNDIR "/bpf.sock"
/* The daemon's reason for not running (it refused to start): one line, for `vmtrack info`. */
#define VMTRACK_BPF_WHYFILE VMTRACK_BPF_RUNDIR "/vmtrackd.why"
#define VMTRACK_BPF_PINDIR "/sys/fs/bpf/vmtrack-abi1"

/* The ranges map (one element, BPF_F_MMAPABLE), mapped writable by its client. The programs
 * treat every field as hostile: `used` is clamped, a slot with end <= start matches nothing. */
struct vmtrack_bpf_slot {
	__u64 start;
	__u64 end; /* 0: slot free */
};

struct vmtrack_bpf_ranges {
	__u32 abi;
	__u32 used; /* slots [0, used) are scanned */
	__u64 reserved;
	struct vmtrack_bpf_slot slot[VMTRACK_BPF_SLOTS];
};

/* The words map (one element, BPF_F_MMAPABLE, frozen by the daemon so that its client can map
 * it only read-only). gen[i] changes whenever pages of slot i's range change; `alive` is 1
 * while the daemon serves this client, 0 once it let it go (every gen was bumped before). */
struct vmtrack_bpf_words {
	__u32 gen[VMTRACK_BPF_SLOTS];
	__u32 alive;
	__u32 changes; /* bumped with any gen: the client's poll reads one word */
	__u32 magic;
	__u32 abi;
};

/* Key of the daemon's maps of maps: the client's address space and which of its caches. */
struct vmtrack_bpf_key {
	__u64 mm;
	__u32 idx;
	__u32 pad;
};

/* Client -> daemon, the one message a connection sends (SOCK_SEQPACKET). */
struct vmtrack_bpf_hello {
	__u32 magic;
	__u32 abi;
	__u32 flags; /* 0 */
	__u32 reserved;
};

/* Daemon -> client. status 0: two fds follow (SCM_RIGHTS): the ranges map, the words map. */
struct vmtrack_bpf_reply {
	__u32 magic;
	__u32 abi;
	__s32 status; /* 0 or a negative errno */
	__u32 slots;
	__u32 ranges_bytes;
	__u32 words_bytes;
	char why[200]; /* status < 0: the refusal, one line */
};

#endif
