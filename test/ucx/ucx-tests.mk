# test/ucx/: UCX's own ucs_rcache (io_uring fixed buffers) against the scenario suite, without
# libvmtrack-ucx and with it for every tracker available (included from ucx-memtype/ucx.mk).
if HAVE_UCX
check_PROGRAMS += test/ucx/test_ucx_rcache
TESTS += test/ucx/test_ucx_rcache
test_ucx_test_ucx_rcache_SOURCES = test/ucx/test_ucx_rcache.c test/ucx/provider_ucx.c \
	test/ucx/provider_ucx.h
test_ucx_test_ucx_rcache_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/test $(CHECK_CFLAGS) \
	$(URING_CFLAGS) $(UCX_CFLAGS) \
	-DVMT_UCX_MODULE_PATH='"$(abs_top_builddir)/.libs/libvmtrack-ucx.so"'
test_ucx_test_ucx_rcache_LDADD = libscenarios.la libvmtrack.la $(CHECK_LIBS) $(URING_LIBS) \
	-lucs -lucm -ldl
EXTRA_test_ucx_test_ucx_rcache_DEPENDENCIES = libvmtrack-ucx.la
endif
