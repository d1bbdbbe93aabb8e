#include "cache/cache_parts.h"

#include <cstring>
#include <utility>

namespace ecstore {
namespace {

Status SizeMismatch(std::string_view key, uint64_t entry, uint64_t buffers) {
  return Status::InvalidArgument("entry " + std::string(key) + " is " + std::to_string(entry) +
                                 " bytes but its buffers hold " + std::to_string(buffers) +
                                 "; give buffers of exactly the entry's size");
}

// The keys (by index) whose entries lie in one part, and those in several.
void SplitByShape(const std::vector<Parts>& parts, std::vector<size_t>* whole,
                  std::vector<size_t>* pieced) {
  for (size_t i = 0; i < parts.size(); ++i) (parts[i].size() == 1 ? whole : pieced)->push_back(i);
}

void GetWhole(Cache& cache, std::string_view ns, const std::vector<std::string>& keys,
              const std::vector<Parts>& parts, const std::vector<size_t>& which,
              std::vector<Status>* out) {
  if (which.empty()) return;
  std::vector<std::string> ks;
  std::vector<std::span<uint8_t>> dsts;
  for (size_t i : which) {
    ks.push_back(keys[i]);
    dsts.push_back(parts[i][0]);
  }
  std::vector<Result<EntryInfo>> got = cache.GetMany(ns, ks, dsts);
  for (size_t j = 0; j < which.size(); ++j) {
    size_t i = which[j];
    if (!got[j].ok())
      (*out)[i] = got[j].status();
    else if (got[j]->bytes != dsts[j].size())
      (*out)[i] = SizeMismatch(keys[i], got[j]->bytes, dsts[j].size());
    else
      (*out)[i] = Status::Ok();
  }
}

void GetPieced(Cache& cache, std::string_view ns, const std::vector<std::string>& keys,
               const std::vector<Parts>& parts, const std::vector<size_t>& which,
               std::vector<Status>* out) {
  if (which.empty()) return;
  std::vector<std::string> ks;
  for (size_t i : which) ks.push_back(keys[i]);
  std::vector<Result<ReadLease>> leases = cache.AcquireMany(ns, ks);
  for (size_t j = 0; j < which.size(); ++j) {
    size_t i = which[j];
    if (!leases[j].ok()) {
      (*out)[i] = leases[j].status();
      continue;
    }
    const ReadLease& l = *leases[j];
    uint64_t want = PartsBytes(parts[i]);
    if (l.size() != want) {
      (*out)[i] = SizeMismatch(keys[i], l.size(), want);
      continue;
    }
    uint64_t at = 0;
    for (std::span<uint8_t> p : parts[i]) {
      std::memcpy(p.data(), l.data() + at, p.size());
      at += p.size();
    }
    (*out)[i] = Status::Ok();
  }
}

}  // namespace

uint64_t PartsBytes(const Parts& parts) {
  uint64_t n = 0;
  for (std::span<uint8_t> p : parts) n += p.size();
  return n;
}

std::vector<Status> GetIntoParts(Cache& cache, std::string_view ns,
                                 const std::vector<std::string>& keys,
                                 const std::vector<Parts>& parts) {
  if (parts.size() != keys.size())
    return std::vector<Status>(
        keys.size(), Status::InvalidArgument("GetIntoParts needs one list of parts per key"));
  std::vector<Status> out(keys.size());
  std::vector<size_t> whole, pieced;
  SplitByShape(parts, &whole, &pieced);
  GetWhole(cache, ns, keys, parts, whole, &out);
  GetPieced(cache, ns, keys, parts, pieced, &out);
  return out;
}

std::vector<Status> PutFromParts(Cache& cache, std::string_view ns,
                                 const std::vector<std::string>& keys,
                                 const std::vector<Parts>& parts,
                                 const std::vector<TensorMeta>& metas) {
  if (parts.size() != keys.size() || (!metas.empty() && metas.size() != keys.size()))
    return std::vector<Status>(
        keys.size(),
        Status::InvalidArgument("PutFromParts needs one list of parts (and meta, if any) per key"));
  std::vector<Status> out(keys.size());
  std::vector<uint8_t> gathered;
  for (size_t i = 0; i < keys.size(); ++i) {
    uint64_t bytes = PartsBytes(parts[i]);
    TensorMeta meta =
        metas.empty() ? TensorMeta{DType::kU8, {static_cast<int64_t>(bytes)}} : metas[i];
    std::span<const uint8_t> src;
    if (parts[i].size() == 1) {
      src = parts[i][0];
    } else {
      gathered.resize(bytes);
      uint64_t at = 0;
      for (std::span<uint8_t> p : parts[i]) {
        std::memcpy(gathered.data() + at, p.data(), p.size());
        at += p.size();
      }
      src = {gathered.data(), bytes};
    }
    out[i] = cache.Put(ns, keys[i], meta, src);
  }
  return out;
}

}  // namespace ecstore
