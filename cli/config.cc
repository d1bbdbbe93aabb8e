#include "cli/config.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

namespace ecstore::cli {
namespace fs = std::filesystem;
namespace {

// Options a config file or the environment may set: named (not positional), not --help,
// --version or --config itself.
bool Settable(const CLI::Option* opt) {
  const std::string& name = opt->get_single_name();
  return !opt->get_lnames().empty() && name != "help" && name != "version" && name != "config";
}

std::string Normalized(std::string name) {
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

void SetFrom(CLI::Option* opt, const std::vector<std::string>& inputs, const std::string& origin) {
  try {
    for (const std::string& in : inputs) opt->add_result(in);
    opt->run_callback();
  } catch (const CLI::Error& e) {
    throw CLI::ValidationError(origin + ": " + e.what());
  }
}

}  // namespace

std::string EnvName(const CLI::Option* opt) {
  std::string env = "EC_STORE_" + opt->get_single_name();
  for (char& c : env) c = c == '-' ? '_' : static_cast<char>(std::toupper(c));
  return env;
}

void ApplyEnvAndConfig(CLI::App& app, const std::vector<CLI::App*>& sections,
                       const std::string& config_file) {
  // Each settable option, by "section.name" ("" for the globals).
  std::map<std::string, CLI::Option*> known;
  auto collect = [&](CLI::App* a, const std::string& prefix) {
    for (CLI::Option* opt : a->get_options())
      if (Settable(opt)) known[prefix + opt->get_single_name()] = opt;
  };
  collect(&app, "");
  for (CLI::App* s : sections) collect(s, s->get_name() + ".");

  for (auto& [_, opt] : known) {
    if (opt->count() > 0) continue;
    if (const char* v = std::getenv(EnvName(opt).c_str()); v && *v)
      SetFrom(opt, {v}, "environment variable " + EnvName(opt));
  }
  if (config_file.empty()) return;
  std::error_code ec;
  if (fs::exists(config_file, ec) && !fs::is_regular_file(config_file, ec))
    throw CLI::ValidationError("config file " + config_file +
                               " is not a regular file (a FIFO or device would be read "
                               "forever); check --config / EC_STORE_CONFIG");
  if (!std::ifstream(config_file))
    throw CLI::ValidationError("config file " + config_file +
                               " cannot be read; check --config / EC_STORE_CONFIG");
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigTOML().from_file(config_file);
  } catch (const CLI::Error& e) {
    throw CLI::ValidationError("config file " + config_file + ": " + e.what());
  }
  for (const CLI::ConfigItem& item : items) {
    if (item.name == "++" || item.name == "--") continue;  // section markers
    std::string full = Normalized(item.fullname());
    auto it = known.find(full);
    if (it == known.end()) {
      std::string names;
      for (auto& [k, _] : known) names += (names.empty() ? "" : ", ") + k;
      throw CLI::ValidationError("config file " + config_file + ": unknown setting '" + full +
                                 "'; known: " + names);
    }
    if (it->second->count() == 0)
      SetFrom(it->second, item.inputs, "config file " + config_file + ", " + full);
  }
}

}  // namespace ecstore::cli
