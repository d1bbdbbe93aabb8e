#include "sim/fake_node.h"

#include <algorithm>
#include <utility>

#include "base/mutex.h"

namespace ecstore::sim {

FakeNode::FakeNode(std::string id, uint64_t capacity, const std::atomic<uint64_t>* clock_us)
    : id_(std::move(id)), capacity_(capacity), clock_us_(clock_us) {}

std::string FakeNode::Name(std::string_view ns, std::string_view key) {
  std::string n(ns);
  n.push_back('\0');
  n.append(key);
  return n;
}

bool FakeNode::Put(const std::string& name, uint64_t bytes) {
  MutexLock l(&mu_);
  if (bytes > capacity_) return false;
  if (auto it = held_.find(name); it != held_.end()) {
    bytes_ -= it->second.bytes;
    lru_.erase(it->second.lru);
    held_.erase(it);
  }
  while (bytes_ + bytes > capacity_) {  // the least recently used go first
    auto victim = held_.find(lru_.back());
    bytes_ -= victim->second.bytes;
    held_.erase(victim);
    lru_.pop_back();
  }
  lru_.push_front(name);
  held_[name] = {bytes, lru_.begin()};
  bytes_ += bytes;
  claims_.erase(name);
  ++puts_;
  return true;
}

bool FakeNode::Touch(const std::string& name, uint64_t* bytes) {
  MutexLock l(&mu_);
  auto it = held_.find(name);
  if (it == held_.end()) return false;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  *bytes = it->second.bytes;
  return true;
}

bool FakeNode::Has(const std::string& name, uint64_t* bytes) const {
  MutexLock l(&mu_);
  auto it = held_.find(name);
  if (it == held_.end()) return false;
  *bytes = it->second.bytes;
  return true;
}

bool FakeNode::Erase(const std::string& name) {
  MutexLock l(&mu_);
  auto it = held_.find(name);
  if (it == held_.end()) return false;
  bytes_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  held_.erase(it);
  return true;
}

// As the server's claim table: present where held, held while another's claim lasts, else
// granted to this caller for `ttl` of the simulation's time.
ClaimAnswer FakeNode::Claim(const std::string& name, std::chrono::milliseconds ttl) {
  MutexLock l(&mu_);
  if (held_.count(name)) return {ClaimOutcome::kPresent, 0};
  const uint64_t now = clock_us_->load();
  auto it = claims_.find(name);
  if (it != claims_.end() && it->second > now)
    return {ClaimOutcome::kHeld, static_cast<uint32_t>((it->second - now) / 1000)};
  claims_[name] = now + static_cast<uint64_t>(ttl.count()) * 1000;
  return {ClaimOutcome::kGranted, 0};
}

void FakeNode::Clear() {
  MutexLock l(&mu_);
  held_.clear();
  lru_.clear();
  claims_.clear();
  bytes_ = 0;
}

uint64_t FakeNode::bytes() const {
  MutexLock l(&mu_);
  return bytes_;
}

size_t FakeNode::entries() const {
  MutexLock l(&mu_);
  return held_.size();
}

std::vector<std::pair<std::string, uint64_t>> FakeNode::Held() const {
  MutexLock l(&mu_);
  std::vector<std::pair<std::string, uint64_t>> out;
  out.reserve(held_.size());
  for (const auto& [name, e] : held_) out.emplace_back(name, e.bytes);
  return out;
}

std::vector<EntryInfo> FakeNode::List() const {
  MutexLock l(&mu_);
  std::vector<EntryInfo> out;
  out.reserve(held_.size());
  for (const auto& [name, e] : held_) {
    EntryInfo info;
    const size_t cut = name.find('\0');
    info.ns = name.substr(0, cut);
    info.key = name.substr(cut + 1);
    info.bytes = e.bytes;
    out.push_back(std::move(info));
  }
  return out;
}

// The node as a connection sees it: every call Unavailable while it is down.
class FakeNode::Face : public Cache, public Claims {
 public:
  explicit Face(FakeNode* n) : n_(n) {}
  const char* transport() const override { return "sim"; }
  CacheCapabilities capabilities() override { return {.claims = this}; }

  Status Put(std::string_view ns, std::string_view key, const TensorMeta& meta,
             std::span<const uint8_t>) override {
    EC_RETURN_IF_ERROR(Up());
    auto size = meta.ByteSize();  // notional: the simulation sends no payload
    if (!size.ok()) return size.status();
    if (!n_->Put(Name(ns, key), *size))
      return Status::NoSpace("larger than node " + n_->id() + "'s capacity");
    return Status::Ok();
  }
  Result<EntryInfo> Get(std::string_view ns, std::string_view key, std::span<uint8_t>) override {
    EC_RETURN_IF_ERROR(Up());
    EntryInfo info;
    if (!n_->Touch(Name(ns, key), &info.bytes))
      return Status::NotFound(std::string(ns) + "/" + std::string(key));
    info.ns = ns, info.key = key;
    info.tiers.add(Tier::kPool);
    return info;
  }
  std::vector<Result<EntryInfo>> GetMany(std::string_view ns, const std::vector<std::string>& keys,
                                         const std::vector<std::span<uint8_t>>& dsts) override {
    std::vector<Result<EntryInfo>> out;
    for (size_t i = 0; i < keys.size(); ++i) out.push_back(Get(ns, keys[i], dsts[i]));
    return out;
  }
  Result<ReadLease> Acquire(std::string_view ns, std::string_view key) override {
    EC_RETURN_IF_ERROR(Up());
    return Status::NotFound(std::string(ns) + "/" + std::string(key) +
                            ": a simulated node holds no bytes to lease");
  }
  Result<ReadLease> Pin(std::string_view ns, std::string_view key) override {
    return Acquire(ns, key);
  }
  Result<EntryInfo> Lookup(std::string_view ns, std::string_view key) override {
    EC_RETURN_IF_ERROR(Up());
    EntryInfo info;
    if (!n_->Has(Name(ns, key), &info.bytes))
      return Status::NotFound(std::string(ns) + "/" + std::string(key));
    info.ns = ns, info.key = key;
    info.tiers.add(Tier::kPool);
    return info;
  }
  Result<std::vector<std::optional<EntryInfo>>> LookupMany(
      std::string_view ns, const std::vector<std::string>& keys) override {
    EC_RETURN_IF_ERROR(Up());
    std::vector<std::optional<EntryInfo>> out;
    for (const auto& k : keys) {
      auto r = Lookup(ns, k);
      out.push_back(r.ok() ? std::optional<EntryInfo>(*r) : std::nullopt);
    }
    return out;
  }
  Status Erase(std::string_view ns, std::string_view key) override {
    EC_RETURN_IF_ERROR(Up());
    return n_->Erase(Name(ns, key)) ? Status::Ok()
                                    : Status::NotFound(std::string(ns) + "/" + std::string(key));
  }
  Status EraseMany(const std::vector<std::pair<std::string, std::string>>& ns_keys,
                   std::vector<bool>* erased) override {
    EC_RETURN_IF_ERROR(Up());
    erased->clear();
    for (const auto& [ns, key] : ns_keys) erased->push_back(n_->Erase(Name(ns, key)));
    return Status::Ok();
  }
  Status ListPages(size_t page_size,
                   const std::function<bool(std::vector<EntryInfo>&&)>& on_page) override {
    EC_RETURN_IF_ERROR(Up());
    auto all = n_->List();
    for (size_t at = 0; at < all.size(); at += page_size) {
      std::vector<EntryInfo> page(
          std::make_move_iterator(all.begin() + static_cast<std::ptrdiff_t>(at)),
          std::make_move_iterator(
              all.begin() + static_cast<std::ptrdiff_t>(std::min(all.size(), at + page_size))));
      if (!on_page(std::move(page))) break;
    }
    return Status::Ok();
  }
  Result<StoreStats> Stats() override {
    EC_RETURN_IF_ERROR(Up());
    return StoreStats{};
  }
  Result<ClaimAnswer> Claim(std::string_view ns, std::string_view key,
                            std::chrono::milliseconds ttl) override {
    EC_RETURN_IF_ERROR(Up());
    return n_->Claim(Name(ns, key), ttl);
  }

 private:
  Status Up() const {
    return n_->down() ? Status::Unavailable("simulated node " + n_->id() + " is down")
                      : Status::Ok();
  }
  FakeNode* const n_;
};

std::unique_ptr<Cache> FakeNode::Connect() { return std::make_unique<Face>(this); }

}  // namespace ecstore::sim
