# kmod/: vmtrack.ko is built by Kbuild, not by Automake. `make kmod` builds it against the
# kernel build tree configure found (--with-kernel-build=DIR) in $(KMOD_BUILDDIR), from a copy
# of the sources (Kbuild writes next to its sources; the source tree stays clean).
KMOD_FILES = kmod/vmtrack_main.c kmod/Kbuild kmod/Makefile kmod/uapi/vmtrack_kmod.h
EXTRA_DIST += $(KMOD_FILES) kmod/dkms.conf kmod/.gitignore
KMOD_BUILDDIR = $(abs_top_builddir)/kmod.build
KMOD_KO = $(KMOD_BUILDDIR)/vmtrack.ko

# (FORCE, not .PHONY: automake refuses .PHONY in some fragments and not in others)
if HAVE_KERNEL_BUILD
kmod: FORCE
	$(AM_V_at)$(MKDIR_P) $(KMOD_BUILDDIR)/uapi
	$(AM_V_at)for f in $(KMOD_FILES); do \
	  d=$(KMOD_BUILDDIR)/$${f#kmod/}; \
	  cmp -s $(srcdir)/$$f $$d || cp $(srcdir)/$$f $$d || exit 1; \
	done
	$(MAKE) -C $(KMOD_BUILDDIR) KDIR=$(KERNEL_BUILD) modules
	@echo "kmod: built $(KMOD_KO) for $(KERNEL_BUILD)"
else
kmod: FORCE
	@echo "kmod: no kernel build tree: apt-get install linux-headers-amd64, or" \
	  "configure --with-kernel-build=DIR" >&2; exit 1
endif

kmod-clean:
	rm -rf $(KMOD_BUILDDIR)

FORCE:
