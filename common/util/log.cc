#include "config.h"
#include "util/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

namespace vmt {

static std::atomic<int> g_level{static_cast<int>(LogLevel::warn)};

void log_set_level(LogLevel level) noexcept { g_level.store(static_cast<int>(level)); }
LogLevel log_level() noexcept { return static_cast<LogLevel>(g_level.load(std::memory_order_relaxed)); }

// The program's log function, published under a sequence count so that log() (maybe inside a
// libc hook) reads a consistent (fn, arg) pair without a lock: odd while a writer changes it.
using LogFn = void (*)(void *, int, const char *);
static std::atomic<unsigned> g_sink_seq{0};
static std::atomic<LogFn> g_sink_fn{nullptr};
static std::atomic<void *> g_sink_arg{nullptr};
static std::atomic_flag g_sink_writer = ATOMIC_FLAG_INIT;

void log_set_sink(LogFn fn, void *arg) noexcept
{
    while (g_sink_writer.test_and_set(std::memory_order_acquire))
        ;  // another vmt_set_log_fn: a few stores
    unsigned seq = g_sink_seq.load(std::memory_order_relaxed);
    g_sink_seq.store(seq + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    g_sink_fn.store(fn, std::memory_order_relaxed);
    g_sink_arg.store(arg, std::memory_order_relaxed);
    g_sink_seq.store(seq + 2, std::memory_order_release);
    g_sink_writer.clear(std::memory_order_release);
}

static LogFn read_sink(void **arg) noexcept
{
    for (;;) {
        unsigned seq = g_sink_seq.load(std::memory_order_acquire);
        if (seq & 1)
            continue;
        LogFn fn = g_sink_fn.load(std::memory_order_relaxed);
        *arg = g_sink_arg.load(std::memory_order_relaxed);
        std::atomic_thread_fence(std::memory_order_acquire);
        if (g_sink_seq.load(std::memory_order_relaxed) == seq)
            return fn;
    }
}

// A message is one line: inner newlines (a multi-line report) become "; ", trailing ones go.
// Returns the new length; line[len] is 0.
static size_t one_line(char *line, size_t len) noexcept
{
    while (len && line[len - 1] == '\n')
        len--;
    char out[512];
    size_t o = 0;
    for (size_t i = 0; i < len && o < sizeof out - 3; i++) {
        if (line[i] == '\n') {
            out[o++] = ';';
            out[o++] = ' ';
        } else {
            out[o++] = line[i];
        }
    }
    memcpy(line, out, o);
    line[o] = 0;
    return o;
}

// tag: the level's word, for stderr only (a log function gets the level itself); what: part of
// the message whichever way it goes.
static void vwrite(int level, const char *tag, const char *what, const char *fmt,
                   va_list ap) noexcept
{
    char line[512];
    void *arg;
    LogFn fn = read_sink(&arg);
    int n = fn ? snprintf(line, sizeof line, "%s", what)
               : snprintf(line, sizeof line, "vmtrack: %s%s", tag, what);
    if (n < 0)
        return;
    int m = vsnprintf(line + n, sizeof line - n, fmt, ap);
    size_t len = m < 0 ? (size_t)n : (size_t)n + (size_t)m;
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    len = one_line(line, len);
    if (fn) {
        fn(arg, level, line);
        return;
    }
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
    vwrite(static_cast<int>(level), tags[static_cast<int>(level)], "", fmt, ap);
    va_end(ap);
}

void misuse(const char *fmt, ...) noexcept
{
    va_list ap;
    va_start(ap, fmt);
    vwrite(static_cast<int>(LogLevel::error), "", "API misuse: ", fmt, ap);
    va_end(ap);
#ifdef VMT_DEBUG
    abort();
#endif
}

}  // namespace vmt
