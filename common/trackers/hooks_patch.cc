// Entry patching for the hooks tracker; see hooks_patch.h for the method and why.
#include "trackers/hooks_patch.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <linux/membarrier.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace vmt {

namespace {

constexpr size_t kPage = 4096;
constexpr size_t kJmpLen = 5;
constexpr size_t kSlot = 16;

// The trampoline page: slot i = `jmp *0(%rip)` + 8-byte target. Mapped once near libc and kept
// for the life of the process (a thread may still be passing through it after an unpatch).
uint8_t *g_tramp = nullptr;
size_t g_tramp_used = 0;

uintptr_t g_libc_lo = 0, g_libc_hi = 0;  // libc's executable segment(s)
uintptr_t g_main_lo = 0, g_main_hi = 0;  // the main program's
bool g_sync_core = false;

long raw(long nr, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0, long f = 0)
{
    return syscall(nr, a, b, c, d, e, f);
}

void *libc_handle()
{
    static void *h = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    return h;
}

void text_range(struct dl_phdr_info *info, uintptr_t *lo_out, uintptr_t *hi_out)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        if (!*lo_out || lo < *lo_out)
            *lo_out = lo;
        if (hi > *hi_out)
            *hi_out = hi;
    }
}

int find_text(struct dl_phdr_info *info, size_t, void *data)
{
    int *seen = (int *)data;
    if ((*seen)++ == 0)  // the first object is the main program
        text_range(info, &g_main_lo, &g_main_hi);
    else if (info->dlpi_name && strstr(info->dlpi_name, "libc.so"))
        text_range(info, &g_libc_lo, &g_libc_hi);
    return 0;
}

void libc_range()
{
    if (!g_libc_lo) {
        int seen = 0;
        dl_iterate_phdr(find_text, &seen);
    }
}

void sync_cores()
{
    if (g_sync_core)
        raw(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE, 0, 0);
}

// A trampoline page within +-2 GiB of libc's text (MAP_FIXED_NOREPLACE at hints around it).
int tramp_map(std::string *why)
{
    if (g_tramp)
        return 0;
    libc_range();
    if (!g_libc_lo) {
        *why = "cannot find libc's text segment";
        return -ENOENT;
    }
    const uintptr_t step = 16u << 20;
    for (uintptr_t d = step; d < (1ul << 31) - (64u << 20); d += step) {
        uintptr_t hints[2] = {(g_libc_lo - d) & ~(kPage - 1), (g_libc_hi + d) & ~(kPage - 1)};
        for (uintptr_t h : hints) {
            long r = raw(SYS_mmap, (long)h, kPage, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
            if (r < 0 && r > -4096)
                continue;
            if ((uintptr_t)r != h) {  // old kernel: the flag was only a hint
                raw(SYS_munmap, r, kPage);
                continue;
            }
            g_tramp = (uint8_t *)r;
            memset(g_tramp, 0xcc, kPage);
            raw(SYS_mprotect, (long)g_tramp, kPage, PROT_READ | PROT_EXEC);
            return 0;
        }
    }
    *why = "no free page within 2 GiB of libc for the trampolines";
    return -ENOMEM;
}

// Slot for `hook` (reused if it exists).
uint8_t *tramp_slot(void *hook)
{
    for (size_t off = 0; off < g_tramp_used; off += kSlot) {
        void *t;
        memcpy(&t, g_tramp + off + 6, 8);
        if (t == hook)
            return g_tramp + off;
    }
    if (g_tramp_used + kSlot > kPage)
        return nullptr;
    uint8_t code[kSlot] = {0xff, 0x25, 0, 0, 0, 0};
    memcpy(code + 6, &hook, 8);
    code[14] = code[15] = 0xcc;
    uint8_t *slot = g_tramp + g_tramp_used;
    raw(SYS_mprotect, (long)g_tramp, kPage, PROT_READ | PROT_WRITE);
    memcpy(slot, code, kSlot);
    raw(SYS_mprotect, (long)g_tramp, kPage, PROT_READ | PROT_EXEC);
    g_tramp_used += kSlot;
    return slot;
}

uint64_t *qword_of(const uint8_t *entry)
{
    return (uint64_t *)((uintptr_t)entry & ~(uintptr_t)7);
}

// Every access to code (libc's entries, and what a foreign jump points at) goes through these
// inline-asm accessors: sanitizers (TSan) would otherwise record the accesses in shadow memory
// they do not keep for code, and crash. Stores are xchg / lock cmpxchg: atomic, fully ordered.
inline uint64_t code_load(const uint64_t *q)
{
    uint64_t v;
    asm volatile("movq (%1), %0" : "=r"(v) : "r"(q) : "memory");
    return v;
}

inline void code_store(uint64_t *q, uint64_t v)
{
    asm volatile("xchgq %0, (%1)" : "+r"(v) : "r"(q) : "memory");
}

inline bool code_cas(uint64_t *q, uint64_t expect, uint64_t v)
{
    bool ok;
    asm volatile("lock cmpxchgq %3, (%1)\n\tsete %0"
                 : "=q"(ok), "+r"(q), "+a"(expect)
                 : "r"(v)
                 : "memory", "cc");
    return ok;
}

// Copy n bytes of code at src (any alignment) into dst, qword by qword.
void code_read(const uint8_t *src, uint8_t *dst, size_t n)
{
    const uint64_t *q = qword_of(src);
    size_t skip = (size_t)(src - (const uint8_t *)q);
    size_t done = 0;
    for (; done < n; q++) {
        uint64_t v = code_load(q);
        size_t take = std::min(n - done, 8 - skip);
        memcpy(dst + done, (uint8_t *)&v + skip, take);
        done += take;
        skip = 0;
    }
}

// Replace the bytes [entry, entry+len) inside the aligned qword with `bytes`: one atomic store.
void store_bytes(uint8_t *entry, const uint8_t *bytes, size_t len)
{
    uint64_t *q = qword_of(entry);
    uint64_t v = code_load(q);
    memcpy((uint8_t *)&v + (entry - (uint8_t *)q), bytes, len);
    code_store(q, v);
}

int protect(PatchSite *sites, size_t n, int prot)
{
    for (size_t i = 0; i < n; i++) {
        if (sites[i].alias)
            continue;
        uintptr_t p = (uintptr_t)sites[i].entry & ~(kPage - 1);
        uintptr_t e = ((uintptr_t)sites[i].entry + 8 + kPage - 1) & ~(kPage - 1);
        long r = raw(SYS_mprotect, (long)p, (long)(e - p), prot);
        if (r < 0)
            return -errno;
    }
    return 0;
}

void nap_us(long us);

// What /proc tells about another thread of this process.
enum class TState { gone, blocked, runnable, unknown };

long read_small(const char *path, char *buf, size_t len)
{
    int fd = (int)raw(SYS_open, (long)path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    long n = raw(SYS_read, fd, (long)buf, (long)len - 1);
    raw(SYS_close, fd);
    if (n < 0)
        return -1;
    buf[n] = 0;
    return n;
}

// "/proc/self/task/TID/syscall": for a thread blocked (in a system call or not) its pc, the
// address it will resume at; "running" for a thread on a CPU or waiting for one.
TState thread_state(long tid, uintptr_t *pc)
{
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/self/task/%ld/syscall", tid);
    long n = read_small(path, buf, sizeof buf);
    if (n == -ENOENT || n == -ESRCH)
        return TState::gone;
    if (n <= 0)
        return TState::unknown;
    if (!strncmp(buf, "running", 7))
        return TState::runnable;
    char *end = buf + n;
    while (end > buf && (end[-1] == '\n' || end[-1] == ' '))
        *--end = 0;
    char *last = strrchr(buf, ' ');
    if (!last)
        return TState::unknown;
    *pc = (uintptr_t)strtoull(last + 1, nullptr, 16);
    return TState::blocked;
}

// CPU time the thread has used, in ns ("/proc/self/task/TID/schedstat", else utime+stime from
// "stat" in clock ticks); 0 if unknown.
uint64_t thread_cpu_ns(long tid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/self/task/%ld/schedstat", tid);
    if (read_small(path, buf, sizeof buf) > 0)
        return strtoull(buf, nullptr, 10);
    snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
    if (read_small(path, buf, sizeof buf) <= 0)
        return 0;
    const char *p = strrchr(buf, ')');  // fields after "(comm)": state is field 3
    for (int field = 2; p && field < 14; field++)
        p = strchr(p + 1, ' ');
    if (!p)
        return 0;
    char *q;
    uint64_t ut = strtoull(p + 1, &q, 10), st = strtoull(q, nullptr, 10);
    return (ut + st) * (1000000000ull / (uint64_t)sysconf(_SC_CLK_TCK));
}

bool pc_inside(const PatchSite *sites, size_t n, uintptr_t pc)
{
    for (size_t i = 0; i < n; i++)
        if (!sites[i].alias && pc > (uintptr_t)sites[i].entry &&
            pc < (uintptr_t)sites[i].entry + kJmpLen)
            return true;
    return false;
}

// After `jmp .` is at every entry, nobody can *enter* bytes 1..4 any more; wait until nobody
// is *in* them. A thread is clear once seen blocked with its resume pc elsewhere, or once it
// has used kCpuProof of CPU time since then (a thread stopped inside a prologue resumes there
// and leaves it within a few instructions of running; the scheduler does not take a CPU back
// that fast). Threads that appear later are clear (they could only have entered at an entry).
// 0 when clear, -EAGAIN on timeout, -ENOENT without /proc.
constexpr uint64_t kCpuProof = 2000000;  // 2 ms
constexpr int kMaxThreads = 1024;

int wait_quiescent(const PatchSite *sites, size_t n, const char **why)
{
    struct T {
        long tid;
        uint64_t cpu0;
        bool clear;
    } ts[kMaxThreads];
    int nt = 0;
    int dfd = (int)raw(SYS_open, (long)"/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return -ENOENT;
    long self = raw(SYS_gettid);
    alignas(8) char buf[4096];
    for (;;) {
        long got = raw(SYS_getdents64, dfd, (long)buf, sizeof buf);
        if (got <= 0)
            break;
        for (long off = 0; off < got;) {
            struct d64 {
                uint64_t ino;
                int64_t off;
                unsigned short reclen;
                unsigned char type;
                char name[];
            } *d = (struct d64 *)(buf + off);
            off += d->reclen;
            if (d->name[0] < '0' || d->name[0] > '9')
                continue;
            long tid = strtol(d->name, nullptr, 10);
            if (tid == self)
                continue;
            if (nt == kMaxThreads) {
                raw(SYS_close, dfd);
                *why = "too many threads to check";  // static: no allocation here
                return -EAGAIN;
            }
            ts[nt++] = T{tid, thread_cpu_ns(tid), false};
        }
    }
    raw(SYS_close, dfd);
    for (int round = 0; round < 4000; round++) {  // ~2 s
        int left = 0;
        for (int i = 0; i < nt; i++) {
            if (ts[i].clear)
                continue;
            uintptr_t pc = 0;
            TState st = thread_state(ts[i].tid, &pc);
            if (st == TState::gone || (st == TState::blocked && !pc_inside(sites, n, pc)))
                ts[i].clear = true;
            else if (st != TState::blocked && thread_cpu_ns(ts[i].tid) >= ts[i].cpu0 + kCpuProof)
                ts[i].clear = true;
            if (!ts[i].clear)
                left++;
        }
        if (!left)
            return 0;
        nap_us(500);
    }
    *why = "a thread stayed inside a function's first instructions (or never ran) for 2 s; "
           "not patched";
    return -EAGAIN;
}

void nap_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, nullptr);
}

const char *owner_of(uintptr_t target, std::string *owner)
{
    Dl_info info;
    // A trampoline in anonymous memory (`jmp *0(%rip); .quad hook`, as vmtrack writes, or
    // `movabs $hook,%r11; jmp *%r11`): name the hook's owner instead.
    if (target && !dladdr((void *)target, &info) && msync((void *)(target & ~(kPage - 1)),
                                                          kPage, MS_ASYNC) == 0) {
        uint8_t t[16];
        code_read((const uint8_t *)target, t, sizeof t);
        if (t[0] == 0xff && t[1] == 0x25 && !t[2] && !t[3] && !t[4] && !t[5])
            memcpy(&target, t + 6, 8);
        else if (t[0] == 0x49 && t[1] == 0xbb && t[10] == 0x41 && t[11] == 0xff && t[12] == 0xe3)
            memcpy(&target, t + 2, 8);
    }
    if (target && dladdr((void *)target, &info) && info.dli_fname) {
        const char *f = info.dli_fname;
        if (strstr(f, "libvmtrack"))
            *owner = std::string("another copy of vmtrack (") + f + ")";
        else if (strstr(f, "ucm"))
            *owner = std::string("UCX ucm (") + f + ")";
        else if (strstr(f, "open-pal") || strstr(f, "libmpi") || strstr(f, "openmpi"))
            *owner = std::string("the Open MPI patcher (") + f + ")";
        else
            *owner = std::string("code in ") + f;
    } else {
        char b[128];
        snprintf(b, sizeof b, "a jump to %#lx (anonymous memory: UCX ucm or Open MPI "
                 "patcher trampolines)", (unsigned long)target);
        *owner = b;
    }
    return owner->c_str();
}

}  // namespace

void *libc_symbol(const char *name)
{
    void *h = libc_handle();
    return h ? dlsym(h, name) : nullptr;
}

int patch_locate(PatchSite *sites, size_t n, std::string *why)
{
    libc_range();
    if (!libc_handle()) {
        *why = "glibc's libc.so.6 is not loaded (the hooks patch glibc)";
        return -ENOENT;
    }
    for (size_t i = 0; i < n; i++) {
        sites[i].entry = (uint8_t *)libc_symbol(sites[i].name);
        if (!sites[i].entry) {
            *why = std::string("libc has no ") + sites[i].name;
            return -ENOENT;
        }
        sites[i].alias = false;
        for (size_t j = 0; j < i; j++)
            if (sites[j].entry == sites[i].entry)
                sites[i].alias = true;
        if (((uintptr_t)sites[i].entry & 7) > 8 - kJmpLen) {
            *why = std::string(sites[i].name) + ": entry not aligned for an atomic patch";
            return -ENOTSUP;
        }
    }
    return 0;
}

bool patch_entry_ours(const uint8_t *entry)
{
    uint8_t e[8];
    code_read(entry, e, sizeof e);
    if (e[0] != 0xe9 || !g_tramp)
        return false;
    int32_t rel;
    memcpy(&rel, e + 1, 4);
    uintptr_t t = (uintptr_t)entry + 5 + rel;
    return t >= (uintptr_t)g_tramp && t < (uintptr_t)g_tramp + kPage;
}

bool patch_entry_foreign(const uint8_t *entry, std::string *owner)
{
    if (patch_entry_ours(entry))
        return false;
    uint8_t e[16];
    code_read(entry, e, sizeof e);
    uintptr_t target = 0;
    if (e[0] == 0xe9) {  // jmp rel32
        int32_t rel;
        memcpy(&rel, e + 1, 4);
        target = (uintptr_t)entry + 5 + rel;
    } else if (e[0] == 0xeb) {  // jmp rel8
        target = (uintptr_t)entry + 2 + (int8_t)e[1];
    } else if (e[0] == 0xff && e[1] == 0x25) {  // jmp *rel32(%rip)
        int32_t rel;
        memcpy(&rel, e + 2, 4);
        code_read(entry + 6 + rel, (uint8_t *)&target, 8);
    } else if ((e[0] == 0x49 && e[1] == 0xbb && e[10] == 0x41 && e[11] == 0xff &&
                e[12] == 0xe3) ||  // movabs $x,%r11; jmp *%r11 (ucm, opal patcher)
               (e[0] == 0x48 && e[1] == 0xb8 && e[10] == 0xff && e[11] == 0xe0)) {
        memcpy(&target, e + 2, 8);  // movabs $x,%rax; jmp *%rax
    } else if (e[0] == 0xcc) {
        *owner = "a breakpoint (int3): a debugger or an int3-based patcher";
        return true;
    } else {
        return false;
    }
    owner_of(target, owner);
    return true;
}

int patch_install(PatchSite *sites, size_t n, std::string *why)
{
    int rc = tramp_map(why);
    if (rc)
        return rc;
    static bool sync_tried = false;
    if (!sync_tried) {
        sync_tried = true;
        g_sync_core = raw(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE,
                          0, 0) == 0;
    }
    uint8_t code[16][kJmpLen];
    if (n > 16) {
        *why = "too many patch sites";
        return -EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        std::string owner;
        if (sites[i].alias)
            continue;
        if (patch_entry_foreign(sites[i].entry, &owner)) {
            *why = std::string(sites[i].name) + ": entry already patched by " + owner;
            return -EBUSY;
        }
        if (patch_entry_ours(sites[i].entry)) {
            *why = std::string(sites[i].name) + ": already patched by vmtrack";
            return -EALREADY;
        }
        uint8_t *slot = tramp_slot(sites[i].hook);
        if (!slot) {
            *why = "trampoline page full";
            return -ENOSPC;
        }
        int64_t rel = (int64_t)((intptr_t)slot - ((intptr_t)sites[i].entry + 5));
        if (rel != (int32_t)rel) {
            *why = "trampoline out of reach";
            return -ERANGE;
        }
        int32_t r32 = (int32_t)rel;
        code[i][0] = 0xe9;
        memcpy(&code[i][1], &r32, 4);
        sites[i].saved = code_load(qword_of(sites[i].entry));
    }
    rc = protect(sites, n, PROT_READ | PROT_WRITE | PROT_EXEC);
    if (rc) {
        protect(sites, n, PROT_READ | PROT_EXEC);
        *why = std::string("mprotect of libc's text to RWX failed: ") + strerror(-rc);
        return rc;
    }
    // (1) `jmp .` at each entry: callers from now on wait there.
    static const uint8_t spin[2] = {0xeb, 0xfe};
    for (size_t i = 0; i < n; i++)
        if (!sites[i].alias)
            store_bytes(sites[i].entry, spin, 2);
    sync_cores();
    // (2) wait until no thread sits between instructions under bytes 1..4.
    const char *qwhy = "";  // no allocation until the entries are consistent again
    rc = wait_quiescent(sites, n, &qwhy);
    if (rc == -ENOENT) {  // no /proc: give descheduled threads time to run on
        nap_us(50000);
        rc = 0;
    }
    if (rc) {
        for (size_t i = 0; i < n; i++)
            if (!sites[i].alias)
                code_store(qword_of(sites[i].entry), sites[i].saved);
        sync_cores();
        protect(sites, n, PROT_READ | PROT_EXEC);
        *why = qwhy;
        return rc;
    }
    // (3) bytes 2..4, then (4) the first two bytes: the complete `jmp rel32`.
    for (size_t i = 0; i < n; i++)
        if (!sites[i].alias)
            store_bytes(sites[i].entry + 2, code[i] + 2, kJmpLen - 2);
    sync_cores();
    for (size_t i = 0; i < n; i++) {
        if (sites[i].alias)
            continue;
        store_bytes(sites[i].entry, code[i], 2);
        sites[i].patched = code_load(qword_of(sites[i].entry));
        sites[i].active = true;
    }
    sync_cores();
    protect(sites, n, PROT_READ | PROT_EXEC);
    return 0;
}

bool patch_intact(const PatchSite *sites, size_t n, std::string *who)
{
    for (size_t i = 0; i < n; i++) {
        if (!sites[i].active)
            continue;
        if (code_load(qword_of(sites[i].entry)) == sites[i].patched)
            continue;
        if (who) {
            std::string owner;
            if (!patch_entry_foreign(sites[i].entry, &owner))
                owner = "unknown code (the entry no longer holds our jump)";
            *who = std::string(sites[i].name) + " was patched over by " + owner;
        }
        return false;
    }
    return true;
}

void patch_intact_set(const PatchSite *sites, size_t n, IntactSet *set)
{
    set->n = 0;
    for (size_t i = 0; i < n && set->n < IntactSet::kMax; i++) {
        if (!sites[i].active)
            continue;
        set->qword[set->n] = qword_of(sites[i].entry);
        set->ours[set->n] = sites[i].patched;
        set->n++;
    }
}

void patch_remove(PatchSite *sites, size_t n)
{
    bool any = false;
    for (size_t i = 0; i < n; i++)
        any |= sites[i].active;
    if (!any)
        return;
    protect(sites, n, PROT_READ | PROT_WRITE | PROT_EXEC);
    for (size_t i = 0; i < n; i++) {
        if (!sites[i].active)
            continue;
        // someone patched over us: leave their bytes alone
        code_cas(qword_of(sites[i].entry), sites[i].patched, sites[i].saved);
        sites[i].active = false;
    }
    sync_cores();
    protect(sites, n, PROT_READ | PROT_EXEC);
}

bool pc_in_main_program(uintptr_t pc) noexcept
{
    return pc >= g_main_lo && pc < g_main_hi;
}

std::string patch_method()
{
    char b[160];
    snprintf(b, sizeof b,
             "5-byte jmp at each entry to trampolines at %p (libc text %#lx-%#lx), written "
             "with atomic 8-byte stores%s",
             (void *)g_tramp, (unsigned long)g_libc_lo, (unsigned long)g_libc_hi,
             g_sync_core ? " + membarrier(SYNC_CORE)" : "");
    return b;
}

}  // namespace vmt
