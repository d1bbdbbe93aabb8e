#include "cache/cache.h"

namespace ecstore {

const char* TierName(Tier t) {
  switch (t) {
    case Tier::kDevice:
      return "device";
    case Tier::kPool:
      return "pool";
    case Tier::kDisk:
      return "disk";
  }
  return "?";
}

EntryInfo EntryInfo::Of(const EntryRecord& r, TierSet tiers) {
  EntryInfo i;
  i.ns = r.ns;
  i.key = r.key;
  i.tiers = tiers;
  i.bytes = r.bytes;
  i.meta = r.meta;
  i.created_us = r.created_us;
  i.last_access_us = r.last_access_us;
  i.hits = r.hits;
  i.checksum = r.checksum;
  return i;
}

Tier TierSet::fastest() const {
  for (Tier t : kAllTiers)
    if (has(t)) return t;
  return Tier::kDisk;
}

TierStats& StoreStats::at(Tier t) {
  for (auto& s : tiers)
    if (s.tier == t) return s;
  TierStats fresh;
  fresh.tier = t;
  auto pos = tiers.begin();  // keep fastest first
  while (pos != tiers.end() && pos->tier < t) ++pos;
  return *tiers.insert(pos, fresh);
}

TierStats StoreStats::of(Tier t) const {
  for (const auto& s : tiers)
    if (s.tier == t) return s;
  TierStats none;
  none.tier = t;
  return none;
}

ReadLease::ReadLease(ReadLease&& o) noexcept { *this = std::move(o); }
ReadLease& ReadLease::operator=(ReadLease&& o) noexcept {
  if (this != &o) {
    Reset();
    releaser_ = std::exchange(o.releaser_, nullptr);
    token_ = std::exchange(o.token_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    info_ = std::move(o.info_);
    kind_ = o.kind_;
    served_from_ = o.served_from_;
  }
  return *this;
}
ReadLease::~ReadLease() { Reset(); }
void ReadLease::Reset() {
  if (releaser_) releaser_->Release(token_);
  releaser_ = nullptr;
  token_ = nullptr;
  data_ = nullptr;
  info_ = EntryInfo{};
}

std::vector<Result<ReadLease>> Cache::AcquireMany(std::string_view ns,
                                                  const std::vector<std::string>& keys,
                                                  LandingWatch* watch) {
  if (watch) watch->streamed.assign(keys.size(), false);
  std::vector<Result<ReadLease>> out;
  out.reserve(keys.size());
  for (const std::string& k : keys) out.push_back(Acquire(ns, k));
  return out;
}

Result<bool> Cache::Contains(std::string_view ns, std::string_view key) {
  auto found = Lookup(ns, key);
  if (found.ok()) return true;
  if (found.status().IsNotFound()) return false;
  return found.status();
}

Result<std::vector<bool>> Cache::ContainsMany(std::string_view ns,
                                              const std::vector<std::string>& keys) {
  auto found = LookupMany(ns, keys);
  if (!found.ok()) return found.status();
  std::vector<bool> out;
  out.reserve(found->size());
  for (const auto& f : *found) out.push_back(f.has_value());
  return out;
}

Result<std::vector<std::vector<Location>>> Cache::Locate(std::string_view ns,
                                                         const std::vector<std::string>& keys) {
  auto found = LookupMany(ns, keys);
  if (!found.ok()) return found.status();
  std::vector<std::vector<Location>> out(found->size());
  for (size_t i = 0; i < found->size(); ++i)
    if ((*found)[i]) out[i].push_back({"", (*found)[i]->tier()});
  return out;
}

Result<bool> Cache::Prefetch(std::string_view, const std::vector<std::string>&) {
  return false;  // a hint: nothing to do where there is no prefetch
}

Result<ClaimAnswer> ClaimOrGrant(const CacheCapabilities& caps, std::string_view ns,
                                 std::string_view key, std::chrono::milliseconds ttl) {
  if (caps.claims) return caps.claims->Claim(ns, key, ttl);
  return ClaimAnswer{};  // no one else's claims are seen here: compute, as without claims
}

Result<std::vector<EntryInfo>> Cache::List() {
  std::vector<EntryInfo> all;
  Status st = ListPages(1024, [&](std::vector<EntryInfo>&& page) {
    all.insert(all.end(), std::make_move_iterator(page.begin()),
               std::make_move_iterator(page.end()));
    return true;
  });
  if (!st.ok()) return st;
  return all;
}

std::vector<Status> DeviceIo::PutManyFromDevice(std::string_view ns,
                                                const std::vector<DeviceSource>& items,
                                                bool checksum_when_spilled) {
  std::vector<Status> out;
  out.reserve(items.size());
  for (const DeviceSource& i : items)
    out.push_back(PutFromDevice(ns, i.key, i.meta, i.src, i.bytes, checksum_when_spilled));
  return out;
}

}  // namespace ecstore
