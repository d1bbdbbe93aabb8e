#include "net/remote_admin.h"

#include <nlohmann/json.hpp>

#include "net/socket.h"

namespace ecstore::net {

Result<std::string> RemoteAdmin::Ask(Op op, Op expect) {
  if (!link_->valid()) EC_RETURN_IF_ERROR(link_->Open());
  SetTimeouts(link_->fd(), std::chrono::milliseconds(0));  // as long as the work takes
  Status st = link_->SendRequest(op, {});
  auto body = st.ok() ? link_->ReadReply(expect) : Result<std::string>(st);
  if (link_->valid()) SetTimeouts(link_->fd(), link_->options().timeout);
  if (!body.ok()) return body.status();
  auto js = JsonReplyText(*body);
  if (!js.ok()) return js.status();
  return std::string(*js);
}

namespace {
Result<nlohmann::json> ParseAdmin(const Result<std::string>& text) {
  if (!text.ok()) return text.status();
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::Unavailable("malformed admin reply");
  return j;
}
}  // namespace

Result<VerifyReport> RemoteAdmin::Verify(
    const std::function<void(uint64_t done, uint64_t total)>& progress) {
  auto j = ParseAdmin(Ask(Op::kVerify, Op::kVerifyOk));
  if (!j.ok()) return j.status();
  VerifyReport rep;
  rep.checked = j->value("checked", uint64_t{0});
  rep.bytes = j->value("bytes", uint64_t{0});
  rep.corrupt = j->value("corrupt", std::vector<std::string>{});
  rep.errors = j->value("errors", std::vector<std::string>{});
  if (progress) progress(rep.checked, rep.checked);
  return rep;
}

Result<CompactReport> RemoteAdmin::Compact(double live_ratio_threshold) {
  if (live_ratio_threshold != 1.0)
    return Status::InvalidArgument(
        "a daemon compacts at threshold 1.0 only (every sealed "
        "segment with dead bytes); ask for 1.0");
  auto j = ParseAdmin(Ask(Op::kCompact, Op::kCompactOk));
  if (!j.ok()) return j.status();
  return CompactReport{.before = j->value("before", uint64_t{0}),
                       .after = j->value("after", uint64_t{0})};
}

}  // namespace ecstore::net
