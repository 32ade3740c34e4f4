/* The takeover decision (ompi-rcache/takeover_gate.c) on facts, one condition false at a time,
 * including those a real process cannot be put in from outside (the memory framework already
 * registered, vmtrack.ko usable on a machine without it); and the selection strings the
 * component reads. test/ompi/takeover_gates.sh checks the same in real MPI processes. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "ompi-rcache/ompi_release.h"
#include "ompi-rcache/takeover_gate.h"
#include "../lib/check_run.h"

static struct vmt_ompi_takeover_facts all_met(void)
{
    struct vmt_ompi_takeover_facts f = {
        .rcache_selection = "vmtrack",
        .tracker_param = "auto",
    };
    return f;
}

static void assert_refused(const struct vmt_ompi_takeover_facts *f, const char *why)
{
    char buf[512];
    const char *no = vmt_ompi_takeover_refusal(f, buf, sizeof(buf));
    ck_assert_msg(no, "taken over, expected refusal \"%s\"", why);
    ck_assert_msg(strstr(no, why), "refused with \"%s\", expected \"%s\"", no, why);
}

START_TEST(t_all_met)
{
    char buf[200];
    struct vmt_ompi_takeover_facts f = all_met();
    ck_assert_ptr_null(vmt_ompi_takeover_refusal(&f, buf, sizeof(buf)));
    f.rcache_selection = "grdma, vmtrack";           /* named in a list */
    ck_assert_ptr_null(vmt_ompi_takeover_refusal(&f, buf, sizeof(buf)));
    f.tracker_param = "hooks";
    f.kmod_usable = true;                            /* hooks asked for: kmod does not matter */
    ck_assert_ptr_null(vmt_ompi_takeover_refusal(&f, buf, sizeof(buf)));
    f = all_met();
    f.tracker_env = "hooks";
    f.kmod_usable = true;
    ck_assert_ptr_null(vmt_ompi_takeover_refusal(&f, buf, sizeof(buf)));
    f = all_met();
    f.ucx_hook_mode = "reloc";                       /* UCX told not to patch libc */
    ck_assert_ptr_null(vmt_ompi_takeover_refusal(&f, buf, sizeof(buf)));
    f.ucx_hook_mode = "none";
    ck_assert_ptr_null(vmt_ompi_takeover_refusal(&f, buf, sizeof(buf)));
    f.ucx_loaded = "libucs.so.0";   /* loaded, told not to patch libc (vmtrack's UCX module) */
    ck_assert_ptr_null(vmt_ompi_takeover_refusal(&f, buf, sizeof(buf)));
    f.tracker_env = "";                              /* set but empty: unset */
    ck_assert_ptr_null(vmt_ompi_takeover_refusal(&f, buf, sizeof(buf)));
}
END_TEST

/* all_met() with one fact changed, and the reason expected */
#define MET .rcache_selection = "vmtrack", .tracker_param = "auto"
static const struct {
    struct vmt_ompi_takeover_facts f;
    const char *why;
} refusals[] = {
    {{.tracker_param = "auto"}, "not chosen by name (--mca rcache <unset>)"},
    {{.rcache_selection = "^grdma", .tracker_param = "auto"},
     "not chosen by name (--mca rcache ^grdma)"},
    {{.rcache_selection = "grdma", .tracker_param = "auto"}, "not chosen by name"},
    {{.rcache_selection = "vmtrackx", .tracker_param = "auto"}, "not chosen by name"},
    {{.rcache_selection = "vmtrack", .tracker_param = "none"}, "rcache_vmtrack_tracker=none"},
    {{.rcache_selection = "vmtrack", .tracker_param = "kmod"}, "rcache_vmtrack_tracker=kmod"},
    {{MET, .tracker_env = "uffd"}, "VMTRACK_TRACKER=uffd"},
    /* the environment wins over the parameter */
    {{.rcache_selection = "vmtrack", .tracker_param = "hooks", .tracker_env = "none"},
     "VMTRACK_TRACKER=none"},
    {{MET, .kmod_usable = true}, "vmtrack.ko is usable"},
    {{MET, .memory_set_by = "command line"}, "memory framework selection was set (command line)"},
    {{MET, .memory_framework_touched = true}, "memory framework is already registered or open"},
    {{MET, .ucx_loaded = "libucs.so.0"}, "UCX (libucs.so.0) is already loaded without"},
    {{MET, .libc_patched = "munmap() by /x/libucm.so.0"},
     "libc is already patched: munmap() by /x/libucm.so.0"},
    {{MET, .ucx_loaded = "libucs.so.0", .ucx_hook_mode = "bistro"},
     "UCX_MEM_MMAP_HOOK_MODE=bistro"},
    {{MET, .ucx_hook_mode = "bistro"}, "UCX_MEM_MMAP_HOOK_MODE=bistro"},
    /* Open MPI 5: UCX is loaded and patched before main; the refusal names the fix */
    {{MET, .ucx_loaded = "libucs.so.0", .ucx_hook_mode = "bistro",
      .libc_patched = "mmap() by /usr/lib/libucm.so.0"},
     "start the job with UCX_MEM_MMAP_HOOK_MODE=reloc"},
};

START_TEST(t_each_condition)
{
    assert_refused(&refusals[_i].f, refusals[_i].why);
}
END_TEST

START_TEST(t_selection_strings)
{
    ck_assert(vmt_ompi_selection_allows(NULL, "grdma"));
    ck_assert(vmt_ompi_selection_allows("", "grdma"));
    ck_assert(vmt_ompi_selection_allows("vmtrack,grdma", "grdma"));
    ck_assert(!vmt_ompi_selection_allows("vmtrack", "grdma"));
    ck_assert(!vmt_ompi_selection_allows("^uct,openib,ofi", "ofi"));
    ck_assert(vmt_ompi_selection_allows("^uct, openib ,ofi", "vader"));
    ck_assert(!vmt_ompi_selection_allows("^uct, openib ,ofi", "openib"));
    ck_assert(vmt_ompi_selection_names("self, vmtrack", "vmtrack"));
    ck_assert(!vmt_ompi_selection_names("^vmtrack", "vmtrack"));
    ck_assert(!vmt_ompi_selection_names("^grdma", "vmtrack"));
    ck_assert(!vmt_ompi_selection_names(NULL, "vmtrack"));
    ck_assert(!vmt_ompi_selection_names("vmtrack2", "vmtrack"));
}
END_TEST

/* The release the component runs in against the one it was built for: major.minor. */
START_TEST(t_release_check)
{
    char buf[256];
    ck_assert_ptr_null(vmt_ompi_release_refusal("5.0.7", "5.0.7", buf, sizeof(buf)));
    ck_assert_ptr_null(vmt_ompi_release_refusal("5.0.7", "5.0.3", buf, sizeof(buf)));
    ck_assert_ptr_null(vmt_ompi_release_refusal("6.0.0rc2", "6.0.0rc2", buf, sizeof(buf)));
    ck_assert_ptr_null(vmt_ompi_release_refusal("4.1.4", "4.1.4", buf, sizeof(buf)));
    /* Debian's 6.0 reuses 4.1's libopen-pal.so.40: a 4.1 build loads into it */
    const char *no = vmt_ompi_release_refusal("4.1.4", "6.0.0rc2", buf, sizeof(buf));
    ck_assert_ptr_nonnull(no);
    ck_assert_ptr_nonnull(strstr(no, "built for Open MPI 4.1.4, running in Open MPI 6.0.0rc2"));
    ck_assert_ptr_nonnull(strstr(no, "rebuild vmtrack against Open MPI 6.0.0rc2"));
    ck_assert_ptr_nonnull(vmt_ompi_release_refusal("5.0.7", "5.1.0", buf, sizeof(buf)));
    ck_assert_ptr_nonnull(vmt_ompi_release_refusal("5.0.7", "4.1.4", buf, sizeof(buf)));
    no = vmt_ompi_release_refusal("5.0.7", "", buf, sizeof(buf));
    ck_assert_ptr_nonnull(no);
    ck_assert_ptr_nonnull(strstr(no, "unreadable"));
    ck_assert_ptr_nonnull(vmt_ompi_release_refusal("5.0.7", NULL, buf, sizeof(buf)));
    ck_assert_ptr_nonnull(vmt_ompi_release_refusal("x", "5.0.7", buf, sizeof(buf)));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ompi-takeover");
    TCase *tc = tcase_create("decision");
    tcase_add_test(tc, t_all_met);
    tcase_add_loop_test(tc, t_each_condition, 0, sizeof(refusals) / sizeof(refusals[0]));
    tcase_add_test(tc, t_selection_strings);
    tcase_add_test(tc, t_release_check);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK) ? 1 : 0;
}
