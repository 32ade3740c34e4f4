// The VMTRACK_* environment: parsed once, strictly (an unknown value is an error that names
// the variable, never a silent default).
#ifndef VMTRACK_COMMON_ENV_H
#define VMTRACK_COMMON_ENV_H

#include <cstddef>
#include <string>

namespace vmt {

struct EnvConfig {
    std::string tracker = "auto";
    size_t max_entries = 0;
    size_t max_bytes = 0;
    bool merge = true;
    bool stats_at_exit = false;
    int log_level = 1;  // LogLevel::warn
};

// 0, or -EINVAL with *error naming the variable and what it accepts.
int env_parse(EnvConfig *cfg, std::string *error);

// Parses "123", "64K", "2M", "1G" (powers of 1024). 0 or -EINVAL.
int parse_size(const char *text, size_t *out);

// VMTRACK_LANES: a whole number from 1 to kMostLanes. 0 or -EINVAL.
constexpr unsigned kMostLanes = 8;  // Cache's kMaxLanes
int parse_lanes(const char *text, unsigned *out);

}  // namespace vmt

#endif
