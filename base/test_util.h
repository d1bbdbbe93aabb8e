// Helpers shared by the tests of every room: scratch directories, deterministic payloads,
// deadlines scaled to the machine. Test-only: no library source includes it.
//
// Thread rules: TempDir belongs to its test; the functions are pure.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "base/tensor_meta.h"

namespace ecstore::testing {

// A 1-D bf16 shape of `bytes` bytes: what most tests put.
inline TensorMeta U8(uint64_t n) { return {DType::kU8, {static_cast<int64_t>(n)}}; }
inline TensorMeta Bf16(uint64_t bytes) { return {DType::kBF16, {static_cast<int64_t>(bytes / 2)}}; }

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ecstore-test-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// bf16-like bytes derived only from (seed, size), so any process can check them.
inline std::vector<uint8_t> Payload(uint64_t seed, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + bytes);
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t v = rng();
    std::memcpy(out.data() + i, &v, 8);
  }
  for (; i < bytes; ++i) out[i] = static_cast<uint8_t>(rng());
  return out;
}

inline std::span<const uint8_t> Span(const std::vector<uint8_t>& v) { return {v.data(), v.size()}; }

// A test's deadline for this machine: `ms` times EC_TEST_TIME_SCALE (default 1), which a run
// under emulation (the Soft-RoCE VM) sets, so that a slow machine does not fail a test on
// time alone.
inline std::chrono::milliseconds Scaled(std::chrono::milliseconds ms) {
  const char* s = std::getenv("EC_TEST_TIME_SCALE");
  const double scale = s ? std::atof(s) : 1.0;
  return std::chrono::milliseconds(
      static_cast<int64_t>(static_cast<double>(ms.count()) * (scale >= 1.0 ? scale : 1.0)));
}

// Polls `done` every few ms until it is true or `limit` (Scaled) passed; returns the last
// answer. For a condition another process or thread brings about and tells no one of (a
// server reaping a closed connection): the wait lasts as long as the condition takes.
template <typename Fn>
bool WaitFor(Fn&& done, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + Scaled(limit);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= until) return done();
    ::usleep(2000);
  }
  return true;
}

}  // namespace ecstore::testing

// EC_SANITIZED: built with AddressSanitizer or ThreadSanitizer, by gcc (which defines
// __SANITIZE_*) or clang (which answers __has_feature).
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define EC_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define EC_SANITIZED 1
#endif
#endif
