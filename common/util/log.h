// Messages for humans: one line each, filtered by VMTRACK_LOG, written to stderr prefixed
// "vmtrack: " or handed to the program's vmt_set_log_fn.
//
// Levels: ERROR for what nobody learns otherwise; a failure the caller gets as a return value
// is logged at INFO (the caller decides whether it is an error), never at ERROR.
#ifndef VMTRACK_COMMON_LOG_H
#define VMTRACK_COMMON_LOG_H

namespace vmt {

enum class LogLevel { error = 0, warn = 1, info = 2, debug = 3 };

void log_set_level(LogLevel level) noexcept;
LogLevel log_level() noexcept;
// printf-style; never allocates on the heap, so it may be used inside libc hooks.
void log(LogLevel level, const char *fmt, ...) noexcept __attribute__((format(printf, 2, 3)));

// Where messages go: fn(arg, level, line), or stderr when fn is NULL. Safe against concurrent
// log() calls, which never wait for it.
void log_set_sink(void (*fn)(void *, int, const char *), void *arg) noexcept;

// API misuse that would corrupt memory if ignored (double vmt_put, put after detach): the
// message always goes out; debug builds (--enable-debug) then abort.
void misuse(const char *fmt, ...) noexcept __attribute__((format(printf, 1, 2)));

}  // namespace vmt

#define VMT_LOG_ERROR(...) ::vmt::log(::vmt::LogLevel::error, __VA_ARGS__)
#define VMT_LOG_WARN(...) ::vmt::log(::vmt::LogLevel::warn, __VA_ARGS__)
#define VMT_LOG_INFO(...) ::vmt::log(::vmt::LogLevel::info, __VA_ARGS__)
#define VMT_LOG_DEBUG(...)                                              \
    do {                                                                \
        if (::vmt::log_level() >= ::vmt::LogLevel::debug)               \
            ::vmt::log(::vmt::LogLevel::debug, __VA_ARGS__);            \
    } while (0)

#endif
