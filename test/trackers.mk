# Tests of the user-space trackers (issue 3): hooks and uffd, through the public API with a
# counting fake device; and their micro-benchmark (built by `make check`, not run as a test).
check_PROGRAMS += test/test_hooks test/test_uffd test/test_hooks_engine test/bench_trackers
TESTS += test/test_hooks test/test_uffd test/test_hooks_engine
test_test_hooks_SOURCES = test/test_hooks.c test/test_hooks_uffd_common.h test/fake_device.h
test_test_hooks_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
test_test_hooks_LDADD = libvmtrack.la $(CHECK_LIBS) -lpthread -ldl
test_test_uffd_SOURCES = test/test_uffd.c test/test_hooks_uffd_common.h test/fake_device.h
test_test_uffd_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
test_test_uffd_LDADD = libvmtrack.la $(CHECK_LIBS) -lpthread
# the patching engine on synthetic code (compiled in: libvmtrack does not export it)
test_test_hooks_engine_SOURCES = test/test_hooks_engine.c test/hooks_engine_shim.cc \
	common/hooks_patch.cc common/hooks_patch.h
test_test_hooks_engine_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
test_test_hooks_engine_LDADD = $(CHECK_LIBS) -lpthread -ldl
test_bench_trackers_SOURCES = test/bench_trackers.c
test_bench_trackers_LDADD = libvmtrack.la

# Next to a real other patcher (UCX ucm, bistro mode): hooks must refuse, not stack.
if HAVE_UCX
check_PROGRAMS += test/test_hooks_ucm
TESTS += test/test_hooks_ucm
test_test_hooks_ucm_SOURCES = test/test_hooks_ucm.c
test_test_hooks_ucm_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(UCX_CFLAGS)
test_test_hooks_ucm_LDADD = libvmtrack.la $(UCX_LIBS) -lucs $(CHECK_LIBS) -ldl
endif
