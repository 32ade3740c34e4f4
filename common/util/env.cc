#include "config.h"
#include "util/env.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "util/log.h"

extern char **environ;

namespace vmt {

namespace {

struct Known {
    const char *name;
    const char *accepts;
};
const Known kKnown[] = {
    {"VMTRACK_TRACKER", "auto, kmod, hooks, uffd, none or pass"},
    {"VMTRACK_MAX_ENTRIES", "a positive whole number"},
    {"VMTRACK_MAX_BYTES", "a positive size, e.g. 1073741824, 512M or 4G"},
    {"VMTRACK_MERGE", "0 or 1"},
    {"VMTRACK_STATS", "0 or 1"},
    {"VMTRACK_LOG", "error, warn, info or debug"},
    {"VMTRACK_LANES", "1 to 8 (the most lanes a cache has; 1: one index for all threads)"},
    {"VMTRACK_IOURING_TABLE", "sparse, tagged or whole (the io_uring device's table)"},
    {"VMTRACK_TEST_EPOCH_WRAP", "1 (tests: a new cache's memo epoch wraps after 1024 retirements)"},
    {"VMTRACK_TEST_ENTRY_REGS", "2 to 65535 (tests: registrations an entry takes, not yet freed)"},
    // read by libvmtrack-ucx (ucx-memtype/), listed so that they are not reported as typos
    {"VMTRACK_UCX", "1 or 0"},
    {"VMTRACK_UCX_NATIVE", "1 or 0"},
    {"VMTRACK_UCX_CHECK", "1 or 0 (0: refuse UCP's cache instead of checking its hits)"},
    // read by libvmtrack-ofi (ofi-monitor/)
    {"VMTRACK_OFI", "0 (the constructor does not import the monitor)"},
    {"VMTRACK_OFI_MAX_RANGES", "a positive whole number (the monitor's table of ranges)"},
};

int bad(std::string *error, const char *name, const char *value)
{
    const char *accepts = "";
    for (const Known &k : kKnown)
        if (strcmp(k.name, name) == 0)
            accepts = k.accepts;
    *error = std::string(name) + "=\"" + value + "\" is not valid: it takes " + accepts;
    return -EINVAL;
}

int parse_bool(const char *v, bool *out)
{
    if (strcmp(v, "0") == 0) {
        *out = false;
        return 0;
    }
    if (strcmp(v, "1") == 0) {
        *out = true;
        return 0;
    }
    return -EINVAL;
}

}  // namespace

int parse_size(const char *text, size_t *out)
{
    if (!text || !*text || *text == '-' || *text == '+')
        return -EINVAL;
    errno = 0;
    char *end = nullptr;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || end == text)
        return -EINVAL;
    unsigned shift = 0;
    switch (*end) {
    case '\0': break;
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: return -EINVAL;
    }
    if (*end != '\0' || v == 0)
        return -EINVAL;
    if (shift && v > (~0ULL >> shift))
        return -EINVAL;
    *out = (size_t)(v << shift);
    return 0;
}

int parse_lanes(const char *text, unsigned *out)
{
    char *end = nullptr;
    errno = 0;
    unsigned long n = strtoul(text, &end, 10);
    if (errno || !*text || *end || *text == '-' || n < 1 || n > kMostLanes)
        return -EINVAL;
    *out = (unsigned)n;
    return 0;
}

int env_parse(EnvConfig *cfg, std::string *error)
{
    const char *v;
    if ((v = getenv("VMTRACK_TRACKER")) && *v) {
        static const char *const names[] = {"auto", "kmod", "bpf", "hooks", "uffd", "none", "pass"};
        bool ok = false;
        for (const char *n : names)
            ok |= strcmp(n, v) == 0;
        if (!ok)
            return bad(error, "VMTRACK_TRACKER", v);
        cfg->tracker = v;
    }
    if ((v = getenv("VMTRACK_MAX_ENTRIES")) && *v) {
        char *end = nullptr;
        errno = 0;
        unsigned long long n = strtoull(v, &end, 10);
        if (errno || *end || n == 0 || *v == '-')
            return bad(error, "VMTRACK_MAX_ENTRIES", v);
        cfg->max_entries = n;
    }
    if ((v = getenv("VMTRACK_MAX_BYTES")) && *v) {
        if (parse_size(v, &cfg->max_bytes))
            return bad(error, "VMTRACK_MAX_BYTES", v);
    }
    if ((v = getenv("VMTRACK_MERGE")) && *v) {
        if (parse_bool(v, &cfg->merge))
            return bad(error, "VMTRACK_MERGE", v);
    }
    if ((v = getenv("VMTRACK_STATS")) && *v) {
        if (parse_bool(v, &cfg->stats_at_exit))
            return bad(error, "VMTRACK_STATS", v);
    }
    unsigned lanes;  // read by every cache when it is made (Cache::lanes_for): checked here
    if ((v = getenv("VMTRACK_LANES")) && *v && parse_lanes(v, &lanes))
        return bad(error, "VMTRACK_LANES", v);
    if ((v = getenv("VMTRACK_LOG")) && *v) {
        static const char *const levels[] = {"error", "warn", "info", "debug"};
        int found = -1;
        for (int i = 0; i < 4; i++)
            if (strcmp(levels[i], v) == 0)
                found = i;
        if (found < 0)
            return bad(error, "VMTRACK_LOG", v);
        cfg->log_level = found;
    }
    // A misspelt variable would otherwise be ignored without a word.
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "VMTRACK_", 8) != 0)
            continue;
        const char *eq = strchr(*e, '=');
        size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
        bool known = false;
        for (const Known &k : kKnown)
            known |= strlen(k.name) == len && strncmp(k.name, *e, len) == 0;
        if (!known)
            VMT_LOG_WARN("%.*s is not a variable vmtrack reads (ignored)", (int)len, *e);
    }
    return 0;
}

}  // namespace vmt
