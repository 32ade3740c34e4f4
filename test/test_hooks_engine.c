/* The patching engine on synthetic code: a thread stopped between two instructions that the
 * 5-byte jump would cover must make the patcher wait (and then run on correctly); the jump, once
 * in, leads to the hook; unpatching restores the bytes. Foreign-jump recognition. */
#define _GNU_SOURCE
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "lib/vmt_test.h"

int shim_patch(void *entry, void *hook, char *why, size_t whylen);
void shim_unpatch(void);
int shim_foreign(const void *entry, char *owner, size_t len);

static unsigned char *g_code;
static int g_pipe[2];

/* A code page near libc (the trampolines are placed within 2 GiB of libc). */
static unsigned char *code_page(void)
{
    uintptr_t near = (uintptr_t)dlsym(dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD), "munmap");
    for (uintptr_t d = 256ul << 20; d < (1ul << 30); d += 64ul << 20) {
        void *want = (void *)((near - d) & ~4095ul);
        void *p = mmap(want, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (p == want)
            return p;
        if (p != MAP_FAILED)
            munmap(p, 4096);
    }
    return NULL;
}

/* The synthetic code is called as a variadic function: with no floating-point arguments the
 * caller sets %al (so %rax) to 0, which is SYS_read: fn(fd, buf, len) is read(fd, buf, len). */
typedef long (*code_fn)(long, long, long, ...);

static long call_code(long a, long b, long c)
{
    return ((code_fn)(void *)g_code)(a, b, c);
}

static long hook(void)
{
    return 4242;
}

static char g_byte;

static void *reader(void *arg)
{
    (void)arg;
    /* blocks in the syscall at offset 0: its pc is then offset 2, inside the 5 patched bytes */
    return (void *)call_code(g_pipe[0], (long)&g_byte, 1);
}

static void *releaser(void *arg)
{
    (void)arg;
    usleep(300 * 1000);
    if (write(g_pipe[1], "x", 1) != 1)
        return (void *)1;
    return NULL;
}

START_TEST(waits_for_stopped_thread)
{
    g_code = code_page();
    ck_assert_ptr_nonnull(g_code);
    /* syscall; nop; nop; nop; ret */
    static const unsigned char code[] = {0x0f, 0x05, 0x90, 0x90, 0x90, 0xc3};
    memcpy(g_code, code, sizeof code);
    ck_assert_int_eq(mprotect(g_code, 4096, PROT_READ | PROT_EXEC), 0);
    ck_assert_int_eq(call_code(-1, 0, 0), -EBADF);

    ck_assert_int_eq(pipe(g_pipe), 0);
    pthread_t rd, rel;
    ck_assert_int_eq(pthread_create(&rd, NULL, reader, NULL), 0);
    usleep(100 * 1000); /* let it block in read() */
    ck_assert_int_eq(pthread_create(&rel, NULL, releaser, NULL), 0);
    double t0 = now_ns() / 1e6;
    char why[256] = "";
    int rc = shim_patch(g_code, (void *)hook, why, sizeof why);
    double waited = now_ns() / 1e6 - t0;
    ck_assert_msg(rc == 0, "patch: %d %s", rc, why);
    void *got;
    pthread_join(rd, &got);
    pthread_join(rel, NULL);
    ck_assert_int_eq((long)got, 1); /* the stopped thread finished the original code */
    ck_assert_msg(waited > 150, "patched after %.0f ms, while a thread sat inside the bytes", waited);
    ck_assert_int_eq(g_code[0], 0xe9);
    ck_assert_int_eq(call_code(-1, 0, 0), 4242); /* the jump leads to the hook */
    shim_unpatch();
    ck_assert_int_eq(memcmp(g_code, code, sizeof code), 0);
    ck_assert_int_eq(call_code(-1, 0, 0), -EBADF);
    munmap(g_code, 4096);
}
END_TEST

START_TEST(no_wait_when_idle)
{
    g_code = code_page();
    ck_assert_ptr_nonnull(g_code);
    static const unsigned char code[] = {0x0f, 0x05, 0x90, 0x90, 0x90, 0xc3};
    memcpy(g_code, code, sizeof code);
    ck_assert_int_eq(mprotect(g_code, 4096, PROT_READ | PROT_EXEC), 0);
    char why[256] = "";
    double t0 = now_ns() / 1e6;
    ck_assert_int_eq(shim_patch(g_code, (void *)hook, why, sizeof why), 0);
    printf("patch with no thread inside: %.2f ms\n", now_ns() / 1e6 - t0);
    ck_assert_int_eq(call_code(-1, 0, 0), 4242);
    /* patching it again is refused: it is ours already */
    ck_assert_int_ne(shim_patch(g_code, (void *)hook, why, sizeof why), 0);
    shim_unpatch();
    munmap(g_code, 4096);
}
END_TEST

START_TEST(foreign_forms)
{
    unsigned char buf[32];
    char owner[256];
    void *target = (void *)hook;
    /* movabs $target,%r11; jmp *%r11 */
    unsigned char a[13] = {0x49, 0xbb, 0, 0, 0, 0, 0, 0, 0, 0, 0x41, 0xff, 0xe3};
    memcpy(a + 2, &target, 8);
    memset(buf, 0x90, sizeof buf);
    memcpy(buf, a, sizeof a);
    ck_assert(shim_foreign(buf, owner, sizeof owner));
    ck_assert_msg(strstr(owner, "test_hooks_engine"), "owner: %s", owner);
    /* movabs $target,%rax; jmp *%rax */
    unsigned char b[12] = {0x48, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xe0};
    memcpy(b + 2, &target, 8);
    memset(buf, 0x90, sizeof buf);
    memcpy(buf, b, sizeof b);
    ck_assert(shim_foreign(buf, owner, sizeof owner));
    /* jmp *0(%rip); .quad target */
    unsigned char c[14] = {0xff, 0x25, 0, 0, 0, 0};
    memcpy(c + 6, &target, 8);
    memset(buf, 0x90, sizeof buf);
    memcpy(buf, c, sizeof c);
    ck_assert(shim_foreign(buf, owner, sizeof owner));
    ck_assert_msg(strstr(owner, "test_hooks_engine"), "owner: %s", owner);
    /* jmp rel32 to a trampoline in anonymous memory (jmp *0(%rip); .quad target): the owner
     * is whoever the trampoline leads to */
    unsigned char *tramp = map_filled(4096, 0x90);
    int32_t rel = 64 - 5;
    tramp[0] = 0xe9;
    memcpy(tramp + 1, &rel, 4);
    memcpy(tramp + 64, c, sizeof c);
    ck_assert(shim_foreign(tramp, owner, sizeof owner));
    ck_assert_msg(strstr(owner, "test_hooks_engine"), "owner through a trampoline: %s", owner);
    munmap(tramp, 4096);
    /* int3 */
    memset(buf, 0x90, sizeof buf);
    buf[0] = 0xcc;
    ck_assert(shim_foreign(buf, owner, sizeof owner));
    ck_assert_msg(strstr(owner, "breakpoint"), "owner: %s", owner);
    /* plain code (libc's own munmap prologue) */
    static const unsigned char plain[] = {0xb8, 0x0b, 0, 0, 0, 0x0f, 0x05, 0xc3};
    memset(buf, 0x90, sizeof buf);
    memcpy(buf, plain, sizeof plain);
    ck_assert(!shim_foreign(buf, owner, sizeof owner));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("hooks patching engine");
    TCase *tc = tcase_create("engine");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, waits_for_stopped_thread);
    tcase_add_test(tc, no_wait_when_idle);
    tcase_add_test(tc, foreign_forms);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK) ? 1 : 0;
}
