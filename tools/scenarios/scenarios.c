/* The scenarios: register a buffer through a provider, change the address space under it,
 * write new bytes at the same address, WRITE_FIXED them to a file with the index the provider
 * returns, read the file back. Old bytes: STALE. New bytes: caught. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <liburing.h>

#include "scenario.h"
#include "scn_internal.h"

#define SEED_OLD 0x01d5eedull
#define SEED_NEW 0x0e7eedull
#define SEED_CHILD 0xc41dull
#define MAP_LEN (256u * 1024)
#define MALLOC_LEN (1024u * 1024)

#define WHY(out, ...) snprintf((out)->detail, sizeof((out)->detail), __VA_ARGS__)

struct mem {
    void *addr;
    size_t len;
    void *aux;     /* mremap: where the old pages went */
    size_t auxlen;
    int kind;      /* for release */
};

enum { MEM_MMAP, MEM_MALLOC, MEM_SHM, MEM_BRK };

struct memops {
    enum scn_result (*alloc)(struct mem *m, struct scn_outcome *out);
    /* Change the address space under m->addr and bring memory back at the same address.
     * SCN_CAUGHT means "done, go on"; SCN_NA / SCN_ERROR end the scenario. */
    enum scn_result (*change)(struct mem *m, struct scn_outcome *out);
};

/* ---- the common engine -------------------------------------------------------------------- */
static int unavailable(int ret) { return ret == -ENOTSUP || ret == -ENODEV; }

static enum scn_result judge(const void *rb, size_t len, uint64_t want, uint64_t old,
                             const char *who, struct scn_outcome *out)
{
    if (scn_matches(rb, len, want))
        return SCN_CAUGHT;
    if (scn_matches(rb, len, old)) {
        WHY(out, "%sthe file got the bytes from before the change: stale registration", who);
        return SCN_STALE;
    }
    /* Changes to part of the buffer: any page with the old bytes is a stale registration. */
    const size_t pg = 4096;
    unsigned char *ref = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                              -1, 0);
    if (ref != MAP_FAILED) {
        size_t stale = 0;
        scn_fill(ref, len, old);
        for (size_t off = 0; off + pg <= len; off += pg)
            stale += memcmp((const char *)rb + off, ref + off, pg) == 0;
        munmap(ref, len);
        if (stale) {
            WHY(out, "%s%zu of %zu pages got the bytes from before the change: stale "
                "registration", who, stale, len / pg);
            return SCN_STALE;
        }
    }
    const unsigned char *b = rb;
    size_t zeros = 0;
    for (size_t i = 0; i < len; i++)
        zeros += b[i] == 0;
    WHY(out, "%sthe file got neither the new nor the old bytes (%zu of %zu bytes zero)", who,
        zeros, len);
    return SCN_ERROR;
}

/* get, WRITE_FIXED at offset 0, read back into rb, put. SCN_CAUGHT means the I/O worked
 * (the caller judges the bytes). */
static enum scn_result write_through(const struct scn_provider *p, void *ctx,
                                     struct io_uring *ring, int fd, void *addr, size_t len,
                                     void *rb, const char *when, struct scn_outcome *out)
{
    int idx = -1;
    void *tok = NULL;
    int ret = p->get(ctx, addr, len, &idx, &tok);
    if (ret == -EOPNOTSUPP && strstr(when, "before")) {
        /* Linux before 6.x (e.g. 6.1) refuses fixed buffers in file-backed memory (System V
         * shm is shmem): the device cannot take this memory at all, nothing to measure. */
        WHY(out, "this kernel's io_uring cannot register this kind of memory as a fixed buffer "
            "(%s)", strerror(-ret));
        return SCN_NA;
    }
    if (ret < 0) {
        WHY(out, "%s: %s get(%p, %zu): %s", when, p->name, addr, len, strerror(-ret));
        return SCN_ERROR;
    }
    ret = scn_write_fixed(ring, fd, addr, len, idx, 0);
    p->put(ctx, tok);
    if (ret < 0) {
        WHY(out, "%s: WRITE_FIXED with buffer index %d: %s", when, idx, strerror(-ret));
        return SCN_ERROR;
    }
    ret = scn_read_back(fd, rb, len, 0);
    if (ret < 0) {
        WHY(out, "%s: reading the file back: %s", when, strerror(-ret));
        return SCN_ERROR;
    }
    return SCN_CAUGHT;
}

struct env {
    struct io_uring ring;
    int ring_ok;
    int fd;
    void *ctx;
    void *rb;       /* read-back buffer (mmap, so that it never moves the heap) */
    size_t rblen;
};

static enum scn_result env_open(struct env *e, const struct scn_provider *p, const char *variant,
                                struct scn_outcome *out)
{
    memset(e, 0, sizeof(*e));
    e->fd = -1;
    e->rblen = 4u << 20;
    e->rb = mmap(NULL, e->rblen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (e->rb == MAP_FAILED) {
        e->rb = NULL;
        WHY(out, "mmap: %s", strerror(errno));
        return SCN_ERROR;
    }
    int ret = io_uring_queue_init(8, &e->ring, 0);
    if (ret < 0) {
        WHY(out, "io_uring_queue_init: %s", strerror(-ret));
        return unavailable(ret) || ret == -ENOSYS || ret == -EPERM ? SCN_UNAVAILABLE : SCN_ERROR;
    }
    e->ring_ok = 1;
    e->fd = scn_tmpfile();
    if (e->fd < 0) {
        WHY(out, "temporary file: %s", strerror(-e->fd));
        return SCN_ERROR;
    }
    char why[200] = "";
    ret = p->setup(&e->ctx, &e->ring, variant, why, sizeof(why));
    if (ret < 0) {
        WHY(out, "%s", why[0] ? why : strerror(-ret));
        return unavailable(ret) ? SCN_UNAVAILABLE : SCN_ERROR;
    }
    return SCN_CAUGHT;
}

static void env_close(struct env *e, const struct scn_provider *p)
{
    if (e->ctx)
        p->teardown(e->ctx);
    if (e->ring_ok)
        io_uring_queue_exit(&e->ring);
    if (e->fd >= 0)
        close(e->fd);
    if (e->rb)
        munmap(e->rb, e->rblen);
}

static enum scn_result engine(const struct scn_provider *p, const char *variant,
                              struct scn_outcome *out, const struct memops *mo)
{
    struct env e;
    enum scn_result r = env_open(&e, p, variant, out);
    struct mem m;
    memset(&m, 0, sizeof(m));
    if (r != SCN_CAUGHT)
        goto done;
    r = mo->alloc(&m, out);
    if (r != SCN_CAUGHT)
        goto done;
    scn_fill(m.addr, m.len, SEED_OLD);
    r = write_through(p, e.ctx, &e.ring, e.fd, m.addr, m.len, e.rb, "before the change", out);
    if (r != SCN_CAUGHT)
        goto done;
    if (!scn_matches(e.rb, m.len, SEED_OLD)) {
        WHY(out, "before the change: the file did not get the buffer's bytes");
        r = SCN_ERROR;
        goto done;
    }
    r = mo->change(&m, out);
    if (r != SCN_CAUGHT)
        goto done;
    scn_fill(m.addr, m.len, SEED_NEW);
    r = write_through(p, e.ctx, &e.ring, e.fd, m.addr, m.len, e.rb, "after the change", out);
    if (r != SCN_CAUGHT)
        goto done;
    r = judge(e.rb, m.len, SEED_NEW, SEED_OLD, "", out);
done:
    env_close(&e, p);
    /* The memory itself is left to the process's exit: the scenario runs in a child. */
    return r;
}

/* ---- address-space changes ---------------------------------------------------------------- */
static enum scn_result alloc_mmap(struct mem *m, struct scn_outcome *out)
{
    m->len = MAP_LEN;
    m->addr = mmap(NULL, m->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m->addr == MAP_FAILED) {
        WHY(out, "mmap: %s", strerror(errno));
        return SCN_ERROR;
    }
    return SCN_CAUGHT;
}

/* mmap at m->addr without MAP_FIXED: the hint must be honoured, else not applicable. */
static enum scn_result map_again(struct mem *m, struct scn_outcome *out)
{
    void *a = mmap(m->addr, m->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED) {
        WHY(out, "mmap again: %s", strerror(errno));
        return SCN_ERROR;
    }
    if (a != m->addr) {
        munmap(a, m->len);
        WHY(out, "the kernel did not map the same address again (%p instead of %p)", a, m->addr);
        return SCN_NA;
    }
    return SCN_CAUGHT;
}

static enum scn_result change_munmap(struct mem *m, struct scn_outcome *out)
{
    if (munmap(m->addr, m->len) < 0) {
        WHY(out, "munmap: %s", strerror(errno));
        return SCN_ERROR;
    }
    return map_again(m, out);
}

static enum scn_result change_raw_munmap(struct mem *m, struct scn_outcome *out)
{
    if (syscall(SYS_munmap, m->addr, m->len) < 0) {
        WHY(out, "syscall(SYS_munmap): %s", strerror(errno));
        return SCN_ERROR;
    }
    return map_again(m, out);
}

static enum scn_result change_mremap(struct mem *m, struct scn_outcome *out)
{
    void *dst = mmap(NULL, m->len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (dst == MAP_FAILED) {
        WHY(out, "mmap (mremap target): %s", strerror(errno));
        return SCN_ERROR;
    }
    void *r = mremap(m->addr, m->len, m->len, MREMAP_MAYMOVE | MREMAP_FIXED, dst);
    if (r == MAP_FAILED) {
        WHY(out, "mremap: %s", strerror(errno));
        return SCN_ERROR;
    }
    m->aux = r;
    m->auxlen = m->len;
    return map_again(m, out);
}

static enum scn_result change_dontneed(struct mem *m, struct scn_outcome *out)
{
    if (madvise(m->addr, m->len, MADV_DONTNEED) < 0) {
        WHY(out, "madvise(MADV_DONTNEED): %s", strerror(errno));
        return SCN_ERROR;
    }
    return SCN_CAUGHT;
}

static enum scn_result change_map_fixed(struct mem *m, struct scn_outcome *out)
{
    void *a = mmap(m->addr, m->len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (a == MAP_FAILED) {
        WHY(out, "mmap(MAP_FIXED): %s", strerror(errno));
        return SCN_ERROR;
    }
    return SCN_CAUGHT;
}

static enum scn_result alloc_malloc(struct mem *m, struct scn_outcome *out)
{
    /* A fixed threshold (this also turns off glibc's dynamic threshold, which would serve
     * the second malloc from the heap after the first free). */
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    m->len = MALLOC_LEN;
    m->addr = malloc(m->len);
    if (!m->addr) {
        WHY(out, "malloc: %s", strerror(errno));
        return SCN_ERROR;
    }
    return SCN_CAUGHT;
}

static enum scn_result change_free_malloc(struct mem *m, struct scn_outcome *out)
{
    uintptr_t old = (uintptr_t)m->addr;
    free(m->addr);
    m->addr = malloc(m->len);
    if (!m->addr) {
        WHY(out, "malloc again: %s", strerror(errno));
        return SCN_ERROR;
    }
    if ((uintptr_t)m->addr != old) {
        WHY(out, "malloc did not return the same address again (%p instead of %#lx)", m->addr,
            (unsigned long)old);
        return SCN_NA;
    }
    return SCN_CAUGHT;
}

static enum scn_result alloc_shm(struct mem *m, struct scn_outcome *out)
{
    m->len = MAP_LEN;
    int id = shmget(IPC_PRIVATE, m->len, IPC_CREAT | 0600);
    if (id < 0) {
        WHY(out, "shmget: %s (System V shared memory not usable here)", strerror(errno));
        return SCN_NA;
    }
    m->addr = shmat(id, NULL, 0);
    int e = errno;
    shmctl(id, IPC_RMID, NULL);  /* destroyed once detached */
    if (m->addr == (void *)-1) {
        WHY(out, "shmat: %s", strerror(e));
        return SCN_NA;
    }
    return SCN_CAUGHT;
}

static enum scn_result change_shm(struct mem *m, struct scn_outcome *out)
{
    if (shmdt(m->addr) < 0) {
        WHY(out, "shmdt: %s", strerror(errno));
        return SCN_ERROR;
    }
    int id = shmget(IPC_PRIVATE, m->len, IPC_CREAT | 0600);
    if (id < 0) {
        WHY(out, "shmget again: %s", strerror(errno));
        return SCN_ERROR;
    }
    void *a = shmat(id, m->addr, 0);
    int e = errno;
    shmctl(id, IPC_RMID, NULL);
    if (a == (void *)-1) {
        WHY(out, "shmat at %p again: %s", m->addr, strerror(e));
        return SCN_NA;
    }
    if (a != m->addr) {
        shmdt(a);
        WHY(out, "shmat did not attach at the same address (%p instead of %p)", a, m->addr);
        return SCN_NA;
    }
    return SCN_CAUGHT;
}

static enum scn_result alloc_brk(struct mem *m, struct scn_outcome *out)
{
    /* Keep malloc off the break while the scenario moves it: give the main arena free space
     * at its top that it will not trim, so that the provider's allocations come from there. */
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
    mallopt(M_MMAP_THRESHOLD, 16 << 20);
    void *pad = malloc(8 << 20);
    free(pad);
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    m->len = MAP_LEN;
    uintptr_t cur = (uintptr_t)sbrk(0);
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t base = (cur + pg - 1) & ~(pg - 1);
    if (sbrk((intptr_t)(base - cur + m->len)) == (void *)-1) {
        WHY(out, "sbrk: %s (no program break to grow)", strerror(errno));
        return SCN_NA;
    }
    m->addr = (void *)base;
    return SCN_CAUGHT;
}

static enum scn_result change_brk(struct mem *m, struct scn_outcome *out)
{
    char *end = (char *)m->addr + m->len;
    if (sbrk(0) != end) {
        WHY(out, "the allocator moved the program break past the buffer");
        return SCN_NA;
    }
    if (sbrk(-(intptr_t)m->len) == (void *)-1) {
        WHY(out, "sbrk shrink: %s", strerror(errno));
        return SCN_ERROR;
    }
    void *a = sbrk((intptr_t)m->len);
    if (a == (void *)-1) {
        WHY(out, "sbrk grow: %s", strerror(errno));
        return SCN_ERROR;
    }
    if (a != m->addr) {
        WHY(out, "the break did not grow back at the same address");
        return SCN_NA;
    }
    return SCN_CAUGHT;
}

/* munmap the upper half, map it again at its address: the lower half keeps its pages. */
static enum scn_result change_munmap_part(struct mem *m, struct scn_outcome *out)
{
    struct mem upper = {(char *)m->addr + m->len / 2, m->len / 2, NULL, 0, MEM_MMAP};
    if (munmap(upper.addr, upper.len) < 0) {
        WHY(out, "munmap of the upper half: %s", strerror(errno));
        return SCN_ERROR;
    }
    return map_again(&upper, out);
}

/* mremap in place: shrink to half (the upper half's pages are freed), grow back (new zero
 * pages there). No MREMAP_MAYMOVE: the addresses stay. */
static enum scn_result change_mremap_in_place(struct mem *m, struct scn_outcome *out)
{
    if (mremap(m->addr, m->len, m->len / 2, 0) != m->addr) {
        WHY(out, "mremap shrink in place: %s", strerror(errno));
        return SCN_ERROR;
    }
    if (mremap(m->addr, m->len / 2, m->len, 0) != m->addr) {
        WHY(out, "mremap grow in place: %s (the range after it was taken)", strerror(errno));
        return SCN_NA;
    }
    return SCN_CAUGHT;
}

/* A shared mapping of a memfd (tmpfs): the file, not the address space, is changed. */
static enum scn_result alloc_memfd(struct mem *m, struct scn_outcome *out)
{
    m->len = MAP_LEN;
    int fd = (int)syscall(SYS_memfd_create, "vmtrack-scenario", 0u);
    if (fd < 0) {
        WHY(out, "memfd_create: %s", strerror(errno));
        return SCN_NA;
    }
    if (ftruncate(fd, (off_t)m->len) < 0) {
        WHY(out, "ftruncate: %s", strerror(errno));
        close(fd);
        return SCN_ERROR;
    }
    m->addr = mmap(NULL, m->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    m->kind = fd;  /* kept open: the change goes through it */
    if (m->addr == MAP_FAILED) {
        WHY(out, "mmap of the memfd: %s", strerror(errno));
        return SCN_ERROR;
    }
    return SCN_CAUGHT;
}

/* Punch a hole through the file under the mapping: its pages leave the page cache, the next
 * write faults in new ones. No address-space call is made. */
static enum scn_result change_punch_hole(struct mem *m, struct scn_outcome *out)
{
    if (fallocate(m->kind, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t)m->len) < 0) {
        WHY(out, "fallocate(PUNCH_HOLE): %s", strerror(errno));
        return errno == EOPNOTSUPP ? SCN_NA : SCN_ERROR;
    }
    return SCN_CAUGHT;
}

/* A transparent-hugepage range (2 MiB aligned, MADV_HUGEPAGE), then MADV_DONTNEED over it. */
static enum scn_result alloc_thp(struct mem *m, struct scn_outcome *out)
{
    const size_t huge = 2u << 20;
    char *raw = mmap(NULL, 2 * huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
        WHY(out, "mmap: %s", strerror(errno));
        return SCN_ERROR;
    }
    m->addr = (void *)(((uintptr_t)raw + huge - 1) & ~(uintptr_t)(huge - 1));
    m->len = huge;
    if (madvise(m->addr, m->len, MADV_HUGEPAGE) < 0) {
        WHY(out, "madvise(MADV_HUGEPAGE): %s (no transparent hugepages here)", strerror(errno));
        return SCN_NA;
    }
    return SCN_CAUGHT;
}

#define ENGINE_SCENARIO(fn, alloc, change)                                                    \
    static enum scn_result fn(const struct scn_provider *p, const char *v,                    \
                              struct scn_outcome *o)                                          \
    {                                                                                         \
        static const struct memops mo = {alloc, change};                                      \
        return engine(p, v, o, &mo);                                                          \
    }

ENGINE_SCENARIO(run_munmap, alloc_mmap, change_munmap)
ENGINE_SCENARIO(run_free_malloc, alloc_malloc, change_free_malloc)
ENGINE_SCENARIO(run_mremap, alloc_mmap, change_mremap)
ENGINE_SCENARIO(run_dontneed, alloc_mmap, change_dontneed)
ENGINE_SCENARIO(run_raw_munmap, alloc_mmap, change_raw_munmap)
ENGINE_SCENARIO(run_map_fixed, alloc_mmap, change_map_fixed)
ENGINE_SCENARIO(run_shm, alloc_shm, change_shm)
ENGINE_SCENARIO(run_brk, alloc_brk, change_brk)
ENGINE_SCENARIO(run_munmap_part, alloc_mmap, change_munmap_part)
ENGINE_SCENARIO(run_mremap_in_place, alloc_mmap, change_mremap_in_place)
ENGINE_SCENARIO(run_punch_hole, alloc_memfd, change_punch_hole)
ENGINE_SCENARIO(run_thp_dontneed, alloc_thp, change_dontneed)

/* ---- fork ------------------------------------------------------------------------------- */
/* The parent registers and caches a buffer, then forks. The child, with a ring of its own,
 * writes its own bytes and must get them to its file (its own cache, not the parent's
 * registration); then the parent writes new bytes and must get them to its file (its
 * registration still maps its pages). */
static enum scn_result fork_child_part(const struct scn_provider *p, const char *variant,
                                       void *parent_ctx, struct mem *m, struct mem *held,
                                       struct scn_outcome *out)
{
    /* The buffer the parent holds a registration on: the child's copy is the child's. */
    scn_fill(held->addr, held->len, SEED_CHILD + 1);
    struct io_uring ring;
    int ret = io_uring_queue_init(8, &ring, 0);
    if (ret < 0) {
        WHY(out, "child: io_uring_queue_init: %s", strerror(-ret));
        return SCN_ERROR;
    }
    int fd = scn_tmpfile();
    if (fd < 0) {
        WHY(out, "child: temporary file: %s", strerror(-fd));
        return SCN_ERROR;
    }
    void *rb = mmap(NULL, m->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (rb == MAP_FAILED) {
        WHY(out, "child: mmap: %s", strerror(errno));
        return SCN_ERROR;
    }
    void *ctx = NULL;
    char why[200] = "";
    ret = p->fork_child ? p->fork_child(parent_ctx, &ctx, &ring, variant, why, sizeof(why))
                        : p->setup(&ctx, &ring, variant, why, sizeof(why));
    if (ret < 0) {
        WHY(out, "child: setting up the provider: %s", why[0] ? why : strerror(-ret));
        return SCN_ERROR;
    }
    scn_fill(m->addr, m->len, SEED_CHILD);
    enum scn_result r = write_through(p, ctx, &ring, fd, m->addr, m->len, rb, "child", out);
    if (r == SCN_CAUGHT)
        r = judge(rb, m->len, SEED_CHILD, SEED_OLD, "child: ", out);
    p->teardown(ctx);
    io_uring_queue_exit(&ring);
    close(fd);
    return r;
}

/* Fork; the child runs fork_child_part and sends its outcome back through a pipe into *co. */
static enum scn_result fork_and_collect(const struct scn_provider *p, const char *variant,
                                        struct env *e, struct mem *m, struct mem *h,
                                        struct scn_outcome *co, struct scn_outcome *out)
{
    int fds[2];
    if (pipe(fds) < 0) {
        WHY(out, "pipe: %s", strerror(errno));
        return SCN_ERROR;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        WHY(out, "fork: %s", strerror(errno));
        return SCN_ERROR;
    }
    if (pid == 0) {
        close(fds[0]);
        struct scn_outcome cco;
        memset(&cco, 0, sizeof(cco));
        cco.result = fork_child_part(p, variant, e->ctx, m, h, &cco);
        ssize_t w = write(fds[1], &cco, sizeof(cco));
        (void)w;
        _exit(0);
    }
    close(fds[1]);
    memset(co, 0, sizeof(*co));
    size_t got = 0;
    while (got < sizeof(*co)) {
        ssize_t n = read(fds[0], (char *)co + got, sizeof(*co) - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fds[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (got != sizeof(*co)) {
        WHY(out, "the forked child died without a result (%s %d)",
            WIFSIGNALED(st) ? "signal" : "status", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
        return SCN_ERROR;
    }
    return SCN_CAUGHT;
}

/* The parent after fork: the registration it held across the fork still maps its pages,
 * untouched by what the child wrote into its copy and by whatever the child's cache did, and
 * new bytes go through it. Releases the hold (htok). */
static enum scn_result check_held_after_fork(const struct scn_provider *p, struct env *e,
                                             const struct mem *h, int hidx, void *htok,
                                             struct scn_outcome *out)
{
    int ret = scn_write_fixed(&e->ring, e->fd, h->addr, h->len, hidx, 0);
    if (ret == 0)
        ret = scn_read_back(e->fd, e->rb, h->len, 0);
    if (ret < 0) {
        WHY(out, "parent after fork: WRITE_FIXED with the held buffer %d: %s (the child "
            "deregistered the parent's registration?)", hidx, strerror(-ret));
        p->put(e->ctx, htok);
        return SCN_ERROR;
    }
    if (!scn_matches(e->rb, h->len, SEED_OLD + 1)) {
        WHY(out, "parent after fork: the held registration %s",
            scn_matches(e->rb, h->len, SEED_CHILD + 1) ? "got the child's bytes"
                                                        : "got neither the parent's bytes nor the child's");
        p->put(e->ctx, htok);
        return SCN_ERROR;
    }
    scn_fill(h->addr, h->len, SEED_NEW + 1);
    ret = scn_write_fixed(&e->ring, e->fd, h->addr, h->len, hidx, 0);
    if (ret == 0)
        ret = scn_read_back(e->fd, e->rb, h->len, 0);
    p->put(e->ctx, htok);
    if (ret < 0 || !scn_matches(e->rb, h->len, SEED_NEW + 1)) {
        WHY(out, "parent after fork: new bytes through the held registration: %s",
            ret < 0 ? strerror(-ret) : "the file did not get them (the parent lost its pages)");
        return ret < 0 ? SCN_ERROR : SCN_STALE;
    }
    return SCN_CAUGHT;
}

static enum scn_result run_fork(const struct scn_provider *p, const char *variant,
                                struct scn_outcome *out)
{
    struct env e;
    struct mem m;
    memset(&m, 0, sizeof(m));
    enum scn_result r = env_open(&e, p, variant, out);
    if (r != SCN_CAUGHT)
        goto done;
    r = alloc_mmap(&m, out);
    if (r != SCN_CAUGHT)
        goto done;
    scn_fill(m.addr, m.len, SEED_OLD);
    r = write_through(p, e.ctx, &e.ring, e.fd, m.addr, m.len, e.rb, "before fork", out);
    if (r != SCN_CAUGHT)
        goto done;
    if (!scn_matches(e.rb, m.len, SEED_OLD)) {
        WHY(out, "before fork: the file did not get the buffer's bytes");
        r = SCN_ERROR;
        goto done;
    }
    /* A second buffer whose registration the parent holds across the fork. */
    struct mem h;
    r = alloc_mmap(&h, out);
    if (r != SCN_CAUGHT)
        goto done;
    int hidx = -1;
    void *htok = NULL;
    scn_fill(h.addr, h.len, SEED_OLD + 1);
    int ret = p->get(e.ctx, h.addr, h.len, &hidx, &htok);
    if (ret < 0) {
        WHY(out, "before fork: %s get(%p, %zu): %s", p->name, h.addr, h.len, strerror(-ret));
        r = SCN_ERROR;
        goto done;
    }
    struct scn_outcome co;
    r = fork_and_collect(p, variant, &e, &m, &h, &co, out);
    if (r != SCN_CAUGHT)
        goto done;
    r = check_held_after_fork(p, &e, &h, hidx, htok, out);
    if (r != SCN_CAUGHT)
        goto done;
    /* ...and its cached one too. */
    scn_fill(m.addr, m.len, SEED_NEW);
    r = write_through(p, e.ctx, &e.ring, e.fd, m.addr, m.len, e.rb, "parent after fork", out);
    if (r == SCN_CAUGHT)
        r = judge(e.rb, m.len, SEED_NEW, SEED_OLD, "parent after fork: ", out);
    if (co.result != SCN_CAUGHT && (r == SCN_CAUGHT || co.result == SCN_STALE)) {
        co.detail[sizeof(co.detail) - 1] = 0;
        r = co.result;
        memcpy(out->detail, co.detail, sizeof(out->detail));
    }
done:
    env_close(&e, p);
    return r;
}

const struct scn_scenario scn_scenarios[] = {
    {"munmap-mmap", "munmap, then mmap again at the address (hint, no MAP_FIXED)", run_munmap},
    {"free-malloc", "free a large block (glibc unmaps it), malloc it again", run_free_malloc},
    {"mremap-mmap", "mremap the pages away, then mmap again at the address", run_mremap},
    {"madv-dontneed", "madvise(MADV_DONTNEED): fresh zero pages at the same address",
     run_dontneed},
    {"raw-syscall-munmap", "syscall(SYS_munmap) bypassing libc, then mmap again",
     run_raw_munmap},
    {"mmap-fixed", "mmap(MAP_FIXED) new pages over the buffer", run_map_fixed},
    {"shmdt-shmat", "shmdt, then shmat a new segment at the address", run_shm},
    {"sbrk-shrink-grow", "sbrk shrink over the buffer, then grow again", run_brk},
    {"fork", "fork: the child uses its own cache; the parent's held and cached registrations "
     "keep working",
     run_fork},
    {"munmap-part", "munmap the upper half of the buffer, mmap it again there", run_munmap_part},
    {"mremap-in-place", "mremap shrink to half and grow back in place (no move)",
     run_mremap_in_place},
    {"memfd-punch-hole", "a shared memfd mapping; fallocate(PUNCH_HOLE) through the file",
     run_punch_hole},
    {"thp-dontneed", "a transparent-hugepage range, then madvise(MADV_DONTNEED)",
     run_thp_dontneed},
};
const size_t scn_scenario_count = sizeof(scn_scenarios) / sizeof(scn_scenarios[0]);
