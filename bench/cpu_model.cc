// The CPU a bench ran on (cpu_model.h).
#include "config.h"

#include "cpu_model.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace vmt_bench {

namespace {

// The value of the first "key : value" line of /proc/cpuinfo with this key, or "".
std::string cpuinfo_field(const char *key)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return "";
    char line[512];
    std::string value;
    size_t klen = strlen(key);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, klen) != 0 || (line[klen] != ' ' && line[klen] != '\t' &&
                                              line[klen] != ':'))
            continue;
        const char *colon = strchr(line, ':');
        if (!colon)
            continue;
        value = colon + 1;
        size_t b = value.find_first_not_of(" \t");
        size_t e = value.find_last_not_of(" \t\n");
        value = b == std::string::npos ? "" : value.substr(b, e - b + 1);
        break;
    }
    fclose(f);
    return value;
}

// The first CPU's level-1 data cache ("48K"), or "".
std::string l1d_size()
{
    for (int i = 0; i < 8; i++) {
        std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
        char level[16] = "", type[32] = "", size[32] = "";
        FILE *f = fopen((dir + "level").c_str(), "r");
        if (!f)
            break;
        bool ok = fscanf(f, "%15s", level) == 1;
        fclose(f);
        f = fopen((dir + "type").c_str(), "r");
        if (!f)
            continue;
        ok = ok && fscanf(f, "%31s", type) == 1;
        fclose(f);
        if (!ok || strcmp(level, "1") != 0 || strcmp(type, "Data") != 0)
            continue;
        f = fopen((dir + "size").c_str(), "r");
        if (!f)
            return "";
        ok = fscanf(f, "%31s", size) == 1;
        fclose(f);
        return ok ? size : "";
    }
    return "";
}

}  // namespace

std::string cpu_model()
{
    std::string name = cpuinfo_field("model name");
    std::string family = cpuinfo_field("cpu family"), model = cpuinfo_field("model");
    std::string out = name.empty() ? "an unnamed CPU" : name;
    if (!family.empty() && !model.empty())
        out += " (family " + family + ", model " + model + ")";
    std::string l1d = l1d_size();
    if (!l1d.empty()) {
        if (l1d.back() == 'K')
            l1d = l1d.substr(0, l1d.size() - 1) + " KiB";
        out += ", L1d " + l1d;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus > 0)
        out += ", " + std::to_string(cpus) + " CPUs";
    return out;
}

}  // namespace vmt_bench
