# The `vmtrack` command: info, bench, check.
bin_PROGRAMS += vmtrack
vmtrack_SOURCES = tools/vmtrack.cc tools/commands.h tools/info.cc tools/bench.cc \
	tools/check.c tools/bench_ucx.c
vmtrack_CPPFLAGS = $(AM_CPPFLAGS) $(URING_CFLAGS) $(UCX_CFLAGS)
vmtrack_LDADD = libvmtrack.la $(URING_LIBS) $(UCX_LIBS) -lpthread
