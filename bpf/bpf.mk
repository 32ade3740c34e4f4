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

