#include "cli/serve_events.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/mutex.h"
#include "base/safetensors.h"
#include "cli/output.h"
#include "net/socket.h"

namespace ecstore::cli {

void Events::Serving(net::Server* s) {
  MutexLock l(&mu);
  server = s;
}

bool Events::MaySubscribe(const std::string& key) {
  MutexLock l(&mu);
  return server && server->gate().MaySubscribe(key);
}

Events::~Events() {
  if (pub) store->SetEvents(nullptr);
}

namespace {

// An endpoint only this host reaches: ipc://, or tcp:// on a loopback address.
bool LocalEndpoint(const std::string& at) {
  if (at.rfind("ipc://", 0) == 0 || at.rfind("inproc://", 0) == 0) return true;
  if (at.rfind("tcp://", 0) != 0) return false;
  auto hp = net::ParseHostPort(at.substr(6));
  return hp.ok() && net::IsLoopback(hp->host);
}

// The events' CURVE secret key from --events-key; refused at start where the sockets would
// be open to anyone a daemon with TLS or an ACL, or other hosts, would not let in.
std::string EventsKey(const Globals& g, const ServeArgs& a) {
  CheckEvents(g, a);
  if (a.events_key.empty()) return "";
  auto text = safetensors::ReadFile(a.events_key);
  if (!text.ok())
    throw CliError("InvalidArgument: --events-key " + a.events_key + ": " +
                   text.status().message());
  std::string key = text->substr(0, text->find_first_of("\r\n"));
  Check(events::CurvePublicKey(key));
  return key;
}

}  // namespace

void CheckEvents(const Globals& g, const ServeArgs& a) {
  if (a.events.empty()) {
    if (!a.events_replay.empty())
      throw CliError("InvalidArgument: --events-replay needs --events (the stream it replays)");
    return;
  }
  const bool guarded = !g.tls_cert.empty() || !a.acl_file.empty();
  const bool local =
      LocalEndpoint(a.events) && (a.events_replay.empty() || LocalEndpoint(a.events_replay));
  if (a.events_key.empty() && (guarded || !local))
    throw CliError(
        "InvalidArgument: --events " + a.events +
        (guarded ? " beside TLS or an ACL" : " (not a loopback address)") +
        " would tell anyone every namespace and key: give --events-key FILE (CURVE; make "
        "one with `ec-store events-keys PREFIX`) and subscribers' curve= keys with the events "
        "right in --acl-file");
  if (!a.events_key.empty() && a.acl_file.empty())
    throw CliError(
        "InvalidArgument: --events-key needs --acl-file: its curve= proofs with the "
        "events right say which subscribers may in (docs/events.md)");
}

void StartEvents(const Globals& g, const ServeArgs& a, const std::optional<ClusterJoin>& join,
                 Store* store, Events* out) {
  CheckEvents(g, a);
  if (a.events.empty()) return;
  events::EventOptions o;
  o.publish = a.events;
  o.replay = a.events_replay;
  o.curve_secret_key = EventsKey(g, a);
  const std::string public_key =
      o.curve_secret_key.empty() ? "" : Check(events::CurvePublicKey(o.curve_secret_key));
  if (!public_key.empty())
    o.may_subscribe = [out](const std::string& key) { return out->MaySubscribe(key); };
  auto interval = ParseDuration(a.events_interval);
  if (!interval.ok() || *interval > 1'000'000)
    throw CliError("InvalidArgument: --events-interval '" + a.events_interval +
                   "': give a duration of at most 1s (e.g. 2ms, 500us)");
  o.min_interval = std::chrono::microseconds(*interval);
  o.heartbeat = std::chrono::milliseconds(Check(ParseDuration(a.events_heartbeat)) / 1000);
  o.node = join ? join->id : (a.node_id.empty() ? a.listen : a.node_id);
  // Outside a cluster the start time tells one start from the next.
  o.incarnation =
      join ? join->incarnation
           : static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                       std::chrono::system_clock::now().time_since_epoch())
                                       .count());
  out->store = store;
  out->pub = Check(events::EventPublisher::Start(std::move(o), store));
  store->SetEvents(out->pub.get());
  spdlog::info("entry events on {}{}{}", a.events,
               a.events_replay.empty() ? "" : " (replay and snapshots on " + a.events_replay + ")",
               public_key.empty() ? "" : ", CURVE on: this node's public key " + public_key);
}

int EventsKeysCommand(const std::string& prefix) {
  const auto keys = Check(events::NewCurveKeys());
  auto write = [](const std::string& path, const std::string& text, mode_t mode) {
    UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode));
    if (!fd.valid())
      throw CliError("IOError: cannot create " + path + ": " + std::strerror(errno) +
                     (errno == EEXIST ? " (it exists: keys are never overwritten; pick another "
                                        "PREFIX)"
                                      : ""));
    const std::string line = text + "\n";
    if (::write(fd.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size()))
      throw CliError("IOError: cannot write " + path + ": " + std::strerror(errno));
  };
  write(prefix + ".key", keys.secret_key, 0600);
  write(prefix + ".pub", keys.public_key, 0644);
  std::printf("%s\n", keys.public_key.c_str());
  return 0;
}

}  // namespace ecstore::cli
