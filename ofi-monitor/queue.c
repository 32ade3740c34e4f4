/* Bounded multi-producer queue with per-cell turn counters (the classic array queue whose
 * cells say whether they are free for position p or hold the item of position p), and a futex
 * to sleep on. See queue.h for who pushes and why nothing here may block. */
#define _GNU_SOURCE
#include "queue.h"

#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

void vmt_ofi_queue_init(struct vmt_ofi_queue *q)
{
    for (size_t i = 0; i < VMT_OFI_QUEUE_CELLS; i++)
        atomic_init(&q->cells[i].turn, i);
    atomic_init(&q->head, 0);
    q->tail = 0;
    atomic_init(&q->overflow, 0);
    atomic_init(&q->wake, 0);
}

void vmt_ofi_queue_kick(struct vmt_ofi_queue *q)
{
    atomic_fetch_add_explicit(&q->wake, 1, memory_order_release);
    syscall(SYS_futex, &q->wake, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

int vmt_ofi_queue_push(struct vmt_ofi_queue *q, uintptr_t addr, size_t len)
{
    size_t pos = atomic_load_explicit(&q->head, memory_order_relaxed);
    for (;;) {
        struct vmt_ofi_cell *c = &q->cells[pos & (VMT_OFI_QUEUE_CELLS - 1)];
        size_t turn = atomic_load_explicit(&c->turn, memory_order_acquire);
        if (turn == pos) {
            if (atomic_compare_exchange_weak_explicit(&q->head, &pos, pos + 1,
                                                      memory_order_relaxed,
                                                      memory_order_relaxed)) {
                c->addr = addr;
                c->len = len;
                atomic_store_explicit(&c->turn, pos + 1, memory_order_release);
                vmt_ofi_queue_kick(q);
                return 0;
            }
        } else if (turn < pos) {
            /* The consumer has not freed this cell yet: the queue is full. */
            atomic_store_explicit(&q->overflow, 1, memory_order_release);
            vmt_ofi_queue_kick(q);
            return -ENOSPC;
        } else {
            pos = atomic_load_explicit(&q->head, memory_order_relaxed);
        }
    }
}

int vmt_ofi_queue_pop(struct vmt_ofi_queue *q, uintptr_t *addr, size_t *len)
{
    struct vmt_ofi_cell *c = &q->cells[q->tail & (VMT_OFI_QUEUE_CELLS - 1)];
    if (atomic_load_explicit(&c->turn, memory_order_acquire) != q->tail + 1)
        return 0;
    *addr = c->addr;
    *len = c->len;
    atomic_store_explicit(&c->turn, q->tail + VMT_OFI_QUEUE_CELLS, memory_order_release);
    q->tail++;
    return 1;
}

void vmt_ofi_queue_wait(struct vmt_ofi_queue *q, uint32_t seen, unsigned timeout_ms)
{
    struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L};
    if (atomic_load_explicit(&q->wake, memory_order_acquire) != seen)
        return;
    syscall(SYS_futex, &q->wake, FUTEX_WAIT_PRIVATE, seen, &ts, NULL, 0);
}
