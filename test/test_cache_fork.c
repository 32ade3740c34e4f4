/* fork(): the child's cache starts empty and cannot use the parent's devices; the parent's
 * registrations are untouched by what the child does. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vmtrack.h>

#include "lib/vmt_test.h"

START_TEST(fork_child_starts_empty)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0);
    char *buf = map_anon(3 * page);
    struct vmt_reg *held = get_ok(fx.dev, buf, page, VMT_ACCESS_READ);
    vmt_put(get_ok(fx.dev, buf + 2 * page, page, VMT_ACCESS_READ));
    long deregs_before = atomic_load(&fx.fake.deregs);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        struct vmt_reg *r;
        /* The parent's device is not the child's. */
        if (vmt_get(fx.dev, buf, page, VMT_ACCESS_READ, &r) != -ENODEV)
            _exit(10);
        struct vmt_stats s = {.sz = sizeof s};
        vmt_stats_get(fx.cache, &s);
        if (s.entries != 0)
            _exit(11);
        struct fake_device mine;
        fake_init(&mine, 0);
        struct vmt_device *d;
        if (vmt_device_attach(fx.cache, &fx.fake.ops, &fx.fake, &d) || d == fx.dev)
            _exit(12);
        if (vmt_get(d, buf, page, VMT_ACCESS_READ, &r))
            _exit(13);
        vmt_put(r);
        vmt_put(held);  /* the parent's: must not deregister it */
        vmt_flush(fx.cache);
        vmt_device_detach(d);
        /* Only the child's own registration was deregistered. */
        if (atomic_load(&fx.fake.deregs) != deregs_before + 1)
            _exit(14);
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
    /* The parent's registrations keep working. */
    struct vmt_reg *again = get_ok(fx.dev, buf, page, VMT_ACCESS_READ);
    ck_assert_ptr_eq(again, held);
    vmt_put(again);
    vmt_put(held);
    vmt_put(get_ok(fx.dev, buf + 2 * page, page, VMT_ACCESS_READ));
    ck_assert_int_eq(atomic_load(&fx.fake.deregs), deregs_before);
    ck_assert_uint_eq(stats_of(fx.cache).registrations, 2);
    munmap(buf, 3 * page);
    fixture_close(&fx);
}
END_TEST

int main(void)
{
    const TTest *const cases[] = {fork_child_starts_empty, NULL};
    return check_run_cases("cache fork", 60, cases);
}
