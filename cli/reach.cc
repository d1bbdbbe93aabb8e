#include "cli/reach.h"

#include <cstdlib>

#include "base/safetensors.h"
#include "base/units.h"
#include "cli/output.h"

namespace ecstore::cli {
namespace {
// A secret file's first line; an empty one is refused, naming the flag.
std::string FirstLine(const std::string& path, const char* flag) {
  std::string text = Check(safetensors::ReadFile(path));
  if (size_t nl = text.find_first_of("\r\n"); nl != std::string::npos) text.resize(nl);
  if (text.empty())
    throw CliError(std::string("InvalidArgument: ") + flag + " " + path + " is empty");
  return text;
}
}  // namespace

std::string ClientToken(const Globals& g) {
  if (g.token_file.empty()) {
    const char* env = std::getenv("EC_STORE_TOKEN");
    return env ? env : "";
  }
  return FirstLine(g.token_file, "token file");
}

net::ClientOptions ClientOptionsOf(const Globals& g) {
  net::ClientOptions co;
  co.token = ClientToken(g);
  co.timeout = std::chrono::milliseconds(Check(ParseDuration(g.timeout)) / 1000);
  if (net::IsTlsAddress(g.server) || !g.tls_ca.empty())
    co.tls = net::TlsOptions{.cert = g.tls_cert,
                             .key = g.tls_key,
                             .ca = g.tls_ca,
                             .server_name = g.tls_server_name,
                             .server_uri = ""};
  return co;
}

cluster::EtcdAccess EtcdAccessOf(const Globals& g) {
  cluster::EtcdAccess a{g.etcd_ca, g.etcd_cert, g.etcd_key, g.etcd_user, ""};
  if (!g.etcd_password_file.empty())
    a.password = FirstLine(g.etcd_password_file, "--etcd-password-file");
  if (!a.user.empty() && a.password.empty() && a.cert.empty())
    throw CliError("InvalidArgument: --etcd-user needs its password: give --etcd-password-file");
  return a;
}

}  // namespace ecstore::cli
