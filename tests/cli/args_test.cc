#include "cli/args.h"

#include <gtest/gtest.h>

namespace atrium::cli {
namespace {

TEST(CliParseDurationTest, AcceptsEachUnitAndSums) {
  struct Case {
    const char* text;
    int64_t seconds;
  };
  for (const Case& c : {Case{"30d", 30 * 86400}, Case{"12h", 12 * 3600}, Case{"90m", 90 * 60},
                        Case{"3600s", 3600}, Case{"2w", 14 * 86400}, Case{"1h30m", 5400},
                        Case{"1d2h3m4s", 86400 + 7200 + 180 + 4}, Case{"45", 45}}) {
    auto parsed = ParseDuration(c.text);
    ASSERT_TRUE(parsed.has_value()) << c.text << ": " << parsed.error().message;
    EXPECT_EQ(*parsed, c.seconds) << c.text;
  }
}

TEST(CliParseDurationTest, RejectsMalformedZeroAndOverflow) {
  for (const char* text : {"", "d", "10x", "1.5h", "-1h", "0s", "0", "h1", "1h 2m", "1h30",
                           "99999999999999999999s", "9999999999999999w"}) {
    auto parsed = ParseDuration(text);
    ASSERT_FALSE(parsed.has_value()) << text;
    EXPECT_EQ(parsed.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(parsed.error().message.find("bad duration"), std::string::npos);
  }
}

TEST(CliParseLabelTest, SplitsAtTheFirstEquals) {
  auto label = ParseLabel("env=prod=eu");
  ASSERT_TRUE(label.has_value());
  EXPECT_EQ(label->first, "env");
  EXPECT_EQ(label->second, "prod=eu");
  auto empty_value = ParseLabel("team=");
  ASSERT_TRUE(empty_value.has_value());
  EXPECT_EQ(empty_value->second, "");
  EXPECT_FALSE(ParseLabel("novalue").has_value());
  EXPECT_FALSE(ParseLabel("=v").has_value());
  EXPECT_FALSE(ParseLabel("").has_value());
}

TEST(CliParseLabelsTest, LaterDuplicateWinsAndErrorsNameTheLabel) {
  auto labels = ParseLabels({"a=1", "b=2", "a=3"});
  ASSERT_TRUE(labels.has_value());
  EXPECT_EQ(*labels, (std::map<std::string, std::string>{{"a", "3"}, {"b", "2"}}));
  auto bad = ParseLabels({"a=1", "oops"});
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("'oops'"), std::string::npos);
}

TEST(CliParseMilliGpusTest, GpusDecimalsAndMilli) {
  EXPECT_EQ(*ParseMilliGpus("4"), 4000);
  EXPECT_EQ(*ParseMilliGpus("0.5"), 500);
  EXPECT_EQ(*ParseMilliGpus("1.125"), 1125);
  EXPECT_EQ(*ParseMilliGpus("250m"), 250);
  EXPECT_EQ(*ParseMilliGpus("0"), 0);
  for (const char* bad : {"", "-1", "1.2345", "1.", ".5", "abc", "m", "1e3", "99999999"}) {
    auto r = ParseMilliGpus(bad);
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  }
  EXPECT_EQ(FormatMilliGpus(4000), "4");
  EXPECT_EQ(FormatMilliGpus(500), "0.5");
  EXPECT_EQ(FormatMilliGpus(1125), "1.125");
  EXPECT_EQ(FormatMilliGpus(143), "0.143");
}

TEST(CliParseEndpointTest, UrlWithOptionalCapacity) {
  struct Case {
    const char* text;
    int64_t capacity, max_prefill, burst;  // 0: not given
  };
  for (const Case& c :
       {Case{"http://10.0.0.5:8000", 0, 0, 0}, Case{"http://10.0.0.5:8000=16", 16, 0, 0},
        Case{"http://10.0.0.5:8000=32:2", 32, 2, 0},
        Case{"http://10.0.0.5:8000=32:2:4", 32, 2, 4}}) {
    auto parsed = ParseEndpointArg(c.text);
    ASSERT_TRUE(parsed.has_value()) << c.text;
    EXPECT_EQ(parsed->url, "http://10.0.0.5:8000") << c.text;
    EXPECT_EQ(parsed->capacity, c.capacity) << c.text;
    EXPECT_EQ(parsed->max_prefill, c.max_prefill) << c.text;
    EXPECT_EQ(parsed->burst, c.burst) << c.text;
  }
  // A '=' not followed by a number stays in the URL (the server refuses it).
  auto odd = ParseEndpointArg("http://h/a=b");
  ASSERT_TRUE(odd.has_value());
  EXPECT_EQ(odd->url, "http://h/a=b");
  for (const char* bad :
       {"", "=8", "http://h=0", "http://h=100001", "http://h=9999999", "http://h=8:", "http://h=:2",
        "http://h=8:2:1:1", "http://h=8:100001", "http://h=8:2:100001", "http://h=8:2:"}) {
    auto r = ParseEndpointArg(bad);
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  }
}

TEST(CliQueryTest, EncodesValuesAndSkipsEmptyOnes) {
  EXPECT_EQ(UrlEncode("a-z_0.9~"), "a-z_0.9~");
  EXPECT_EQ(UrlEncode("k=v&x y/é"), "k%3Dv%26x%20y%2F%C3%A9");
  EXPECT_EQ(WithQuery("/t", {}), "/t");
  EXPECT_EQ(WithQuery("/t", {{"state", ""}, {"label", "env=prod"}, {"limit", "2"}}),
            "/t?label=env%3Dprod&limit=2");
  EXPECT_EQ(WithQuery("/t?owner=x", {{"cursor", "c1"}}), "/t?owner=x&cursor=c1");
}

}  // namespace
}  // namespace atrium::cli
