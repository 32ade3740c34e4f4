# Tests of the Open MPI rcache component (included from ompi-rcache/ompi.mk, inside
# `if OMPI_COMPONENT`). They load the component from the build tree (test/ompi/ompi_testenv.c).
OMPI_TEST_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir) -I$(top_srcdir)/tools \
	$(OMPI_INTERNAL_CPPFLAGS) $(CHECK_CFLAGS) $(URING_CFLAGS) \
	-DVMT_OMPI_BUILDDIR='"$(abs_top_builddir)"' \
	-DVMT_OMPI_SYSTEM_COMPONENTDIR='"$(OMPI_SYSTEM_COMPONENTDIR)"'
OMPI_TEST_LIBS = libvmtrack.la $(OMPI_LIBS) $(OMPI_PAL_LIBS) $(CHECK_LIBS)
OMPI_TEST_LDOPTS = $(OMPI_RPATH)
OMPI_TEST_DEPS = mca_rcache_vmtrack.la

# The component through Open MPI's framework (fake BTL): semantics a BTL relies on.
check_PROGRAMS += test/ompi/test_ompi_framework
TESTS += test/ompi/test_ompi_framework
test_ompi_test_ompi_framework_SOURCES = test/ompi/test_ompi_framework.c \
	test/ompi/ompi_testenv.c test/ompi/ompi_testenv.h \
	ompi-rcache/entry_owner.c ompi-rcache/entry_owner.h \
	ompi-rcache/takeover_gate.c ompi-rcache/takeover_gate.h
test_ompi_test_ompi_framework_CPPFLAGS = $(OMPI_TEST_CPPFLAGS)
if HAVE_UCX
# UCX is there: the guard test loads it to patch libc after the takeover
test_ompi_test_ompi_framework_CPPFLAGS += -DVMT_OMPI_TEST_UCX=1
endif
test_ompi_test_ompi_framework_LDADD = $(OMPI_TEST_LIBS)
test_ompi_test_ompi_framework_LDFLAGS = $(OMPI_TEST_LDOPTS)
EXTRA_test_ompi_test_ompi_framework_DEPENDENCIES = $(OMPI_TEST_DEPS)

# ... and "grdma" asked for by name with --mca rcache vmtrack (served by vmtrack on 5.0+).
TESTS += test/ompi/grdma_served.sh

# The takeover decision, one condition at a time, and the release check (no MPI).
check_PROGRAMS += test/ompi/test_ompi_takeover
TESTS += test/ompi/test_ompi_takeover
test_ompi_test_ompi_takeover_SOURCES = test/ompi/test_ompi_takeover.c \
	ompi-rcache/takeover_gate.c ompi-rcache/takeover_gate.h \
	ompi-rcache/ompi_release.c ompi-rcache/ompi_release.h
test_ompi_test_ompi_takeover_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir) $(CHECK_CFLAGS)
test_ompi_test_ompi_takeover_LDADD = $(CHECK_LIBS)

# The scenario suite through the framework, for vmtrack (each tracker) and grdma.
check_PROGRAMS += test/ompi/test_ompi_scenarios
TESTS += test/ompi/test_ompi_scenarios
test_ompi_test_ompi_scenarios_SOURCES = test/ompi/test_ompi_scenarios.c \
	test/ompi/ompi_provider.c test/ompi/ompi_provider.h \
	test/ompi/ompi_testenv.c test/ompi/ompi_testenv.h
test_ompi_test_ompi_scenarios_CPPFLAGS = $(OMPI_TEST_CPPFLAGS)
test_ompi_test_ompi_scenarios_LDADD = libscenarios.la $(OMPI_TEST_LIBS) $(URING_LIBS)
test_ompi_test_ompi_scenarios_LDFLAGS = $(OMPI_TEST_LDOPTS)
EXTRA_test_ompi_test_ompi_scenarios_DEPENDENCIES = $(OMPI_TEST_DEPS)

# ... and with --mca memory patcher (Open MPI's patcher stays: the mode before the takeover).
TESTS += test/ompi/scenarios_patcher.sh

# The MPI job for mpirun -np 2 through a real BTL (test/ompi/mpirun_rxe.sh, in the guest rig).
check_PROGRAMS += test/ompi/mpi_rdma_check
test_ompi_mpi_rdma_check_SOURCES = test/ompi/mpi_rdma_check.c test/ompi/word_pattern.h
test_ompi_mpi_rdma_check_CPPFLAGS = $(AM_CPPFLAGS) -isystem $(OMPI_PREFIX_INC)
test_ompi_mpi_rdma_check_LDADD = libvmtrack.la $(OMPI_LIBS)
test_ompi_mpi_rdma_check_LDFLAGS = $(OMPI_TEST_LDOPTS)

# mpirun -np 2 --mca rcache vmtrack on the host (vader, and pml ucx): vmtrack's hooks the only
# patcher, Open MPI's and UCX's consumers still get events.
check_PROGRAMS += test/ompi/mpi_hooks_check
test_ompi_mpi_hooks_check_SOURCES = test/ompi/mpi_hooks_check.c \
	ompi-rcache/entry_owner.c ompi-rcache/entry_owner.h
test_ompi_mpi_hooks_check_CPPFLAGS = $(OMPI_TEST_CPPFLAGS)
test_ompi_mpi_hooks_check_LDADD = $(OMPI_LIBS) $(OMPI_PAL_LIBS) -ldl
test_ompi_mpi_hooks_check_LDFLAGS = $(OMPI_TEST_LDOPTS)
EXTRA_test_ompi_mpi_hooks_check_DEPENDENCIES = $(OMPI_TEST_DEPS)
# ... and three MPI Sessions cycles in one process (Open MPI 5), also run by mpirun_host.sh.
check_PROGRAMS += test/ompi/mpi_sessions_check
test_ompi_mpi_sessions_check_SOURCES = test/ompi/mpi_sessions_check.c \
	ompi-rcache/entry_owner.c ompi-rcache/entry_owner.h
test_ompi_mpi_sessions_check_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir) -isystem $(OMPI_PREFIX_INC)
test_ompi_mpi_sessions_check_LDADD = $(OMPI_LIBS)
test_ompi_mpi_sessions_check_LDFLAGS = $(OMPI_TEST_LDOPTS)
TESTS += test/ompi/mpirun_host.sh
# ... and each condition of the takeover made false: skipped, saying why.
TESTS += test/ompi/takeover_gates.sh

# ompi_info shows the component and its parameters; --mca rcache vmtrack names the fix.
TESTS += test/ompi/ompi_info.sh

# mpirun -np 2 over openib on soft-RoCE in the guest rig (skips, saying why, where it cannot).
TESTS += test/ompi/mpirun_rxe.sh

# mpirun -np 2 with RDMA WRITEs over verbs (rxe0) registered through the framework's vmtrack
# module: run by mpirun_rxe.sh in the guest where openib cannot connect over RoCE.
check_PROGRAMS += test/ompi/mpi_verbs_rdma
test_ompi_mpi_verbs_rdma_SOURCES = test/ompi/mpi_verbs_rdma.c test/ompi/word_pattern.h
test_ompi_mpi_verbs_rdma_CPPFLAGS = $(OMPI_TEST_CPPFLAGS) $(IBVERBS_CFLAGS)
test_ompi_mpi_verbs_rdma_LDADD = libvmtrack.la $(OMPI_LIBS) $(OMPI_PAL_LIBS) $(IBVERBS_LIBS)
test_ompi_mpi_verbs_rdma_LDFLAGS = $(OMPI_TEST_LDOPTS)
EXTRA_test_ompi_mpi_verbs_rdma_DEPENDENCIES = $(OMPI_TEST_DEPS)

# Open MPI 5, pml ucx over rxe0: do registrations let rank 0 send stale pages? The MPICH job's
# program (test/ucx/mpich_stale.c: plain MPI), built against Open MPI; run by mpirun_rxe.sh.
check_PROGRAMS += test/ompi/ompi_stale
test_ompi_ompi_stale_SOURCES = test/ucx/mpich_stale.c test/lib/stale_rounds.h
test_ompi_ompi_stale_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/ucx-memtype -isystem $(OMPI_PREFIX_INC)
test_ompi_ompi_stale_LDADD = $(OMPI_LIBS)
test_ompi_ompi_stale_LDFLAGS = $(OMPI_TEST_LDOPTS)

# mtl ofi and btl ofi over verbs;ofi_rxm (rxe0): stale pages through libfabric's MR cache and
# through the rcache framework; run by mpirun_rxe.sh (test/ompi/ofi_jobs.sh).
OMPI_OFI_VM_DEPS =
if HAVE_OFI
check_PROGRAMS += test/ompi/mpi_ofi_stale
test_ompi_mpi_ofi_stale_SOURCES = test/ompi/mpi_ofi_stale.c test/lib/stale_rounds.h
test_ompi_mpi_ofi_stale_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/ofi-monitor \
	-isystem $(OMPI_PREFIX_INC)
test_ompi_mpi_ofi_stale_LDADD = $(OMPI_LIBS) -ldl
test_ompi_mpi_ofi_stale_LDFLAGS = $(OMPI_TEST_LDOPTS)
OMPI_OFI_VM_DEPS += test/ompi/mpi_ofi_stale$(EXEEXT) libvmtrack-ofi.la
endif
EXTRA_DIST += test/ompi/ofi_jobs.sh

# The guest job on its own: make check-ompi-vm
.PHONY: check-ompi-vm
check-ompi-vm: mca_rcache_vmtrack.la test/ompi/mpi_rdma_check$(EXEEXT) test/ompi/mpi_verbs_rdma$(EXEEXT) \
		test/ompi/ompi_stale$(EXEEXT) $(OMPI_OFI_VM_DEPS)
	VMT_OMPI_VM=1 VMT_BUILDDIR=$(abs_top_builddir) bash $(abs_top_srcdir)/test/ompi/mpirun_rxe.sh

# The component directory the tests make in the build tree (ompi_testenv.c, the scripts).
CLEANFILES += test/ompi/components/mca_rcache_vmtrack.so
