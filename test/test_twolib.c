/* Two separately built shared libraries, loaded with dlopen, each call vmt_shared(), attach the
 * same ring and register the same buffer: one device, one registration, one fixed index. */
#define _GNU_SOURCE
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <liburing.h>
#include <vmtrack.h>
#include <vmtrack/iouring.h>
#include "lib/vmt_test.h"

#ifndef TWOLIB_DIR
#error "TWOLIB_DIR must be defined"
#endif

typedef int (*register_fn)(struct io_uring *, void *, size_t, struct vmt_device **,
                           struct vmt_reg **, int *);
typedef void (*release_fn)(struct vmt_device *, struct vmt_reg *);
typedef const char *(*name_fn)(void);

struct lib {
    void *h;
    register_fn reg;
    release_fn rel;
};

static void load(struct lib *l, const char *file, const char *want)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", TWOLIB_DIR, file);
    l->h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(l->h != NULL, "dlopen %s: %s", path, dlerror());
    l->reg = (register_fn)dlsym(l->h, "twolib_register");
    l->rel = (release_fn)dlsym(l->h, "twolib_release");
    name_fn name = (name_fn)dlsym(l->h, "twolib_name");
    ck_assert_ptr_nonnull(l->reg);
    ck_assert_ptr_nonnull(l->rel);
    ck_assert_ptr_nonnull(name);
    ck_assert_str_eq(name(), want);
}

START_TEST(two_libraries_one_registration)
{
    struct lib a, b;
    load(&a, "libtwolib_a.so", "a");
    load(&b, "libtwolib_b.so", "b");
    ck_assert_ptr_ne(a.reg, b.reg);  /* really two libraries */

    struct io_uring ring;
    ck_assert_int_eq(io_uring_queue_init(8, &ring, 0), 0);
    size_t len = 192 * 1024;
    unsigned char *buf = map_anon(len);
    for (size_t i = 0; i < len; i++)
        buf[i] = (unsigned char)(i * 13 + 1);

    struct vmt_device *da, *db;
    struct vmt_reg *ra, *rb;
    int ia = -1, ib = -1;
    int ret = a.reg(&ring, buf, len, &da, &ra, &ia);
    ck_assert_msg(ret == 0, "library a: %s", strerror(-ret));
    ret = b.reg(&ring, buf, len, &db, &rb, &ib);
    ck_assert_msg(ret == 0, "library b: %s", strerror(-ret));

    ck_assert_ptr_eq(da, db);
    ck_assert_int_ge(ia, 0);
    ck_assert_int_eq(ia, ib);
    struct vmt_stats s = stats_of(vmt_shared());
    ck_assert_uint_eq(s.registrations, 1);
    ck_assert_uint_eq(s.entries, 1);

    /* The shared index really names the buffer. */
    char path[] = "/tmp/vmtrack-test-twolib-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
    io_uring_prep_write_fixed(sqe, fd, buf, (unsigned)len, 0, ia);
    ck_assert_int_eq(io_uring_submit(&ring), 1);
    struct io_uring_cqe *cqe;
    ck_assert_int_eq(io_uring_wait_cqe(&ring, &cqe), 0);
    ck_assert_int_eq(cqe->res, (int)len);
    io_uring_cqe_seen(&ring, cqe);
    unsigned char *back = malloc(len);
    ck_assert_int_eq(pread(fd, back, len, 0), (ssize_t)len);
    ck_assert(memcmp(back, buf, len) == 0);
    free(back);
    close(fd);

    a.rel(da, ra);
    b.rel(db, rb);
    /* Both attachments gone: the ring has no vmtrack table any more. */
    struct iovec iov = {buf, len};
    ck_assert_int_eq(io_uring_register_buffers(&ring, &iov, 1), 0);
    io_uring_unregister_buffers(&ring);
    io_uring_queue_exit(&ring);
    munmap(buf, len);
    dlclose(a.h);
    dlclose(b.h);
}
END_TEST

int main(void)
{
    int rc = skip_unless_iouring("test_twolib");
    if (rc)
        return rc;
    /* Cache what is registered whatever trackers exist here ("pass" would register twice). */
    setenv("VMTRACK_TRACKER", "none", 1);
    Suite *s = suite_create("twolib");
    TCase *tc = tcase_create("shared");
    tcase_add_test(tc, two_libraries_one_registration);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK) ? 1 : 0;
}
