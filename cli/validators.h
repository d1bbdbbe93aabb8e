// The command line's validators for sizes and durations, shared by the commands' options.
// Thread rules: constants; CLI11 calls them while parsing, on the main thread.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "cli/flags.h"

namespace ecstore::cli {

// Sizes and durations are checked as the command line is parsed: a bad one is a usage error
// (exit 2) naming the flag, before any store is opened.
inline const CLI::Validator kSize(
    [](const std::string& v) {
      auto n = ParseSize(v);
      return n.ok() ? std::string() : n.status().message();
    },
    "SIZE");
inline const CLI::Validator kDuration(
    [](const std::string& v) {
      auto d = ParseDuration(v);
      return d.ok() ? std::string() : d.status().message();
    },
    "DURATION");

}  // namespace ecstore::cli
