# User-space trackers: libc entry hooks and userfaultfd (issue 3), and their micro-benchmark.
libvmtrack_la_SOURCES += \
	common/tracker_hooks.cc common/hooks_patch.cc common/hooks_patch.h common/hooks_guard.h \
	common/tracker_uffd.cc \
	common/tracker_bench.cc common/tracker_bench.h
libvmtrack_la_LIBADD += -ldl
EXTRA_DIST += doc/trackers.md
