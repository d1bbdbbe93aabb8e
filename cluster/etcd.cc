#include "cluster/etcd.h"

#include <httplib.h>

#include <array>
#include <nlohmann/json.hpp>

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
                                     std::chrono::milliseconds timeout) {
  const std::string scheme = "etcd://";
  const size_t slash = uri.find('/', scheme.size());
  if (uri.rfind(scheme, 0) != 0 || slash == std::string::npos || slash + 1 >= uri.size())
    return Status::InvalidArgument("cluster '" + uri +
                                   "': write etcd://HOST:PORT[,HOST:PORT...]/NAME, e.g. "
                                   "etcd://127.0.0.1:2379/prod");
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
    endpoints.push_back(hp);
    at = comma + 1;
  }
  return EtcdClient(std::move(endpoints), timeout);
}

Result<std::string> EtcdClient::Call(const std::string& path, const std::string& body) {
  std::string last = "no endpoint";
  for (const std::string& hp : endpoints_) {
    const size_t colon = hp.rfind(':');
    httplib::Client c(hp.substr(0, colon), std::stoi(hp.substr(colon + 1)));
    const auto secs = std::chrono::duration_cast<std::chrono::seconds>(timeout_).count();
    const auto usecs =
        std::chrono::duration_cast<std::chrono::microseconds>(timeout_).count() % 1000000;
    c.set_connection_timeout(secs, usecs);
    c.set_read_timeout(secs, usecs);
    c.set_write_timeout(secs, usecs);
    auto res = c.Post(path.c_str(), body, "application/json");
    if (!res) {
      last = hp + ": " + httplib::to_string(res.error());
      continue;
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

Result<std::vector<std::pair<std::string, std::string>>> EtcdClient::Prefix(
    const std::string& prefix) {
  auto r = Call("/v3/kv/range",
                json{{"key", Base64(prefix)}, {"range_end", Base64(RangeEnd(prefix))}}.dump());
  if (!r.ok()) return r.status();
  auto j = json::parse(*r, nullptr, false);
  if (j.is_discarded()) return Status::Unavailable("etcd: malformed range reply");
  std::vector<std::pair<std::string, std::string>> out;
  for (const json& kv : j.value("kvs", json::array())) {
    auto k = FromBase64(kv.value("key", ""));
    auto v = FromBase64(kv.value("value", ""));
    if (!k.ok() || !v.ok()) return Status::Unavailable("etcd: malformed key or value");
    out.emplace_back(*k, *v);
  }
  return out;
}

}  // namespace ecstore::cluster
