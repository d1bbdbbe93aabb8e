// Settings beneath the command line: environment variables and a config file.
// Precedence, highest first: the command line, then EC_STORE_* environment variables, then
// the config file (--config FILE, or EC_STORE_CONFIG), then the built-in defaults.
// Thread rules: single-threaded (runs once, after parsing, before a command runs).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace ecstore::cli {

// The environment variable of an option: --token-file -> EC_STORE_TOKEN_FILE.
std::string EnvName(const CLI::Option* opt);

// For the app's global options and `sections`' own (subcommands whose options a config
// file may set under [name]): gives each option the command line left unset its
// environment variable's value, else the config file's. A setting the file names that no
// option has is a usage error (CLI::ValidationError), as is a value an option refuses.
void ApplyEnvAndConfig(CLI::App& app, const std::vector<CLI::App*>& sections,
                       const std::string& config_file);

}  // namespace ecstore::cli
