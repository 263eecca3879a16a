// Egress policy: where a tenant may aim the gateway. A dedicated deployment's
// endpoints are the tenant's to choose (a tenant admin creates and updates
// them), and the gateway POSTs its clients' requests there and relays the
// answers: unchecked, that is a request forgery against whatever the gateway
// can reach (the cloud's metadata service at 169.254.169.254, the control
// plane's own API, an operator's shared model server the tenant is not
// entitled to). So a dedicated deployment's endpoint must pass the
// operator's rules, when it is created or updated (the host as written) and
// again when the gateway connects (every address the host resolves to: a
// name may resolve elsewhere by then, DNS rebinding). Shared deployments are
// the platform staff's own and are not restricted.
//
// The rules, in order (the first that refuses names itself in the verdict):
//  1. never the host:port of a shared deployment's endpoint;
//  2. never one of the platform's own listeners (API, gateway; a listener
//     on 0.0.0.0 or :: is reached on any of the machine's addresses);
//  3. the host must match one of `allowed_hosts` (default "*": any);
//  4. never an address in `denied_networks`;
//  5. never an unspecified, multicast or reserved address (no model server
//     answers there; 0.0.0.0 reaches this machine);
//  6. never loopback, link-local, private (RFC 1918), shared (CGNAT,
//     RFC 6598), unique-local IPv6 and the other special ranges of
//     kSpecialRanges, unless the address is in one of `allowed_networks`
//     (an operator whose tenants run model servers on its cluster network
//     opens that network, e.g. 10.0.0.0/8). Public addresses pass.
// A host name ("localhost" and *.localhost excepted, which are loopback
// whatever DNS says) passes 4-6 when the endpoint is written: its addresses
// are checked when the gateway connects.
//
// Pure: no I/O (names are not resolved here), no clock. EgressPolicy adds
// one mutex, for the listeners learnt as the platform binds them.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "model/gateway_records.h"

namespace atrium::gateway {

// An IPv4 or IPv6 address. IPv4 is held as IPv4-mapped IPv6
// (::ffff:a.b.c.d), so ::ffff:127.0.0.1 and 127.0.0.1 are one address.
struct IpAddress {
  std::array<uint8_t, 16> bytes{};
  bool IsV4() const;
  std::string ToString() const;
  bool operator==(const IpAddress&) const = default;
};

// An address as written in a URL host or a configuration: IPv6 (without
// brackets) or IPv4 in any form the system resolver takes as numeric
// ("127.0.0.1", and also "127.1", "0x7f.1", "2130706433", "0177.0.0.1":
// each reaches 127.0.0.1, so each must be judged as it). nullopt for a name.
std::optional<IpAddress> ParseIpAddress(std::string_view text);

struct IpNetwork {
  IpAddress base;    // host bits zero
  int prefix = 0;    // over the 128 bits (an IPv4 /8 is /104)
  std::string text;  // as the operator wrote it, for messages
  bool Contains(const IpAddress& address) const;
};
// "10.0.0.0/8", "fc00::/7", or one address ("192.0.2.7": /32, "::1": /128).
// Host bits must be zero ("10.0.0.1/8" is refused: it says something else
// than it does).
Result<IpNetwork> ParseIpNetwork(std::string_view text);

// A host pattern: "*" (any host), "*.example.com" (any name under
// example.com, not example.com itself), or one exact name or address.
// Names compare case-insensitively, without a trailing dot.
Status ValidateHostPattern(std::string_view pattern);
bool HostPatternMatches(std::string_view pattern, std::string_view host);

// A URL's host (lower case, no brackets, no trailing dot) and port (the
// scheme's default when the URL has none).
struct HostPort {
  std::string host;
  uint16_t port = 0;
  bool operator==(const HostPort&) const = default;
};
// "http[s]://host[:port][/path]"; kInvalidArgument otherwise.
Result<HostPort> HostPortOfUrl(std::string_view url);
// The host:port of every endpoint the platform runs or chose among
// `deployments`: shared deployments' and managed replicas' (another
// tenant's dedicated ones included), which a tenant's endpoint may never
// name.
std::vector<HostPort> SharedEndpointsOf(const std::vector<DeploymentRecord>& deployments);

// Whether the gateway sends `d`'s requests (and probes) only where the
// egress policy lets it: a tenant's dedicated deployment whose endpoints
// the tenant wrote. A managed one's endpoints are the serving
// controller's (replicas it started on the platform's nodes), and a shared
// one's the operator's.
inline bool UnderEgressPolicy(const DeploymentRecord& d) {
  return d.visibility != "shared" && !d.managed();
}

// The operator's rules ([egress] in the configuration).
struct EgressRules {
  std::vector<IpNetwork> allowed_networks;         // default: none
  std::vector<IpNetwork> denied_networks;          // default: none
  std::vector<std::string> allowed_hosts = {"*"};  // default: any host
};

// What the rules are applied with, besides the endpoint itself.
struct EgressFacts {
  std::vector<HostPort> platform_listeners;  // as bound; host may be 0.0.0.0 or ::
  std::vector<IpAddress> local_addresses;    // this machine's (for wildcard listeners)
  std::vector<HostPort> shared_endpoints;    // every shared deployment's endpoints
};

struct EgressVerdict {
  bool allowed = true;
  // When refused: the rule, for the tenant admin and the logs, e.g.
  // "127.0.0.1 is a loopback address (127.0.0.0/8); the operator has not
  // opened it in egress.allowed_networks".
  std::string rule;
};

// A dedicated deployment's endpoint URL as written (create, update, and
// before the gateway reuses a connection).
EgressVerdict CheckEndpointUrl(const EgressRules& rules, const EgressFacts& facts,
                               std::string_view url);
// One address the endpoint's host resolved to, with the endpoint's port,
// when the gateway connects. `target` is the URL's host:port (for rule 1 and
// 2 by address). Rules 1, 2, 4-6.
EgressVerdict CheckResolvedAddress(const EgressRules& rules, const EgressFacts& facts,
                                   const HostPort& target, const IpAddress& address);

// The special ranges of rule 6 (and 5), in the order they are matched.
struct SpecialRange {
  const char* network;
  const char* name;
  bool never_allowed;  // rule 5: allowed_networks cannot open it
};
const std::vector<SpecialRange>& SpecialRanges();

// The rules and the platform's listeners, shared by the API (create and
// update) and the gateway (connect). Thread-safe.
class EgressPolicy {
 public:
  explicit EgressPolicy(EgressRules rules = {}) : rules_(std::move(rules)) {}

  const EgressRules& rules() const { return rules_; }
  // A listener of the platform, once bound (a port 0 in the configuration
  // is only known then).
  void AddPlatformListener(HostPort listener);
  void SetLocalAddresses(std::vector<IpAddress> addresses);
  // The facts as of now, with `shared_endpoints` (from the caller's view of
  // the deployments) filled in.
  EgressFacts Facts(std::vector<HostPort> shared_endpoints) const;

 private:
  const EgressRules rules_;
  mutable std::mutex mu_;
  std::vector<HostPort> listeners_;         // GUARDED_BY(mu_)
  std::vector<IpAddress> local_addresses_;  // GUARDED_BY(mu_)
};

}  // namespace atrium::gateway
