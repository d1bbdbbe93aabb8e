// Entries whose bytes lie in several pieces of the caller's memory, read and written in
// batches through any Cache. SGLang's embedding pool is paged: it hands each entry of a
// batch as a list of (pointer, size) page runs, usually one.
//
//   std::vector<Parts> parts = {{{p0, n0}}, {{p1, n1}, {p2, n2}}};
//   std::vector<Status> got = GetIntoParts(cache, "sglang", {"h0", "h1"}, parts);
//   std::vector<Status> put = PutFromParts(cache, "sglang", {"h0", "h1"}, parts);
//
// Thread rules: those of the Cache passed in (a net::Client is used by one thread at a
// time); the functions keep no state.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/tensor_meta.h"
#include "cache/cache.h"

namespace ecstore {

// One entry's bytes in the caller's memory: its pieces, in order.
using Parts = std::vector<std::span<uint8_t>>;

// Bytes the parts hold together.
uint64_t PartsBytes(const Parts& parts);

// Reads entry i into parts[i]; result i is its status: NotFound where the key is absent,
// InvalidArgument where the entry's size is not exactly the parts' total. An entry in one
// part is read straight into it (Cache::GetMany: one copy, nothing staged); one in several
// pieces is read under a lease (Cache::AcquireMany: in place for an embedded store or a
// same-host daemon; a TCP or RDMA lease stages the bytes in its own buffer) and copied piece
// by piece. A failed read may have written some of its parts.
std::vector<Status> GetIntoParts(Cache& cache, std::string_view ns,
                                 const std::vector<std::string>& keys,
                                 const std::vector<Parts>& parts);

// Stores the bytes of parts[i], in order, as key i's entry, described by metas[i] -- or, with
// metas empty, as a flat u8 tensor of their size. An entry in one part is put from it
// directly; one in several pieces is first gathered into one buffer, reused across the batch.
std::vector<Status> PutFromParts(Cache& cache, std::string_view ns,
                                 const std::vector<std::string>& keys,
                                 const std::vector<Parts>& parts,
                                 const std::vector<TensorMeta>& metas = {});

}  // namespace ecstore
