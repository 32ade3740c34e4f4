// The entry-patching engine of the hooks tracker (x86-64): find libc's own definitions of the
// functions to hook, detect entries another patcher already owns, and write / remove a 5-byte
// `jmp rel32` at a function entry so that it lands in a replacement function.
//
// How a patch is written while other threads may run the function:
//  - the jump goes to a 16-byte slot `jmp *0(%rip); .quad hook` in a trampoline page mapped
//    within +-2 GiB of libc, so the entry needs only 5 bytes (one instruction, nothing to tear);
//  - every store to the entry is one atomic, aligned 8-byte store (entries are 16-byte
//    aligned), so an instruction fetch sees either the old bytes or the new ones;
//  - a thread may be stopped *between* two of the original instructions the 5 bytes cover (e.g.
//    after mmap's 3-byte `mov %ecx,%r10d`): overwriting under it would make it resume inside
//    our jump. So: (1) the first 2 bytes become `jmp .` (eb fe): new callers wait at the entry;
//    (2) wait until every other thread is seen blocked with its resume pc outside bytes 1..4
//    (/proc/self/task/*/syscall) or has used 2 ms of CPU since (1) (schedstat); (3) write bytes
//    2..4; (4) write the final first 2 bytes.
//    No int3, no signal handler. membarrier(SYNC_CORE) between steps where the kernel has it.
//  - removing a patch is one atomic store of the saved 8 bytes: a 5-byte jump has no inner
//    instruction boundary, so no thread can be stopped inside it.
// Nothing here allocates once patching has started (raw system calls, stack buffers): a
// thread waiting at a patched entry may hold malloc's locks.
#ifndef VMTRACK_COMMON_HOOKS_PATCH_H
#define VMTRACK_COMMON_HOOKS_PATCH_H

#include <cstddef>
#include <cstdint>
#include <string>

namespace vmt {

struct PatchSite {
    const char *name;       // libc symbol, e.g. "munmap"
    void *hook;             // the replacement function
    uint8_t *entry = nullptr;   // libc's definition (filled by patch_locate)
    uint64_t saved = 0;     // the aligned 8 bytes holding the first 5 bytes, before patching
    uint64_t patched = 0;   // what we wrote
    bool active = false;    // our jump is in place
    bool alias = false;     // same entry as an earlier site (mmap64 == mmap): not patched twice
};

// libc's own definition of `name` (not an interposer's), or nullptr.
void *libc_symbol(const char *name);

// Fill sites[i].entry. 0, or -ENOENT with *why naming the missing function.
int patch_locate(PatchSite *sites, size_t n, std::string *why);

// Does the entry already start with a jump or breakpoint that is not ours? Then true and
// *owner names the likely owner ("UCX ucm (libucm.so.0)", "Open MPI patcher (...)", ...).
bool patch_entry_foreign(const uint8_t *entry, std::string *owner);

// Is the entry one of our jumps (into our trampoline page)?
bool patch_entry_ours(const uint8_t *entry);

// Are all active sites still our bytes? If not, *who names the first site someone else
// overwrote and where it jumps now. Cheap (one load per site): called on the miss path.
bool patch_intact(const PatchSite *sites, size_t n, std::string *who);

// patch_intact's question as the miss path asks it, once a miss: the active sites' aligned
// qwords and our bytes in them, gathered once (patch_intact_set) so that the check is a loop
// of loads with one branch. false means "look again with patch_intact", not "overwritten".
struct IntactSet {
    static constexpr size_t kMax = 16;
    const uint64_t *qword[kMax];
    uint64_t ours[kMax];
    size_t n = 0;
};
void patch_intact_set(const PatchSite *sites, size_t n, IntactSet *set);
inline bool patch_intact_quick(const IntactSet &set)
{
    uint64_t differ = 0;
    for (size_t i = 0; i < set.n; i++) {
        uint64_t v;
        // A load the compiler may not drop or merge (code is read as data, see code_load).
        asm volatile("movq (%1), %0" : "=r"(v) : "r"(set.qword[i]));
        differ |= v ^ set.ours[i];
    }
    return differ == 0;
}

// Patch every site (side effects only on success or partial failure, which is undone).
int patch_install(PatchSite *sites, size_t n, std::string *why);
// Restore every active site's saved bytes (leaves alone an entry someone patched over ours).
void patch_remove(PatchSite *sites, size_t n);

// Is pc inside the main program's own code? The hooks reap (run device deregistrations) only
// for calls made from there: a call from libc may hold malloc's locks, a call from another
// library (a driver, an MPI) may hold that library's locks, which its dereg could need.
bool pc_in_main_program(uintptr_t pc) noexcept;

// Human-readable line about the patch method, for describe().
std::string patch_method();

}  // namespace vmt

#endif
