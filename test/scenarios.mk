# The scenario suite (test/scenarios/): scenarios, the vmtrack provider, the harness and the
# stress. A convenience library linked into `vmtrack` (vmtrack check) and the tests; the Open MPI
# and UCX providers build against test/scenarios/scenario.h and link it too.
noinst_LTLIBRARIES += libscenarios.la
libscenarios_la_SOURCES = \
	test/scenarios/scenario.h test/scenarios/scn_internal.h \
	test/scenarios/harness.c test/scenarios/scenarios.c \
	test/scenarios/provider_vmtrack.c test/scenarios/stress.c
libscenarios_la_CPPFLAGS = $(AM_CPPFLAGS) $(URING_CFLAGS)
libscenarios_la_LIBADD = libvmtrack.la $(URING_LIBS) -lpthread
vmtrack_LDADD += libscenarios.la

check_PROGRAMS += test/test_scenarios test/test_stress
TESTS += test/test_scenarios test/test_stress
test_test_scenarios_SOURCES = test/test_scenarios.c
test_test_scenarios_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/test $(CHECK_CFLAGS)
test_test_scenarios_LDADD = libscenarios.la libvmtrack.la $(CHECK_LIBS) $(URING_LIBS)
test_test_stress_SOURCES = test/test_stress.c
test_test_stress_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/test $(CHECK_CFLAGS)
test_test_stress_LDADD = libscenarios.la libvmtrack.la $(CHECK_LIBS) $(URING_LIBS) -lpthread

# The command line of `vmtrack check`.
TESTS += test/check_cli.sh
EXTRA_DIST += test/check_cli.sh doc/scenarios.md
