# test/vm/: the guest rig (test/vm/run, README.md) and test/kmod/: the module's tests.
# `make check-vm` builds vmtrack.ko for the kernel the guest boots, boots it under qemu (TCG)
# and runs test/vm/check-vm.sh inside: the module's contract test, load/unload cycles, the
# scenario suite with the kmod tracker (vmtrack check --tracker kmod) and the figures.
EXTRA_DIST += test/vm/run test/vm/check-vm.sh test/vm/README.md test/kmod/loadcycle.sh \
	test/vm/kernel test/vm/matrix

# Outside the guest (plain `make check`) the contract test finds no /dev/vmtrack and skips.
check_PROGRAMS += test/kmod/kmod_contract test/kmod/kmod_change_log test/kmod/test_kmod_tracker
TESTS += test/kmod/kmod_contract test/kmod/kmod_change_log test/kmod/test_kmod_tracker
test_kmod_kmod_contract_SOURCES = test/kmod/kmod_contract.c test/kmod/kmod_util.h
test_kmod_kmod_contract_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/kmod/uapi $(CHECK_CFLAGS)
test_kmod_kmod_contract_LDADD = $(CHECK_LIBS) -lpthread
test_kmod_kmod_change_log_SOURCES = test/kmod/kmod_change_log.c test/kmod/kmod_util.h
test_kmod_kmod_change_log_CPPFLAGS = $(test_kmod_kmod_contract_CPPFLAGS)
test_kmod_kmod_change_log_LDADD = $(CHECK_LIBS)
test_kmod_test_kmod_tracker_SOURCES = test/kmod/test_kmod_tracker.c
test_kmod_test_kmod_tracker_CFLAGS = $(TEST_CFLAGS)
test_kmod_test_kmod_tracker_LDADD = $(TEST_LDADD)

VM_RUN = $(top_srcdir)/test/vm/run
# check-vm.sh runs the bpf tracker's tests too (test/bpf/check-bpf.sh, a few minutes)
VM_TIMEOUT = 900

VM_GUEST_BINARIES = test/kmod/kmod_contract$(EXEEXT) test/kmod/kmod_change_log$(EXEEXT) \
	bench/kmod_bench$(EXEEXT) \
	test/kmod/test_kmod_tracker$(EXEEXT) vmtrack$(EXEEXT) $(BPF_GUEST_BINARIES)

# The guests that attach and detach vmtrackd's BPF programs (check-vm.sh runs check-bpf.sh) run
# every vCPU on one host thread: under multi-threaded TCG a daemon restart while other code
# runs through the patched functions locked up the guest kernel (6.1: soft lockups on both
# vCPUs in restart_racing_registrations; 6.12: int3 oopses), see test/vm/README.md.
# VMT_VM_ACCEL=tcg overrides.
VM_BPF_ACCEL = VMT_VM_ACCEL="$${VMT_VM_ACCEL:-tcg,thread=single}"

check-vm: kmod $(VM_GUEST_BINARIES) test/test_verbs$(EXEEXT)
	$(VM_BPF_ACCEL) $(VM_RUN) --timeout $(VM_TIMEOUT) --kmod $(KMOD_KO) --share $(abs_top_builddir) -- \
	  $(SHELL) $(abs_top_srcdir)/test/vm/check-vm.sh $(abs_top_builddir) $(abs_top_srcdir)
	@echo "==== the verbs device on soft-RoCE (skips on the host: no RDMA device there)"
	$(VM_RUN) --rxe --timeout 600 --kmod $(KMOD_KO) --share $(abs_top_builddir) -- \
	  $(abs_top_builddir)/test/test_verbs

# The same guest tests on Debian's other kernels (test/vm/matrix; test/vm/kernel unpacks them
# under /tmp/vmtrack-kernels without installing). Empty: the running release's list, chosen in
# test/vm/matrix (Debian 12: its 6.12 and Debian 11's 5.10; Debian 13: trixie-backports' 7.x);
# `make check-matrix-vm VM_KERNELS="7 6.12"` names others.
VM_KERNELS =
check-matrix-vm: $(VM_GUEST_BINARIES)
	$(VM_BPF_ACCEL) VM_TIMEOUT=$(VM_TIMEOUT) $(SHELL) $(top_srcdir)/test/vm/matrix $(abs_top_builddir) \
	  $(abs_top_srcdir) $(VM_KERNELS)
