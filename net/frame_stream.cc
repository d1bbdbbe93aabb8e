#include "net/frame_stream.h"

#include "net/transport.h"

namespace ecstore::net {

Status FrameStream::Send(Op op, const std::string& body, std::span<const uint8_t> payload) {
  if (!io_.valid()) return Status::Unavailable("not connected");
  uint8_t hdr[kHeaderBytes];
  EncodeHeader({kVersion, op, next_id_++, body.size() + payload.size()}, hdr);
  iovec iov[3] = {{hdr, kHeaderBytes},
                  {const_cast<char*>(body.data()), body.size()},
                  {const_cast<uint8_t*>(payload.data()), payload.size()}};
  Status st = io_.Send(iov, payload.empty() ? 2 : 3, "server");
  if (!st.ok()) sends_whole_ = false;
  return st;
}

Status FrameStream::SendRelease(void* lease_token) {
  BodyWriter w;
  w.U64(reinterpret_cast<uint64_t>(lease_token));
  return Send(Op::kRelease, w.data());
}

Status FrameStream::ReadHeader(FrameHeader* h, int* passed_fd) {
  uint8_t hdr[kHeaderBytes];
  // A descriptor comes only over the unix socket, never under TLS.
  EC_RETURN_IF_ERROR(passed_fd && !io_.tls()
                         ? RecvAllWithFd(io_.fd(), hdr, kHeaderBytes, passed_fd, "server")
                         : io_.Recv(hdr, kHeaderBytes, "server"));
  auto d = DecodeHeader(hdr);
  if (!d.ok()) return Status::Unavailable("server sent a malformed frame: " + d.status().message());
  *h = *d;
  return Status::Ok();
}

Result<std::string> FrameStream::ReadReply(Op expect, int* passed_fd) {
  return ReadFrame(expect, expect, nullptr, passed_fd);
}

Result<std::string> FrameStream::ReadReplyOrNote(Op expect, Op note, bool* is_note) {
  return ReadFrame(expect, note, is_note, nullptr);
}

Result<std::string> FrameStream::ReadFrame(Op expect, Op note, bool* is_note, int* passed_fd) {
  FrameHeader h;
  EC_RETURN_IF_ERROR(ReadHeader(&h, passed_fd));
  std::string body(h.body_len, '\0');
  EC_RETURN_IF_ERROR(io_.Recv(body.data(), body.size(), "server"));
  if (h.op == Op::kError) {
    BodyReader r(reinterpret_cast<const uint8_t*>(body.data()), body.size());
    return ParseErrorBody(&r);
  }
  if (is_note) *is_note = h.op == note && note != expect;
  if (h.op != expect && h.op != note)
    return Status::Unavailable("server answered with an unexpected frame");
  return body;
}

Status FrameStream::ReadGetReply(const std::function<std::span<uint8_t>(const EntryInfo&)>& dst_for,
                                 EntryInfo* info) {
  FrameHeader h;
  EC_RETURN_IF_ERROR(ReadHeader(&h));
  if (h.op == Op::kError) {
    std::string body(h.body_len, '\0');
    EC_RETURN_IF_ERROR(io_.Recv(body.data(), body.size(), "server"));
    BodyReader r(reinterpret_cast<const uint8_t*>(body.data()), body.size());
    return ParseErrorBody(&r);
  }
  if (h.op != Op::kGetOk) return Status::Unavailable("server answered with an unexpected frame");
  uint32_t info_len = 0;
  EC_RETURN_IF_ERROR(io_.Recv(&info_len, 4, "server"));
  if (info_len > kMaxMetaBody || 4 + info_len > h.body_len)
    return Status::Unavailable("server sent a malformed GET reply");
  std::string ib(info_len, '\0');
  EC_RETURN_IF_ERROR(io_.Recv(ib.data(), ib.size(), "server"));
  BodyReader r(reinterpret_cast<const uint8_t*>(ib.data()), ib.size());
  if (!ReadInfo(&r, info) || info->bytes != h.body_len - 4 - info_len)
    return Status::Unavailable("server sent a malformed GET reply");
  std::span<uint8_t> dst = dst_for(*info);
  if (dst.size() >= info->bytes)  // straight into the caller's buffer
    return io_.Recv(dst.data(), info->bytes, "server");
  std::string drain(info->bytes, '\0');  // keep the stream in step, then refuse
  EC_RETURN_IF_ERROR(io_.Recv(drain.data(), drain.size(), "server"));
  return BufferTooSmall(dst.size(), *info);
}

}  // namespace ecstore::net
