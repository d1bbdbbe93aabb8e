#include "cluster/membership.h"

#include <gtest/gtest.h>

#include <string>

namespace ecstore::cluster {
namespace {

const std::string kPrefix = "/ec-store/c1/nodes/";

TEST(NodeInfo, ARecordRoundTripsThroughJson) {
  NodeInfo n{"node-a",
             "10.0.0.5:7070",
             "10.0.0.5:7071",
             "host-a",
             "/run/ec/serve.sock",
             8ull << 30,
             "0.3.0",
             4};
  auto back = NodeInfo::FromRecord(kPrefix + "node-a", kPrefix, n.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->id, "node-a");
  EXPECT_EQ(back->tcp, "10.0.0.5:7070");
  EXPECT_EQ(back->rdma, "10.0.0.5:7071");
  EXPECT_EQ(back->unix_path, "/run/ec/serve.sock");
  EXPECT_EQ(back->capacity, 8ull << 30);
  EXPECT_EQ(back->incarnation, 4u);
  // Optional fields may be absent or null.
  auto lean = NodeInfo::FromJson(R"({"id":"b","tcp":"127.0.0.1:1","rdma":null})");
  ASSERT_TRUE(lean.ok()) << lean.status().ToString();
  EXPECT_EQ(lean->capacity, 0u);
}

// Each of these once threw out of the parser (nlohmann::type_error) on a client's watch
// thread and aborted the process; each is now InvalidArgument naming what is wrong.
TEST(NodeInfo, EveryMalformedRecordIsRefusedNamingTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"id":7,"tcp":"127.0.0.1:1"})", "'id' is not a string"},
      {R"({"id":"a","tcp":null})", "no 'tcp'"},
      {R"({"id":"a"})", "no 'tcp'"},
      {R"({"id":"a","tcp":"127.0.0.1:1","capacity":"big"})", "'capacity' is not a whole"},
      {R"({"id":"a","tcp":"127.0.0.1:1","capacity":-1})", "'capacity' is not a whole"},
      {R"({"id":"a","tcp":"127.0.0.1:1","capacity":1.5})", "'capacity' is not a whole"},
      {R"({"id":"a","tcp":"127.0.0.1:1","capacity":9223372036854775808})",
       "'capacity' is out of range"},
      {R"({"id":"a","tcp":"127.0.0.1:1","incarnation":[]})", "'incarnation' is not a whole"},
      {R"({"id":"a","tcp":"127.0.0.1:abc"})", "'tcp' is not HOST:PORT"},
      {R"({"id":"a","tcp":"127.0.0.1:0"})", "'tcp' is not HOST:PORT"},
      {R"({"id":"a","tcp":"127.0.0.1:1","rdma":"x"})", "'rdma' is not HOST:PORT"},
      {R"({"id":"a","tcp":"127.0.0.1:1","host":{}})", "'host' is not a string"},
      {R"({"id":"","tcp":"127.0.0.1:1"})", "'id' is not 1-256 printable"},
      {R"({"id":"a/b","tcp":"127.0.0.1:1"})", "'id' is not 1-256 printable"},
      {R"({"id":"a b","tcp":"127.0.0.1:1"})", "'id' is not 1-256 printable"},
      {R"([1,2])", "not a JSON object"},
      {R"({"id":)", "not a JSON object"},
      {"", "not a JSON object"},
  };
  for (const auto& [json, why] : cases) {
    auto n = NodeInfo::FromJson(json);
    ASSERT_FALSE(n.ok()) << json;
    EXPECT_EQ(n.status().code(), Status::Code::kInvalidArgument) << json;
    EXPECT_NE(n.status().message().find(why), std::string::npos)
        << json << ": " << n.status().message();
  }
}

TEST(NodeInfo, ARecordWhoseIdIsNotItsKeysIsRefused) {
  const std::string rec = R"({"id":"node-a","tcp":"127.0.0.1:1"})";
  EXPECT_TRUE(NodeInfo::FromRecord(kPrefix + "node-a", kPrefix, rec).ok());
  auto other = NodeInfo::FromRecord(kPrefix + "node-b", kPrefix, rec);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("not the key's last part"), std::string::npos);
  EXPECT_FALSE(NodeInfo::FromRecord("/elsewhere/node-a", kPrefix, rec).ok());
}

}  // namespace
}  // namespace ecstore::cluster
