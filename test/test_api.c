/* The C ABI's promises beyond the cache itself: version checks, VMT_OPTS, structs larger than
 * the library knows (-E2BIG unless their tail is zero), the log function, vmt_strerror, and a
 * vmt_put from another thread than the vmt_get. */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vmtrack.h>

#include "lib/vmt_test.h"

/* ---- version --------------------------------------------------------------------------- */
START_TEST(version_of_header_and_library)
{
    char expect[32];
    snprintf(expect, sizeof expect, "%d.%d.%d", VMT_VERSION_MAJOR, VMT_VERSION_MINOR,
             VMT_VERSION_PATCH);
    ck_assert_str_eq(VMT_VERSION, expect);
    ck_assert_str_eq(vmt_version(), VMT_VERSION);
    ck_assert_int_eq(VMT_CHECK_VERSION(), 0);
    ck_assert_int_eq(vmt_check_version(VMT_VERSION_MAJOR, 0), 0);
    /* a program built for a newer minor or another major version is refused */
    ck_assert_int_eq(vmt_check_version(VMT_VERSION_MAJOR, VMT_VERSION_MINOR + 1), -ENOTSUP);
    ck_assert_int_eq(vmt_check_version(VMT_VERSION_MAJOR + 1, 0), -ENOTSUP);
    ck_assert(VMT_VERSION_AT_LEAST(VMT_VERSION_MAJOR, VMT_VERSION_MINOR));
    ck_assert(VMT_VERSION_AT_LEAST(0, 0));
    ck_assert(!VMT_VERSION_AT_LEAST(VMT_VERSION_MAJOR, VMT_VERSION_MINOR + 1));
    ck_assert(!VMT_VERSION_AT_LEAST(VMT_VERSION_MAJOR + 1, 0));
}
END_TEST

/* ---- VMT_OPTS -------------------------------------------------------------------------- */
START_TEST(opts_macro_sets_sz_and_zeroes_the_rest)
{
    VMT_OPTS(vmt_cache_opts, o, .tracker = "none", .max_bytes = 12345);
    ck_assert_uint_eq(o.sz, sizeof(struct vmt_cache_opts));
    ck_assert_str_eq(o.tracker, "none");
    ck_assert_uint_eq(o.max_bytes, 12345);
    ck_assert_uint_eq(o.max_entries, 0);
    ck_assert_uint_eq(o.flags, 0);
    VMT_OPTS(vmt_stats, st);
    ck_assert_uint_eq(st.sz, sizeof(struct vmt_stats));
    ck_assert_uint_eq(st.hits, 0);
    ck_assert_uint_eq(st.memo_wraps, 0);
    struct vmt_cache *c;
    ck_assert_int_eq(vmt_cache_create(&o, &c), 0);
    ck_assert_int_eq(vmt_stats_get(c, &st), 0);
    ck_assert_uint_eq(st.max_bytes, 12345);
    vmt_cache_destroy(c);
}
END_TEST

/* ---- structs from a newer vmtrack.h ------------------------------------------------------ */
struct newer_cache_opts {
    struct vmt_cache_opts known;
    uint64_t later[3];
};

START_TEST(larger_cache_opts_need_a_zero_tail)
{
    struct newer_cache_opts n;
    memset(&n, 0, sizeof n);
    n.known.sz = sizeof n;
    n.known.tracker = "none";
    struct vmt_cache *c = NULL;
    ck_assert_int_eq(vmt_cache_create(&n.known, &c), 0);
    ck_assert_str_eq(vmt_cache_tracker(c), "none");
    vmt_cache_destroy(c);

    n.later[2] = 1;  /* a field this library does not know, set: it cannot do what is asked */
    c = NULL;
    ck_assert_int_eq(vmt_cache_create(&n.known, &c), -E2BIG);
    ck_assert_ptr_null(c);
    /* a tail shorter than a field: the bytes count, whatever the program's layout */
    memset(&n, 0, sizeof n);
    n.known.sz = sizeof n.known + 1;
    ((unsigned char *)&n)[sizeof n.known] = 0x80;
    ck_assert_int_eq(vmt_cache_create(&n.known, &c), -E2BIG);
}
END_TEST

/* A cache with manual invalidation only, and a counting device for it (not attached). */
static struct vmt_cache *none_cache_and_device(struct fake_device *f)
{
    VMT_OPTS(vmt_cache_opts, o, .tracker = "none");
    struct vmt_cache *c;
    ck_assert_int_eq(vmt_cache_create(&o, &c), 0);
    fake_init(f, 0);
    return c;
}

struct newer_device_ops {
    struct vmt_device_ops known;
    void *later[2];
};

START_TEST(larger_device_ops_need_a_zero_tail)
{
    struct fake_device f;
    struct vmt_cache *c = none_cache_and_device(&f);
    struct newer_device_ops n;
    memset(&n, 0, sizeof n);
    n.known = f.ops;
    n.known.sz = sizeof n;
    struct vmt_device *d = NULL;
    ck_assert_int_eq(vmt_device_attach(c, &n.known, &f, &d), 0);
    vmt_device_detach(d);

    n.later[1] = &f;
    d = NULL;
    ck_assert_int_eq(vmt_device_attach(c, &n.known, &f, &d), -E2BIG);
    ck_assert_ptr_null(d);
    vmt_cache_destroy(c);
}
END_TEST

struct newer_stats {
    struct vmt_stats known;
    uint64_t later[4];
};

START_TEST(larger_stats_read_zero_for_unknown_counters)
{
    VMT_OPTS(vmt_cache_opts, o, .tracker = "none", .max_entries = 77);
    struct vmt_cache *c;
    ck_assert_int_eq(vmt_cache_create(&o, &c), 0);
    struct newer_stats n;
    memset(&n, 0xff, sizeof n);
    n.known.sz = sizeof n;
    ck_assert_int_eq(vmt_stats_get(c, &n.known), 0);
    ck_assert_uint_eq(n.known.sz, sizeof n);
    ck_assert_uint_eq(n.known.max_entries, 77);
    ck_assert_uint_eq(n.known.hits, 0);
    for (int i = 0; i < 4; i++)
        ck_assert_uint_eq(n.later[i], 0);
    vmt_cache_destroy(c);
}
END_TEST

/* ---- the log function ---------------------------------------------------------------- */
struct captured {
    int calls;
    int level[8];
    char line[8][512];
};

static void capture(void *arg, int level, const char *line)
{
    struct captured *cap = (struct captured *)arg;
    if (cap->calls < 8) {
        cap->level[cap->calls] = level;
        snprintf(cap->line[cap->calls], sizeof cap->line[0], "%s", line);
    }
    cap->calls++;
}

/* main() sets VMTRACK_LOG=info, so messages that only explain a returned error come through. */
START_TEST(log_fn_gets_the_lines_and_a_returned_error_is_not_an_error)
{
    struct captured cap;
    memset(&cap, 0, sizeof cap);
    ck_assert_int_eq(vmt_set_log_fn(capture, &cap), 0);
    VMT_OPTS(vmt_cache_opts, o, .tracker = "bogus");
    struct vmt_cache *c;
    ck_assert_int_eq(vmt_cache_create(&o, &c), -EINVAL);
    ck_assert_int_ge(cap.calls, 1);
    int about_bogus = 0;
    for (int i = 0; i < cap.calls && i < 8; i++) {
        ck_assert_msg(cap.level[i] != VMT_LOG_LEVEL_ERROR,
                      "an error the caller gets back was logged at ERROR: %s", cap.line[i]);
        ck_assert_msg(strncmp(cap.line[i], "vmtrack: ", 9) != 0 && !strchr(cap.line[i], '\n'),
                      "the line carries the stderr prefix or a newline: %s", cap.line[i]);
        about_bogus += strstr(cap.line[i], "bogus") != NULL;
    }
    ck_assert_msg(about_bogus, "no line names the unknown tracker: %s", cap.line[0]);
    ck_assert_int_eq(cap.level[0], VMT_LOG_LEVEL_INFO);

    /* back to stderr */
    ck_assert_int_eq(vmt_set_log_fn(NULL, NULL), 0);
    int calls = cap.calls;
    char path[] = "/tmp/test_api_stderr_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    int saved = dup(STDERR_FILENO);
    ck_assert_int_ge(saved, 0);
    ck_assert_int_eq(dup2(fd, STDERR_FILENO), STDERR_FILENO);
    int rc = vmt_cache_create(&o, &c);
    dup2(saved, STDERR_FILENO);
    close(saved);
    ck_assert_int_eq(rc, -EINVAL);
    ck_assert_int_eq(cap.calls, calls);
    char text[1024] = "";
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    close(fd);
    ck_assert_int_gt(n, 0);
    text[n] = 0;
    ck_assert_msg(strstr(text, "vmtrack: ") && strstr(text, "bogus"), "stderr: %s", text);
}
END_TEST

START_TEST(log_level_set_by_the_program_wins)
{
    struct captured cap;
    memset(&cap, 0, sizeof cap);
    ck_assert_int_eq(vmt_set_log_fn(capture, &cap), 0);
    /* VMTRACK_LOG=info (main) is read first, then replaced */
    ck_assert_int_eq(vmt_set_log_level(VMT_LOG_LEVEL_WARN), VMT_LOG_LEVEL_INFO);
    ck_assert_int_eq(vmt_set_log_level(VMT_LOG_LEVEL_DEBUG + 1), -EINVAL);
    ck_assert_int_eq(vmt_set_log_level(-1), -EINVAL);
    VMT_OPTS(vmt_cache_opts, o, .tracker = "bogus");
    struct vmt_cache *c;
    ck_assert_int_eq(vmt_cache_create(&o, &c), -EINVAL);
    ck_assert_msg(cap.calls == 0, "an explanation got through at level warn: %s", cap.line[0]);
    ck_assert_int_eq(vmt_set_log_level(VMT_LOG_LEVEL_INFO), VMT_LOG_LEVEL_WARN);
    ck_assert_int_eq(vmt_cache_create(&o, &c), -EINVAL);
    ck_assert_int_ge(cap.calls, 1);
    ck_assert_int_eq(cap.level[0], VMT_LOG_LEVEL_INFO);
    vmt_set_log_fn(NULL, NULL);
}
END_TEST

/* ---- vmt_strerror ------------------------------------------------------------------------ */
START_TEST(strerror_speaks_of_the_errno)
{
    static const int errs[] = {EINVAL, E2BIG, EFAULT, ENOSPC, ENODEV, ENOMEM, EBUSY,
                               ENOTSUP, EPROTO, ENOSYS, EEXIST, ENOENT, EIO};
    for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++) {
        const char *s = vmt_strerror(-errs[i]);
        ck_assert_ptr_nonnull(s);
        ck_assert_msg(strlen(s) > 8, "-%d: \"%s\"", errs[i], s);
        ck_assert_msg(!strstr(s, "vmt_get"), "-%d is worded for one function: %s", errs[i], s);
        for (size_t j = 0; j < i; j++)
            ck_assert_msg(strcmp(s, vmt_strerror(-errs[j])) != 0, "-%d and -%d read the same",
                          errs[i], errs[j]);
    }
    ck_assert_str_eq(vmt_strerror(-EXDEV), strerror(EXDEV));
    ck_assert_str_eq(vmt_strerror(0), "success");
}
END_TEST

/* ---- threads ----------------------------------------------------------------------------- */
static void *put_it(void *reg)
{
    vmt_put((struct vmt_reg *)reg);
    return NULL;
}

START_TEST(put_from_another_thread_releases_the_hold)
{
    struct fake_device f;
    struct vmt_cache *c = none_cache_and_device(&f);
    struct vmt_device *d;
    ck_assert_int_eq(vmt_device_attach(c, &f.ops, &f, &d), 0);
    size_t len = 1 << 16;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(p, MAP_FAILED);
    struct vmt_reg *r;
    ck_assert_int_eq(vmt_get(d, p, len, VMT_ACCESS_READ, &r), 0);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, put_it, r), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    /* released: a flush may deregister it now (a hold still counted would keep it) */
    ck_assert_int_eq(vmt_flush(c), 0);
    ck_assert_int_eq(atomic_load(&f.deregs), 1);
    ck_assert_int_eq(atomic_load(&f.live), 0);
    vmt_device_detach(d);
    vmt_cache_destroy(c);
    munmap(p, len);
}
END_TEST

int main(void)
{
    setenv("VMTRACK_LOG", "info", 1);
    Suite *s = suite_create("api");
    TCase *tc = tcase_create("api");
    tcase_add_test(tc, version_of_header_and_library);
    tcase_add_test(tc, opts_macro_sets_sz_and_zeroes_the_rest);
    tcase_add_test(tc, larger_cache_opts_need_a_zero_tail);
    tcase_add_test(tc, larger_device_ops_need_a_zero_tail);
    tcase_add_test(tc, larger_stats_read_zero_for_unknown_counters);
    tcase_add_test(tc, log_fn_gets_the_lines_and_a_returned_error_is_not_an_error);
    tcase_add_test(tc, log_level_set_by_the_program_wins);
    tcase_add_test(tc, strerror_speaks_of_the_errno);
    tcase_add_test(tc, put_from_another_thread_releases_the_hold);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK) ? 1 : 0;
}
