// The op table against the protocol it describes: every op the enum declares has a row, every
// request names its right, and the lookups built on it (IsKnownOp, IsRequest, ScopeOf, the
// in-place rule, the metrics labels) say what the row says.
#include "net/op_table.h"

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "server/acl.h"
#include "server/server_metrics.h"  // OpLabel

namespace ecstore::net {
namespace {

// Every `kName = N,` of `enum class Op` in net/protocol.h, read from the source tree:
// an op added there without a row here fails.
std::vector<std::pair<std::string, int>> DeclaredOps() {
  std::string path = __FILE__;
  path = path.substr(0, path.rfind("/server/")) + "/net/protocol.h";
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  const size_t from = s.find("enum class Op"), to = s.find("};", from);
  EXPECT_NE(from, std::string::npos) << path;
  std::vector<std::pair<std::string, int>> out;
  const std::regex row(R"(\b(k\w+)\s*=\s*(\d+),)");
  const std::string body = s.substr(from, to - from);
  for (std::sregex_iterator it(body.begin(), body.end(), row), end; it != end; ++it)
    out.emplace_back((*it)[1], std::stoi((*it)[2]));
  return out;
}

TEST(OpTable, EveryDeclaredOpHasARowAndEveryRowADeclaredOp) {
  const auto declared = DeclaredOps();
  ASSERT_GT(declared.size(), 40u);
  for (const auto& [name, value] : declared) {
    SCOPED_TRACE(name);
    EXPECT_NE(FindOp(static_cast<uint16_t>(value)), nullptr) << "no row in net/op_table.h";
  }
  EXPECT_EQ(declared.size(), std::size(kOpTable));
  for (uint32_t op = 0; op < 70000; ++op)
    ASSERT_EQ(IsKnownOp(static_cast<uint16_t>(op)), FindOp(static_cast<uint16_t>(op)) != nullptr);
}

TEST(OpTable, EveryRequestNamesItsRightAndItsLookupsAgree) {
  for (const OpRow& r : kOpTable) {
    SCOPED_TRACE(static_cast<int>(r.op));
    if (!r.request) {
      EXPECT_FALSE(IsRequest(r.op, true, true));
      EXPECT_EQ(ScopeOf(r.op, "").right, 0);
      continue;
    }
    ASSERT_NE(r.right, 0);
    EXPECT_STRNE(OpLabel(r.op), "");
    EXPECT_EQ(IsRequest(r.op, true, false), r.via != Via::kRdma);
    EXPECT_EQ(IsRequest(r.op, false, false), r.via == Via::kAny);
    EXPECT_EQ(IsRequest(r.op, false, true), r.via != Via::kShm);
    EXPECT_EQ(ReadsPoolInPlace(r.op), r.in_place);
    // The access check takes its right from the row: an empty body is malformed where the
    // row says the namespaces are in it.
    const RequestScope s = ScopeOf(r.op, "");
    EXPECT_EQ(s.right, r.right == kNoRight ? 0 : r.right);
    EXPECT_EQ(s.every_namespace, r.ns == NsAt::kEvery);
    EXPECT_EQ(s.malformed, r.ns == NsAt::kFirst || r.ns == NsAt::kPairs);
    // Every request but HELLO, RELEASE and VIEW needs a right.
    const bool free = r.op == Op::kHello || r.op == Op::kRelease || r.op == Op::kView;
    EXPECT_EQ(r.right == kNoRight, free);
  }
  EXPECT_EQ(RequestOpLimit(), static_cast<size_t>(Op::kView) + 1);  // the metrics count them all
}

}  // namespace
}  // namespace ecstore::net
