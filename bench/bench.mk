# Benchmarks, all through the public API. `vmtrack bench` itself (bench/bench.cc and the
# tracker's unmap cost, bench/tracker_bench.cc) is linked into the `vmtrack` command
# (tools/tools.mk); the rest are built by `make check` and run by hand.

# UCX's side of `vmtrack bench --compare-ucx`, in a process of its own (loading UCX patches
# libc); a helper of the command, so it goes to libexec.
if HAVE_UCX
pkglibexec_PROGRAMS = vmtrack-ucx-bench
vmtrack_ucx_bench_SOURCES = bench/bench_ucx_main.c bench/bench_ucx.c bench/bench_ucx_miss.c \
	bench/bench_ucx_rcache.h bench/miss_workloads.c bench/miss_workloads.h tools/commands.h
vmtrack_ucx_bench_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tools -I$(top_srcdir)/bench $(UCX_CFLAGS)
vmtrack_ucx_bench_LDADD = $(UCX_LIBS) -lpthread
else
EXTRA_DIST += bench/bench_ucx_main.c bench/bench_ucx.c bench/bench_ucx_miss.c \
	bench/bench_ucx_rcache.h
endif

# vmt_get's memo hit against a model of the least a memo hit does: ./bench/hit_model [HITS]
check_PROGRAMS += bench/hit_model
bench_hit_model_SOURCES = bench/hit_model.cc bench/bench_util.h bench/null_device.h
bench_hit_model_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/bench
bench_hit_model_LDADD = libvmtrack.la

# What each user-space tracker adds to munmap: ./bench/bench_trackers
check_PROGRAMS += bench/bench_trackers
bench_bench_trackers_SOURCES = bench/bench_trackers.c bench/tracker_bench.cc bench/tracker_bench.h
bench_bench_trackers_LDADD = libvmtrack.la

# The module's own costs (watch, unwatch, munmap of a watched range), run in the guest.
check_PROGRAMS += bench/kmod_bench
bench_kmod_bench_SOURCES = bench/kmod_bench.c test/kmod/kmod_util.h
bench_kmod_bench_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/kmod/uapi -I$(top_srcdir)/test/kmod

# Hit cost of vmtrack against grdma through Open MPI's rcache framework: ./bench/ompi_bench [pairs]
if OMPI_COMPONENT
check_PROGRAMS += bench/ompi_bench
bench_ompi_bench_SOURCES = bench/ompi_bench.c test/ompi/ompi_testenv.c test/ompi/ompi_testenv.h
bench_ompi_bench_CPPFLAGS = $(OMPI_TEST_CPPFLAGS) -I$(top_srcdir)/test/ompi
bench_ompi_bench_LDADD = $(OMPI_TEST_LIBS)
bench_ompi_bench_LDFLAGS = $(OMPI_TEST_LDOPTS)
EXTRA_bench_ompi_bench_DEPENDENCIES = $(OMPI_TEST_DEPS)
# MPI ping-pong, grdma against vmtrack in one run: bench/ompi_pingpong.sh [--guest] sm|uct|ofi
check_PROGRAMS += bench/mpi_pingpong
bench_mpi_pingpong_SOURCES = bench/mpi_pingpong.c
bench_mpi_pingpong_CPPFLAGS = $(AM_CPPFLAGS) -isystem $(OMPI_PREFIX_INC)
bench_mpi_pingpong_LDADD = $(OMPI_LIBS)
bench_mpi_pingpong_LDFLAGS = $(OMPI_TEST_LDOPTS)
endif
EXTRA_DIST += bench/ompi_pingpong.sh

# The runs behind README's figures.
EXTRA_DIST += doc/bench.md
# UCX's rcache API, stock against served by vmtrack (libvmtrack-ucx), 1 and 2 threads:
# ./bench/ucx_rcache_bench [ROUNDS [HITS]] (doc/ucx.md, "Numbers")
if UCX_MODULE_SERVES
check_PROGRAMS += bench/ucx_rcache_bench
bench_ucx_rcache_bench_SOURCES = bench/ucx_rcache_bench.c bench/miss_workloads.c \
	bench/miss_workloads.h
bench_ucx_rcache_bench_CPPFLAGS = $(AM_CPPFLAGS) \
	-DVMT_UCX_MODULE_PATH='"$(abs_top_builddir)/.libs/libvmtrack-ucx.so"' \
	-DVMT_UCX_BENCH_PATH='"$(abs_top_builddir)/vmtrack-ucx-bench"'
EXTRA_bench_ucx_rcache_bench_DEPENDENCIES = libvmtrack-ucx.la vmtrack-ucx-bench$(EXEEXT)
endif
