#include "net/transport_choice.h"

#include <gtest/gtest.h>

namespace ecstore::net {
namespace {

// Every name round-trips; anything else is refused naming the four.
TEST(TransportChoice, NamesRoundTripAndAnUnknownOneIsRefusedNamingTheChoices) {
  for (TransportKind k :
       {TransportKind::kAuto, TransportKind::kTcp, TransportKind::kShm, TransportKind::kRdma}) {
    auto back = ParseTransportKind(TransportKindName(k));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, k);
  }
  auto bad = ParseTransportKind("infiniband");
  ASSERT_TRUE(bad.status().IsInvalidArgument());
  EXPECT_NE(bad.status().message().find("auto, tcp, shm, rdma"), std::string::npos);
}

// auto: shared memory on the same host, RDMA between hosts that both have it, else TCP.
TEST(TransportChoice, AutoPrefersSharedMemoryThenRdmaBetweenHostsThenTcp) {
  auto pick = [](TransportOffer o) { return *ChooseTransport(o, TransportKind::kAuto); };
  EXPECT_EQ(pick({.same_host = true, .shm = true, .rdma = true, .rdma_device = true}),
            TransportKind::kShm);
  EXPECT_EQ(pick({.same_host = true, .rdma = true, .rdma_device = true}), TransportKind::kTcp)
      << "no RDMA to a loopback server";
  EXPECT_EQ(pick({.rdma = true, .rdma_device = true}), TransportKind::kRdma);
  EXPECT_EQ(pick({.rdma = true}), TransportKind::kTcp) << "no RDMA device here";
  EXPECT_EQ(pick({.rdma_device = true}), TransportKind::kTcp) << "none offered";
}

// A forced kind is kept, or refused where the offer rules it out, saying what to do.
TEST(TransportChoice, AForcedKindIsKeptOrRefusedWithWhatToDo) {
  EXPECT_EQ(*ChooseTransport({.same_host = true, .shm = true}, TransportKind::kTcp),
            TransportKind::kTcp);
  EXPECT_EQ(*ChooseTransport({.rdma = true}, TransportKind::kRdma), TransportKind::kRdma)
      << "forced RDMA is tried whatever the device check says";
  auto shm = ChooseTransport({.rdma = true}, TransportKind::kShm);
  ASSERT_TRUE(shm.status().IsInvalidArgument());
  EXPECT_NE(shm.status().message().find("unix:"), std::string::npos);
  EXPECT_TRUE(ChooseTransport({.same_host = true, .shm = true}, TransportKind::kRdma)
                  .status()
                  .IsUnavailable());
}

}  // namespace
}  // namespace ecstore::net
