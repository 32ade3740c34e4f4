# The `vmtrack` command: info, bench, check.
bin_PROGRAMS += vmtrack
vmtrack_SOURCES = tools/vmtrack.cc tools/commands.h tools/info.cc tools/bench.cc tools/check.c
vmtrack_CPPFLAGS = $(AM_CPPFLAGS) $(URING_CFLAGS) $(IBVERBS_CFLAGS)
vmtrack_LDADD = libvmtrack.la $(URING_LIBS) $(IBVERBS_LIBS) -lpthread

# UCX's side of `vmtrack bench --compare-ucx`, in a process of its own (see the source).
if HAVE_UCX
bin_PROGRAMS += vmtrack-ucx-bench
vmtrack_ucx_bench_SOURCES = tools/bench_ucx_main.c tools/bench_ucx.c tools/commands.h
vmtrack_ucx_bench_CPPFLAGS = $(AM_CPPFLAGS) $(UCX_CFLAGS)
vmtrack_ucx_bench_LDADD = $(UCX_LIBS) -lpthread
else
EXTRA_DIST += tools/bench_ucx_main.c tools/bench_ucx.c
endif
