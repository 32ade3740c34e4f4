/* See entry_owner.h. */
#define _GNU_SOURCE
#include "entry_owner.h"

#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

/* The target of a jump at `p`: jmp rel32, jmp *rel32(%rip), movabs $x,%r11 (or %rax); jmp *reg.
 * 0 when `p` does not start with one. */
static uintptr_t jump_target(const unsigned char *p)
{
    uintptr_t t = 0;
    int32_t rel;
    if (0xe9 == p[0]) {
        memcpy(&rel, p + 1, sizeof(rel));
        t = (uintptr_t) p + 5 + rel;
    } else if (0xff == p[0] && 0x25 == p[1]) {
        memcpy(&rel, p + 2, sizeof(rel));
        memcpy(&t, p + 6 + rel, sizeof(t));
    } else if ((0x49 == p[0] && 0xbb == p[1] && 0x41 == p[10] && 0xff == p[11] &&
                0xe3 == p[12]) ||
               (0x48 == p[0] && 0xb8 == p[1] && 0xff == p[10] && 0xe0 == p[11])) {
        memcpy(&t, p + 2, sizeof(t));
    }
    return t;
}

const char *vmt_ompi_entry_owner(const void *entry)
{
    Dl_info info;
    uintptr_t at = (uintptr_t) entry;
    /* at most two jumps: entry -> trampoline page -> hook */
    for (int hop = 0; hop < 3; hop++) {
        uintptr_t next = jump_target((const unsigned char *) at);
        if (0 == next)
            break;
        at = next;
        if (dladdr((void *) at, &info) && info.dli_fname)
            return info.dli_fname;
    }
    if (at == (uintptr_t) entry && dladdr(entry, &info) && info.dli_fname)
        return info.dli_fname;
    return "code outside any shared object";
}
