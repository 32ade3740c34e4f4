#include "config.h"
#include "util/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>

namespace vmt {

static std::atomic<int> g_level{static_cast<int>(LogLevel::warn)};

void log_set_level(LogLevel level) noexcept { g_level.store(static_cast<int>(level)); }
LogLevel log_level() noexcept { return static_cast<LogLevel>(g_level.load(std::memory_order_relaxed)); }

static void vwrite(const char *tag, const char *fmt, va_list ap) noexcept
{
    char line[512];
    int n = snprintf(line, sizeof line, "vmtrack: %s", tag);
    if (n < 0)
        return;
    int m = vsnprintf(line + n, sizeof line - n, fmt, ap);
    size_t len = m < 0 ? (size_t)n : (size_t)n + (size_t)m;
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    line[len++] = '\n';
    // write(2) directly: no stdio locks, safe inside hooks and after fork.
    ssize_t ignored = write(STDERR_FILENO, line, len);
    (void)ignored;
}

void log(LogLevel level, const char *fmt, ...) noexcept
{
    if (static_cast<int>(level) > g_level.load(std::memory_order_relaxed))
        return;
    static const char *const tags[] = {"error: ", "warning: ", "", "debug: "};
    va_list ap;
    va_start(ap, fmt);
    vwrite(tags[static_cast<int>(level)], fmt, ap);
    va_end(ap);
}

void misuse(const char *fmt, ...) noexcept
{
    va_list ap;
    va_start(ap, fmt);
    vwrite("API misuse: ", fmt, ap);
    va_end(ap);
#ifdef VMT_DEBUG
    abort();
#endif
}

}  // namespace vmt
