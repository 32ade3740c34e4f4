# Tests of the core cache (Check).
check_PROGRAMS += test/test_cache
TESTS += test/test_cache
test_test_cache_SOURCES = test/test_cache.c test/fake_device.h test/check_run.h
test_test_cache_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
test_test_cache_LDADD = libvmtrack.la $(CHECK_LIBS) -lpthread
# Every Check program here (some built only in the guest or with MPI/UCX) runs through it.
EXTRA_DIST += test/check_run.h
