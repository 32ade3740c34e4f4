# libvmtrack: the C++17 core behind include/vmtrack.h. One fragment for the whole library:
#   cache/    the cache (hit, miss, put, retirement, eviction, events, fork)
#   index/    the range index (B+tree), its type-stable pools, per-thread holds
#   trackers/ the tracker interface, selection, none/pass, hooks + patch engine, uffd, kmod client
#   devices/  the built-in devices: io_uring fixed buffers, RDMA verbs
#   util/     environment, log
lib_LTLIBRARIES += libvmtrack.la
include_HEADERS += include/vmtrack.h
vmtrackdevincdir = $(includedir)/vmtrack
vmtrackdevinc_HEADERS = include/vmtrack/iouring.h include/vmtrack/verbs.h
libvmtrack_la_SOURCES = \
	common/api.cc \
	common/cache/cache.h common/cache/internal.h \
	common/cache/lifecycle.cc common/cache/hit.cc common/cache/miss.cc \
	common/cache/retire.cc common/cache/evict.cc common/cache/events.cc \
	common/cache/fork.cc common/cache/stats.cc common/cache/maintain.cc \
	common/index/index.h common/index/pool.h \
	common/index/holds.cc common/index/holds.h \
	common/trackers/tracker.h \
	common/trackers/select.cc common/trackers/select.h \
	common/trackers/none.cc \
	common/trackers/hooks.cc common/trackers/hooks_guard.h \
	common/trackers/hooks_patch.cc common/trackers/hooks_patch.h \
	common/trackers/uffd.cc \
	common/trackers/kmod.cc kmod/uapi/vmtrack_kmod.h \
	common/devices/iouring.cc common/devices/verbs.cc \
	common/util/env.cc common/util/env.h \
	common/util/log.cc common/util/log.h
libvmtrack_la_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/common $(URING_CFLAGS) $(IBVERBS_CFLAGS)
libvmtrack_la_LIBADD = $(URING_LIBS) $(IBVERBS_LIBS) -lpthread -ldl
libvmtrack_la_LDFLAGS = -version-info 0:0:0 -Wl,--version-script=$(srcdir)/common/libvmtrack.map
EXTRA_libvmtrack_la_DEPENDENCIES = common/libvmtrack.map
EXTRA_DIST += common/libvmtrack.map doc/trackers.md
