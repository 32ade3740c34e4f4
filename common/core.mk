# libvmtrack: the C++ core (cache, index, holds, trackers' interface) behind include/vmtrack.h.
lib_LTLIBRARIES += libvmtrack.la
include_HEADERS += include/vmtrack.h
nobase_include_HEADERS += include/vmtrack/iouring.h include/vmtrack/verbs.h
libvmtrack_la_SOURCES = \
	common/api.cc \
	common/cache.cc common/cache.h \
	common/index.h \
	common/holds.cc common/holds.h \
	common/pool.h \
	common/env.cc common/env.h \
	common/log.cc common/log.h \
	common/tracker.h common/tracker_none.cc common/tracker_select.cc common/tracker_select.h
libvmtrack_la_CPPFLAGS = $(AM_CPPFLAGS) $(URING_CFLAGS) $(IBVERBS_CFLAGS)
libvmtrack_la_LIBADD = $(URING_LIBS) $(IBVERBS_LIBS) -lpthread
libvmtrack_la_LDFLAGS = -version-info 0:0:0 -Wl,--version-script=$(srcdir)/common/libvmtrack.map
EXTRA_libvmtrack_la_DEPENDENCIES = common/libvmtrack.map
EXTRA_DIST += common/libvmtrack.map
