/* Micro-benchmark of a tracker's cost on unmapping (internal; used by `vmtrack bench` and
 * test/bench_trackers). C linkage. */
#ifndef VMTRACK_COMMON_TRACKER_BENCH_H
#define VMTRACK_COMMON_TRACKER_BENCH_H

#ifdef __cplusplus
extern "C" {
#endif

/* Create a cache with `tracker` ("hooks", "uffd", "kmod", ...) and a fake device, then measure:
 *  *unwatched_ns_added: extra time of mmap+munmap (64 KiB) of memory the cache does not hold,
 *                       libc calls with the tracker active minus raw system calls (median of
 *                       41 interleaved pairs of 100-call batches);
 *  *watched_ns:         time of munmap of a populated 64 KiB range the cache holds (registered,
 *                       put), median of 201; tracker "none" gives the plain munmap baseline.
 * Returns 0 or a negative errno (the tracker is not available here). Takes ~0.1-1 s. */
int vmt_bench_tracker_unmap(const char *tracker, double *unwatched_ns_added, double *watched_ns);

#ifdef __cplusplus
}
#endif
#endif
