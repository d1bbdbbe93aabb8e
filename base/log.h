// Where the library's log lines go. By default spdlog's default logger (stderr); an engine
// that embeds the store routes them into its own logging instead, without spdlog in its
// build:
//
//   ecstore::SetLogSink([](ecstore::LogLevel level, std::string_view line) {
//     my_logger.log(ToMine(level), line);
//   });
//
// Thread rules: SetLogSink from any thread (it swaps the process's default logger); the sink
// is called from whichever of the store's threads logs, one line at a time.
#pragma once

#include <functional>
#include <string_view>

namespace ecstore {

enum class LogLevel { kTrace, kDebug, kInfo, kWarn, kError };

using LogSink = std::function<void(LogLevel level, std::string_view line)>;

// Sends every line the library logs at `min` or above to `sink`; a null sink restores the
// default (stderr).
void SetLogSink(LogSink sink, LogLevel min = LogLevel::kInfo);

}  // namespace ecstore
