# ucx-memtype/: libvmtrack-ucx, which makes UCX's registration caches (1.13 to 1.23) take their
# memory events from vmtrack (doc/ucx.md), and its tests (test/ucx/).
if UCX_MODULE
lib_LTLIBRARIES += libvmtrack-ucx.la
vmtrackucxincdir = $(includedir)/vmtrack
vmtrackucxinc_HEADERS = ucx-memtype/vmtrack_ucx.h
libvmtrack_ucx_la_SOURCES = ucx-memtype/vmtrack_ucx.h \
	ucx-memtype/ucx_release.c ucx-memtype/ucx_release.h \
	ucx-memtype/ucx_feed.c ucx-memtype/ucx_feed.h \
	ucx-memtype/rcache_watch.c ucx-memtype/rcache_watch.h \
	ucx-memtype/rcache_native.c ucx-memtype/uct_witness.c ucx-memtype/uct_witness.h \
	ucx-memtype/md_lock.c ucx-memtype/md_lock.h
libvmtrack_ucx_la_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/ucx-memtype $(UCX_CFLAGS)
libvmtrack_ucx_la_CFLAGS = $(AM_CFLAGS) -fvisibility=hidden -fno-plt $(LTO_FLAGS)
libvmtrack_ucx_la_LIBADD = libvmtrack.la -lucs -lucm -ldl -lpthread
libvmtrack_ucx_la_LDFLAGS = -version-info 0:0:0 \
	-Wl,--version-script=$(srcdir)/ucx-memtype/libvmtrack-ucx.map $(LTO_FLAGS)
EXTRA_libvmtrack_ucx_la_DEPENDENCIES = ucx-memtype/libvmtrack-ucx.map
endif
EXTRA_DIST += ucx-memtype/libvmtrack-ucx.map

# The ucx.conf line that replaces the UCX_MEM_MMAP_HOOK_MODE=none environment variable.
if UCX_MODULE
vmtrackucxconfdir = $(datadir)/vmtrack
vmtrackucxconf_DATA = ucx-memtype/ucx.conf
endif
EXTRA_DIST += ucx-memtype/ucx.conf

include test/ucx/ucx-tests.mk
EXTRA_DIST += doc/ucx.md
