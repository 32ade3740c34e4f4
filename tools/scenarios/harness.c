/* The scenario harness: run a scenario in a forked child with a timeout, result names, which
 * scenarios vmtrack's trackers claim to catch, and a fixed-buffer table helper for providers
 * that manage their own table (Open MPI, UCX). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <liburing.h>

#include "scenario.h"
#include "scn_internal.h"

const char *scn_result_name(enum scn_result r)
{
    switch (r) {
    case SCN_CAUGHT: return "caught";
    case SCN_STALE: return "STALE";
    case SCN_NA: return "n/a";
    case SCN_ERROR: return "ERROR";
    case SCN_UNAVAILABLE: return "unavailable";
    case SCN_CRASH: return "CRASH";
    }
    return "?";
}

const struct scn_scenario *scn_find(const char *name)
{
    for (size_t i = 0; i < scn_scenario_count; i++)
        if (strcmp(scn_scenarios[i].name, name) == 0)
            return &scn_scenarios[i];
    if (strcmp(name, scn_stress_scenario.name) == 0)
        return &scn_stress_scenario;
    return NULL;
}

int scn_vmtrack_claims(const char *tracker, const char *scenario)
{
    if (!tracker || !scenario)
        return 0;
    if (!strcmp(tracker, "none"))
        return 0;
    /* A change made through a file, not through the address space: only the kernel sees it
     * (hooks see no call; userfaultfd reports no event for it). */
    int through_file = !strcmp(scenario, "memfd-punch-hole");
    if (!strcmp(tracker, "hooks"))
        return strcmp(scenario, "raw-syscall-munmap") != 0 && !through_file;
    if (!strcmp(tracker, "uffd"))
        return !through_file;
    /* kmod, bpf (the kernel's own paths), pass (caches nothing): every scenario */
    return !strcmp(tracker, "kmod") || !strcmp(tracker, "bpf") || !strcmp(tracker, "pass");
}

static long elapsed_ms(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

/* Wait for pid with a deadline; SIGKILL it when the deadline passes. Returns the wait status,
 * or -1 if it had to be killed. */
static int wait_deadline(pid_t pid, const struct timespec *t0, long timeout_ms)
{
    int status;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            return status;
        if (r < 0 && errno != EINTR)
            return 0;
        if (elapsed_ms(t0) > timeout_ms) {
            kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
            return -1;
        }
        usleep(2000);
    }
}

int scn_run(const struct scn_scenario *s, const struct scn_provider *p, const char *variant,
            unsigned timeout_ms, struct scn_outcome *out)
{
    if (!s || !p || !out)
        return -EINVAL;
    long tmo = timeout_ms ? (long)timeout_ms : 20000;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0)
        return -errno;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(fds[0]);
        close(fds[1]);
        return -e;
    }
    if (pid == 0) {
        close(fds[0]);
        struct scn_outcome o;
        memset(&o, 0, sizeof(o));
        o.result = s->run(p, variant, &o);
        ssize_t w = write(fds[1], &o, sizeof(o));
        (void)w;
        _exit(0);
    }
    close(fds[1]);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    memset(out, 0, sizeof(*out));
    size_t got = 0;
    int timed_out = 0;
    while (got < sizeof(*out)) {
        long left = tmo - elapsed_ms(&t0);
        if (left <= 0) {
            timed_out = 1;
            break;
        }
        struct pollfd pfd = {fds[0], POLLIN, 0};
        int r = poll(&pfd, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0) {
            timed_out = 1;
            break;
        }
        ssize_t n = read(fds[0], (char *)out + got, sizeof(*out) - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;  /* the child died without a result */
        got += (size_t)n;
    }
    close(fds[0]);
    if (timed_out) {
        kill(pid, SIGKILL);
        int st;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        out->result = SCN_CRASH;
        snprintf(out->detail, sizeof(out->detail), "timed out after %ld ms (killed)", tmo);
        return 0;
    }
    /* Give the child a little time to exit after reporting (trackers shut down). */
    int status = wait_deadline(pid, &t0, tmo + 5000);
    if (got == sizeof(*out)) {
        out->detail[sizeof(out->detail) - 1] = 0;
        if (status != -1 && WIFSIGNALED(status) && out->result == SCN_CAUGHT) {
            out->result = SCN_CRASH;
            snprintf(out->detail, sizeof(out->detail), "caught, then killed by signal %d (%s)",
                     WTERMSIG(status), strsignal(WTERMSIG(status)));
        }
        return 0;
    }
    out->result = SCN_CRASH;
    if (status == -1)
        snprintf(out->detail, sizeof(out->detail), "did not exit (killed)");
    else if (WIFSIGNALED(status))
        snprintf(out->detail, sizeof(out->detail), "killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(out->detail, sizeof(out->detail), "exited with status %d and no result",
                 WEXITSTATUS(status));
    return 0;
}

/* ---- fixed-buffer table for providers that manage their own ---------------------------- */
struct scn_ring_table {
    struct io_uring *ring;
    unsigned slots;
    pthread_mutex_t mu;
    unsigned nfree;
    int *free_slots;
};

int scn_ring_table_create(struct io_uring *ring, unsigned slots, struct scn_ring_table **out)
{
    if (!ring || !out || slots == 0 || slots > 16384)
        return -EINVAL;
    struct scn_ring_table *t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    t->free_slots = calloc(slots, sizeof(int));
    if (!t->free_slots) {
        free(t);
        return -ENOMEM;
    }
    int ret = io_uring_register_buffers_sparse(ring, slots);
    if (ret < 0) {
        free(t->free_slots);
        free(t);
        return ret;
    }
    t->ring = ring;
    t->slots = slots;
    pthread_mutex_init(&t->mu, NULL);
    for (unsigned i = 0; i < slots; i++)
        t->free_slots[i] = (int)(slots - 1 - i);
    t->nfree = slots;
    *out = t;
    return 0;
}

void scn_ring_table_destroy(struct scn_ring_table *t)
{
    if (!t)
        return;
    io_uring_unregister_buffers(t->ring);
    pthread_mutex_destroy(&t->mu);
    free(t->free_slots);
    free(t);
}

int scn_ring_slot_reg(struct scn_ring_table *t, void *addr, size_t len, int *slot)
{
    if (!t || !addr || !len || !slot)
        return -EINVAL;
    pthread_mutex_lock(&t->mu);
    if (t->nfree == 0) {
        pthread_mutex_unlock(&t->mu);
        return -ENOSPC;
    }
    int s = t->free_slots[--t->nfree];
    pthread_mutex_unlock(&t->mu);
    struct iovec iov = {addr, len};
    __u64 tag = 0;
    int ret = io_uring_register_buffers_update_tag(t->ring, (unsigned)s, &iov, &tag, 1);
    if (ret != 1) {
        pthread_mutex_lock(&t->mu);
        t->free_slots[t->nfree++] = s;
        pthread_mutex_unlock(&t->mu);
        return ret < 0 ? ret : -EIO;
    }
    *slot = s;
    return 0;
}

void scn_ring_slot_dereg(struct scn_ring_table *t, int slot)
{
    if (!t || slot < 0 || (unsigned)slot >= t->slots)
        return;
    struct iovec iov = {NULL, 0};
    __u64 tag = 0;
    if (io_uring_register_buffers_update_tag(t->ring, (unsigned)slot, &iov, &tag, 1) != 1)
        return;
    pthread_mutex_lock(&t->mu);
    t->free_slots[t->nfree++] = slot;
    pthread_mutex_unlock(&t->mu);
}

/* ---- I/O helpers shared by the scenarios and the stress -------------------------------- */
void scn_fill(void *buf, size_t len, uint64_t seed)
{
    unsigned char *b = buf;
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < len; i++) {
        if ((i & 7) == 0) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        b[i] = (unsigned char)(x >> ((i & 7) * 8));
    }
}

int scn_matches(const void *buf, size_t len, uint64_t seed)
{
    const unsigned char *b = buf;
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < len; i++) {
        if ((i & 7) == 0) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        if (b[i] != (unsigned char)(x >> ((i & 7) * 8)))
            return 0;
    }
    return 1;
}

int scn_tmpfile(void)
{
    const char *dir = getenv("TMPDIR");
    char path[512];
    snprintf(path, sizeof(path), "%s/vmtrack-scn-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0)
        return -errno;
    unlink(path);
    return fd;
}

int scn_write_fixed(struct io_uring *ring, int fd, const void *buf, size_t len, int index,
                    off_t off)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
    if (!sqe)
        return -EBUSY;
    io_uring_prep_write_fixed(sqe, fd, buf, (unsigned)len, off, index);
    int ret = io_uring_submit(ring);
    if (ret < 0)
        return ret;
    struct io_uring_cqe *cqe;
    do
        ret = io_uring_wait_cqe(ring, &cqe);
    while (ret == -EINTR);
    if (ret < 0)
        return ret;
    ret = cqe->res;
    io_uring_cqe_seen(ring, cqe);
    if (ret >= 0 && (size_t)ret != len)
        return -EIO;
    return ret < 0 ? ret : 0;
}

int scn_read_back(int fd, void *buf, size_t len, off_t off)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = pread(fd, (char *)buf + got, len - got, off + (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? -errno : -EIO;
        got += (size_t)n;
    }
    return 0;
}
