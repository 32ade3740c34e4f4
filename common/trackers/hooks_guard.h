// The hooks tracker's per-thread re-entrancy mark. Code inside vmtrack that may call munmap &
// co. (device deregistration, freeing memory) can hold a HooksGuard: a hooked call made under it
// still invalidates the cache (correctness) but does not call TrackerSink::reap() (no
// recursion into the cache from inside the cache). Cheap: one initial-exec TLS counter.
#ifndef VMTRACK_COMMON_HOOKS_GUARD_H
#define VMTRACK_COMMON_HOOKS_GUARD_H

namespace vmt {

void hooks_enter() noexcept;
void hooks_leave() noexcept;
bool hooks_inside() noexcept;

struct HooksGuard {
    HooksGuard() noexcept { hooks_enter(); }
    ~HooksGuard() { hooks_leave(); }
    HooksGuard(const HooksGuard &) = delete;
    HooksGuard &operator=(const HooksGuard &) = delete;
};

}  // namespace vmt

#endif
