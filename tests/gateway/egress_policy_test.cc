#include "gateway/egress_policy.h"

#include <gtest/gtest.h>

namespace atrium::gateway {
namespace {

EgressRules RulesOpening(std::vector<std::string> networks) {
  EgressRules rules;
  for (const std::string& n : networks) rules.allowed_networks.push_back(*ParseIpNetwork(n));
  return rules;
}

TEST(EgressPolicyTest, AddressesParseInEveryFormTheResolverTakesAsNumeric) {
  const IpAddress loopback = *ParseIpAddress("127.0.0.1");
  for (const char* same : {"127.0.0.1", "127.1", "0x7f.1", "2130706433", "0177.0.0.1",
                           "::ffff:127.0.0.1", "::FFFF:7f00:1"}) {
    auto parsed = ParseIpAddress(same);
    ASSERT_TRUE(parsed.has_value()) << same;
    EXPECT_EQ(*parsed, loopback) << same;
  }
  EXPECT_EQ(loopback.ToString(), "127.0.0.1");
  EXPECT_TRUE(loopback.IsV4());
  EXPECT_EQ(ParseIpAddress("::1")->ToString(), "::1");
  for (const char* name : {"", "localhost", "gpu-1.internal", "127.0.0.1 x", "deadbeef.example",
                           "1.2.3.4.5", "fe80::1%eth0"}) {
    EXPECT_FALSE(ParseIpAddress(name).has_value()) << name;
  }
}

TEST(EgressPolicyTest, NetworksAreCanonicalAndContainWhatTheySay) {
  struct Case {
    const char* network;
    const char* address;
    bool contains;
  };
  const Case cases[] = {
      {"10.0.0.0/8", "10.255.1.2", true},      {"10.0.0.0/8", "11.0.0.1", false},
      {"10.0.0.0/8", "::ffff:10.1.1.1", true}, {"100.64.0.0/10", "100.127.255.255", true},
      {"100.64.0.0/10", "100.128.0.0", false}, {"fc00::/7", "fd12::1", true},
      {"fc00::/7", "fe00::1", false},          {"192.0.2.7", "192.0.2.7", true},
      {"192.0.2.7", "192.0.2.8", false},       {"::1", "::1", true},
      {"0.0.0.0/0", "8.8.8.8", true},          {"0.0.0.0/0", "2001:db8::1", false},
      {"::/0", "2001:db8::1", true},
  };
  for (const Case& c : cases) {
    auto network = ParseIpNetwork(c.network);
    ASSERT_TRUE(network.has_value()) << c.network;
    EXPECT_EQ(network->Contains(*ParseIpAddress(c.address)), c.contains)
        << c.network << " " << c.address;
  }
  for (const char* bad :
       {"10.0.0.1/8", "10.0.0.0/33", "::/129", "10.1/8", "10.0.0.0/", "eth0", "10.0.0.0/x", ""}) {
    EXPECT_FALSE(ParseIpNetwork(bad).has_value()) << bad;
  }
}

TEST(EgressPolicyTest, HostPatternsMatchNamesCaseInsensitively) {
  struct Case {
    const char* pattern;
    const char* host;
    bool matches;
  };
  const Case cases[] = {
      {"*", "anything.example", true},
      {"*.models.example.com", "gpu-1.models.example.com", true},
      {"*.models.example.com", "GPU-1.Models.Example.com.", true},
      {"*.models.example.com", "models.example.com", false},
      {"*.models.example.com", "evilmodels.example.com", false},
      {"models.example.com", "models.example.com", true},
      {"models.example.com", "x.models.example.com", false},
      {"203.0.113.5", "203.0.113.5", true},
      {"203.0.113.5", "203.0.113.6", false},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(HostPatternMatches(c.pattern, c.host), c.matches) << c.pattern << " " << c.host;
  }
  for (const char* good : {"*", "*.example.com", "example.com", "10.0.0.1", "::1"}) {
    EXPECT_TRUE(ValidateHostPattern(good).has_value()) << good;
  }
  for (const char* bad : {"", "*.", "a*.example.com", "exa mple.com", "*example.com", "**"}) {
    EXPECT_FALSE(ValidateHostPattern(bad).has_value()) << bad;
  }
}

TEST(EgressPolicyTest, UrlsGiveTheirHostAndPortWithTheSchemesDefault) {
  EXPECT_EQ(*HostPortOfUrl("http://Example.COM/v1"), (HostPort{"example.com", 80}));
  EXPECT_EQ(*HostPortOfUrl("https://example.com."), (HostPort{"example.com", 443}));
  EXPECT_EQ(*HostPortOfUrl("http://[::1]:8000/x"), (HostPort{"::1", 8000}));
  EXPECT_EQ(*HostPortOfUrl("http://10.0.0.5:8000"), (HostPort{"10.0.0.5", 8000}));
  for (const char* bad : {"ftp://h", "http://", "http://h:", "http://h:0", "http://h:70000",
                          "http://u@h", "http://[::1"}) {
    EXPECT_FALSE(HostPortOfUrl(bad).has_value()) << bad;
  }
}

// The table of the issue: every address a tenant aimed the gateway at.
TEST(EgressPolicyTest, ByDefaultATenantsEndpointReachesOnlyPublicAddresses) {
  const EgressRules rules;
  const EgressFacts facts;
  struct Case {
    const char* url;
    const char* says;  // "" = allowed
  };
  const Case cases[] = {
      {"http://203.0.113.10:8000", ""},
      {"https://models.example.com", ""},  // a name: checked again when connecting
      {"http://[2001:db8::5]:8000", ""},
      {"http://127.0.0.1:8080", "loopback"},
      {"http://127.1:8080", "loopback"},
      {"http://2130706433:8080", "loopback"},
      {"http://[::1]:8000", "loopback"},
      {"http://[::ffff:127.0.0.1]:8000", "loopback"},
      {"http://localhost:8000", "loopback"},
      {"http://LOCALHOST.:8000", "loopback"},
      {"http://api.localhost:8000", "loopback"},
      {"http://169.254.169.254/latest/meta-data", "link-local"},
      {"http://[fe80::1]:80", "link-local"},
      {"http://10.0.0.5:8000", "private"},
      {"http://172.16.3.4:8000", "private"},
      {"http://192.168.1.1", "private"},
      {"http://100.64.0.1", "CGNAT"},
      {"http://[fd00::1]:80", "unique local"},
      {"http://0.0.0.0:8080", "unspecified"},
      {"http://[::]:8080", "unspecified"},
      {"http://224.0.0.1", "multicast"},
      {"http://255.255.255.255", "reserved"},
      {"http://[64:ff9b::a00:1]", "NAT64"},
  };
  for (const Case& c : cases) {
    EgressVerdict v = CheckEndpointUrl(rules, facts, c.url);
    if (std::string(c.says).empty()) {
      EXPECT_TRUE(v.allowed) << c.url << ": " << v.rule;
    } else {
      EXPECT_FALSE(v.allowed) << c.url;
      EXPECT_NE(v.rule.find(c.says), std::string::npos) << c.url << ": " << v.rule;
      // Each refusal says whether the operator may open it.
      EXPECT_TRUE(v.rule.find("egress.allowed_networks") != std::string::npos ||
                  v.rule.find("never a model server") != std::string::npos)
          << v.rule;
    }
  }
}

TEST(EgressPolicyTest, TheOperatorOpensNetworksButNeverTheUnspecifiedOrMulticastOnes) {
  const EgressRules rules = RulesOpening({"127.0.0.0/8", "10.0.0.0/8", "0.0.0.0/0", "::/0"});
  const EgressFacts facts;
  EXPECT_TRUE(CheckEndpointUrl(rules, facts, "http://127.0.0.1:9000").allowed);
  EXPECT_TRUE(CheckEndpointUrl(rules, facts, "http://localhost:9000").allowed);
  EXPECT_TRUE(CheckEndpointUrl(rules, facts, "http://10.2.3.4:9000").allowed);
  EXPECT_FALSE(CheckEndpointUrl(rules, facts, "http://0.0.0.0:9000").allowed);
  EXPECT_FALSE(CheckEndpointUrl(rules, facts, "http://224.0.0.1:9000").allowed);
  EXPECT_FALSE(CheckEndpointUrl(rules, facts, "http://[ff02::1]:9000").allowed);
  // Only what is opened: loopback open does not open the metadata service.
  const EgressRules loopback_only = RulesOpening({"127.0.0.0/8"});
  EXPECT_FALSE(CheckEndpointUrl(loopback_only, facts, "http://169.254.169.254").allowed);
  EXPECT_FALSE(CheckEndpointUrl(loopback_only, facts, "http://[::1]:80").allowed);
}

TEST(EgressPolicyTest, DeniedNetworksWinOverAllowedOnesAndPublicAddresses) {
  EgressRules rules = RulesOpening({"10.0.0.0/8"});
  rules.denied_networks = {*ParseIpNetwork("10.9.0.0/16"), *ParseIpNetwork("203.0.113.0/24")};
  const EgressFacts facts;
  EXPECT_TRUE(CheckEndpointUrl(rules, facts, "http://10.8.0.1").allowed);
  EgressVerdict v = CheckEndpointUrl(rules, facts, "http://10.9.0.1");
  EXPECT_FALSE(v.allowed);
  EXPECT_NE(v.rule.find("egress.denied_networks (10.9.0.0/16)"), std::string::npos) << v.rule;
  EXPECT_FALSE(CheckEndpointUrl(rules, facts, "http://203.0.113.9").allowed);
}

TEST(EgressPolicyTest, AllowedHostsNarrowWhichHostsATenantMayName) {
  EgressRules rules;
  rules.allowed_hosts = {"*.models.example.com"};
  const EgressFacts facts;
  EXPECT_TRUE(CheckEndpointUrl(rules, facts, "https://gpu-1.models.example.com").allowed);
  EgressVerdict v = CheckEndpointUrl(rules, facts, "https://evil.example.net");
  EXPECT_FALSE(v.allowed);
  EXPECT_NE(v.rule.find("egress.allowed_hosts"), std::string::npos) << v.rule;
  EXPECT_FALSE(CheckEndpointUrl(rules, facts, "http://203.0.113.10").allowed);
}

// The issue: a tenant not entitled to a shared model got it served by
// pointing its dedicated deployment at the shared server's URL.
TEST(EgressPolicyTest, ASharedDeploymentsEndpointIsNeverATenantsEvenOnAnOpenedNetwork) {
  const EgressRules rules = RulesOpening({"10.0.0.0/8"});
  EgressFacts facts;
  facts.shared_endpoints = {*HostPortOfUrl("http://10.0.0.9:8000"),
                            *HostPortOfUrl("https://shared.models.example.com")};
  for (const char* url :
       {"http://10.0.0.9:8000", "http://10.0.0.9:8000/v1", "http://10.0.0.9:8000/",
        "http://012.0.0.9:8000", "https://SHARED.models.example.com:443",
        "https://shared.models.example.com./x"}) {
    EgressVerdict v = CheckEndpointUrl(rules, facts, url);
    EXPECT_FALSE(v.allowed) << url;
    EXPECT_NE(v.rule.find("reserved for the platform"), std::string::npos) << url << ": " << v.rule;
  }
  EXPECT_TRUE(CheckEndpointUrl(rules, facts, "http://10.0.0.9:8001").allowed);
  EXPECT_TRUE(CheckEndpointUrl(rules, facts, "http://shared.models.example.com").allowed);
  // By address when connecting: a name of the tenant's that resolves there.
  EgressVerdict v =
      CheckResolvedAddress(rules, facts, {"mine.example.com", 8000}, *ParseIpAddress("10.0.0.9"));
  EXPECT_FALSE(v.allowed);
  EXPECT_NE(v.rule.find("reaches 10.0.0.9, which is reserved for the platform"), std::string::npos)
      << v.rule;
}

// The issue: pointing a dedicated deployment at the API returned the API's
// own answer.
TEST(EgressPolicyTest, ThePlatformsOwnListenersAreNeverATenantsEndpoint) {
  const EgressRules rules = RulesOpening({"127.0.0.0/8", "::1/128", "10.0.0.0/8"});
  EgressFacts facts;
  facts.platform_listeners = {{"127.0.0.1", 8080}, {"0.0.0.0", 8081}};
  facts.local_addresses = {*ParseIpAddress("10.1.2.3")};
  for (const char* url : {"http://127.0.0.1:8080", "http://localhost:8080/api/v1",
                          "http://127.0.0.1:8081", "http://10.1.2.3:8081", "http://[::1]:8081"}) {
    EgressVerdict v = CheckEndpointUrl(rules, facts, url);
    EXPECT_FALSE(v.allowed) << url;
    EXPECT_NE(v.rule.find("reserved for the platform"), std::string::npos) << url << ": " << v.rule;
  }
  EXPECT_TRUE(CheckEndpointUrl(rules, facts, "http://127.0.0.1:9000").allowed);
  EXPECT_TRUE(CheckEndpointUrl(rules, facts, "http://10.1.2.4:8081").allowed);
  // A name that resolves to the API when the gateway connects.
  EXPECT_FALSE(
      CheckResolvedAddress(rules, facts, {"api.example.com", 8080}, *ParseIpAddress("127.0.0.1"))
          .allowed);
}

// DNS rebinding: a name that passed when written resolves to loopback later.
TEST(EgressPolicyTest, ResolvedAddressesAreJudgedLikeLiteralOnes) {
  const EgressRules rules;
  const EgressFacts facts;
  EgressVerdict v = CheckResolvedAddress(rules, facts, {"rebind.example.com", 8000},
                                         *ParseIpAddress("127.0.0.1"));
  EXPECT_FALSE(v.allowed);
  EXPECT_NE(v.rule.find("rebind.example.com resolves to 127.0.0.1, which is a loopback address"),
            std::string::npos)
      << v.rule;
  EXPECT_FALSE(CheckResolvedAddress(rules, facts, {"x.example.com", 80},
                                    *ParseIpAddress("::ffff:169.254.169.254"))
                   .allowed);
  EXPECT_TRUE(
      CheckResolvedAddress(rules, facts, {"x.example.com", 80}, *ParseIpAddress("203.0.113.10"))
          .allowed);
}

TEST(EgressPolicyTest, ThePolicyHandsOutTheListenersItLearnt) {
  EgressPolicy policy(RulesOpening({"127.0.0.0/8"}));
  policy.AddPlatformListener({"LocalHost", 1});
  policy.AddPlatformListener({"127.0.0.1", 2});
  EgressFacts facts = policy.Facts({{"10.0.0.1", 3}});
  ASSERT_EQ(facts.platform_listeners.size(), 2u);
  EXPECT_EQ(facts.platform_listeners[0].host, "localhost");
  EXPECT_EQ(facts.shared_endpoints.size(), 1u);
  EXPECT_FALSE(CheckEndpointUrl(policy.rules(), facts, "http://127.0.0.1:2").allowed);
  EXPECT_TRUE(CheckEndpointUrl(policy.rules(), facts, "http://127.0.0.1:4").allowed);
}

}  // namespace
}  // namespace atrium::gateway
