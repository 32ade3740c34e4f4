/* The events waiting for the notifier thread: a bounded lock-free queue of address ranges.
 *
 * Producers are any thread: the unmapping thread inside a vmtrack hook (which may hold
 * libfabric's mm_lock), and valid()/subscribe(), which run under mm_lock. So a push takes no
 * lock and never blocks; a full queue sets a flag instead, and the consumer then treats the
 * whole address space as changed (correct, only slower). The one consumer is the notifier. */
#ifndef VMTRACK_OFI_QUEUE_H
#define VMTRACK_OFI_QUEUE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define VMT_OFI_QUEUE_CELLS 1024u   /* a power of two */

struct vmt_ofi_cell {
    _Atomic size_t turn;           /* whose turn the cell is: position (push) or position+1 (pop) */
    uintptr_t addr;
    size_t len;
};

struct vmt_ofi_queue {
    struct vmt_ofi_cell cells[VMT_OFI_QUEUE_CELLS];
    _Atomic size_t head;           /* next position to push */
    size_t tail;                   /* next position to pop (consumer only) */
    _Atomic int overflow;          /* a push found the queue full */
    _Atomic uint32_t wake;         /* futex word: bumped by every push */
};

void vmt_ofi_queue_init(struct vmt_ofi_queue *q);
/* Push [addr, addr+len) and wake the consumer. Returns 0, or -ENOSPC when full (flag set). */
int  vmt_ofi_queue_push(struct vmt_ofi_queue *q, uintptr_t addr, size_t len);
/* Pop one range: 1, or 0 when empty. Consumer only. */
int  vmt_ofi_queue_pop(struct vmt_ofi_queue *q, uintptr_t *addr, size_t *len);
/* Wait until the futex word differs from `seen` (a push or vmt_ofi_queue_kick happened since
 * it was read) or timeout_ms passed. */
void vmt_ofi_queue_wait(struct vmt_ofi_queue *q, uint32_t seen, unsigned timeout_ms);
void vmt_ofi_queue_kick(struct vmt_ofi_queue *q);

#endif
