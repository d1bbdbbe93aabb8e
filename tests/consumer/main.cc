// Embeds the store through the installed headers: put, close, reopen, get byte-exact.
#include <ecstore/store.h>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  ecstore::Options o;
  o.pool_bytes = 8 << 20;
  std::vector<uint8_t> bytes(1 << 20);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7);
  {
    auto s = ecstore::Store::Open(argv[1], o);
    if (!s.ok()) return std::printf("open: %s\n", s.status().ToString().c_str()), 1;
    auto st = (*s)->Put("ns", "k", {ecstore::DType::kU8, {1 << 20}}, bytes);
    if (!st.ok() || !(*s)->Close().ok()) return std::printf("put: %s\n", st.ToString().c_str()), 1;
  }
  auto s = ecstore::Store::Open(argv[1], o);
  std::vector<uint8_t> got(bytes.size());
  auto info = s.ok() ? (*s)->Get("ns", "k", got) : ecstore::Result<ecstore::EntryInfo>(s.status());
  if (!info.ok() || got != bytes) return std::printf("get failed\n"), 1;
  std::printf("consumer: put, reopen and get byte-exact through the installed library\n");
  return 0;
}
