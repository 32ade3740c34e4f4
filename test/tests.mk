# The Check tests of `make check`: the core cache, the user-space trackers, the built-in devices,
# two libraries sharing the process-wide cache, the scenario suite and its stress. How to add a
# test, the skip rule and the test library: test/README.md.

# The test library (test/lib/): the fake device, the cache fixture, stats, mappings, a clock,
# tracker availability; test/lib/check_run.h (the runner and VMT_TEST_SKIP) is header only.
# Tests that only load the cache or time it use the bench's device that registers nothing
# (bench/null_device.h). test/lib/stale_rounds.h: the rounds of the MPI stale-page jobs
# (test/ucx/mpich_stale.c, test/ompi/mpi_ofi_stale.c), which build against MPI, not this library.
check_LTLIBRARIES += test/lib/libvmttest.la
test_lib_libvmttest_la_SOURCES = test/lib/vmt_test.c test/lib/system.c test/lib/iouring.c \
	test/lib/kernel_tracker_cases.c test/lib/kernel_tracker_cases.h \
	test/lib/vmt_test.h test/lib/check_run.h test/lib/skip.h
test_lib_libvmttest_la_CPPFLAGS = $(AM_CPPFLAGS) $(URING_CFLAGS)
test_lib_libvmttest_la_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
TEST_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
TEST_LDADD = test/lib/libvmttest.la libvmtrack.la $(CHECK_LIBS) -lpthread
EXTRA_DIST += test/README.md test/lib/stale_rounds.h

# The core cache against the fake device, one feature per program (test/test_cache_<feature>.c).
CACHE_TESTS = test/test_cache_lookup test/test_cache_misuse test/test_cache_evict \
	test/test_cache_merge test/test_cache_holds test/test_cache_memo test/test_cache_devices \
	test/test_cache_events test/test_cache_fork test/test_cache_config test/test_cache_threads \
	test/test_cache_reclaim test/test_cache_lanes
check_PROGRAMS += $(CACHE_TESTS)
TESTS += $(CACHE_TESTS)
test_test_cache_lookup_CFLAGS = $(TEST_CFLAGS)
test_test_cache_lookup_LDADD = $(TEST_LDADD)
test_test_cache_misuse_CFLAGS = $(TEST_CFLAGS)
test_test_cache_misuse_LDADD = $(TEST_LDADD)
test_test_cache_evict_CFLAGS = $(TEST_CFLAGS)
test_test_cache_evict_LDADD = $(TEST_LDADD)
test_test_cache_merge_CFLAGS = $(TEST_CFLAGS)
test_test_cache_merge_LDADD = $(TEST_LDADD)
test_test_cache_holds_CFLAGS = $(TEST_CFLAGS)
test_test_cache_holds_LDADD = $(TEST_LDADD)
test_test_cache_memo_CFLAGS = $(TEST_CFLAGS)
test_test_cache_memo_LDADD = $(TEST_LDADD)
test_test_cache_devices_CFLAGS = $(TEST_CFLAGS)
test_test_cache_devices_LDADD = $(TEST_LDADD)
test_test_cache_events_CFLAGS = $(TEST_CFLAGS)
test_test_cache_events_LDADD = $(TEST_LDADD)
test_test_cache_fork_CFLAGS = $(TEST_CFLAGS)
test_test_cache_fork_LDADD = $(TEST_LDADD)
test_test_cache_config_CFLAGS = $(TEST_CFLAGS)
test_test_cache_config_LDADD = $(TEST_LDADD)
test_test_cache_threads_CFLAGS = $(TEST_CFLAGS)
test_test_cache_threads_LDADD = $(TEST_LDADD)
test_test_cache_reclaim_CFLAGS = $(TEST_CFLAGS)
test_test_cache_reclaim_LDADD = $(TEST_LDADD)
test_test_cache_lanes_CFLAGS = $(TEST_CFLAGS)
test_test_cache_lanes_LDADD = $(TEST_LDADD)

# The membarrier registration made when libvmtrack is loaded (no Check: it must look before
# anything else in the process runs).
# libvmtrack stays loaded after a dlclose of what loaded it (its trackers live on).
check_PROGRAMS += test/test_stays_loaded
TESTS += test/test_stays_loaded
test_test_stays_loaded_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/test \
	-DVMT_LIBVMTRACK_PATH='"$(abs_top_builddir)/.libs/libvmtrack.so.0"'
test_test_stays_loaded_LDADD = -ldl
EXTRA_test_test_stays_loaded_DEPENDENCIES = libvmtrack.la

check_PROGRAMS += test/test_membarrier_at_load
TESTS += test/test_membarrier_at_load
test_test_membarrier_at_load_CFLAGS = $(AM_CFLAGS)
test_test_membarrier_at_load_LDADD = libvmtrack.la

# The interval index's walks, compiled in (libvmtrack does not export it).
check_PROGRAMS += test/test_index_walks
TESTS += test/test_index_walks
test_test_index_walks_SOURCES = test/test_index_walks.cc common/util/spin_lock.cc
test_test_index_walks_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/common -I$(top_srcdir)/test
test_test_index_walks_CXXFLAGS = $(AM_CXXFLAGS) $(CHECK_CFLAGS)
test_test_index_walks_LDADD = $(CHECK_LIBS) -lpthread

# The index lock: one holder at a time, and every waiter served, asleep or not.
check_PROGRAMS += test/test_spin_lock
TESTS += test/test_spin_lock
test_test_spin_lock_SOURCES = test/test_spin_lock.cc common/util/spin_lock.cc
test_test_spin_lock_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/common -I$(top_srcdir)/test
test_test_spin_lock_CXXFLAGS = $(AM_CXXFLAGS) $(CHECK_CFLAGS)
test_test_spin_lock_LDADD = $(CHECK_LIBS) -lpthread

# The pools' chunks, from a fresh mmap and from the stash an earlier pool left.
check_PROGRAMS += test/test_pool
TESTS += test/test_pool
test_test_pool_SOURCES = test/test_pool.cc
test_test_pool_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/common -I$(top_srcdir)/test
test_test_pool_CXXFLAGS = $(AM_CXXFLAGS) $(CHECK_CFLAGS)
test_test_pool_LDADD = $(CHECK_LIBS)

# The miss's mapped check and what it remembers of the address space, against the kernel.
check_PROGRAMS += test/test_mapped_blocks
TESTS += test/test_mapped_blocks
test_test_mapped_blocks_SOURCES = test/test_mapped_blocks.cc common/cache/mapped_blocks.cc
test_test_mapped_blocks_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/common -I$(top_srcdir)/test
test_test_mapped_blocks_CXXFLAGS = $(AM_CXXFLAGS) $(CHECK_CFLAGS)
test_test_mapped_blocks_LDADD = $(CHECK_LIBS) -lpthread

# The user-space trackers through the public API with the fake device: the changes every
# tracker must see (test_tracker_changes.c, compiled once per tracker with TRACKER) and each
# tracker's own cases.

# The C ABI around the cache: versions, VMT_OPTS, larger structs, the log function, vmt_strerror.
check_PROGRAMS += test/test_api
TESTS += test/test_api
test_test_api_CFLAGS = $(TEST_CFLAGS)
test_test_api_LDADD = $(TEST_LDADD)
check_PROGRAMS += test/test_hooks test/test_uffd test/test_hooks_engine
TESTS += test/test_hooks test/test_uffd test/test_hooks_engine
test_test_hooks_SOURCES = test/test_hooks.c test/test_tracker_changes.c test/tracker_changes.h
test_test_hooks_CPPFLAGS = $(AM_CPPFLAGS) -DTRACKER='"hooks"'
test_test_hooks_CFLAGS = $(TEST_CFLAGS)
test_test_hooks_LDADD = $(TEST_LDADD) -ldl
test_test_uffd_SOURCES = test/test_uffd.c test/test_tracker_changes.c test/tracker_changes.h
test_test_uffd_CPPFLAGS = $(AM_CPPFLAGS) -DTRACKER='"uffd"'
test_test_uffd_CFLAGS = $(TEST_CFLAGS)
test_test_uffd_LDADD = $(TEST_LDADD)
# the patching engine on synthetic code (compiled in: libvmtrack does not export it)
test_test_hooks_engine_SOURCES = test/test_hooks_engine.c test/hooks_engine_shim.cc \
	common/trackers/hooks_patch.cc common/trackers/hooks_patch.h
test_test_hooks_engine_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/common
test_test_hooks_engine_CFLAGS = $(TEST_CFLAGS)
test_test_hooks_engine_LDADD = test/lib/libvmttest.la $(CHECK_LIBS) -lpthread -ldl

# Next to a real other patcher (UCX ucm, bistro mode): hooks must refuse, not stack.
if HAVE_UCX
check_PROGRAMS += test/test_hooks_ucm
TESTS += test/test_hooks_ucm
test_test_hooks_ucm_SOURCES = test/test_hooks_ucm.c
test_test_hooks_ucm_CFLAGS = $(TEST_CFLAGS) $(UCX_CFLAGS)
test_test_hooks_ucm_LDADD = libvmtrack.la $(UCX_LIBS) -lucs $(CHECK_LIBS) -ldl
endif

# Tests of the built-in devices (io_uring fixed buffers, verbs) and of two libraries sharing the
# process-wide cache.
check_PROGRAMS += test/test_iouring test/test_verbs test/test_twolib
TESTS += test/test_iouring test/test_verbs test/test_twolib

test_test_iouring_SOURCES = test/test_iouring.c
test_test_iouring_CPPFLAGS = $(AM_CPPFLAGS) $(URING_CFLAGS)
test_test_iouring_CFLAGS = $(TEST_CFLAGS)
test_test_iouring_LDADD = $(TEST_LDADD) $(URING_LIBS)

test_test_verbs_SOURCES = test/test_verbs.c
test_test_verbs_CPPFLAGS = $(AM_CPPFLAGS) $(IBVERBS_CFLAGS)
test_test_verbs_CFLAGS = $(TEST_CFLAGS)
test_test_verbs_LDADD = $(TEST_LDADD) $(IBVERBS_LIBS)

# Two shared libraries built separately from one source, loaded by test_twolib with dlopen.
check_LTLIBRARIES += test/libtwolib_a.la test/libtwolib_b.la
test_libtwolib_a_la_SOURCES = test/twolib_lib.c
test_libtwolib_a_la_CPPFLAGS = $(AM_CPPFLAGS) $(URING_CFLAGS) -DTWOLIB_NAME='"a"'
test_libtwolib_a_la_LDFLAGS = -module -avoid-version -shared -rpath /nowhere
test_libtwolib_a_la_LIBADD = libvmtrack.la
test_libtwolib_b_la_SOURCES = test/twolib_lib.c
test_libtwolib_b_la_CPPFLAGS = $(AM_CPPFLAGS) $(URING_CFLAGS) -DTWOLIB_NAME='"b"'
test_libtwolib_b_la_LDFLAGS = -module -avoid-version -shared -rpath /nowhere
test_libtwolib_b_la_LIBADD = libvmtrack.la

test_test_twolib_SOURCES = test/test_twolib.c
test_test_twolib_CPPFLAGS = $(AM_CPPFLAGS) $(URING_CFLAGS) \
	-DTWOLIB_DIR='"$(abs_builddir)/test/.libs"'
test_test_twolib_CFLAGS = $(TEST_CFLAGS)
test_test_twolib_LDADD = $(TEST_LDADD) $(URING_LIBS) -ldl
EXTRA_test_test_twolib_DEPENDENCIES = test/libtwolib_a.la test/libtwolib_b.la

# The scenario suite (tools/scenarios/) and its concurrency stress, one program per tracker
# from one source each (TRACKER; "none" is the positive control), so that a tracker not
# available here is a skipped program; and the harness itself.
SCENARIO_TESTS = test/test_scenario_harness \
	test/test_scenarios_kmod test/test_scenarios_hooks test/test_scenarios_uffd \
	test/test_scenarios_pass test/test_scenarios_none \
	test/test_stress_kmod test/test_stress_hooks test/test_stress_uffd test/test_stress_pass \
	test/test_stress_none
check_PROGRAMS += $(SCENARIO_TESTS)
TESTS += $(SCENARIO_TESTS)
SCENARIO_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tools
SCENARIO_LDADD = libscenarios.la $(TEST_LDADD) $(URING_LIBS)
test_test_scenario_harness_CPPFLAGS = $(SCENARIO_CPPFLAGS)
test_test_scenario_harness_CFLAGS = $(TEST_CFLAGS)
test_test_scenario_harness_LDADD = $(SCENARIO_LDADD)
test_test_scenarios_kmod_SOURCES = test/test_scenarios.c
test_test_scenarios_kmod_CPPFLAGS = $(SCENARIO_CPPFLAGS) -DTRACKER='"kmod"'
test_test_scenarios_kmod_CFLAGS = $(TEST_CFLAGS)
test_test_scenarios_kmod_LDADD = $(SCENARIO_LDADD)
test_test_scenarios_hooks_SOURCES = test/test_scenarios.c
test_test_scenarios_hooks_CPPFLAGS = $(SCENARIO_CPPFLAGS) -DTRACKER='"hooks"'
test_test_scenarios_hooks_CFLAGS = $(TEST_CFLAGS)
test_test_scenarios_hooks_LDADD = $(SCENARIO_LDADD)
test_test_scenarios_uffd_SOURCES = test/test_scenarios.c
test_test_scenarios_uffd_CPPFLAGS = $(SCENARIO_CPPFLAGS) -DTRACKER='"uffd"'
test_test_scenarios_uffd_CFLAGS = $(TEST_CFLAGS)
test_test_scenarios_uffd_LDADD = $(SCENARIO_LDADD)
test_test_scenarios_pass_SOURCES = test/test_scenarios.c
test_test_scenarios_pass_CPPFLAGS = $(SCENARIO_CPPFLAGS) -DTRACKER='"pass"'
test_test_scenarios_pass_CFLAGS = $(TEST_CFLAGS)
test_test_scenarios_pass_LDADD = $(SCENARIO_LDADD)
test_test_scenarios_none_SOURCES = test/test_scenarios.c
test_test_scenarios_none_CPPFLAGS = $(SCENARIO_CPPFLAGS) -DTRACKER='"none"'
test_test_scenarios_none_CFLAGS = $(TEST_CFLAGS)
test_test_scenarios_none_LDADD = $(SCENARIO_LDADD)
test_test_stress_kmod_SOURCES = test/test_stress.c
test_test_stress_kmod_CPPFLAGS = $(SCENARIO_CPPFLAGS) -DTRACKER='"kmod"'
test_test_stress_kmod_CFLAGS = $(TEST_CFLAGS)
test_test_stress_kmod_LDADD = $(SCENARIO_LDADD)
test_test_stress_hooks_SOURCES = test/test_stress.c
test_test_stress_hooks_CPPFLAGS = $(SCENARIO_CPPFLAGS) -DTRACKER='"hooks"'
test_test_stress_hooks_CFLAGS = $(TEST_CFLAGS)
test_test_stress_hooks_LDADD = $(SCENARIO_LDADD)
test_test_stress_uffd_SOURCES = test/test_stress.c
test_test_stress_uffd_CPPFLAGS = $(SCENARIO_CPPFLAGS) -DTRACKER='"uffd"'
test_test_stress_uffd_CFLAGS = $(TEST_CFLAGS)
test_test_stress_uffd_LDADD = $(SCENARIO_LDADD)
test_test_stress_pass_SOURCES = test/test_stress.c
test_test_stress_pass_CPPFLAGS = $(SCENARIO_CPPFLAGS) -DTRACKER='"pass"'
test_test_stress_pass_CFLAGS = $(TEST_CFLAGS)
test_test_stress_pass_LDADD = $(SCENARIO_LDADD)
test_test_stress_none_SOURCES = test/test_stress.c
test_test_stress_none_CPPFLAGS = $(SCENARIO_CPPFLAGS) -DTRACKER='"none"'
test_test_stress_none_CFLAGS = $(TEST_CFLAGS)
test_test_stress_none_LDADD = $(SCENARIO_LDADD)

# The command line of `vmtrack check`; the library's exports against the public headers.
TESTS += test/check_cli.sh test/check_exports.sh
EXTRA_DIST += test/check_cli.sh test/check_exports.sh doc/scenarios.md

# Regression tests of bugs found while measuring the miss path (a merge racing an unmap, detach
# with nested puts, device-limit eviction, the subscriber lock across fork).
check_PROGRAMS += test/test_cache_bugs
TESTS += test/test_cache_bugs
test_test_cache_bugs_CFLAGS = $(TEST_CFLAGS)
test_test_cache_bugs_LDADD = $(TEST_LDADD)

# Fault injection: a device that fails at random and is slow, under threads that unmap.
check_PROGRAMS += test/test_faults
TESTS += test/test_faults
test_test_faults_CFLAGS = $(TEST_CFLAGS)
test_test_faults_LDADD = $(TEST_LDADD)
# The command line of `vmtrack check`.
TESTS += test/check_cli.sh
EXTRA_DIST += test/check_cli.sh doc/scenarios.md

# The io_uring device on older kernels' tables (common/devices/iouring.cc), forced here.
TESTS += test/iouring-tables.sh
EXTRA_DIST += test/iouring-tables.sh
# A device's reg runs only inside vmt_get, in the calling thread, with no cache lock held.
check_PROGRAMS += test/test_reg_context
TESTS += test/test_reg_context
test_test_reg_context_SOURCES = test/test_reg_context.c test/lib/check_run.h
test_test_reg_context_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
test_test_reg_context_LDADD = libvmtrack.la $(CHECK_LIBS) -lpthread

# vmt_reg_invalidate and vmt_device_flush leave the other devices' registrations alone.
check_PROGRAMS += test/test_maintain
TESTS += test/test_maintain
test_test_maintain_SOURCES = test/test_maintain.c test/lib/check_run.h
test_test_maintain_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
test_test_maintain_LDADD = libvmtrack.la $(CHECK_LIBS)

# The UCX module's rcache lock, compiled in (it needs no UCX).
check_PROGRAMS += test/test_md_lock
TESTS += test/test_md_lock
test_test_md_lock_SOURCES = test/test_md_lock.c ucx-memtype/md_lock.c ucx-memtype/md_lock.h \
	test/lib/check_run.h
test_test_md_lock_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/ucx-memtype -I$(top_srcdir)/test
test_test_md_lock_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
test_test_md_lock_LDADD = $(CHECK_LIBS) -lpthread
