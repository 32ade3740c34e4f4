/* Subscribers: vmt_subscribe and vmt_unsubscribe, and the range an invalidation reports
 * to them. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vmtrack.h>

#include "lib/vmt_test.h"

struct event_log {
    int calls;
    const void *addr;
    size_t len;
};
static void on_event(void *arg, const void *addr, size_t len)
{
    struct event_log *l = arg;
    l->calls++;
    l->addr = addr;
    l->len = len;
}

START_TEST(subscribers)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0);
    struct event_log log = {0, NULL, 0};
    ck_assert_int_eq(vmt_subscribe(fx.cache, on_event, &log), 0);
    ck_assert_int_eq(vmt_subscribe(fx.cache, on_event, &log), -EEXIST);
    ck_assert_int_eq(vmt_subscribe(fx.cache, NULL, &log), -EINVAL);
    char *buf = map_anon(page);
    ck_assert_int_eq(vmt_invalidate(fx.cache, buf, 123), 0);
    ck_assert_int_eq(log.calls, 1);
    ck_assert_ptr_eq(log.addr, buf);
    ck_assert_uint_eq(log.len, 123);
    ck_assert_int_eq(vmt_unsubscribe(fx.cache, on_event, &log), 0);
    ck_assert_int_eq(vmt_unsubscribe(fx.cache, on_event, &log), -ENOENT);
    ck_assert_int_eq(vmt_invalidate(fx.cache, buf, 123), 0);
    ck_assert_int_eq(log.calls, 1);
    ck_assert_int_eq(vmt_invalidate(fx.cache, buf, 0), -EINVAL);
    munmap(buf, page);
    fixture_close(&fx);
}
END_TEST

int main(void)
{
    const TTest *const cases[] = {subscribers, NULL};
    return check_run_cases("cache events", 60, cases);
}
