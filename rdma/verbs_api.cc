#include "rdma/verbs_api.h"

#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include <mutex>

namespace ecstore::rdma {
namespace {

struct LoadedLibs {
  VerbsApi api;
  bool ok = false;
  std::string why;
};

// Resolves `name` from `lib` into *fn; false (with why) when it is not there.
template <typename Fn>
bool Resolve(void* lib, const char* soname, const char* name, Fn* fn, std::string* why) {
  *fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (*fn) return true;
  *why = std::string(soname) + " has no " + name + " (rdma-core too old?)";
  return false;
}

LoadedLibs Load() {
  LoadedLibs l;
  // librdmacm needs libibverbs (its own dependency): opening it first would load that too,
  // but the verbs library is named on its own so a missing one is said as such.
  void* verbs = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  void* cm = verbs ? dlopen("librdmacm.so.1", RTLD_NOW | RTLD_LOCAL) : nullptr;
  if (!verbs || !cm) {
    l.why = std::string(verbs ? "librdmacm.so.1" : "libibverbs.so.1") + " is not installed (" +
            dlerror() +
            "); install rdma-core (Debian/Ubuntu: libibverbs1 librdmacm1 and the NIC's "
            "provider, ibverbs-providers) for RDMA";
    return l;
  }
  bool ok = true;
#define EC_VERBS_RESOLVE(f) ok = ok && Resolve(verbs, "libibverbs.so.1", #f, &l.api.f, &l.why);
  EC_VERBS_FUNCTIONS(EC_VERBS_RESOLVE)
#undef EC_VERBS_RESOLVE
#define EC_RDMACM_RESOLVE(f) ok = ok && Resolve(cm, "librdmacm.so.1", #f, &l.api.f, &l.why);
  EC_RDMACM_FUNCTIONS(EC_RDMACM_RESOLVE)
#undef EC_RDMACM_RESOLVE
  l.api.ibv_reg_dmabuf_mr =
      reinterpret_cast<decltype(l.api.ibv_reg_dmabuf_mr)>(dlsym(verbs, "ibv_reg_dmabuf_mr"));
  l.ok = ok;
  // The libraries stay loaded for the life of the process: their objects outlive any caller.
  return l;
}

}  // namespace

const VerbsApi* Verbs(std::string* why) {
  static const LoadedLibs loaded = [] {
    LoadedLibs l = Load();
    if (!l.ok) spdlog::info("RDMA unavailable, TCP and shared memory only: {}", l.why);
    return l;
  }();
  if (!loaded.ok && why) *why = loaded.why;
  return loaded.ok ? &loaded.api : nullptr;
}

}  // namespace ecstore::rdma
