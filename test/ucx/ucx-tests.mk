# test/ucx/: UCX's own ucs_rcache (io_uring fixed buffers) against the scenario suite, without
# libvmtrack-ucx and with it for every tracker available (included from ucx-memtype/ucx.mk).
if UCX_MODULE_SERVES
check_PROGRAMS += test/ucx/test_ucx_rcache
TESTS += test/ucx/test_ucx_rcache
test_ucx_test_ucx_rcache_SOURCES = test/ucx/test_ucx_rcache.c test/ucx/provider_ucx.c \
	test/ucx/provider_ucx.h test/ucx/ucx_rcache_params.h
test_ucx_test_ucx_rcache_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tools $(CHECK_CFLAGS) \
	$(URING_CFLAGS) $(UCX_CFLAGS) \
	-DVMT_UCX_MODULE_PATH='"$(abs_top_builddir)/.libs/libvmtrack-ucx.so"'
test_ucx_test_ucx_rcache_LDADD = libscenarios.la test/lib/libvmttest.la libvmtrack.la $(CHECK_LIBS) $(URING_LIBS) \
	-lucs -lucm -ldl
EXTRA_test_ucx_test_ucx_rcache_DEPENDENCIES = libvmtrack-ucx.la
endif

# A UCP put over RDMA with the module (soft-RoCE in the guest rig; skips without a device).
if UCX_MODULE
check_PROGRAMS += test/ucx/test_ucp_rxe
TESTS += test/ucx/test_ucp_rxe
test_ucx_test_ucp_rxe_SOURCES = test/ucx/test_ucp_rxe.c
test_ucx_test_ucp_rxe_CPPFLAGS = $(AM_CPPFLAGS) $(IBVERBS_CFLAGS) $(UCX_CFLAGS) \
	-I$(top_srcdir)/ucx-memtype \
	-DVMT_UCX_MODULE_PATH='"$(abs_top_builddir)/.libs/libvmtrack-ucx.so"'
test_ucx_test_ucp_rxe_LDADD = libvmtrack.la $(IBVERBS_LIBS) -lucp -lucs -ldl
EXTRA_test_ucx_test_ucp_rxe_DEPENDENCIES = libvmtrack-ucx.la
endif

# A 2-rank MPICH job over soft-RoCE with the module (test/ucx/mpich_rxe.sh, in the guest rig;
# skips, saying why, without VMT_UCX_VM=1 or without Debian's mpich). The job is built with
# MPICH's own wrapper, mpicc.mpich, and links no vmtrack: the same binary runs on stock UCX.
if UCX_MODULE
TESTS += test/ucx/mpich_rxe.sh
if HAVE_MPICH
MPICH_STALE = test/ucx/mpich_stale$(EXEEXT)
$(MPICH_STALE): test/ucx/mpich_stale.c test/lib/stale_rounds.h include/vmtrack.h \
		ucx-memtype/vmtrack_ucx.h include/vmtrack/version.h
	@$(MKDIR_P) test/ucx
	$(AM_V_CC)$(MPICC_MPICH) $(WARN_CFLAGS) $(CFLAGS) -I$(top_srcdir)/include \
		-I$(top_builddir)/include -I$(top_srcdir)/ucx-memtype -o $@ $(srcdir)/test/ucx/mpich_stale.c
MPICH_SEND_COST = test/ucx/mpich_send_cost$(EXEEXT)
$(MPICH_SEND_COST): test/ucx/mpich_send_cost.c ucx-memtype/vmtrack_ucx.h
	@$(MKDIR_P) test/ucx
	$(AM_V_CC)$(MPICC_MPICH) $(WARN_CFLAGS) $(CFLAGS) -I$(top_srcdir)/ucx-memtype \
		-o $@ $(srcdir)/test/ucx/mpich_send_cost.c
check_SCRIPTS = $(MPICH_STALE) $(MPICH_SEND_COST)
CLEANFILES += $(MPICH_STALE) $(MPICH_SEND_COST)
endif
endif
EXTRA_DIST += test/ucx/mpich_rxe.sh test/ucx/mpich_stale.c test/ucx/mpich_send_cost.c

# The tests above in the guest rig (Debian's kernel under qemu with vmtrack.ko, and soft-RoCE
# for the UCP transfer and the MPICH job): `make check-ucx-vm`.
# test_ucx_rcache (the scenario suite with kmod) only where the module serves UCX's rcaches.
if UCX_MODULE
if UCX_MODULE_SERVES
UCX_VM_SCENARIOS = test/ucx/test_ucx_rcache$(EXEEXT)
endif
.PHONY: check-ucx-vm
check-ucx-vm: $(UCX_VM_SCENARIOS) test/ucx/test_ucp_rxe$(EXEEXT) libvmtrack-ucx.la \
		$(MPICH_STALE) $(MPICH_SEND_COST)
	if test -n "$(UCX_VM_SCENARIOS)"; then \
		$(abs_top_srcdir)/test/vm/run --timeout 1500 -- ./test/ucx/test_ucx_rcache; fi
	VMTRACK_TRACKER=kmod $(abs_top_srcdir)/test/vm/run --rxe --timeout 900 -- ./test/ucx/test_ucp_rxe
	VMT_UCX_VM=1 VMT_BUILDDIR=$(abs_top_builddir) $(abs_top_srcdir)/test/ucx/mpich_rxe.sh
endif

# What a caller of UCX's public ucs_rcache_* API may rely on, against stock UCX and with the
# module (deliberate differences: the table in doc/ucx.md).
if UCX_MODULE_SERVES
check_PROGRAMS += test/ucx/test_ucs_rcache_semantics
TESTS += test/ucx/test_ucs_rcache_semantics
test_ucx_test_ucs_rcache_semantics_SOURCES = test/ucx/test_ucs_rcache_semantics.c \
	test/ucx/ucx_rcache_params.h
test_ucx_test_ucs_rcache_semantics_CPPFLAGS = $(AM_CPPFLAGS) $(CHECK_CFLAGS) $(UCX_CFLAGS) \
	-I$(top_srcdir)/ucx-memtype \
	-DVMT_UCX_MODULE_PATH='"$(abs_top_builddir)/.libs/libvmtrack-ucx.so"'
test_ucx_test_ucs_rcache_semantics_LDADD = $(CHECK_LIBS) -lucs -lucm -ldl -lpthread
EXTRA_test_ucx_test_ucs_rcache_semantics_DEPENDENCIES = libvmtrack-ucx.la
endif

# One cache for both stacks: Open MPI's component, a UCX rcache (libvmtrack-ucx linked before
# libucs, not preloaded) and an io_uring user on one buffer and one budget.
if UCX_MODULE_SERVES
if OMPI_COMPONENT
check_PROGRAMS += test/ucx/test_one_cache
TESTS += test/ucx/test_one_cache
test_ucx_test_one_cache_SOURCES = test/ucx/test_one_cache.c test/ucx/ucx_rcache_params.h \
	test/ompi/ompi_testenv.c test/ompi/ompi_testenv.h
test_ucx_test_one_cache_CPPFLAGS = $(OMPI_TEST_CPPFLAGS) -I$(top_srcdir)/test/ompi \
	-I$(top_srcdir)/ucx-memtype $(UCX_CFLAGS)
test_ucx_test_one_cache_LDADD = libvmtrack-ucx.la $(OMPI_TEST_LIBS) $(URING_LIBS) -lucs -lucm
test_ucx_test_one_cache_LDFLAGS = $(OMPI_TEST_LDOPTS)
EXTRA_test_ucx_test_one_cache_DEPENDENCIES = $(OMPI_TEST_DEPS) libvmtrack-ucx.la
endif
endif

# The module under the UCX it was built with, any release from 1.13 to 1.23: the release
# table, the mode per tracker, UCP and UCX's rcache API through the interposers.
if UCX_MODULE
check_PROGRAMS += test/ucx/test_ucx_release
TESTS += test/ucx/test_ucx_release
test_ucx_test_ucx_release_SOURCES = test/ucx/test_ucx_release.c ucx-memtype/ucx_release.c \
	ucx-memtype/ucx_release.h
test_ucx_test_ucx_release_CPPFLAGS = $(AM_CPPFLAGS) $(UCX_CFLAGS) -I$(top_srcdir)/ucx-memtype \
	-DVMT_UCX_MODULE_PATH='"$(abs_top_builddir)/.libs/libvmtrack-ucx.so"'
test_ucx_test_ucx_release_LDADD = -lucp -lucs -lucm -ldl -lpthread
EXTRA_test_ucx_test_ucx_release_DEPENDENCIES = libvmtrack-ucx.la
endif
