# The Check tests of `make check`: the core cache, the user-space trackers, the built-in devices,
# two libraries sharing the process-wide cache, the scenario suite and its stress.
# Tests of the core cache (Check).
check_PROGRAMS += test/test_cache
TESTS += test/test_cache
test_test_cache_SOURCES = test/test_cache.c test/fake_device.h test/check_run.h
test_test_cache_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
test_test_cache_LDADD = libvmtrack.la $(CHECK_LIBS) -lpthread
# Every Check program here (some built only in the guest or with MPI/UCX) runs through it.
EXTRA_DIST += test/check_run.h

# Tests of the user-space trackers: hooks and uffd, through the public API with a
# counting fake device.
check_PROGRAMS += test/test_hooks test/test_uffd test/test_hooks_engine
TESTS += test/test_hooks test/test_uffd test/test_hooks_engine
test_test_hooks_SOURCES = test/test_hooks.c test/test_hooks_uffd_common.h test/fake_device.h
test_test_hooks_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
test_test_hooks_LDADD = libvmtrack.la $(CHECK_LIBS) -lpthread -ldl
test_test_uffd_SOURCES = test/test_uffd.c test/test_hooks_uffd_common.h test/fake_device.h
test_test_uffd_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
test_test_uffd_LDADD = libvmtrack.la $(CHECK_LIBS) -lpthread
# the patching engine on synthetic code (compiled in: libvmtrack does not export it)
test_test_hooks_engine_SOURCES = test/test_hooks_engine.c test/hooks_engine_shim.cc \
	common/trackers/hooks_patch.cc common/trackers/hooks_patch.h
test_test_hooks_engine_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/common
test_test_hooks_engine_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
test_test_hooks_engine_LDADD = $(CHECK_LIBS) -lpthread -ldl

# Next to a real other patcher (UCX ucm, bistro mode): hooks must refuse, not stack.
if HAVE_UCX
check_PROGRAMS += test/test_hooks_ucm
TESTS += test/test_hooks_ucm
test_test_hooks_ucm_SOURCES = test/test_hooks_ucm.c
test_test_hooks_ucm_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(UCX_CFLAGS)
test_test_hooks_ucm_LDADD = libvmtrack.la $(UCX_LIBS) -lucs $(CHECK_LIBS) -ldl
endif

# Tests of the built-in devices (io_uring fixed buffers, verbs) and of two libraries sharing the
# process-wide cache.
check_PROGRAMS += test/test_iouring test/test_verbs test/test_twolib
TESTS += test/test_iouring test/test_verbs test/test_twolib

test_test_iouring_SOURCES = test/test_iouring.c
test_test_iouring_CPPFLAGS = $(AM_CPPFLAGS) $(URING_CFLAGS) $(CHECK_CFLAGS)
test_test_iouring_LDADD = libvmtrack.la $(CHECK_LIBS) $(URING_LIBS) -lpthread

test_test_verbs_SOURCES = test/test_verbs.c
test_test_verbs_CPPFLAGS = $(AM_CPPFLAGS) $(IBVERBS_CFLAGS) $(CHECK_CFLAGS)
test_test_verbs_LDADD = libvmtrack.la $(CHECK_LIBS) $(IBVERBS_LIBS)

# Two shared libraries built separately from one source, loaded by test_twolib with dlopen.
check_LTLIBRARIES += test/libtwolib_a.la test/libtwolib_b.la
test_libtwolib_a_la_SOURCES = test/twolib_lib.c
test_libtwolib_a_la_CPPFLAGS = $(AM_CPPFLAGS) $(URING_CFLAGS) -DTWOLIB_NAME='"a"'
test_libtwolib_a_la_LDFLAGS = -module -avoid-version -shared -rpath /nowhere
test_libtwolib_a_la_LIBADD = libvmtrack.la
test_libtwolib_b_la_SOURCES = test/twolib_lib.c
test_libtwolib_b_la_CPPFLAGS = $(AM_CPPFLAGS) $(URING_CFLAGS) -DTWOLIB_NAME='"b"'
test_libtwolib_b_la_LDFLAGS = -module -avoid-version -shared -rpath /nowhere
test_libtwolib_b_la_LIBADD = libvmtrack.la

test_test_twolib_SOURCES = test/test_twolib.c
test_test_twolib_CPPFLAGS = $(AM_CPPFLAGS) $(URING_CFLAGS) $(CHECK_CFLAGS) \
	-DTWOLIB_DIR='"$(abs_builddir)/test/.libs"'
test_test_twolib_LDADD = libvmtrack.la $(CHECK_LIBS) $(URING_LIBS) -ldl
EXTRA_test_test_twolib_DEPENDENCIES = test/libtwolib_a.la test/libtwolib_b.la

# The scenario suite (tools/scenarios/) for every tracker, and its concurrency stress.

check_PROGRAMS += test/test_scenarios test/test_stress
TESTS += test/test_scenarios test/test_stress
test_test_scenarios_SOURCES = test/test_scenarios.c
test_test_scenarios_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tools $(CHECK_CFLAGS)
test_test_scenarios_LDADD = libscenarios.la libvmtrack.la $(CHECK_LIBS) $(URING_LIBS)
test_test_stress_SOURCES = test/test_stress.c
test_test_stress_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tools $(CHECK_CFLAGS)
test_test_stress_LDADD = libscenarios.la libvmtrack.la $(CHECK_LIBS) $(URING_LIBS) -lpthread

# The command line of `vmtrack check`.
TESTS += test/check_cli.sh
EXTRA_DIST += test/check_cli.sh doc/scenarios.md

# A device's reg runs only inside vmt_get, in the calling thread, with no cache lock held.
check_PROGRAMS += test/test_reg_context
TESTS += test/test_reg_context
test_test_reg_context_SOURCES = test/test_reg_context.c test/check_run.h
test_test_reg_context_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
test_test_reg_context_LDADD = libvmtrack.la $(CHECK_LIBS) -lpthread

# vmt_reg_invalidate and vmt_device_flush leave the other devices' registrations alone.
check_PROGRAMS += test/test_maintain
TESTS += test/test_maintain
test_test_maintain_SOURCES = test/test_maintain.c test/check_run.h
test_test_maintain_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
test_test_maintain_LDADD = libvmtrack.la $(CHECK_LIBS)
