#include "base/status.h"

#include <cerrno>
#include <cstring>

#include "base/tensor_meta.h"

namespace ecstore {

struct Status::Needed {
  uint64_t bytes;
  TensorMeta meta;
};

Status Status::BufferTooSmall(std::string msg, uint64_t needed_bytes, const TensorMeta& meta) {
  Status s(Code::kInvalidArgument, std::move(msg));
  s.needed_ = std::make_shared<const Needed>(Needed{needed_bytes, meta});
  return s;
}

uint64_t Status::needed_bytes() const { return needed_ ? needed_->bytes : 0; }

const TensorMeta* Status::needed_meta() const { return needed_ ? &needed_->meta : nullptr; }

const char* Status::CodeName(Code code) {
  switch (code) {
    case Code::kOk:
      return "OK";
    case Code::kNotFound:
      return "NotFound";
    case Code::kCorruption:
      return "Corruption";
    case Code::kIOError:
      return "IOError";
    case Code::kNoSpace:
      return "NoSpace";
    case Code::kBusy:
      return "Busy";
    case Code::kInvalidArgument:
      return "InvalidArgument";
    case Code::kUnavailable:
      return "Unavailable";
    case Code::kPermissionDenied:
      return "PermissionDenied";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(CodeName(code_)) + ": " + message_;
}

Status Status::FromErrno(int err, const std::string& context) {
  std::string msg = context + ": " + std::strerror(err);
  switch (err) {
    case ENOSPC:
    case EDQUOT:
      return NoSpace(msg + " (free disk space or lower Options::disk_quota_bytes)");
    case ENOENT:
      return NotFound(msg);
    case EACCES:
    case EPERM:
    case EROFS:
      return IOError(msg + " (check the directory's permissions)");
    default:
      return IOError(msg);
  }
}

}  // namespace ecstore
