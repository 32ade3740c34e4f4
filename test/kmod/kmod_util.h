/* Helpers for the tests and benchmark of /dev/vmtrack (kmod/uapi/vmtrack_kmod.h). */
#ifndef VMTRACK_TEST_KMOD_UTIL_H
#define VMTRACK_TEST_KMOD_UTIL_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "vmtrack_kmod.h"
#include "../lib/skip.h"

struct vt {
	int fd;
	const volatile uint32_t *w;	/* the mapped words */
	size_t map_bytes;
	struct vmtrack_info info;
};

/* Exit VMT_TEST_SKIP (skipped under Automake) with the reason when the device is not there. */
static inline void vt_require_device(const char *prog)
{
	if (access(VMTRACK_DEVICE, R_OK) != 0) {
		printf("SKIP: %s: %s not present (%s): load vmtrack.ko, e.g. run under "
		       "test/vm/run\n", prog, VMTRACK_DEVICE, strerror(errno));
		exit(VMT_TEST_SKIP);
	}
}

static inline int vt_open(struct vt *v)
{
	void *p;

	memset(v, 0, sizeof(*v));
	v->fd = open(VMTRACK_DEVICE, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (v->fd < 0)
		return -errno;
	if (ioctl(v->fd, VMTRACK_IOC_INFO, &v->info) != 0) {
		int e = -errno;
		close(v->fd);
		return e;
	}
	p = mmap(NULL, v->info.map_bytes, PROT_READ, MAP_SHARED, v->fd, 0);
	if (p == MAP_FAILED) {
		int e = -errno;
		close(v->fd);
		return e;
	}
	v->w = p;
	v->map_bytes = v->info.map_bytes;
	return 0;
}

static inline void vt_close(struct vt *v)
{
	if (v->w)
		munmap((void *)v->w, v->map_bytes);
	if (v->fd >= 0)
		close(v->fd);
	v->w = NULL;
	v->fd = -1;
}

static inline int vt_watch(struct vt *v, const void *addr, size_t len, uint64_t cookie,
			   struct vmtrack_watch *out)
{
	struct vmtrack_watch a;

	memset(&a, 0, sizeof(a));
	if (out)
		memset(out, 0, sizeof(*out));
	a.start = (uintptr_t)addr;
	a.len = len;
	a.cookie = cookie;
	if (ioctl(v->fd, VMTRACK_IOC_WATCH, &a) != 0)
		return -errno;
	if (out)
		*out = a;
	return 0;
}

static inline int vt_unwatch(struct vt *v, uint64_t handle)
{
	struct vmtrack_unwatch a;

	memset(&a, 0, sizeof(a));
	a.handle = handle;
	return ioctl(v->fd, VMTRACK_IOC_UNWATCH, &a) != 0 ? -errno : 0;
}

/* Still valid: the word of the watch is what WATCH returned. */
static inline int vt_valid(const struct vt *v, const struct vmtrack_watch *w)
{
	return v->w[w->index] == w->gen;
}

static inline long vt_page(void)
{
	return sysconf(_SC_PAGESIZE);
}

static inline void *vt_map(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	memset(p, 0x5a, len);	/* populate */
	return p;
}

#endif
