#include "base/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

namespace ecstore::safetensors {

namespace {
// A one-tensor encoder-cache file has a header of ~150 bytes; 64 KiB leaves room for any
// __metadata__ while a hostile 100 MiB header (which cost 7.8 GB and ~40 s to parse as a
// tree) is refused before it is read. JSON deeper than a real header is refused as well.
constexpr uint64_t kMaxHeader = 64 << 10;
constexpr int kMaxDepth = 4;
}  // namespace

Result<uint64_t> HeaderBytes(std::span<const uint8_t> first8, uint64_t file_size) {
  if (first8.size() < 8 || file_size < 8)
    return Status::InvalidArgument("not a safetensors file: shorter than its 8-byte header length");
  uint64_t n = 0;
  std::memcpy(&n, first8.data(), 8);
  if (n > kMaxHeader)
    return Status::InvalidArgument("safetensors header of " + std::to_string(n) +
                                   " bytes is larger than the " + std::to_string(kMaxHeader) +
                                   " bytes a one-tensor encoder-cache file needs; refusing it");
  if (n + 8 > file_size)
    return Status::InvalidArgument("safetensors header length " + std::to_string(n) +
                                   " does not fit in a file of " + std::to_string(file_size) +
                                   " bytes: the file is truncated or not safetensors");
  return n + 8;
}

Result<Layout> ParseHeader(std::span<const uint8_t> head, uint64_t file_size) {
  Result<uint64_t> need = HeaderBytes(head, file_size);
  if (!need.ok()) return need.status();
  if (head.size() < *need) return Status::InvalidArgument("safetensors header is incomplete");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(head.begin() + 8, head.begin() + *need,
                              [](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
                                if (depth > kMaxDepth)
                                  throw std::runtime_error("nested deeper than a real header");
                                return true;
                              });
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("safetensors header is not valid JSON: ") +
                                   e.what());
  }
  if (!j.is_object()) return Status::InvalidArgument("safetensors header is not a JSON object");
  Layout layout;
  int tensors = 0;
  for (auto& [name, val] : j.items()) {
    if (name == "__metadata__") continue;
    ++tensors;
    layout.tensor_name = name;
    try {
      Result<DType> dt = ParseDType(val.at("dtype").get<std::string>());
      if (!dt.ok()) return dt.status();
      layout.meta.dtype = *dt;
      layout.meta.shape = val.at("shape").get<std::vector<int64_t>>();
      auto offs = val.at("data_offsets").get<std::vector<uint64_t>>();
      if (offs.size() != 2 || offs[1] < offs[0])
        return Status::InvalidArgument("safetensors data_offsets must be [begin, end]");
      layout.data_offset = *need + offs[0];
      layout.data_bytes = offs[1] - offs[0];
    } catch (const std::exception& e) {
      return Status::InvalidArgument("safetensors tensor '" + name + "' is malformed: " + e.what());
    }
  }
  if (tensors != 1)
    return Status::InvalidArgument("safetensors file holds " + std::to_string(tensors) +
                                   " tensors; ec-store entries hold exactly one");
  if (layout.data_offset + layout.data_bytes > file_size)
    return Status::InvalidArgument("safetensors file is truncated: the tensor needs bytes up to " +
                                   std::to_string(layout.data_offset + layout.data_bytes) +
                                   " but the file has " + std::to_string(file_size));
  EC_RETURN_IF_ERROR(ValidateMeta(layout.meta, layout.data_bytes));
  return layout;
}

std::string MakeHeader(const TensorMeta& meta, const std::string& tensor_name) {
  nlohmann::json j;
  uint64_t bytes = meta.ByteSize().ok() ? meta.ByteSize().value() : 0;
  j[tensor_name] = {
      {"dtype", DTypeName(meta.dtype)}, {"shape", meta.shape}, {"data_offsets", {0, bytes}}};
  j["__metadata__"] = {{"format", "pt"}};
  std::string js = j.dump();
  while ((js.size() + 8) % 8) js.push_back(' ');
  std::string out(8, '\0');
  uint64_t n = js.size();
  std::memcpy(out.data(), &n, 8);
  return out + js;
}

Result<std::string> ReadFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "open " + path);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return Status::FromErrno(e, "stat " + path);
  }
  std::string data(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::read(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = n < 0 ? errno : EIO;
      ::close(fd);
      return Status::FromErrno(e, "read " + path);
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return data;
}

Status Load(const std::string& path, TensorMeta* meta, std::string* bytes) {
  {  // the header length first: a hostile file is refused before it is read
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::FromErrno(errno, "open " + path);
    uint8_t first8[8];
    struct stat st;
    bool got = fstat(fd, &st) == 0 && ::pread(fd, first8, 8, 0) == 8;
    ::close(fd);
    if (got) {
      auto need = HeaderBytes(first8, static_cast<uint64_t>(st.st_size));
      if (!need.ok()) return Status::InvalidArgument(path + ": " + need.status().message());
    }
  }
  Result<std::string> data = ReadFile(path);
  if (!data.ok()) return data.status();
  auto span =
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(data->data()), data->size());
  Result<Layout> layout = ParseHeader(span, data->size());
  if (!layout.ok()) return Status::InvalidArgument(path + ": " + layout.status().message());
  *meta = layout->meta;
  bytes->assign(data->data() + layout->data_offset, layout->data_bytes);
  return Status::Ok();
}

namespace {
int WriteAll(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n) {
    ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return errno;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return 0;
}

Status WriteFile(const std::string& path, const TensorMeta& meta, std::span<const uint8_t> bytes,
                 bool sync) {
  std::string header = MakeHeader(meta);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::FromErrno(errno, "create " + path);
  int err = WriteAll(fd, header.data(), header.size());
  if (!err) err = WriteAll(fd, bytes.data(), bytes.size());
  if (!err && sync && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && !err) err = errno;
  if (err) return Status::FromErrno(err, "write " + path);
  return Status::Ok();
}
}  // namespace

Status Save(const std::string& path, const TensorMeta& meta, std::span<const uint8_t> bytes) {
  return WriteFile(path, meta, bytes, false);
}

Status SaveDurable(const std::string& path, const TensorMeta& meta,
                   std::span<const uint8_t> bytes) {
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  Status st = WriteFile(tmp, meta, bytes, true);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0)
    st = Status::FromErrno(errno, "rename " + tmp + " to " + path);
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  const std::string dir = path.substr(0, path.find_last_of('/') + 1);
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {  // make the rename itself durable
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::Ok();
}

}  // namespace ecstore::safetensors
