#ifndef VMTRACK_COMMON_TRACKER_SELECT_H
#define VMTRACK_COMMON_TRACKER_SELECT_H

#include "trackers/tracker.h"

namespace vmt {

// Creates the tracker called `name` ("auto"/NULL: kmod, bpf, hooks, uffd, else pass). *report gets
// one line per tracker considered: "name: in use", "name: unavailable: why", ...
// 0, -EINVAL (unknown name), or the named tracker's error.
int select_tracker(const char *name, TrackerSink *sink, std::unique_ptr<Tracker> *out,
                   std::string *report);

}  // namespace vmt

#endif
