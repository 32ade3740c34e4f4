/* Costs of /dev/vmtrack, printed as figures (not a pass/fail test):
 *   watch + unwatch per range, munmap of a watched vs an unwatched range, kernel memory per
 *   watched range, and the validity check (one load) against nothing.
 * Usage: kmod_bench [N]   (N watches for the memory figure, default 100000) */
#define _GNU_SOURCE
#include <time.h>

#include "kmod_util.h"

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* A /proc/meminfo counter in kB ("Slab" grows by the watch objects and the index). */
static long meminfo_kb(const char *key)
{
	char line[256];
	long v = -1;
	size_t kl = strlen(key);
	FILE *f = fopen("/proc/meminfo", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, kl) && line[kl] == ':') {
			v = atol(line + kl + 1);
			break;
		}
	fclose(f);
	return v;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void drain(struct vt *v)
{
	struct vmtrack_event ev[64];

	while (read(v->fd, ev, sizeof(ev)) > 0)
		;
}

/* watch + unwatch of one page, R times; ns per pair */
static int bench_watch_pairs(struct vt *v, char *buf, long pg, int r, double *ns)
{
	double t0 = now_ns();
	int i;

	for (i = 0; i < r; i++) {
		struct vmtrack_watch x;

		if (vt_watch(v, buf + (i % 64) * pg, pg, i, &x) || vt_unwatch(v, x.handle)) {
			perror("watch/unwatch");
			return -1;
		}
	}
	*ns = (now_ns() - t0) / r;
	return 0;
}

/* munmap of a 64 KiB populated range, watched and unwatched alternately (so that drift of an
 * emulated or loaded machine hits both the same); prints the medians */
static int bench_munmap(struct vt *v, long pg, int u)
{
	size_t len = 16 * pg;
	double *tw = calloc(u, sizeof(double)), *tu = calloc(u, sizeof(double));
	double t0;
	int i;

	if (!tw || !tu)
		return -1;
	for (i = 0; i < u; i++) {
		char *a = vt_map(len), *b = vt_map(len), *c = vt_map(pg);
		struct vmtrack_watch x;

		if (!a || !b || !c || vt_watch(v, a, len, i, &x)) {
			perror("map/watch");
			return -1;
		}
		/* an untimed munmap first: under TCG the first one after another system call
		 * pays for re-warming the emulator */
		munmap(c, pg);
		/* alternate which one goes first */
		if (i & 1) {
			t0 = now_ns();
			munmap(a, len);
			tw[i] = now_ns() - t0;
		}
		t0 = now_ns();
		munmap(b, len);
		tu[i] = now_ns() - t0;
		if (!(i & 1)) {
			t0 = now_ns();
			munmap(a, len);
			tw[i] = now_ns() - t0;
		}
		vt_unwatch(v, x.handle);
		if (i % 32 == 31)
			drain(v);
	}
	qsort(tw, u, sizeof(double), cmp_double);
	qsort(tu, u, sizeof(double), cmp_double);
	printf("munmap of 64 KiB (median of %d): unwatched %.0f ns, watched %.0f ns (%+.0f ns)\n",
	       u, tu[u / 2], tw[u / 2], tw[u / 2] - tu[u / 2]);
	free(tw);
	free(tu);
	drain(v);
	return 0;
}

/* the hit check: one load and a compare, against no check */
static void bench_valid(struct vt *v, char *buf, long pg, struct vmtrack_watch *w)
{
	volatile uint32_t sink = 0;
	const long H = 20000000;
	double t0, t;

	vt_watch(v, buf, pg, 1, w);
	t0 = now_ns();
	for (long k = 0; k < H; k++)
		sink += vt_valid(v, w);
	t = (now_ns() - t0) / H;
	t0 = now_ns();
	for (long k = 0; k < H; k++)
		sink += 1;
	printf("validity check: %.2f ns (loop without it: %.2f ns)\n", t, (now_ns() - t0) / H);
	(void)sink;	/* written only so that neither loop is optimised away */
	vt_unwatch(v, w->handle);
}

/* kernel memory per watched range, with n watches (fewer if the module refuses more) */
static int bench_memory(struct vt *v, char *buf, long pg, struct vmtrack_watch *w, int n)
{
	long slab0, slab1;
	int i;

	drain(v);
	sync();
	slab0 = meminfo_kb("Slab");
	for (i = 0; i < n; i++)
		if (vt_watch(v, buf + (i % 64) * pg, pg, i, &w[i])) {
			fprintf(stderr, "watch %d: %s\n", i, strerror(errno));
			n = i;
			break;
		}
	slab1 = meminfo_kb("Slab");
	printf("memory per watched range (%d watches): %.0f bytes of slab (watch object and "
	       "index) + 4 bytes of word page\n", n, (slab1 - slab0) * 1024.0 / n);
	return n;
}

int main(int argc, char **argv)
{
	long pg = vt_page();
	int n = argc > 1 ? atoi(argv[1]) : 100000;
	enum { R = 2000, U = 400 };
	struct vt v;
	struct vmtrack_watch *w;
	char *buf;
	double t0, t;
	int i, r;

	vt_require_device("kmod_bench");
	if (n < 1000)
		n = 1000;
	r = vt_open(&v);
	if (r) {
		fprintf(stderr, "kmod_bench: %s: %s\n", VMTRACK_DEVICE, strerror(-r));
		return 1;
	}
	if ((unsigned)n > v.info.max_watches)
		n = v.info.max_watches;
	w = calloc(n, sizeof(*w));
	buf = vt_map(64 * pg);
	if (!w || !buf)
		return 1;
	printf("module %s, abi %u, max_watches %u, max_events %u, watch struct %llu bytes\n",
	       v.info.version, v.info.abi_version, v.info.max_watches, v.info.max_events,
	       (unsigned long long)v.info.watch_bytes);

	/* warm up (the first watch of an mm registers the notifier subscription) */
	vt_watch(&v, buf, pg, 0, &w[0]);
	vt_unwatch(&v, w[0].handle);

	if (bench_watch_pairs(&v, buf, pg, R, &t))
		return 1;
	printf("watch+unwatch (empty file): %.0f ns per range\n", t);
	/* with many watches in place */
	for (i = 0; i < 10000 && i < n; i++)
		vt_watch(&v, buf + (i % 64) * pg, pg, i, &w[i]);
	if (bench_watch_pairs(&v, buf, pg, R, &t))
		return 1;
	printf("watch+unwatch (10000 watched): %.0f ns per range\n", t);
	for (i = 0; i < 10000 && i < n; i++)
		vt_unwatch(&v, w[i].handle);

	if (bench_munmap(&v, pg, U))
		return 1;
	bench_valid(&v, buf, pg, &w[0]);
	n = bench_memory(&v, buf, pg, w, n);
	t0 = now_ns();
	vt_close(&v);
	printf("close with %d watches: %.1f ms\n", n, (now_ns() - t0) / 1e6);
	return 0;
}
