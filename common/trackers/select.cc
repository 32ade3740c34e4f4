// Which tracker a cache uses: the one named, or for "auto" the best one this machine offers.
#include "config.h"

#include <cerrno>
#include <cstring>

#include "trackers/select.h"

namespace vmt {

const TrackerKind kAutoTrackers[] = {
    {"kmod", kmod_tracker_probe, kmod_tracker_create},
    {"bpf", bpf_tracker_probe, bpf_tracker_create},
    {"hooks", hooks_tracker_probe, hooks_tracker_create},
    {"uffd", uffd_tracker_probe, uffd_tracker_create},
};
const size_t kAutoTrackerCount = sizeof kAutoTrackers / sizeof kAutoTrackers[0];

int select_tracker(const char *name, TrackerSink *sink, std::unique_ptr<Tracker> *out,
                   std::string *report)
{
    if (!name || !*name)
        name = "auto";
    report->clear();
    if (strcmp(name, "none") == 0) {
        *report = "none: chosen by name (manual invalidation with vmt_invalidate only)\n";
        return none_tracker_create(sink, out, report);
    }
    if (strcmp(name, "pass") == 0) {
        *report = "pass: chosen by name (nothing is cached)\n";
        return pass_tracker_create(sink, out, report);
    }
    bool automatic = strcmp(name, "auto") == 0;
    int first_error = 0;
    for (size_t i = 0; i < kAutoTrackerCount; i++) {
        const TrackerKind &k = kAutoTrackers[i];
        if (!automatic && strcmp(name, k.name) != 0)
            continue;
        std::string why;
        int rc = k.create(sink, out, &why);
        if (rc == 0) {
            *report += std::string(k.name) + ": in use" +
                       (automatic ? " (the best tracker available here)" : " (chosen by name)") + "\n";
            // Say why the better ones were passed over, and what the rest would say.
            for (size_t j = i + 1; automatic && j < kAutoTrackerCount; j++) {
                std::string w;
                int prc = kAutoTrackers[j].probe(&w);
                *report += std::string(kAutoTrackers[j].name) + ": " +
                           (prc == 0 ? "available, not used (" + std::string(k.name) + " is preferred)"
                                     : "unavailable: " + w) + "\n";
            }
            return 0;
        }
        *report += std::string(k.name) + ": unavailable: " + why + "\n";
        if (!first_error)
            first_error = rc;
        if (!automatic)
            return rc;
    }
    if (!automatic) {
        *report = std::string("unknown tracker \"") + name + "\" (auto, kmod, bpf, hooks, uffd, none, pass)\n";
        return -EINVAL;
    }
    *report += "pass: in use: no tracker is available, so nothing is cached (every vmt_get "
               "registers, the last vmt_put deregisters); \"none\" (manual vmt_invalidate) is "
               "used only when asked for by name\n";
    return pass_tracker_create(sink, out, report);
}

}  // namespace vmt
