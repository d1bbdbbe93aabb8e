#include "net/transport_choice.h"

#include <string>

namespace ecstore::net {

const char* TransportKindName(TransportKind k) {
  switch (k) {
    case TransportKind::kAuto:
      return "auto";
    case TransportKind::kTcp:
      return "tcp";
    case TransportKind::kShm:
      return "shm";
    case TransportKind::kRdma:
      return "rdma";
  }
  return "auto";
}

Result<TransportKind> ParseTransportKind(std::string_view name) {
  for (TransportKind k :
       {TransportKind::kAuto, TransportKind::kTcp, TransportKind::kShm, TransportKind::kRdma})
    if (name == TransportKindName(k)) return k;
  return Status::InvalidArgument("transport '" + std::string(name) +
                                 "' is not one of auto, tcp, shm, rdma");
}

Result<TransportKind> ChooseTransport(const TransportOffer& offer, TransportKind wanted) {
  switch (wanted) {
    case TransportKind::kTcp:
      return wanted;
    case TransportKind::kShm:
      if (!offer.same_host || !offer.shm)
        return Status::InvalidArgument(
            "transport shm needs a same-host server's unix:/path/serve.sock address");
      return wanted;
    case TransportKind::kRdma:
      if (!offer.rdma)
        return Status::Unavailable("server offers no RDMA (it has no ServerOptions::rdma_listen)");
      return wanted;
    case TransportKind::kAuto:
      break;
  }
  if (offer.same_host && offer.shm) return TransportKind::kShm;
  if (!offer.same_host && offer.rdma && offer.rdma_device) return TransportKind::kRdma;
  return TransportKind::kTcp;
}

}  // namespace ecstore::net
