# bpf/: vmtrackd, the daemon of the bpf tracker (doc/trackers.md), its BPF programs and its
# systemd unit. Built only where configure found clang, bpftool and libbpf (HAVE_BPF); the
# tracker's client (common/trackers/bpf.cc) is part of libvmtrack either way. The programs
# read x86-64 registers in their kprobe, like the rest of vmtrack.
EXTRA_DIST += bpf/vmtrack.bpf.c bpf/vmtrackd.service.in

if HAVE_BPF
sbin_PROGRAMS += vmtrackd
vmtrackd_SOURCES = bpf/vmtrackd.c bpf/vmtrack_bpf_abi.h
nodist_vmtrackd_SOURCES = bpf/vmtrack.skel.h
vmtrackd_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_builddir)/bpf -I$(top_srcdir)/bpf $(LIBBPF_CFLAGS)
vmtrackd_LDADD = $(LIBBPF_LIBS)
$(vmtrackd_OBJECTS): bpf/vmtrack.skel.h

# The programs are compiled for the BPF target and embedded in the daemon (bpftool's skeleton).
bpf/vmtrack.bpf.o: $(top_srcdir)/bpf/vmtrack.bpf.c $(top_srcdir)/bpf/vmtrack_bpf_abi.h
	@$(MKDIR_P) bpf
	$(AM_V_CC)$(BPF_CLANG) -g -O2 -target bpf $(WARN_CFLAGS) -I/usr/include/$(BPF_MULTIARCH) \
	  -I$(top_srcdir)/bpf $(LIBBPF_CFLAGS) -c $(top_srcdir)/bpf/vmtrack.bpf.c -o $@
bpf/vmtrack.skel.h: bpf/vmtrack.bpf.o
	$(AM_V_GEN)$(BPFTOOL) gen skeleton bpf/vmtrack.bpf.o name vmtrack_bpf >$@.tmp && mv $@.tmp $@
CLEANFILES += bpf/vmtrack.bpf.o bpf/vmtrack.skel.h

systemdunitdir = $(prefix)/lib/systemd/system
systemdunit_DATA = bpf/vmtrackd.service
bpf/vmtrackd.service: $(top_srcdir)/bpf/vmtrackd.service.in
	@$(MKDIR_P) bpf
	$(AM_V_GEN)sed 's|@sbindir[@]|$(sbindir)|g' $(top_srcdir)/bpf/vmtrackd.service.in >$@
CLEANFILES += bpf/vmtrackd.service
endif

# Its tests (test/bpf/): they need a running vmtrackd, so `make check` on the host skips them
# (exit 77) and `make check-bpf-vm` runs them in the guest (test/bpf/check-bpf.sh).
EXTRA_DIST += test/bpf/check-bpf.sh test/bpf/daemon.sh
check_PROGRAMS += test/bpf/test_bpf_tracker test/bpf/bpf_daemon_hostile test/bpf/bpf_bench
TESTS += test/bpf/test_bpf_tracker test/bpf/bpf_daemon_hostile
test_bpf_test_bpf_tracker_SOURCES = test/bpf/test_bpf_tracker.c
test_bpf_test_bpf_tracker_CFLAGS = $(TEST_CFLAGS) $(URING_CFLAGS)
test_bpf_test_bpf_tracker_LDADD = $(TEST_LDADD) $(URING_LIBS)
test_bpf_bpf_daemon_hostile_SOURCES = test/bpf/bpf_daemon_hostile.c bpf/vmtrack_bpf_abi.h
test_bpf_bpf_bench_SOURCES = test/bpf/bpf_bench.c
test_bpf_bpf_bench_LDADD = libvmtrack.la

BPF_GUEST_BINARIES = test/bpf/test_bpf_tracker$(EXEEXT) test/bpf/bpf_daemon_hostile$(EXEEXT) \
	test/bpf/bpf_bench$(EXEEXT) vmtrack$(EXEEXT)
if HAVE_BPF
BPF_GUEST_BINARIES += vmtrackd$(EXEEXT)
endif
check-bpf-vm: $(BPF_GUEST_BINARIES)
	$(VM_BPF_ACCEL) $(VM_RUN) --no-kmod --timeout $(VM_TIMEOUT) --share $(abs_top_builddir) -- \
	  $(SHELL) $(abs_top_srcdir)/test/bpf/check-bpf.sh $(abs_top_builddir) $(abs_top_srcdir)
