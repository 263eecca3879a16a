// The pieces the three Beast-based network shells share (http::Server, the
// gateway and the engine simulator use these, and no copies of them).
#include "http/network_shell.h"

#include <gtest/gtest.h>

namespace atrium::http {
namespace {

TEST(ReasonPhrase, StandardCodesHaveTheirPhraseAndOthersAreUnknown) {
  EXPECT_EQ(ReasonPhrase(200), "OK");
  EXPECT_EQ(ReasonPhrase(404), "Not Found");
  EXPECT_EQ(ReasonPhrase(429), "Too Many Requests");
  EXPECT_EQ(ReasonPhrase(503), "Service Unavailable");
  // A model server's own code, relayed by the gateway.
  EXPECT_EQ(ReasonPhrase(299), "Unknown");
  EXPECT_EQ(ReasonPhrase(999), "Unknown");
  EXPECT_EQ(ReasonPhrase(-1), "Unknown");
}

TEST(ListenEndpoint, TakesAddressesWithOrWithoutBracketsAndRefusesBadPorts) {
  auto v4 = ListenEndpoint("127.0.0.1", 8080);
  ASSERT_TRUE(v4.has_value()) << v4.error().message;
  EXPECT_EQ(v4->address().to_string(), "127.0.0.1");
  EXPECT_EQ(v4->port(), 8080);
  auto v6 = ListenEndpoint("[::1]", 0);
  ASSERT_TRUE(v6.has_value()) << v6.error().message;
  EXPECT_TRUE(v6->address().is_v6());
  EXPECT_EQ(v6->address().to_string(), "::1");
  auto bare_v6 = ListenEndpoint("::1", 443);
  ASSERT_TRUE(bare_v6.has_value()) << bare_v6.error().message;
  EXPECT_EQ(bare_v6->port(), 443);
  for (int port : {-1, 65536}) {
    auto refused = ListenEndpoint("127.0.0.1", port);
    ASSERT_FALSE(refused.has_value()) << port;
    EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace atrium::http
