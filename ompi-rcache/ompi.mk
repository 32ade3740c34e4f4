# Open MPI rcache component "vmtrack" (mca_rcache_vmtrack.so; Open MPI 4.1, 5.0, 6.0), built out
# of tree against the installed internal headers (plus, where the development package leaves
# some out, the same release's source tree: --with-ompi-source), and its tests (test/ompi/).
# See doc/openmpi.md.
EXTRA_DIST += doc/openmpi.md ompi-rcache/openmpi-vmtrack.tune.in test/ompi/ompi_info.sh test/ompi/mpirun_rxe.sh \
	test/ompi/scenarios_patcher.sh test/ompi/stress_series.sh test/ompi/mpirun_host.sh \
	test/ompi/takeover_gates.sh test/ompi/ompi_env.sh test/ompi/grdma_served.sh

if OMPI_COMPONENT
# Open MPI's own headers are not warning-clean under -Wextra: include them as system headers.
OMPI_INTERNAL_CPPFLAGS = -isystem $(OMPI_PREFIX_INC) -isystem $(OMPI_PREFIX_INC)/openmpi \
	$(OMPI_SOURCE_CPPFLAGS) $(PMIX_CFLAGS)
OMPI_PAL_LIBS = -L$(OMPI_LIBDIR) -lopen-pal
OMPI_RPATH = -Wl,-rpath,$(OMPI_LIBDIR)

# `make install` puts the component where Open MPI looks (ompi_info --path pkglibdir);
# override with `make install OMPI_COMPONENTDIR=...`.
ompicomponentdir = $(OMPI_COMPONENTDIR)
ompicomponent_LTLIBRARIES = mca_rcache_vmtrack.la
mca_rcache_vmtrack_la_SOURCES = \
	ompi-rcache/rcache_vmtrack.h \
	ompi-rcache/rcache_vmtrack_component.c \
	ompi-rcache/rcache_vmtrack_module.c \
	ompi-rcache/rcache_vmtrack_takeover.c \
	ompi-rcache/rcache_vmtrack_grdma.c ompi-rcache/ompi_compat.h \
	ompi-rcache/ompi_release.c ompi-rcache/ompi_release.h \
	ompi-rcache/takeover_gate.c ompi-rcache/takeover_gate.h \
	ompi-rcache/entry_owner.c ompi-rcache/entry_owner.h
mca_rcache_vmtrack_la_CPPFLAGS = $(AM_CPPFLAGS) $(OMPI_INTERNAL_CPPFLAGS)
# rpath: find libvmtrack wherever it was installed, and Open MPI's libopen-pal.
mca_rcache_vmtrack_la_LDFLAGS = -module -avoid-version -shared $(OMPI_RPATH) -Wl,-rpath,$(libdir)
mca_rcache_vmtrack_la_LIBADD = libvmtrack.la $(OMPI_PAL_LIBS)

# The mpirun settings for jobs on vmtrack (mpirun --tune FILE): the component by name, the
# directories it is installed in, UCX's hook mode from the start (doc/openmpi.md).
ompitunedir = $(datadir)/vmtrack
ompitune_DATA = openmpi-vmtrack.tune
CLEANFILES += openmpi-vmtrack.tune
openmpi-vmtrack.tune: $(srcdir)/ompi-rcache/openmpi-vmtrack.tune.in Makefile
	$(AM_V_GEN)path='$(OMPI_SYSTEM_COMPONENTDIR)'; dir='$(OMPI_COMPONENTDIR)'; \
	[ "$$dir" = "$$path" ] || path="$$path:$$dir"; \
	sed -e "s|@COMPONENT_PATH@|$$path|" \
		-e 's|@TUNE_FILE@|$(ompitunedir)/openmpi-vmtrack.tune|' $< > $@

include test/ompi/ompi_tests.mk
endif
