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
