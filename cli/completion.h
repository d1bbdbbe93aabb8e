// Shell completion for `ec-store`, generated from the command line's own definition (every
// command, its options and the global ones), so it cannot drift from what the CLI takes.
// Thread rules: pure functions.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace ecstore::cli {

// The bash script (`source <(ec-store completion bash)`); zsh runs it through bashcompinit.
std::string CompletionScript(const CLI::App& app, const std::string& shell);

}  // namespace ecstore::cli
