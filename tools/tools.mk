# The `vmtrack` command (info, check, bench) and the scenario suite that `vmtrack check` runs
# (tools/scenarios/: scenarios, the vmtrack provider, the harness, the stress). The suite is a
# convenience library: the tests and the Open MPI and UCX providers link it too.
noinst_LTLIBRARIES += libscenarios.la
libscenarios_la_SOURCES = \
	tools/scenarios/scenario.h tools/scenarios/scn_internal.h \
	tools/scenarios/harness.c tools/scenarios/scenarios.c \
	tools/scenarios/provider_vmtrack.c tools/scenarios/stress.c
libscenarios_la_CPPFLAGS = $(AM_CPPFLAGS) $(URING_CFLAGS)
libscenarios_la_LIBADD = libvmtrack.la $(URING_LIBS) -lpthread

bin_PROGRAMS += vmtrack
vmtrack_SOURCES = tools/vmtrack.cc tools/commands.h tools/info.cc tools/check.c \
	bench/bench.cc bench/tracker_bench.cc bench/tracker_bench.h \
	bench/bench_miss.cc bench/bench_miss.h bench/bench_util.h bench/null_device.h \
	bench/miss_workloads.c bench/miss_workloads.h bench/bench_module.cc bench/bench_module.h \
	bench/cpu_model.cc bench/cpu_model.h
vmtrack_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tools -I$(top_srcdir)/bench $(URING_CFLAGS) $(IBVERBS_CFLAGS) \
	-DVMT_PKGLIBEXECDIR='"$(pkglibexecdir)"' -DVMT_LIBDIR='"$(libdir)"'
vmtrack_LDADD = libscenarios.la libvmtrack.la $(URING_LIBS) $(IBVERBS_LIBS) -lpthread -ldl
# `vmtrack info` says what the UCX module does with the installed UCX: the module's own table
# of releases (ucx-memtype/ucx_release.c, without the part that loads UCX).
if HAVE_UCX
vmtrack_SOURCES += ucx-memtype/ucx_release.c ucx-memtype/ucx_release.h
vmtrack_CPPFLAGS += -I$(top_srcdir)/ucx-memtype $(UCX_CFLAGS) -DUCX_RELEASE_TABLE_ONLY
endif
