#include "cli/completion.h"

#include <sstream>
#include <vector>

namespace ecstore::cli {
namespace {

std::string OptionWords(const CLI::App& app) {
  std::string words;
  for (const CLI::Option* o : app.get_options()) {
    for (const auto& l : o->get_lnames()) words += " --" + l;
    for (const auto& s : o->get_snames()) words += " -" + s;
  }
  return words;
}

}  // namespace

std::string CompletionScript(const CLI::App& app, const std::string& shell) {
  std::vector<const CLI::App*> subs;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    subs.push_back(sub);
  std::string commands;
  for (const CLI::App* sub : subs) commands += " " + sub->get_name();
  std::ostringstream s;
  if (shell == "zsh") s << "autoload -U +X bashcompinit && bashcompinit\n";
  s << "# ec-store completion: source <(ec-store completion " << shell << ")\n"
    << "_ec_store() {\n"
    << "  local cur=\"${COMP_WORDS[COMP_CWORD]}\" cmd=\"\" w\n"
    << "  local commands=\"" << commands.substr(commands.empty() ? 0 : 1) << "\"\n"
    << "  local globals=\"" << OptionWords(app).substr(1) << "\"\n"
    << "  for w in \"${COMP_WORDS[@]:1:COMP_CWORD-1}\"; do\n"
    << "    case \" $commands \" in *\" $w \"*) cmd=$w; break ;; esac\n"
    << "  done\n"
    << "  local words=\"$commands $globals\"\n"
    << "  case \"$cmd\" in\n";
  for (const CLI::App* sub : subs)
    s << "    " << sub->get_name() << ") words=\"" << OptionWords(*sub).substr(0)
      << " $globals\" ;;\n";
  s << "  esac\n"
    << "  COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n"
    << "  if [ ${#COMPREPLY[@]} -eq 0 ] && [ \"${cur#-}\" = \"$cur\" ]; then\n"
    << "    COMPREPLY=($(compgen -f -- \"$cur\"))\n"
    << "  fi\n"
    << "}\n"
    << "complete -F _ec_store ec-store\n";
  return s.str();
}

}  // namespace ecstore::cli
