#include "bench/common.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "base/embedding.h"

namespace ecstore::bench {
namespace {
const Clock::time_point g_start = Clock::now();
}  // namespace

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void Progress(const std::string& msg) {
  std::fprintf(stderr, "\r[bench %5.1fs] %-60s", Since(g_start), msg.c_str());
  std::fflush(stderr);
}

void Die(const Status& st, const char* what) {
  if (st.ok()) return;
  std::fprintf(stderr, "\nbench: %s: %s\n", what, st.ToString().c_str());
  std::exit(1);
}

std::vector<uint8_t> Embedding(size_t elems, uint64_t seed) {
  return SyntheticEmbedding(elems, seed, 0.8f);
}

int PickShape(std::mt19937_64& rng) {
  double x = std::uniform_real_distribution<double>(0, 1)(rng), acc = 0;
  for (int s = 0; s < 4; ++s)
    if ((acc += kShapes[s].weight) >= x) return s;
  return 3;
}

Payloads::Payloads() {
  for (int s = 0; s < 4; ++s)
    base_.push_back(Embedding(static_cast<size_t>(kShapes[s].rows) * kShapes[s].width, 7 + s));
}

std::span<const uint8_t> Payloads::Get(int shape, uint64_t key) {
  auto& b = base_[static_cast<size_t>(shape)];
  std::memcpy(b.data(), &key, 8);
  return {b.data(), b.size()};
}

std::string Key(uint64_t i) {
  char buf[72];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx%016llx%016llx",
                (unsigned long long)(i * 0x9E3779B97F4A7C15ull), (unsigned long long)i,
                (unsigned long long)(~i), (unsigned long long)(i * 31));
  return buf;
}

std::vector<Entry> MakeEntries(uint64_t target_bytes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Entry> out;
  uint64_t total = 0;
  while (total < target_bytes) {
    int s = PickShape(rng);
    out.push_back({Key(seed * 1000000 + out.size()), s});
    total += 2ull * kShapes[s].rows * kShapes[s].width;
  }
  return out;
}

uint64_t Bytes(const Entry& e) { return 2ull * kShapes[e.shape].rows * kShapes[e.shape].width; }

std::unique_ptr<Store> OpenStore(const Config& cfg, const std::string& dir, uint64_t pool,
                                 bool promote) {
  Options o;
  o.pool_bytes = pool;
  o.disk_quota_bytes = 64 * kGiB;
  o.promote_on_get = promote;
  o.segment_bytes = 1 * kGiB;
  if (!cfg.policy.empty()) o.eviction_policy = cfg.policy;
  if (cfg.high_watermark > 0)
    o.high_watermark = cfg.high_watermark, o.low_watermark = cfg.low_watermark;
  auto s = Store::Open(dir, o);
  if (!s.ok()) {
    std::fprintf(stderr, "\nbench: cannot open store: %s\n", s.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(s).value();
}

pid_t StartEcStore(const std::vector<std::string>& args) {
  char self[4096] = {};
  if (readlink("/proc/self/exe", self, sizeof self - 1) <= 0) return -1;
  const std::string bin = std::filesystem::path(self).parent_path() / "ec-store";
  std::vector<char*> argv{const_cast<char*>(bin.c_str())};
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  int out[2];
  if (pipe(out) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    close(out[0]);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  close(out[1]);
  char buf[256];
  ssize_t n = read(out[0], buf, sizeof buf);  // its first line
  close(out[0]);
  return n > 0 ? pid : -1;
}

Daemon::Daemon(const Config& cfg, std::string dir, uint64_t pool, bool fresh)
    : dir_(std::move(dir)), fresh_(fresh) {
  if (fresh_) std::filesystem::remove_all(dir_);
  std::vector<std::string> args{"--dir",        dir_,   "--pool-size", std::to_string(pool),
                                "--disk-quota", "64GiB"};
  if (!cfg.policy.empty()) args.insert(args.end(), {"--eviction-policy", cfg.policy});
  args.insert(args.end(), {"serve", "--listen", "127.0.0.1:0"});
  pid_ = StartEcStore(args);
  if (pid_ < 0) {
    why_ = "ec-store serve did not start";
    return;
  }
  auto c = net::Client::Connect("unix:" + dir_ + "/serve.sock");
  if (c.ok() && std::string_view((*c)->transport()) == "shm")
    client_ = std::move(c).value();
  else
    why_ = c.ok() ? "the daemon offered no shared memory" : c.status().ToString();
}

Result<std::unique_ptr<net::Client>> Daemon::Connect() const {
  return net::Client::Connect("unix:" + dir_ + "/serve.sock");
}

std::string Daemon::Tally(uint64_t misses) const {
  auto st = client_ ? client_->Stats() : Result<StoreStats>(Status::Unavailable(why_));
  if (!st.ok()) return std::to_string(misses) + " misses; stats: " + st.status().ToString();
  return std::to_string(misses) + " misses, pool hits " + std::to_string(st->pool().hits) +
         ", disk hits " + std::to_string(st->disk().hits);
}

Daemon::~Daemon() {
  client_.reset();
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
  if (fresh_) std::filesystem::remove_all(dir_);
}

Zipf::Zipf(size_t n, double s) : cdf_(n) {
  double sum = 0;
  for (size_t i = 0; i < n; ++i) cdf_[i] = (sum += 1.0 / std::pow(static_cast<double>(i + 1), s));
  for (double& c : cdf_) c /= sum;
}

size_t Zipf::operator()(std::mt19937_64& rng) const {
  double x = std::uniform_real_distribution<double>(0, 1)(rng);
  return static_cast<size_t>(std::lower_bound(cdf_.begin(), cdf_.end(), x) - cdf_.begin());
}

}  // namespace ecstore::bench
