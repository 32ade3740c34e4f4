# ofi-monitor/: libvmtrack-ofi, vmtrack's memory monitor imported into libfabric's MR cache
# (doc/ofi.md), and its tests (test/ofi/). The monitor itself is a convenience library so that
# the contract tests can drive it with a notify of their own.
if HAVE_OFI
noinst_LTLIBRARIES += libvmtrack-ofi-core.la
libvmtrack_ofi_core_la_SOURCES = ofi-monitor/monitor.c ofi-monitor/monitor.h \
	ofi-monitor/ranges.c ofi-monitor/ranges.h ofi-monitor/arms.c ofi-monitor/arms.h \
	ofi-monitor/queue.c ofi-monitor/queue.h \
	ofi-monitor/vmtrack_ofi.h
libvmtrack_ofi_core_la_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/ofi-monitor $(OFI_CFLAGS)
libvmtrack_ofi_core_la_CFLAGS = $(AM_CFLAGS) -fvisibility=hidden

lib_LTLIBRARIES += libvmtrack-ofi.la
vmtrackofiincdir = $(includedir)/vmtrack
vmtrackofiinc_HEADERS = ofi-monitor/vmtrack_ofi.h
libvmtrack_ofi_la_SOURCES = ofi-monitor/import.c
libvmtrack_ofi_la_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/ofi-monitor $(OFI_CFLAGS)
libvmtrack_ofi_la_CFLAGS = $(AM_CFLAGS) -fvisibility=hidden
libvmtrack_ofi_la_LIBADD = libvmtrack-ofi-core.la libvmtrack.la $(OFI_LIBS) -lpthread
libvmtrack_ofi_la_LDFLAGS = -version-info 0:0:0 \
	-Wl,--version-script=$(srcdir)/ofi-monitor/libvmtrack-ofi.map
EXTRA_libvmtrack_ofi_la_DEPENDENCIES = ofi-monitor/libvmtrack-ofi.map
endif
EXTRA_DIST += ofi-monitor/libvmtrack-ofi.map doc/ofi.md

include test/ofi/ofi-tests.mk
