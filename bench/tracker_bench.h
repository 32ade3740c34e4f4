/* Micro-benchmark of a tracker's cost on unmapping and on a miss, through the public API (used by
 * `vmtrack bench`, `vmtrack info --measure` and bench/bench_trackers). Not part of libvmtrack. */
#ifndef VMTRACK_COMMON_TRACKER_BENCH_H
#define VMTRACK_COMMON_TRACKER_BENCH_H

#ifdef __cplusplus
extern "C" {
#endif

/* What a tracker adds to unmapping, measured by vmtrack_bench_tracker_unmap. */
struct vmtrack_tracker_unmap_cost {
    /* mmap+munmap (64 KiB) of memory the cache does not hold: libc calls with the tracker
     * active minus raw system calls, median of 41 interleaved pairs of 100-call batches. The
     * kernel's own mmap/munmap (~4 us in a VM) makes this noisy: +-200 ns between runs. */
    double pair_added_ns;
    /* The same difference for munmap of a range where nothing is mapped, which the kernel
     * answers at once: the tracker's own work per unmap (its hook and the cache's invalidation
     * of the range), with little noise. -1 if no range could be reserved for it. */
    double hook_added_ns;
    /* munmap of a populated 64 KiB range the cache holds (registered, put), median of 201;
     * tracker "none" gives the plain munmap baseline. */
    double watched_ns;
    /* vmt_get of a populated 64 KiB range not cached yet, with a device that registers nothing
     * (the cache's miss path and the tracker's watch), median of the same 201 rounds. */
    double miss_ns;
};

/* Creates a cache with `tracker` ("hooks", "uffd", "kmod", ...) and a fake device, and measures.
 * Returns 0 or a negative errno (the tracker is not available here). Takes ~0.1-1 s. */
int vmtrack_bench_tracker_unmap(const char *tracker, struct vmtrack_tracker_unmap_cost *cost);

#ifdef __cplusplus
}
#endif
#endif
