// `vmtrack info`: what vmtrack would do in a process started like this one, and why; with
// --measure, also what the tracker in use costs here (the library itself reports only facts).
#include "config.h"

#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <liburing.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "commands.h"
#include "tracker_bench.h"
#include "vmtrack.h"
#ifdef HAVE_UCX
#include "ucx_release.h"
#endif

namespace {

struct Line {
    std::string key, value;
};

std::string json_escape(const std::string &s)
{
    std::string out;
    for (char c : s) {
        if (c == '"' || c == '\\')
            out += '\\', out += c;
        else if (c == '\n')
            out += "\\n";
        else if ((unsigned char)c < 0x20)
            out += ' ';
        else
            out += c;
    }
    return out;
}

// Which fixed-buffer table the io_uring device gets here (common/devices/iouring.cc tries
// the same three, best first).
std::string probe_iouring()
{
    struct io_uring ring;
    int rc = io_uring_queue_init(4, &ring, 0);
    if (rc < 0)
        return std::string("unavailable: io_uring_queue_init: ") + strerror(-rc);
    std::string kind;
    static char page[4096] __attribute__((aligned(4096)));
    struct iovec iov[16] = {};
    __u64 tags[16] = {};
    if ((rc = io_uring_register_buffers_sparse(&ring, 16384)) == 0) {
        kind = "usable (sparse table: 16384 fixed-buffer slots, 1 GiB per buffer)";
    } else if ((rc = io_uring_register_buffers_tags(&ring, iov, tags, 16)) == 0) {
        kind = "usable (no sparse tables before Linux 5.19: a table of empty slots, updated "
               "in place)";
    } else {
        iov[0] = {page, sizeof(page)};
        if ((rc = io_uring_register_buffers(&ring, iov, 1)) == 0)
            kind = "usable, slowly (no buffer updates before Linux 5.13: each registration "
                   "re-registers a 64-slot table and waits for the ring to be idle)";
    }
    io_uring_queue_exit(&ring);
    if (kind.empty())
        return std::string("unavailable: fixed buffers: ") + strerror(-rc);
    return kind;
}

std::string probe_verbs()
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list)
        return std::string("unavailable: ") + strerror(errno);
    std::string names;
    for (int i = 0; i < n; i++)
        names += std::string(i ? ", " : "") + ibv_get_device_name(list[i]);
    ibv_free_device_list(list);
    if (n == 0)
        return "no RDMA device on this machine";
    return "usable: " + names;
}

#ifdef HAVE_UCX
// libucp's version, asked in a child process: loading UCX runs libucs's constructor, which
// would patch libc here (the child tells it not to) and must not meet this process's tracker.
bool ucx_version(unsigned v[3])
{
    int fd[2];
    if (pipe(fd) < 0)
        return false;
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        setenv("UCX_MEM_MMAP_HOOK_MODE", "none", 1);
        setenv("UCX_VFS_ENABLE", "n", 1);
        void *ucp = dlopen("libucp.so.0", RTLD_NOW | RTLD_LOCAL);
        auto fn = ucp ? (void (*)(unsigned *, unsigned *, unsigned *))dlsym(ucp, "ucp_get_version")
                      : nullptr;
        unsigned got[3] = {0, 0, 0};
        if (fn)
            fn(&got[0], &got[1], &got[2]);
        ssize_t n = write(fd[1], got, sizeof got);
        _exit(n == (ssize_t)sizeof got && fn ? 0 : 1);
    }
    close(fd[1]);
    ssize_t n = pid > 0 ? read(fd[0], v, 3 * sizeof(unsigned)) : -1;
    close(fd[0]);
    int st = 0;
    if (pid > 0)
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
        }
    return pid > 0 && n == (ssize_t)(3 * sizeof(unsigned)) && WIFEXITED(st) &&
           WEXITSTATUS(st) == 0;
}

std::string probe_ucx()
{
    unsigned v[3];
    if (!ucx_version(v))
        return "no libucp.so.0 found (UCX not installed)";
    struct ucx_release r;
    char line[512];
    ucx_release_classify(v[0], v[1], v[2], &r);
    ucx_release_describe(&r, line, sizeof line);
    return line;
}
#else
std::string probe_ucx()
{
    return "vmtrack was built without UCX";
}
#endif

std::string probe_kmod()
{
    if (access("/dev/vmtrack", F_OK) != 0)
        return "/dev/vmtrack absent (module not loaded)";
    if (access("/dev/vmtrack", R_OK) != 0)
        return "/dev/vmtrack present but not readable by this user";
    return "/dev/vmtrack present";
}

std::string memlock()
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0)
        return "unknown";
    if (rl.rlim_cur == RLIM_INFINITY)
        return "unlimited";
    char buf[64];
    snprintf(buf, sizeof buf, "%llu bytes%s", (unsigned long long)rl.rlim_cur,
             geteuid() == 0 ? " (not applied: root pins without it)" : "");
    return buf;
}

// What the tracker in use adds to unmapping and to a miss, against the same figures without a
// tracker ("none"), both measured now in this process.
std::string measure(const char *tracker)
{
    struct vmtrack_tracker_unmap_cost used, base;
    int rc = vmtrack_bench_tracker_unmap(tracker, &used);
    if (rc < 0)
        return std::string("cannot measure tracker \"") + tracker + "\": " + vmt_strerror(rc);
    rc = vmtrack_bench_tracker_unmap("none", &base);
    if (rc < 0)
        return std::string("cannot measure without a tracker: ") + vmt_strerror(rc);
    char b[768];
    int n = snprintf(b, sizeof b,
                     "tracker: %s (medians; a system call in a VM varies by about 200 ns between runs)\n"
                     "mmap+munmap of 64 KiB the cache does not hold: %+.0f ns vs raw system calls\n",
                     tracker, used.pair_added_ns);
    if (used.hook_added_ns >= 0)
        n += snprintf(b + n, sizeof b - n,
                      "munmap where nothing is mapped (the tracker's work per call): %+.0f ns vs "
                      "raw system calls\n", used.hook_added_ns);
    snprintf(b + n, sizeof b - n,
             "munmap of a cached 64 KiB range: %.0f ns (%.0f ns without a tracker)\n"
             "miss on a 64 KiB range, device registering nothing: %.0f ns (%.0f ns without a "
             "tracker)\n",
             used.watched_ns, base.watched_ns, used.miss_ns, base.miss_ns);
    return b;
}

}  // namespace

extern "C" int vmtrack_cmd_info(int argc, char **argv)
{
    bool json = false, measuring = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (!strcmp(argv[i], "--measure")) {
            measuring = true;
        } else {
            fprintf(stderr, "vmtrack info: unknown option \"%s\"\n"
                    "usage: vmtrack info [--json] [--measure]\n", argv[i]);
            return 2;
        }
    }
    std::vector<Line> lines;
    lines.push_back({"version", vmt_version()});
    struct vmt_cache *cache = vmt_shared();
    if (!cache) {
        int err = errno;
        lines.push_back({"shared cache", std::string("cannot be created: ") + strerror(err) +
                                             " (see the message above)"});
    } else {
        char report[8192];
        vmt_cache_tracker_report(cache, report, sizeof report);
        lines.push_back({"tracker", vmt_cache_tracker(cache)});
        std::string caching = strcmp(vmt_cache_tracker(cache), "pass") == 0
                                  ? "OFF: no tracker is available, every vmt_get registers and "
                                    "every last vmt_put deregisters (safe, slow)"
                                  : strcmp(vmt_cache_tracker(cache), "none") == 0
                                        ? "on, invalidated only by vmt_invalidate() (manual)"
                                        : "on, invalidated by the tracker";
        lines.push_back({"caching", caching});
        lines.push_back({"trackers", report});
        if (measuring)
            lines.push_back({"measured", measure(vmt_cache_tracker(cache))});
        VMT_OPTS(vmt_stats, st);
        if (vmt_stats_get(cache, &st) == 0) {
            lines.push_back({"max entries", std::to_string(st.max_entries)});
            lines.push_back({"max bytes", std::to_string(st.max_bytes)});
            lines.push_back({"lanes", std::to_string(st.lanes)});
        }
    }
    lines.push_back({"RLIMIT_MEMLOCK", memlock()});
    lines.push_back({"device io_uring", probe_iouring()});
    lines.push_back({"device verbs", probe_verbs()});
    lines.push_back({"kernel module", probe_kmod()});
    lines.push_back({"UCX", probe_ucx()});
    std::string env;
    for (const char *name : {"VMTRACK_TRACKER", "VMTRACK_MAX_ENTRIES", "VMTRACK_MAX_BYTES",
                             "VMTRACK_MERGE", "VMTRACK_LANES", "VMTRACK_STATS", "VMTRACK_LOG"}) {
        const char *v = getenv(name);
        env += std::string(name) + "=" + (v ? v : "(unset)") + "\n";
    }
    lines.push_back({"environment", env});

    if (json) {
        printf("{");
        for (size_t i = 0; i < lines.size(); i++)
            printf("%s\"%s\":\"%s\"", i ? "," : "", json_escape(lines[i].key).c_str(),
                   json_escape(lines[i].value).c_str());
        printf("}\n");
    } else {
        for (const Line &l : lines) {
            if (l.value.find('\n') == std::string::npos) {
                printf("%-16s %s\n", (l.key + ":").c_str(), l.value.c_str());
                continue;
            }
            printf("%s:\n", l.key.c_str());
            size_t pos = 0;
            while (pos < l.value.size()) {
                size_t nl = l.value.find('\n', pos);
                if (nl == std::string::npos)
                    nl = l.value.size();
                printf("  %s\n", l.value.substr(pos, nl - pos).c_str());
                pos = nl + 1;
            }
        }
    }
    return cache ? 0 : 1;
}
