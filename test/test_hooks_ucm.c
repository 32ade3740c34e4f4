/* The hooks tracker next to a real other patcher: UCX's ucm (linked in, it patches libc's
 * mmap/munmap/... entries in its default "bistro" mode). vmtrack must not stack on it: the
 * hooks tracker is refused with a reason naming UCX ucm, and "auto" picks another tracker. */
#define _GNU_SOURCE
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <ucm/api/ucm.h>
#include <vmtrack.h>
#include "lib/check_run.h"

static void on_event(ucm_event_type_t type, ucm_event_t *event, void *arg)
{
    (void)type;
    (void)event;
    (void)arg;
}

static int ucm_patched(void)
{
    void *h = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    const char *names[] = {"mmap", "munmap", "mremap", "madvise", "shmat", "shmdt", "sbrk", "brk"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const unsigned char *f = dlsym(h, names[i]);
        if (f && (f[0] == 0xe9 || (f[0] == 0x49 && f[1] == 0xbb) || (f[0] == 0xff && f[1] == 0x25)))
            return 1;
    }
    return 0;
}

START_TEST(refused_next_to_ucm)
{
    struct vmt_cache *c;
    struct vmt_cache_opts o = {.sz = sizeof o, .tracker = "hooks"};
    ck_assert_int_eq(vmt_cache_create(&o, &c), -EBUSY);
    o.tracker = "auto";
    ck_assert_int_eq(vmt_cache_create(&o, &c), 0);
    ck_assert_str_ne(vmt_cache_tracker(c), "hooks");
    char buf[4096];
    vmt_cache_tracker_report(c, buf, sizeof buf);
    ck_assert_msg(strstr(buf, "already patched by UCX ucm"), "report: %s", buf);
    vmt_cache_destroy(c);
}
END_TEST

int main(void)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    return test_skip("sanitizer build: the hooks tracker refuses to run under a sanitizer "
                     "runtime");
#endif
    ucs_status_t st = ucm_set_event_handler(UCM_EVENT_MUNMAP | UCM_EVENT_VM_UNMAPPED, 0,
                                            on_event, NULL);
    if (st != UCS_OK || !ucm_patched()) {
        return test_skip("UCX ucm did not patch libc's entries here (status %d; mode not bistro?)",
                         (int)st);
    }
    Suite *s = suite_create("hooks vs UCX ucm");
    TCase *tc = tcase_create("ucm");
    tcase_add_test(tc, refused_next_to_ucm);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK) ? 1 : 0;
}
