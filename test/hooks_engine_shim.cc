// C entry points into the hooks' patching engine (common/trackers/hooks_patch.cc, compiled into the test
// itself: libvmtrack does not export it), for test_hooks_engine.c.
#include <cstdio>
#include <cstring>

#include "trackers/hooks_patch.h"

namespace {
vmt::PatchSite g_site = {"synthetic", nullptr};
}

extern "C" int shim_patch(void *entry, void *hook, char *why, size_t whylen)
{
    g_site.entry = static_cast<uint8_t *>(entry);
    g_site.hook = hook;
    g_site.active = false;
    std::string w;
    int rc = vmt::patch_install(&g_site, 1, &w);
    snprintf(why, whylen, "%s", w.c_str());
    return rc;
}

extern "C" void shim_unpatch(void)
{
    vmt::patch_remove(&g_site, 1);
}

extern "C" int shim_foreign(const void *entry, char *owner, size_t len)
{
    std::string o;
    bool f = vmt::patch_entry_foreign(static_cast<const uint8_t *>(entry), &o);
    snprintf(owner, len, "%s", o.c_str());
    return f;
}
