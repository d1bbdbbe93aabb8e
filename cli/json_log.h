// `serve --log-format json`: one JSON object per log line ({"time", "level", "msg"}), for
// log collectors that parse lines rather than read them.
// Thread rules: the formatter is used under spdlog's sink lock, one line at a time.
#pragma once

#include <spdlog/formatter.h>

#include <memory>

namespace ecstore::cli {

std::unique_ptr<spdlog::formatter> JsonLogFormatter();

}  // namespace ecstore::cli
