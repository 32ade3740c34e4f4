/* How a cache is configured: the tracker "pass" caches nothing (every get registers, every
 * put deregisters); the shared cache reads VMTRACK_TRACKER and VMTRACK_MAX_BYTES and refuses
 * bad values. */
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

START_TEST(pass_mode_caches_nothing)
{
    struct fixture fx;
    fixture_open(&fx, "pass", 0);
    ck_assert_str_eq(vmt_cache_tracker(fx.cache), "pass");
    char *buf = map_anon(page);
    struct vmt_reg *a = get_ok(fx.dev, buf, page, VMT_ACCESS_READ);
    struct vmt_reg *b = get_ok(fx.dev, buf, page, VMT_ACCESS_READ);
    ck_assert_int_eq(atomic_load(&fx.fake.regs), 2);
    vmt_put(a);
    ck_assert_int_eq(atomic_load(&fx.fake.deregs), 1);
    vmt_put(b);
    ck_assert_int_eq(atomic_load(&fx.fake.deregs), 2);
    struct vmt_stats s = stats_of(fx.cache);
    ck_assert_uint_eq(s.entries, 0);
    ck_assert_uint_eq(s.uncached, 2);
    munmap(buf, page);
    fixture_close(&fx);
}
END_TEST

static void env_child(void)
{
    setenv("VMTRACK_TRACKER", "bogus", 1);
    if (vmt_shared() != NULL || errno != EINVAL)
        _exit(1);
    _exit(0);
}
static void env_size_child(void)
{
    setenv("VMTRACK_MAX_BYTES", "12Q", 1);
    if (vmt_shared() != NULL || errno != EINVAL)
        _exit(1);
    _exit(0);
}
static void env_lanes_child(void)
{
    static const char *const bad[] = {"0", "9", "2x", "-1", " "};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("VMTRACK_LANES", bad[i], 1);
        if (vmt_shared() != NULL || errno != EINVAL)
            _exit(1 + (int)i);
    }
    _exit(0);
}
static void env_good_child(void)
{
    setenv("VMTRACK_TRACKER", "none", 1);
    setenv("VMTRACK_MAX_BYTES", "256M", 1);
    setenv("VMTRACK_LANES", "3", 1);
    struct vmt_cache *c = vmt_shared();
    if (!c || vmt_shared() != c || strcmp(vmt_cache_tracker(c), "none") != 0)
        _exit(1);
    struct vmt_stats st = {.sz = sizeof st};
    if (vmt_stats_get(c, &st) != 0 || st.lanes > 3 || st.max_bytes != 256ul << 20)
        _exit(3);
    vmt_cache_destroy(c);  /* refused: the shared cache lives on */
    if (strcmp(vmt_cache_tracker(vmt_shared()), "none") != 0)
        _exit(2);
    _exit(0);
}

START_TEST(environment)
{
    int st = run_in_child(env_child);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "unknown tracker name must fail, status %d", st);
    st = run_in_child(env_size_child);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "bad size must fail, status %d", st);
    st = run_in_child(env_lanes_child);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "bad VMTRACK_LANES must fail, status %d", st);
    st = run_in_child(env_good_child);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "good environment, status %d", st);
}
END_TEST

int main(void)
{
    const TTest *const cases[] = {pass_mode_caches_nothing, environment, NULL};
    return check_run_cases("cache config", 60, cases);
}
