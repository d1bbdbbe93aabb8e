#include "bench/record_probe.h"

#include <fcntl.h>

#include <chrono>
#include <filesystem>
#include <unordered_map>

#include "disk/aligned_buffer.h"
#include "disk/record.h"
#include "store/store.h"

namespace ecstore::bench {

Result<std::unique_ptr<RecordReadProbe>> RecordReadProbe::Open(
    const std::string& store_dir, const std::string& ns, const std::vector<std::string>& keys) {
  std::unique_ptr<RecordReadProbe> p(new RecordReadProbe);
  const Options defaults;  // the store's queue depth and largest piece
  auto io = IoService::Start(Env::Default(), defaults.io_queue_depth, defaults.io_chunk_bytes);
  if (!io.ok()) return io.status();
  p->io_ = std::move(io).value();
  std::unordered_map<std::string, size_t> want;
  for (size_t i = 0; i < keys.size(); ++i) want.emplace(keys[i], i);
  p->at_.assign(keys.size(), Where{-1, 0, 0, 0});
  std::vector<std::filesystem::path> files;
  for (const auto& f : std::filesystem::directory_iterator(store_dir + "/segments"))
    if (f.path().extension() == ".ecs") files.push_back(f.path());
  AlignedBuffer header(kBlockSize);
  for (const auto& path : files) {
    auto fd = Env::Default()->OpenFile(path.string(), O_RDONLY | O_DIRECT);
    if (!fd.ok()) return fd.status();
    const int raw = fd->get();
    const auto size = static_cast<uint64_t>(std::filesystem::file_size(path));
    p->segments_.push_back(std::move(fd).value());
    // Records lie back to back from offset 0; the preallocated tail holds no header.
    for (uint64_t off = 0; off + kBlockSize <= size;) {
      EC_RETURN_IF_ERROR(p->io_->Run({{IoOp::kRead, raw, header.data(), kBlockSize, off, 0}}));
      auto info = DecodeHeader(header.data());
      if (!info.ok()) break;
      const uint64_t len = info->record_bytes();
      auto it = info->ns == ns ? want.find(info->key) : want.end();
      if (it != want.end() && !info->tombstone() && info->seq >= p->at_[it->second].seq)
        p->at_[it->second] = {raw, off, len, info->seq};
      off += len;
    }
  }
  for (size_t i = 0; i < keys.size(); ++i)
    if (p->at_[i].fd < 0)
      return Status::NotFound("no record of '" + keys[i] + "' in " + store_dir + "/segments");
  return p;
}

Result<double> RecordReadProbe::Read(size_t i, std::span<uint8_t> dst) {
  const size_t which[] = {i};
  const std::span<uint8_t> dsts[] = {dst};
  return ReadMany(which, dsts);
}

Result<double> RecordReadProbe::ReadMany(std::span<const size_t> which,
                                         std::span<const std::span<uint8_t>> dsts) {
  std::vector<IoRequest> batch;
  for (size_t k = 0; k < which.size(); ++k) {
    const Where& w = at_[which[k]];
    if (dsts[k].size() < w.len)
      return Status::InvalidArgument("probe destination holds " + std::to_string(dsts[k].size()) +
                                     " bytes, the record " + std::to_string(w.len));
    batch.push_back({IoOp::kRead, w.fd, dsts[k].data(), w.len, w.offset, 0});
  }
  const auto t = std::chrono::steady_clock::now();
  EC_RETURN_IF_ERROR(io_->Run(batch));
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace ecstore::bench
