/* Figures of the bpf tracker (printed, not judged; test/bpf/check-bpf.sh makes the ratios):
 *   bpf_bench hit TRACKER N       ns per hit (vmt_get + vmt_put of a cached 64 KiB range)
 *   bpf_bench munmap plain|use N  median ns of munmap of a populated 64 KiB range; "use": the
 *                                 process has a bpf cache watching 64 other ranges (every
 *                                 zap scans them and matches none)
 * Each prints one line "NAME VALUE". Exit 77 if the tracker is not available. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <vmtrack.h>

#include "../../bench/null_device.h"

struct bench_cache {
	struct vmt_cache *cache;
	struct vmt_device *dev;
};

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static char *map_touched(size_t len)
{
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED) {
		perror("bpf_bench: mmap");
		exit(1);
	}
	memset(p, 1, len);
	return p;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static int open_cache(const char *tracker, struct bench_cache *f)
{
	static struct vmt_device_ops ops;
	struct vmt_cache_opts o;
	int rc;

	memset(&o, 0, sizeof(o));
	o.sz = sizeof(o);
	o.tracker = tracker;
	rc = vmt_cache_create(&o, &f->cache);
	if (rc) {
		printf("SKIP: bpf_bench: tracker %s: %s\n", tracker, strerror(-rc));
		return 77;
	}
	memset(&ops, 0, sizeof(ops));
	ops.sz = sizeof(ops);
	ops.name = "null";
	ops.reg = null_reg;
	ops.dereg = null_dereg;
	rc = vmt_device_attach(f->cache, &ops, NULL, &f->dev);
	if (rc) {
		printf("bpf_bench: vmt_device_attach: %s\n", strerror(-rc));
		return 1;
	}
	return 0;
}

static void close_cache(struct bench_cache *f)
{
	vmt_device_detach(f->dev);
	vmt_cache_destroy(f->cache);
}

static int bench_hit(const char *tracker, long n)
{
	struct bench_cache f;
	struct vmt_reg *r;
	double t0, best = 0;
	char *buf = map_touched(64 << 10);
	int round, rc = open_cache(tracker, &f);
	long i;

	if (rc)
		return rc;
	for (round = 0; round < 5; round++) {
		t0 = now_ns();
		for (i = 0; i < n; i++) {
			if (vmt_get(f.dev, buf, 64 << 10, VMT_ACCESS_READ, &r))
				return 1;
			vmt_put(r);
		}
		t0 = (now_ns() - t0) / (double)n;
		if (round == 0 || t0 < best)
			best = t0;
	}
	{
		struct vmt_stats st;

		memset(&st, 0, sizeof(st));
		st.sz = sizeof(st);
		vmt_stats_get(f.cache, &st);
		printf("hit_%s_ns %.1f (hits %llu, of them memo %llu, registrations %llu)\n",
		       tracker, best, (unsigned long long)st.hits,
		       (unsigned long long)st.memo_hits, (unsigned long long)st.registrations);
	}
	close_cache(&f);
	return 0;
}

static int bench_munmap(int use, long n)
{
	struct bench_cache f;
	double *t = calloc((size_t)n, sizeof(*t));
	char *watched = NULL;
	long i;

	if (!t)
		return 1;
	if (use) {
		int rc = open_cache("bpf", &f);

		if (rc)
			return rc;
		watched = map_touched(128 * 4096);
		for (i = 0; i < 64; i++) {	/* every other page: 64 entries, 64 slots */
			struct vmt_reg *r;

			if (vmt_get(f.dev, watched + 2 * i * 4096, 4096, VMT_ACCESS_READ, &r))
				return 1;
			vmt_put(r);
		}
	}
	for (i = 0; i < n; i++) {
		char *p = mmap(NULL, 64 << 10, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
		double t0;

		if (p == MAP_FAILED)
			return 1;
		t0 = now_ns();
		munmap(p, 64 << 10);
		t[i] = now_ns() - t0;
	}
	qsort(t, (size_t)n, sizeof(*t), cmp_double);
	printf("munmap64k_%s_ns %.0f\n", use ? "use" : "plain", t[n / 2]);
	if (use)
		close_cache(&f);
	free(t);
	return 0;
}

int main(int argc, char **argv)
{
	long n = argc > 3 ? atol(argv[3]) : 0;

	if (argc != 4 || n < 1) {
		fprintf(stderr, "usage: bpf_bench hit TRACKER N | munmap plain|use N\n");
		return 2;
	}
	if (!strcmp(argv[1], "hit"))
		return bench_hit(argv[2], n);
	if (!strcmp(argv[1], "munmap"))
		return bench_munmap(!strcmp(argv[2], "use"), n);
	fprintf(stderr, "usage: bpf_bench hit TRACKER N | munmap plain|use N\n");
	return 2;
}
