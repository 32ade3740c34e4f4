/* A program that knows vmtrack only through its installed headers and `pkg-config vmtrack`:
 * it registers a buffer as an io_uring fixed buffer through the shared cache and checks that
 * a second get of the same range is served from the cache (the installed library works, not
 * just links). Exit 77 with the reason when this kernel has no io_uring. */
#include <errno.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vmtrack.h>
#include <vmtrack/iouring.h>
#include <vmtrack/verbs.h>

int main(void)
{
	struct vmt_cache *cache = vmt_shared();
	struct io_uring ring;
	struct vmt_device *dev;
	struct vmt_reg *a, *b;
	static char buf[1 << 16];
	int rc;

	if (!cache) {
		fprintf(stderr, "consumer: vmt_shared: %s\n", strerror(errno));
		return 1;
	}
	printf("consumer: vmtrack %s, tracker %s\n", vmt_version(), vmt_cache_tracker(cache));
	rc = io_uring_queue_init(4, &ring, 0);
	if (rc < 0) {
		printf("SKIP: consumer: no io_uring here (%s)\n", strerror(-rc));
		return 77;
	}
	rc = vmt_iouring_attach(cache, &ring, 16, &dev);
	if (rc < 0) {
		printf("SKIP: consumer: io_uring device unavailable (%s)\n", vmt_strerror(rc));
		return 77;
	}
	if (vmt_get(dev, buf, sizeof(buf), VMT_ACCESS_READ, &a) ||
	    vmt_get(dev, buf, sizeof(buf), VMT_ACCESS_READ, &b)) {
		fprintf(stderr, "consumer: vmt_get failed\n");
		return 1;
	}
	if (a != b || vmt_iouring_index(a) < 0) {
		fprintf(stderr, "consumer: the second get was not the cached registration\n");
		return 1;
	}
	printf("consumer: PASS (fixed buffer %d served twice)\n", vmt_iouring_index(a));
	vmt_put(b);
	vmt_put(a);
	vmt_iouring_detach(dev);
	io_uring_queue_exit(&ring);
	return 0;
}
