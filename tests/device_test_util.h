// What the GPU tests share: device memory holding a payload, and an `ec-store serve` process
// with a device tier and a same-host client of it (a CUDA allocation cannot be IPC-opened by
// the process that made it). Needs EC_STORE_BIN_DEFAULT (the build's ec-store).
//
//   DeviceBuffer src(n);
//   src.Fill(7);
//   pid_t pid = StartServer(dir, "32MiB", {"--device-pool-gpu", "1"});
//   auto c = ConnectUnix(dir);
//
// Thread rules: call from a test's body.
#pragma once

#ifdef EC_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "base/test_util.h"
#include "net/client.h"

namespace ecstore::testing {

// Device memory holding Payload(seed, bytes), or receiving bytes to check; on the calling
// thread's GPU, or on `device`.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(uint64_t bytes, int device = -1) : bytes_(bytes) {
    int was = 0;
    cudaGetDevice(&was);
    device_ = device >= 0 ? device : was;
    cudaSetDevice(device_);
    EXPECT_EQ(cudaMalloc(&p_, bytes), cudaSuccess);
    cudaSetDevice(was);
  }
  ~DeviceBuffer() { cudaFree(p_); }
  void* get() const { return p_; }
  void Fill(uint64_t seed) {
    auto h = Payload(seed, bytes_);
    EXPECT_EQ(cudaMemcpy(p_, h.data(), bytes_, cudaMemcpyHostToDevice), cudaSuccess);
    // From pageable memory cudaMemcpy may return before its DMA has landed, and the store
    // copies on a non-blocking stream of its own: the bytes are ready only after this.
    int was = 0;
    cudaGetDevice(&was);
    cudaSetDevice(device_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cudaSetDevice(was);
  }
  int device() const { return device_; }
  std::vector<uint8_t> Read() const { return ReadAt(p_, bytes_); }
  static std::vector<uint8_t> ReadAt(const void* p, uint64_t n) {
    std::vector<uint8_t> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }

 private:
  void* p_ = nullptr;
  uint64_t bytes_;
  int device_ = 0;
};

inline std::string EcStoreBin() {
  const char* env = std::getenv("EC_STORE_BIN");
  return env ? env : EC_STORE_BIN_DEFAULT;
}

// `ec-store serve` in `dir` (with a device tier of `device_pool`, or none where empty; more
// global flags in `flags`, such as {"--device-pool-gpu", "1"}); returns its pid once it listens.
inline pid_t StartServer(const std::string& dir, const std::string& device_pool = "32MiB",
                         const std::vector<std::string>& flags = {}) {
  int out[2];
  EXPECT_EQ(pipe(out), 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    close(out[0]);
    std::string bin = EcStoreBin();
    const std::string pool = device_pool.empty() ? "0" : device_pool;
    std::vector<std::string> args = {
        bin, "--dir", dir, "--pool-size", "64MiB", "--device-pool-size", pool};
    args.insert(args.end(), flags.begin(), flags.end());
    for (const char* a : {"serve", "--listen", "127.0.0.1:0"}) args.emplace_back(a);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  close(out[1]);
  char buf[256] = {};
  ssize_t n = read(out[0], buf, sizeof buf - 1);  // the first line names the port: ready
  close(out[0]);
  EXPECT_GT(n, 0) << "ec-store serve (" << EcStoreBin() << ") did not start";
  return pid;
}

inline void StopProcess(pid_t pid, int sig) {
  kill(pid, sig);
  int status;
  waitpid(pid, &status, 0);
}

inline std::unique_ptr<net::Client> ConnectUnix(const std::string& dir) {
  auto c = net::Client::Connect("unix:" + dir + "/serve.sock");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}

}  // namespace ecstore::testing
#endif
