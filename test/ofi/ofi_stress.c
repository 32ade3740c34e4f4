/* Unmaps racing fi_mr_reg. Each round has two phases:
 *   race   a thread unmaps and maps again (libc, or the raw system call) the slots while this
 *          thread registers them through fi_mr_reg + fi_close as fast as it can (it never
 *          touches the memory, so a hole only makes fi_mr_reg fail);
 *   check  with the address space quiet, every slot gets new bytes, is registered (a hit if
 *          the race left an entry cached) and written into the target: anything but the new
 *          bytes means a registration cached during the race outlived its pages.
 *
 * Two races. "fenced": a slot is never remapped while an fi_mr_reg of that slot runs (a lock
 * per slot), so every remap meets an entry that is cached or not there at all: what any
 * monitor is told about, asserted for every monitor that claims the change. "open": no lock,
 * so a remap may also fall between the provider's ibv_reg_mr and libfabric's subscribe, a
 * window libfabric 1.17 leaves to every monitor and vmtrack's closes (arms.h, doc/ofi.md):
 * asserted for vmtrack's monitor, shown for libfabric's own. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "ofi_rig.h"
#include "ofi_suite.h"

#define SLOTS 8
#define SLOT (64u << 10)
#define RACE_MS 150

struct stress {
    char *base;
    int raw, fenced;
    pthread_mutex_t slot_lock[SLOTS];
    _Atomic int stop;
    unsigned long remaps;
};

static void remap(struct stress *s, unsigned k)
{
    char *p = s->base + (size_t)k * SLOT;
    int prot = PROT_READ | PROT_WRITE, flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED;
    if (s->raw) {   /* neither call through libc: no hook can see them */
        syscall(SYS_munmap, p, SLOT);
        syscall(SYS_mmap, p, SLOT, prot, flags, -1, 0);
    } else {
        munmap(p, SLOT);
        mmap(p, SLOT, prot, flags, -1, 0);
    }
}

static void *mutator(void *arg)
{
    struct stress *s = arg;
    unsigned k = 0;
    while (!atomic_load(&s->stop)) {
        unsigned slot = k++ % SLOTS;
        if (s->fenced && pthread_mutex_trylock(&s->slot_lock[slot]))
            continue;   /* being registered: another slot */
        remap(s, slot);
        if (s->fenced)
            pthread_mutex_unlock(&s->slot_lock[slot]);
        s->remaps++;
    }
    return NULL;
}

static long now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void reg_slot(struct ofi_rig *r, struct stress *s, unsigned slot)
{
    if (s->fenced)
        pthread_mutex_lock(&s->slot_lock[slot]);
    rig_reg(r, s->base + (size_t)slot * SLOT, SLOT);
    if (s->fenced)
        pthread_mutex_unlock(&s->slot_lock[slot]);
}

int ofi_stress_run(struct ofi_rig *r, unsigned rounds, int raw, int fenced)
{
    struct stress s = {.raw = raw, .fenced = fenced};
    for (unsigned k = 0; k < SLOTS; k++)
        pthread_mutex_init(&s.slot_lock[k], NULL);
    s.base = mmap(NULL, SLOTS * SLOT, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    unsigned long regs = 0, writes = 0, wrong = 0, errors = 0;
    for (unsigned round = 0; round < rounds; round++) {
        pthread_t t;
        atomic_store(&s.stop, 0);
        pthread_create(&t, NULL, mutator, &s);
        long end = now_ms() + RACE_MS;
        for (unsigned k = 0; now_ms() < end; k++, regs++)
            reg_slot(r, &s, k % SLOTS);
        atomic_store(&s.stop, 1);
        pthread_join(t, NULL);
        for (unsigned k = 0; k < SLOTS; k++) {
            char *p = s.base + (size_t)k * SLOT;
            unsigned pattern = 1000 + round * SLOTS + k;
            rig_fill(p, SLOT, pattern);
            if (rig_put(r, p, SLOT)) {
                errors++;
                continue;
            }
            writes++;
            wrong += !rig_holds(r->target, SLOT, pattern);
        }
    }
    printf("RESULT stress-%s %s writes %lu wrong %lu errors %lu remaps %lu regs %lu\n",
           fenced ? "fenced" : "open", raw ? "raw" : "libc", writes, wrong, errors, s.remaps, regs);
    fflush(stdout);
    return 0;   /* the slots stay mapped: a stale entry left on them must not meet later tests */
}
