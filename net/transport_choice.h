// The transport a client reaches its server's data by: a type, chosen once, by one rule, for
// a Client (Connection::Open) and a cluster's node links alike.
//
//   auto wanted = ParseTransportKind(name);                          // "auto", "tcp", ...
//   auto use = ChooseTransport({.same_host = true, .shm = true}, *wanted);  // kShm
//
// Thread rules: pure functions.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/status.h"

namespace ecstore::net {

// kAuto: by capability. The others force one (kShm needs a same-host server's unix socket).
enum class TransportKind : uint8_t { kAuto, kTcp, kShm, kRdma };
const char* TransportKindName(TransportKind k);  // "auto", "tcp", "shm", "rdma"
// "auto", "tcp", "shm" or "rdma"; InvalidArgument naming them otherwise.
Result<TransportKind> ParseTransportKind(std::string_view name);

// What a client knows of a server, and of its own host, when it chooses.
struct TransportOffer {
  bool same_host = false;    // reached over its unix socket, or at a loopback address
  bool shm = false;          // it offers shared memory (its socket's path, or its pool passed)
  bool rdma = false;         // it offers RDMA verbs (an RDMA address)
  bool rdma_device = false;  // this host has an RDMA device
};

// The transport to set up: shared memory with a same-host server that offers it; RDMA with
// a server on another host where both ends have it; else TCP. A forced kind is that kind,
// or an error where the offer rules it out: kShm without a same-host server offering it
// (InvalidArgument: give its unix: address), kRdma from a server offering none
// (Unavailable). Never kAuto.
Result<TransportKind> ChooseTransport(const TransportOffer& offer, TransportKind wanted);

}  // namespace ecstore::net
