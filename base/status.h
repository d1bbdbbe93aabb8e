// Status and Result<T>: the error type of every data-path call.
// Thread rules: value types; no shared state.
#pragma once

#include <cassert>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace ecstore {

struct TensorMeta;  // base/tensor_meta.h

class Status {
 public:
  enum class Code {
    kOk = 0,
    kNotFound,
    kCorruption,
    kIOError,
    kNoSpace,
    kBusy,
    kInvalidArgument,
    kUnavailable,
    kPermissionDenied,  // the caller's principal lacks the right (server/acl.h)
  };

  Status() = default;
  static Status Ok() { return Status(); }
  static Status NotFound(std::string msg) { return Status(Code::kNotFound, std::move(msg)); }
  static Status Corruption(std::string msg) { return Status(Code::kCorruption, std::move(msg)); }
  static Status IOError(std::string msg) { return Status(Code::kIOError, std::move(msg)); }
  static Status NoSpace(std::string msg) { return Status(Code::kNoSpace, std::move(msg)); }
  static Status Busy(std::string msg) { return Status(Code::kBusy, std::move(msg)); }
  static Status InvalidArgument(std::string msg) {
    return Status(Code::kInvalidArgument, std::move(msg));
  }
  static Status Unavailable(std::string msg) { return Status(Code::kUnavailable, std::move(msg)); }
  static Status PermissionDenied(std::string msg) {
    return Status(Code::kPermissionDenied, std::move(msg));
  }
  // A destination too small for an entry: InvalidArgument, carrying the entry's size and
  // layout, so that the caller sizes its buffer from this answer and asks again -- no lookup
  // first.
  static Status BufferTooSmall(std::string msg, uint64_t needed_bytes, const TensorMeta& meta);
  // Maps an errno from a failed system call to the matching code.
  static Status FromErrno(int err, const std::string& context);

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  bool IsNotFound() const { return code_ == Code::kNotFound; }
  bool IsCorruption() const { return code_ == Code::kCorruption; }
  bool IsInvalidArgument() const { return code_ == Code::kInvalidArgument; }
  bool IsNoSpace() const { return code_ == Code::kNoSpace; }
  bool IsIOError() const { return code_ == Code::kIOError; }
  bool IsBusy() const { return code_ == Code::kBusy; }
  bool IsUnavailable() const { return code_ == Code::kUnavailable; }
  bool IsPermissionDenied() const { return code_ == Code::kPermissionDenied; }
  bool IsBufferTooSmall() const { return needed_ != nullptr; }
  // Where IsBufferTooSmall(): the entry's size and layout (0 and null otherwise).
  uint64_t needed_bytes() const;
  const TensorMeta* needed_meta() const;
  const std::string& message() const { return message_; }
  std::string ToString() const;
  // The same code, its message prefixed with what was being done ("registering ...: ").
  Status WithContext(const std::string& context) const {
    if (ok()) return *this;
    Status s(code_, context + ": " + message_);
    s.needed_ = needed_;
    return s;
  }
  static const char* CodeName(Code code);

 private:
  Status(Code code, std::string msg) : code_(code), message_(std::move(msg)) {}
  struct Needed;  // what a too-small destination needed (status.cc)
  Code code_ = Code::kOk;
  std::string message_;
  std::shared_ptr<const Needed> needed_;
};

// A value or the Status that explains why there is none.
template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) { assert(!status_.ok()); }  // NOLINT
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  // By value from a temporary, so `for (auto& e : *cache->List())` owns what it iterates.
  T operator*() && { return std::move(*value_); }

 private:
  Status status_;
  std::optional<T> value_;
};

#define EC_RETURN_IF_ERROR(expr)    \
  do {                              \
    ::ecstore::Status _st = (expr); \
    if (!_st.ok()) return _st;      \
  } while (0)

}  // namespace ecstore
