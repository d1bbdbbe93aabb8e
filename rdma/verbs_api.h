// The libibverbs and librdmacm entry points the verbs transport calls, resolved at run time
// (dlopen) rather than linked: a build with RDMA runs on a host without rdma-core (no RDMA
// then, TCP and shared memory only, said once in the log), and where rdma-core is
// installed it is the host's own libibverbs that loads the host's own NIC providers --
// a copy vendored into a wheel could not load providers of another rdma-core release.
// Thread rules: Verbs() from any thread; it loads once.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <string>

namespace ecstore::rdma {

// Every function the transport calls, named as in rdma-core. ibv_reg_mr is also a
// function-like macro there: call it as (v.ibv_reg_mr)(...), which the macro leaves alone.
// The formatter reflows these lists differently on each pass: kept as written.
// clang-format off
#define EC_VERBS_FUNCTIONS(X)                                                                \
  X(ibv_get_device_list) X(ibv_free_device_list) X(ibv_get_device_name) X(ibv_alloc_pd)     \
  X(ibv_dealloc_pd) X(ibv_create_cq) X(ibv_destroy_cq) X(ibv_reg_mr) X(ibv_dereg_mr)        \
  X(ibv_wc_status_str)
#define EC_RDMACM_FUNCTIONS(X)                                                               \
  X(rdma_create_event_channel) X(rdma_destroy_event_channel) X(rdma_create_id)              \
  X(rdma_destroy_id) X(rdma_bind_addr) X(rdma_listen) X(rdma_get_src_port)                  \
  X(rdma_resolve_addr) X(rdma_resolve_route) X(rdma_create_qp) X(rdma_destroy_qp)           \
  X(rdma_connect) X(rdma_accept) X(rdma_reject) X(rdma_disconnect) X(rdma_get_cm_event)     \
  X(rdma_ack_cm_event) X(rdma_event_str)
// clang-format on

struct VerbsApi {
#define EC_VERBS_MEMBER(f) decltype(&::f) f = nullptr;
  EC_VERBS_FUNCTIONS(EC_VERBS_MEMBER)
  EC_RDMACM_FUNCTIONS(EC_VERBS_MEMBER)
#undef EC_VERBS_MEMBER
  // rdma-core 34 and later; null before (device pools are then registered as peer memory).
  decltype(&::ibv_reg_dmabuf_mr) ibv_reg_dmabuf_mr = nullptr;
};

// The loaded functions, or null where libibverbs.so.1 or librdmacm.so.1 (or a function of
// theirs) is missing; then *why (when given) says what and how to get it.
const VerbsApi* Verbs(std::string* why = nullptr);

}  // namespace ecstore::rdma
