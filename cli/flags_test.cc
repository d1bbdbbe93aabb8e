#include "cli/flags.h"

#include <gtest/gtest.h>

namespace ecstore::cli {
namespace {

TEST(Cli, SizesParse) {
  EXPECT_EQ(*ParseSize("4096"), 4096u);
  EXPECT_EQ(*ParseSize("256MiB"), 256ull << 20);
  EXPECT_EQ(*ParseSize("1.5GiB"), 3ull << 29);
  EXPECT_EQ(*ParseSize("2gb"), 2000000000u);
}

// Out-of-range and non-decimal numbers are refused, never wrapped or read as 0.
TEST(Cli, BadSizesAndDurationsAreRefused) {
  for (const char* bad : {"nan", "inf", "-1", "1e30", "1e3MiB", "0x10", "0x10MiB", "", "MiB",
                          "99999999999999EiB", "2000000TiB", "4 GiB", "4GiBs"}) {
    auto r = ParseSize(bad);
    EXPECT_TRUE(r.status().IsInvalidArgument()) << bad;
  }
  EXPECT_NE(ParseSize("2000000TiB").status().message().find("out of range"), std::string::npos);
  for (const char* bad :
       {"1e300d", "nan", "inf", "infd", "-5m", "0x10s", "1e3s", "", "d", "1000000000d", "5w"}) {
    auto r = ParseDuration(bad);
    EXPECT_TRUE(r.status().IsInvalidArgument()) << bad;
  }
  EXPECT_NE(ParseDuration("1e300d").status().message().find("bad duration"), std::string::npos);
  EXPECT_NE(ParseDuration("1000000000d").status().message().find("out of range"),
            std::string::npos);
  EXPECT_EQ(*ParseDuration("90s"), 90000000u);
  EXPECT_EQ(*ParseDuration("1.5h"), 5400000000u);
  EXPECT_EQ(*ParseDuration("7d"), 7ull * 86400 * 1000000);
  EXPECT_EQ(*ParseDuration("250ms"), 250000u);
}

}  // namespace
// A misspelling names the command or flag meant; another word names nothing.
TEST(Cli, TheClosestCandidateIsAMisspellingOrAPrefix) {
  const std::vector<std::string> commands{"put", "get", "ls", "inspect", "serve", "stats"};
  EXPECT_EQ(ClosestOf("lss", commands), "ls");
  EXPECT_EQ(ClosestOf("servee", commands), "serve");
  EXPECT_EQ(ClosestOf("insp", commands), "inspect");
  EXPECT_EQ(ClosestOf("stast", commands), "stats");
  EXPECT_EQ(ClosestOf("compile", commands), "");
}

}  // namespace ecstore::cli
