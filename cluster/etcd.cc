#include "cluster/etcd.h"

#include <httplib.h>

#include <array>
#include <nlohmann/json.hpp>
#include <utility>

#include "net/socket.h"
#include "net/tls.h"

namespace ecstore::cluster {

using nlohmann::json;

namespace {
constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// The end of a prefix range: the prefix with its last byte raised (etcd's range_end).
std::string RangeEnd(std::string prefix) {
  while (!prefix.empty() && static_cast<unsigned char>(prefix.back()) == 0xff) prefix.pop_back();
  if (prefix.empty()) return std::string(1, '\0');
  prefix.back() = static_cast<char>(static_cast<unsigned char>(prefix.back()) + 1);
  return prefix;
}
}  // namespace

std::string Base64(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  for (size_t i = 0; i < in.size(); i += 3) {
    uint32_t v = static_cast<uint8_t>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<uint8_t>(in[i + 1]) << 8;
    if (i + 2 < in.size()) v |= static_cast<uint8_t>(in[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < in.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += i + 2 < in.size() ? kAlphabet[v & 63] : '=';
  }
  return out;
}

Result<std::string> FromBase64(std::string_view in) {
  std::array<int, 256> value;
  value.fill(-1);
  for (int i = 0; i < 64; ++i) value[static_cast<uint8_t>(kAlphabet[i])] = i;
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    int v = value[static_cast<uint8_t>(c)];
    if (v < 0) return Status::InvalidArgument("etcd sent a value that is not base64");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

Result<EtcdClient> EtcdClient::Parse(const std::string& uri, std::string* name,
                                     std::chrono::milliseconds timeout, EtcdAccess access) {
  const bool etcds = uri.rfind("etcds://", 0) == 0;
  const std::string scheme = etcds ? "etcds://" : "etcd://";
  const size_t slash = uri.find('/', scheme.size());
  if (uri.rfind(scheme, 0) != 0 || slash == std::string::npos || slash + 1 >= uri.size())
    return Status::InvalidArgument("cluster '" + uri +
                                   "': write etcd://HOST:PORT[,HOST:PORT...]/NAME (etcds:// "
                                   "over TLS), e.g. etcd://127.0.0.1:2379/prod");
  if (access.cert.empty() != access.key.empty())
    return Status::InvalidArgument(
        "an etcd client certificate needs its key and the key its "
        "certificate: give both or neither");
  *name = uri.substr(slash + 1);
  if (name->find('/') != std::string::npos)
    return Status::InvalidArgument("cluster name '" + *name + "' may not contain '/'");
  std::vector<std::string> endpoints;
  std::string hosts = uri.substr(scheme.size(), slash - scheme.size());
  for (size_t at = 0; at <= hosts.size();) {
    size_t comma = hosts.find(',', at);
    if (comma == std::string::npos) comma = hosts.size();
    std::string hp = hosts.substr(at, comma - at);
    if (hp.find(':') == std::string::npos)
      return Status::InvalidArgument("etcd endpoint '" + hp + "' needs a port (HOST:2379)");
    // Checked here, so that no later call meets a port it cannot read.
    if (auto parsed = net::ParseHostPort(hp); !parsed.ok() || parsed->port == 0)
      return Status::InvalidArgument(
          "etcd endpoint '" + hp + "' in '" + uri + "' is not HOST:PORT with a port 1-65535" +
          (parsed.ok() ? "" : " (" + parsed.status().message() + ")") +
          ": write etcd://HOST:PORT[,HOST:PORT...]/NAME, e.g. etcd://127.0.0.1:2379/prod");
    endpoints.push_back(hp);
    at = comma + 1;
  }
  const bool tls = etcds || !access.ca.empty() || !access.cert.empty();
  return EtcdClient(std::move(endpoints), timeout, std::move(access), tls);
}

EtcdClient& EtcdClient::operator=(const EtcdClient& o) {
  if (this == &o) return *this;
  endpoints_ = o.endpoints_, timeout_ = o.timeout_, access_ = o.access_, tls_ = o.tls_;
  auth_token_ = o.auth_token_, watch_at_ = o.watch_at_, keep_ = o.keep_;
  kept_.reset();  // a connection is one thread's: the copy opens its own
  kept_at_.clear();
  return *this;
}

EtcdClient::EtcdClient(std::vector<std::string> endpoints, std::chrono::milliseconds timeout,
                       EtcdAccess access, bool tls)
    : endpoints_(std::move(endpoints)), timeout_(timeout), access_(std::move(access)), tls_(tls) {}
EtcdClient::EtcdClient(const EtcdClient& o) { *this = o; }
EtcdClient::~EtcdClient() = default;
EtcdClient::EtcdClient(EtcdClient&&) noexcept = default;
EtcdClient& EtcdClient::operator=(EtcdClient&&) noexcept = default;

EtcdClient EtcdClient::KeepingConnection() const {
  EtcdClient c = *this;
  c.keep_ = true;
  return c;
}

std::unique_ptr<httplib::Client> EtcdClient::Http(const std::string& hp) {
  auto c = std::make_unique<httplib::Client>((tls_ ? "https://" : "http://") + hp, access_.cert,
                                             access_.key);
  if (tls_) {
    if (!access_.ca.empty()) c->set_ca_cert_path(access_.ca);
    c->enable_server_certificate_verification(true);
  }
  if (!auth_token_.empty()) c->set_default_headers({{"Authorization", auth_token_}});
  const auto secs = std::chrono::duration_cast<std::chrono::seconds>(timeout_).count();
  const auto usecs =
      std::chrono::duration_cast<std::chrono::microseconds>(timeout_).count() % 1000000;
  c->set_connection_timeout(secs, usecs);
  c->set_read_timeout(secs, usecs);
  c->set_write_timeout(secs, usecs);
  return c;
}

Status EtcdClient::Authenticate() {
  auth_token_.clear();
  kept_.reset();  // its requests carry the old token
  bool unused = false;
  auto r = CallOnce("/v3/auth/authenticate",
                    json{{"name", access_.user}, {"password", access_.password}}.dump(), &unused);
  if (!r.ok()) return r.status();
  auto j = json::parse(*r, nullptr, false);
  if (j.is_discarded() || !j.contains("token"))
    return Status::PermissionDenied("etcd refused user '" + access_.user + "': " + *r);
  auth_token_ = j["token"].get<std::string>();
  kept_.reset();
  return Status::Ok();
}

Result<std::string> EtcdClient::Call(const std::string& path, const std::string& body) {
  if (!access_.user.empty() && auth_token_.empty()) EC_RETURN_IF_ERROR(Authenticate());
  bool auth_failed = false;
  auto r = CallOnce(path, body, &auth_failed);
  if (!auth_failed || access_.user.empty()) return r;
  EC_RETURN_IF_ERROR(Authenticate());  // the token expired: once more with a new one
  return CallOnce(path, body, &auth_failed);
}

Result<std::string> EtcdClient::CallOnce(const std::string& path, const std::string& body,
                                         bool* auth_failed) {
  std::string last = "no endpoint";
  net::ScopedNoSigpipe no_sigpipe;  // https: OpenSSL writes with write(2)
  for (const std::string& hp : endpoints_) {
    std::unique_ptr<httplib::Client> made;
    if (!keep_ || !kept_ || kept_at_ != hp) {
      made = Http(hp);
      if (keep_) made->set_keep_alive(true);
    }
    if (keep_ && made) kept_ = std::move(made), kept_at_ = hp;
    httplib::Client* c = keep_ ? kept_.get() : made.get();
    auto res = c->Post(path.c_str(), body, "application/json");
    if (!res) {
      if (keep_) kept_.reset();  // made again at the next call
      last = hp + ": " + httplib::to_string(res.error());
      if (tls_ && res.error() == httplib::Error::SSLServerVerification)
        last +=
            " (the etcd server's certificate is not signed by the CA given, or does not "
            "name " +
            hp + ")";
      continue;
    }
    if (res->status == 401 || res->body.find("invalid auth token") != std::string::npos ||
        res->body.find("user name is empty") != std::string::npos) {
      *auth_failed = true;
      return Status::PermissionDenied("etcd " + hp + path + " refused this client: " + res->body +
                                      " (give an etcd user and password, or a client "
                                      "certificate etcd accepts)");
    }
    if (res->status != 200) return Status::Unavailable("etcd " + hp + path + ": " + res->body);
    return res->body;
  }
  return Status::Unavailable("etcd unreachable (" + last + ")");
}

Result<int64_t> EtcdClient::GrantLease(std::chrono::seconds ttl) {
  auto r = Call("/v3/lease/grant", json{{"TTL", ttl.count()}}.dump());
  if (!r.ok()) return r.status();
  auto j = json::parse(*r, nullptr, false);
  if (j.is_discarded() || !j.contains("ID")) return Status::Unavailable("etcd: no lease: " + *r);
  return std::stoll(j["ID"].get<std::string>());
}

Result<int64_t> EtcdClient::KeepAlive(int64_t lease) {
  auto r = Call("/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}.dump());
  if (!r.ok()) return r.status();
  auto j = json::parse(*r, nullptr, false);
  const json* res = !j.is_discarded() && j.contains("result") ? &j["result"] : nullptr;
  if (!res || !res->contains("TTL")) return Status::NotFound("etcd lease expired");
  return std::stoll((*res)["TTL"].get<std::string>());
}

Status EtcdClient::Revoke(int64_t lease) {
  auto r = Call("/v3/lease/revoke", json{{"ID", std::to_string(lease)}}.dump());
  return r.ok() ? Status::Ok() : r.status();
}

Status EtcdClient::Put(const std::string& key, const std::string& value, int64_t lease) {
  json body{{"key", Base64(key)}, {"value", Base64(value)}};
  if (lease != 0) body["lease"] = std::to_string(lease);
  auto r = Call("/v3/kv/put", body.dump());
  return r.ok() ? Status::Ok() : r.status();
}

Status EtcdClient::Delete(const std::string& key) {
  auto r = Call("/v3/kv/deleterange", json{{"key", Base64(key)}}.dump());
  return r.ok() ? Status::Ok() : r.status();
}

Result<EtcdClient::Record> EtcdClient::Get(const std::string& key) {
  auto r = Call("/v3/kv/range", json{{"key", Base64(key)}}.dump());
  if (!r.ok()) return r.status();
  auto j = json::parse(*r, nullptr, false);
  if (j.is_discarded() || !j.contains("header"))
    return Status::Unavailable("etcd: malformed range reply");
  const json kvs = j.value("kvs", json::array());
  if (kvs.empty()) return Status::NotFound("etcd has no " + key);
  auto v = FromBase64(kvs[0].value("value", ""));
  if (!v.ok()) return Status::Unavailable("etcd: malformed value");
  return Record{*v, std::stoll(kvs[0].value("mod_revision", "0")),
                std::stoll(kvs[0].value("lease", "0"))};
}

Result<bool> EtcdClient::PutIf(const std::string& key, int64_t mod_revision,
                               const std::string& value, int64_t lease) {
  json put{{"key", Base64(key)}, {"value", Base64(value)}};
  if (lease != 0) put["lease"] = std::to_string(lease);
  const json body{{"compare",
                   {{{"key", Base64(key)},
                     {"result", "EQUAL"},
                     {"target", "MOD"},
                     {"mod_revision", std::to_string(mod_revision)}}}},
                  {"success", {{{"request_put", put}}}}};
  auto r = Call("/v3/kv/txn", body.dump());
  if (!r.ok()) return r.status();
  auto j = json::parse(*r, nullptr, false);
  if (j.is_discarded() || !j.contains("header"))
    return Status::Unavailable("etcd: malformed txn reply");
  return j.value("succeeded", false);
}

Result<std::vector<std::pair<std::string, std::string>>> EtcdClient::Prefix(
    const std::string& prefix) {
  auto r = PrefixAt(prefix);
  if (!r.ok()) return r.status();
  return std::move(r->kvs);
}

Result<EtcdClient::Range> EtcdClient::PrefixAt(const std::string& prefix) {
  auto r = Call("/v3/kv/range",
                json{{"key", Base64(prefix)}, {"range_end", Base64(RangeEnd(prefix))}}.dump());
  if (!r.ok()) return r.status();
  auto j = json::parse(*r, nullptr, false);
  if (j.is_discarded() || !j.contains("header"))
    return Status::Unavailable("etcd: malformed range reply");
  Range out;
  out.revision = std::stoll(j["header"].value("revision", "0"));
  for (const json& kv : j.value("kvs", json::array())) {
    auto k = FromBase64(kv.value("key", ""));
    auto v = FromBase64(kv.value("value", ""));
    if (!k.ok() || !v.ok()) return Status::Unavailable("etcd: malformed key or value");
    out.kvs.emplace_back(*k, *v);
    out.leases.push_back(std::stoll(kv.value("lease", "0")));
  }
  return out;
}

// One range, keys only: etcd counts every key in the range before it leaves out those that
// changed before min_mod_revision (a count_only range would ignore that filter).
Result<EtcdClient::Counts> EtcdClient::CountSince(const std::string& prefix,
                                                  int64_t from_revision) {
  auto r = Call("/v3/kv/range", json{{"key", Base64(prefix)},
                                     {"range_end", Base64(RangeEnd(prefix))},
                                     {"keys_only", true},
                                     {"min_mod_revision", std::to_string(from_revision)}}
                                    .dump());
  if (!r.ok()) return r.status();
  auto j = json::parse(*r, nullptr, false);
  if (j.is_discarded() || !j.contains("header"))
    return Status::Unavailable("etcd: malformed range reply");
  return Counts{std::stoll(j.value("count", "0")),
                static_cast<int64_t>(j.value("kvs", json::array()).size()),
                std::stoll(j["header"].value("revision", "0"))};
}

Result<int64_t> EtcdClient::Revision(const std::string& key) {
  auto r = Call("/v3/kv/range", json{{"key", Base64(key)}, {"count_only", true}}.dump());
  if (!r.ok()) return r.status();
  auto j = json::parse(*r, nullptr, false);
  if (j.is_discarded() || !j.contains("header"))
    return Status::Unavailable("etcd: malformed range reply");
  return std::stoll(j["header"].value("revision", "0"));
}

Result<std::pair<int64_t, int64_t>> EtcdClient::TimeToLive(int64_t lease) {
  auto r = Call("/v3/lease/timetolive", json{{"ID", std::to_string(lease)}}.dump());
  if (!r.ok()) return r.status();
  auto j = json::parse(*r, nullptr, false);
  if (j.is_discarded()) return Status::Unavailable("etcd: malformed timetolive reply");
  const int64_t left = std::stoll(j.value("TTL", "-1"));
  if (left < 0) return Status::NotFound("etcd lease " + std::to_string(lease) + " has lapsed");
  return std::pair<int64_t, int64_t>(left, std::stoll(j.value("grantedTTL", "0")));
}

namespace {

// One line of a watch stream ({"result": {...}}): its events told; Aborted where etcd
// cancelled the watch: NotFound (it compacted past the watch's start).
Status TellWatchReply(const std::string& line,
                      const std::function<void(const EtcdClient::Event&)>& on_event) {
  auto j = json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.contains("result"))
    return Status::Unavailable("etcd watch: " + line.substr(0, 200));
  const json& res = j["result"];
  if (res.value("canceled", false) || res.contains("compact_revision"))
    return Status::NotFound("etcd watch cancelled: " + res.value("cancel_reason", "compacted"));
  for (const json& ev : res.value("events", json::array())) {
    const json& kv = ev.value("kv", json::object());
    EtcdClient::Event e;
    e.deleted = ev.value("type", "PUT") == "DELETE";
    auto k = FromBase64(kv.value("key", ""));
    auto v = FromBase64(kv.value("value", ""));
    if (!k.ok() || !v.ok()) return Status::Unavailable("etcd watch: malformed key or value");
    e.key = std::move(k).value();
    e.value = std::move(v).value();
    e.revision = std::stoll(kv.value("mod_revision", "0"));
    e.lease = std::stoll(kv.value("lease", "0"));
    on_event(e);
  }
  return Status::Ok();
}

}  // namespace

void EtcdClient::WatchCancel::Cancel() {
  MutexLock l(&mu_);
  cancelled_ = true;
  if (active_) active_->stop();  // shuts the stream's socket: the blocked read returns
}

void EtcdClient::WatchCancel::Interrupt() {
  MutexLock l(&mu_);
  interrupted_ = true;
  if (active_) active_->stop();
}

Status EtcdClient::Watch(const std::string& prefix, int64_t from_revision,
                         const std::function<void(const Event&)>& on_event, WatchCancel* cancel,
                         std::chrono::milliseconds idle) {
  const std::string hp = endpoints_[watch_at_ % endpoints_.size()];
  if (!access_.user.empty() && auth_token_.empty()) EC_RETURN_IF_ERROR(Authenticate());
  auto http = Http(hp);
  httplib::Client& c = *http;
  // A stream idle this long is watched again (a peer that vanished without a reset).
  const auto quiet = std::chrono::duration_cast<std::chrono::microseconds>(idle).count();
  c.set_read_timeout(quiet / 1000000, quiet % 1000000);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v3/watch";
  req.headers.emplace("Content-Type", "application/json");
  req.body = json{{"create_request",
                   {{"key", Base64(prefix)},
                    {"range_end", Base64(RangeEnd(prefix))},
                    {"start_revision", std::to_string(from_revision)}}}}
                 .dump();
  std::string pending;
  Status failed = Status::Ok();
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    pending.append(data, n);
    for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
      Status st = TellWatchReply(pending.substr(0, nl), on_event);
      pending.erase(0, nl + 1);
      if (!st.ok()) {
        failed = st;
        return false;
      }
    }
    return true;
  };
  {
    MutexLock l(&cancel->mu_);
    if (cancel->cancelled_) return Status::Ok();
    if (std::exchange(cancel->interrupted_, false))
      return Status::Unavailable("etcd watch interrupted: read the prefix again");
    cancel->active_ = &c;
  }
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  net::ScopedNoSigpipe no_sigpipe;
  const bool sent = c.send(req, res, err);
  bool cancelled, interrupted;
  {
    MutexLock l(&cancel->mu_);
    cancel->active_ = nullptr;
    cancelled = cancel->cancelled_;
    interrupted = std::exchange(cancel->interrupted_, false);
  }
  if (cancelled) return Status::Ok();
  if (interrupted) return Status::Unavailable("etcd watch interrupted: read the prefix again");
  if (!failed.ok()) return failed;
  if (err == httplib::Error::Read) return Status::Ok();  // idle (or gone): watch again
  ++watch_at_;                                           // the next watch tries the next endpoint
  auth_token_.clear();  // and authenticates again, in case the token is what expired
  if (!sent) return Status::Unavailable("etcd " + hp + " watch: " + httplib::to_string(err));
  return Status::Unavailable("etcd " + hp + " closed the watch");
}

}  // namespace ecstore::cluster
