# test/ofi/: libvmtrack-ofi's tests (included from ofi-monitor/ofi.mk).
#   test_ofi_contract  the monitor's contract with a stand-in for libfabric's side (host)
#   test_ofi_import    the import into the real libfabric and its refusals (host)
#   test_ofi_rdma      RDMA over verbs;ofi_rxm with libfabric's MR cache: scenarios for each
#                      monitor, cache stats, stress, figures (needs an RDMA device: skips on
#                      the host, `make check-ofi-vm` runs it on soft-RoCE in the guest rig)
if HAVE_OFI
check_PROGRAMS += test/ofi/test_ofi_contract test/ofi/test_ofi_import test/ofi/test_ofi_rdma
TESTS += test/ofi/test_ofi_contract test/ofi/test_ofi_import test/ofi/test_ofi_rdma
test_ofi_test_ofi_contract_SOURCES = test/ofi/test_ofi_contract.c
test_ofi_test_ofi_contract_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/ofi-monitor \
	-I$(top_srcdir)/test $(OFI_CFLAGS) $(CHECK_CFLAGS)
test_ofi_test_ofi_contract_LDADD = libvmtrack-ofi-core.la libvmtrack.la $(OFI_LIBS) \
	$(CHECK_LIBS) -lpthread

test_ofi_test_ofi_import_SOURCES = test/ofi/test_ofi_import.c
test_ofi_test_ofi_import_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/ofi-monitor $(OFI_CFLAGS) \
	-DVMT_OFI_MODULE_PATH='"$(abs_top_builddir)/.libs/libvmtrack-ofi.so"'
test_ofi_test_ofi_import_LDADD = $(OFI_LIBS) -ldl
EXTRA_test_ofi_test_ofi_import_DEPENDENCIES = libvmtrack-ofi.la

test_ofi_test_ofi_rdma_SOURCES = test/ofi/test_ofi_rdma.c test/ofi/ofi_rig.c \
	test/ofi/ofi_rig.h test/ofi/ofi_suite.h test/ofi/ofi_scenarios.c test/ofi/ofi_stress.c \
	test/ofi/ofi_bench.c test/ofi/ofi_reuse.c
test_ofi_test_ofi_rdma_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/ofi-monitor $(OFI_CFLAGS) \
	-DVMT_OFI_MODULE_PATH='"$(abs_top_builddir)/.libs/libvmtrack-ofi.so"'
test_ofi_test_ofi_rdma_LDADD = $(OFI_LIBS) -ldl -lpthread
EXTRA_test_ofi_test_ofi_rdma_DEPENDENCIES = libvmtrack-ofi.la

# In the guest rig: Debian's kernel with vmtrack.ko (kmod tracker) and soft-RoCE rxe0.
.PHONY: check-ofi-vm
check-ofi-vm: test/ofi/test_ofi_rdma$(EXEEXT) libvmtrack-ofi.la
	$(abs_top_srcdir)/test/vm/run --rxe --timeout 480 -- ./test/ofi/test_ofi_rdma --all
endif
