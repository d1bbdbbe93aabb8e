#include "cli/flags.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

namespace ecstore::cli {

namespace {
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}
}  // namespace

std::string ClosestOf(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = 3;  // more than two edits is another word, not a misspelling
  for (const auto& c : candidates) {
    size_t d = c.rfind(word, 0) == 0 && word.size() >= 2 ? 1 : EditDistance(word, c);
    if (d < best_distance) best = c, best_distance = d;
  }
  return best;
}

std::string WithFlagHints(std::string msg) {
  static const std::pair<const char*, const char*> kHints[] = {
      {"a writable store directory", "a writable --dir"},
      {"a shorter store directory path", "a shorter --dir"},
      {"connect to it as a client", "reach it with --server HOST:PORT"},
      {"Options::device_pool_bytes", "--device-pool-size"},
      {"Options::pool_bytes", "--pool-size"},
      {"Options::disk_quota_bytes", "--disk-quota"},
      {"the TensorMeta shape/dtype", "--shape/--dtype"},
      {"ServerOptions::rdma_listen", "--rdma-listen"},
      {"set ServerOptions::token", "give --token-file FILE or set EC_STORE_TOKEN"},
      {"ClientOptions::token", "EC_STORE_TOKEN"},
  };
  for (auto [lib, flag] : kHints)
    for (size_t at = msg.find(lib); at != std::string::npos; at = msg.find(lib, at + 1))
      msg.replace(at, std::strlen(lib), flag);
  return msg;
}

}  // namespace ecstore::cli
