#include "gateway/egress_policy.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <cstring>

namespace atrium::gateway {
namespace {

constexpr std::array<uint8_t, 12> kV4MappedPrefix = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Lower case, without one trailing dot ("Example.COM." is example.com).
std::string NormalHost(std::string_view host) {
  if (host.size() > 1 && host.back() == '.') host.remove_suffix(1);
  return Lower(host);
}

bool IsLocalhostName(const std::string& host) {
  return host == "localhost" ||
         (host.size() > 10 && host.compare(host.size() - 10, 10, ".localhost") == 0);
}

const std::vector<IpNetwork>& ParsedSpecialRanges() {
  static const std::vector<IpNetwork> parsed = [] {
    std::vector<IpNetwork> out;
    for (const SpecialRange& r : SpecialRanges()) out.push_back(*ParseIpNetwork(r.network));
    return out;
  }();
  return parsed;
}

EgressVerdict Refused(std::string rule) { return {false, std::move(rule)}; }

// Rules 1 and 2 say the same, so that a tenant cannot tell which of the
// operator's addresses it found.
constexpr char kReserved[] =
    " is reserved for the platform (a listener of its own or a shared deployment's endpoint)";

std::string Where(const HostPort& hp) {
  return (hp.host.find(':') != std::string::npos ? "[" + hp.host + "]" : hp.host) + ":" +
         std::to_string(hp.port);
}

// Rule 1 by address: a shared endpoint written as this address and port.
bool IsSharedEndpointAddress(const EgressFacts& facts, const IpAddress& address, uint16_t port) {
  for (const HostPort& shared : facts.shared_endpoints) {
    if (shared.port != port) continue;
    if (auto ip = ParseIpAddress(shared.host); ip && *ip == address) return true;
  }
  return false;
}

bool IsLoopback(const IpAddress& address) {
  static const IpNetwork v4 = *ParseIpNetwork("127.0.0.0/8");
  static const IpNetwork v6 = *ParseIpNetwork("::1");
  return v4.Contains(address) || v6.Contains(address);
}

// Rule 2 by address.
bool IsPlatformListenerAddress(const EgressFacts& facts, const IpAddress& address, uint16_t port) {
  for (const HostPort& listener : facts.platform_listeners) {
    if (listener.port != port) continue;
    auto bound = ParseIpAddress(listener.host);
    if (!bound) continue;
    const bool wildcard = bound->bytes == IpAddress{}.bytes || *bound == *ParseIpAddress("0.0.0.0");
    if (wildcard) {
      if (IsLoopback(address)) return true;
      if (std::find(facts.local_addresses.begin(), facts.local_addresses.end(), address) !=
          facts.local_addresses.end()) {
        return true;
      }
      // 0.0.0.0 itself reaches this machine too (rule 5 refuses it anyway).
      if (address.bytes == IpAddress{}.bytes || address == *ParseIpAddress("0.0.0.0")) return true;
    } else if (*bound == address) {
      return true;
    }
  }
  return false;
}

// Rules 4-6 for one address.
EgressVerdict CheckAddressRanges(const EgressRules& rules, const IpAddress& address) {
  for (const IpNetwork& denied : rules.denied_networks) {
    if (denied.Contains(address)) {
      return Refused(address.ToString() + " is in egress.denied_networks (" + denied.text + ")");
    }
  }
  const auto& ranges = SpecialRanges();
  const auto& parsed = ParsedSpecialRanges();
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (!parsed[i].Contains(address)) continue;
    const std::string what =
        address.ToString() + " is " + ranges[i].name + " (" + parsed[i].text + ")";
    if (ranges[i].never_allowed) return Refused(what + ", never a model server");
    for (const IpNetwork& allowed : rules.allowed_networks) {
      if (allowed.Contains(address)) return {};
    }
    return Refused(what + "; the operator has not opened it in egress.allowed_networks");
  }
  return {};
}

}  // namespace

bool IpAddress::IsV4() const {
  return std::equal(kV4MappedPrefix.begin(), kV4MappedPrefix.end(), bytes.begin());
}

std::string IpAddress::ToString() const {
  char buf[INET6_ADDRSTRLEN] = {};
  if (IsV4()) {
    inet_ntop(AF_INET, bytes.data() + 12, buf, sizeof buf);
  } else {
    inet_ntop(AF_INET6, bytes.data(), buf, sizeof buf);
  }
  return buf;
}

std::optional<IpAddress> ParseIpAddress(std::string_view text) {
  if (text.empty() || text.size() >= INET6_ADDRSTRLEN) return std::nullopt;
  const std::string s(text);
  IpAddress out;
  if (s.find(':') != std::string::npos) {
    if (inet_pton(AF_INET6, s.c_str(), out.bytes.data()) != 1) return std::nullopt;
    return out;  // an IPv4-mapped one is already in the IPv4 form
  }
  // inet_aton takes the numeric forms getaddrinfo takes (and stops at a
  // space, so only the characters of those forms are let through).
  for (char c : s) {
    if (!std::isxdigit(static_cast<unsigned char>(c)) && c != '.' && c != 'x' && c != 'X') {
      return std::nullopt;
    }
  }
  in_addr v4{};
  if (inet_aton(s.c_str(), &v4) == 0) return std::nullopt;
  std::copy(kV4MappedPrefix.begin(), kV4MappedPrefix.end(), out.bytes.begin());
  std::memcpy(out.bytes.data() + 12, &v4.s_addr, 4);
  return out;
}

bool IpNetwork::Contains(const IpAddress& address) const {
  int bits = prefix;
  for (size_t i = 0; i < 16 && bits > 0; ++i, bits -= 8) {
    const uint8_t mask = bits >= 8 ? 0xff : static_cast<uint8_t>(0xff << (8 - bits));
    if ((address.bytes[i] & mask) != base.bytes[i]) return false;
  }
  return true;
}

Result<IpNetwork> ParseIpNetwork(std::string_view text) {
  auto bad = [&](const std::string& why) {
    return Error::InvalidArgument("network '" + std::string(text) + "' " + why);
  };
  const size_t slash = text.find('/');
  const std::string_view address_text = text.substr(0, slash);
  // Only the canonical forms here: an operator's "10.1/8" is more likely a typo than meant.
  std::string canonical(address_text);
  unsigned char probe[16];
  const bool v6 = canonical.find(':') != std::string::npos;
  if (inet_pton(v6 ? AF_INET6 : AF_INET, canonical.c_str(), probe) != 1) {
    return bad("is not an IPv4 or IPv6 address with an optional /prefix");
  }
  IpNetwork network;
  network.base = *ParseIpAddress(address_text);
  network.text = std::string(text);
  const int family_bits = v6 ? 128 : 32;
  int prefix = family_bits;
  if (slash != std::string_view::npos) {
    std::string_view digits = text.substr(slash + 1);
    if (digits.empty() || digits.size() > 3 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return bad("has a bad prefix length");
    }
    prefix = std::stoi(std::string(digits));
    if (prefix > family_bits) return bad("has a prefix longer than the address");
  }
  network.prefix = v6 ? prefix : prefix + 96;  // IPv4 sits in the last 32 of the 128 bits
  IpAddress masked = network.base;
  int bits = network.prefix;
  for (size_t i = 0; i < 16; ++i, bits -= 8) {
    const uint8_t mask = bits >= 8   ? 0xff
                         : bits <= 0 ? 0
                                     : static_cast<uint8_t>(0xff << (8 - bits));
    masked.bytes[i] &= mask;
  }
  if (!(masked == network.base)) {
    return bad("has bits set past its prefix (the network is " + masked.ToString() + "/" +
               std::to_string(prefix) + ")");
  }
  return network;
}

Status ValidateHostPattern(std::string_view pattern) {
  auto bad = [&] {
    return Error::InvalidArgument("host pattern '" + std::string(pattern) +
                                  "' must be *, *.domain or one host name or address");
  };
  if (pattern == "*") return OkStatus();
  std::string_view name = pattern;
  if (name.rfind("*.", 0) == 0) name.remove_prefix(2);
  if (name.empty() || name.size() > 253) return bad();
  for (char c : name) {
    const bool ok =
        std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_' || c == ':';
    if (!ok) return bad();
  }
  return OkStatus();
}

bool HostPatternMatches(std::string_view pattern, std::string_view host) {
  if (pattern == "*") return true;
  const std::string h = NormalHost(host);
  if (pattern.rfind("*.", 0) == 0) {
    const std::string suffix = NormalHost(pattern.substr(1));  // ".example.com"
    return h.size() > suffix.size() &&
           h.compare(h.size() - suffix.size(), suffix.size(), suffix) == 0;
  }
  if (auto a = ParseIpAddress(pattern)) {
    auto b = ParseIpAddress(h);
    return b && *a == *b;
  }
  return NormalHost(pattern) == h;
}

Result<HostPort> HostPortOfUrl(std::string_view url) {
  auto bad = [&] {
    return Error::InvalidArgument("endpoint URL '" + std::string(url.substr(0, 200)) +
                                  "' is not http[s]://host[:port][/path]");
  };
  uint16_t port = 0;
  if (url.rfind("http://", 0) == 0) {
    url.remove_prefix(7);
    port = 80;
  } else if (url.rfind("https://", 0) == 0) {
    url.remove_prefix(8);
    port = 443;
  } else {
    return bad();
  }
  std::string_view authority = url.substr(0, url.find_first_of("/?#"));
  if (authority.find('@') != std::string_view::npos) return bad();
  std::string_view host = authority;
  std::string_view port_text;
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return bad();
    host = authority.substr(1, close - 1);
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return bad();
      port_text = after.substr(1);
    }
  } else if (const size_t colon = authority.rfind(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port_text = authority.substr(colon + 1);
  }
  if (host.empty()) return bad();
  if (!port_text.empty() || authority.back() == ':') {
    if (port_text.empty() || port_text.size() > 5 ||
        !std::all_of(port_text.begin(), port_text.end(),
                     [](char c) { return c >= '0' && c <= '9'; })) {
      return bad();
    }
    const int p = std::stoi(std::string(port_text));
    if (p < 1 || p > 65535) return bad();
    port = static_cast<uint16_t>(p);
  }
  return HostPort{NormalHost(host), port};
}

std::vector<HostPort> SharedEndpointsOf(const std::vector<DeploymentRecord>& deployments) {
  std::vector<HostPort> shared;
  for (const DeploymentRecord& d : deployments) {
    if (UnderEgressPolicy(d)) continue;  // a tenant's own URLs
    for (const DeploymentEndpoint& e : d.endpoints) {
      if (auto target = HostPortOfUrl(e.url); target.has_value()) {
        shared.push_back(std::move(*target));
      }
    }
  }
  return shared;
}

const std::vector<SpecialRange>& SpecialRanges() {
  // More specific ranges first: ::1 and :: before ::/96.
  static const std::vector<SpecialRange> ranges = {
      {"0.0.0.0/8", "an unspecified address (this host on this network)", true},
      {"::/128", "the unspecified address", true},
      {"127.0.0.0/8", "a loopback address", false},
      {"::1/128", "the loopback address", false},
      {"10.0.0.0/8", "a private address (RFC 1918)", false},
      {"172.16.0.0/12", "a private address (RFC 1918)", false},
      {"192.168.0.0/16", "a private address (RFC 1918)", false},
      {"100.64.0.0/10", "a shared address (CGNAT, RFC 6598)", false},
      {"169.254.0.0/16", "a link-local address (cloud metadata services live here)", false},
      {"fe80::/10", "a link-local address", false},
      {"fec0::/10", "a site-local address (deprecated)", false},
      {"fc00::/7", "a unique local address (ULA)", false},
      {"192.0.0.0/24", "an IETF protocol assignment", false},
      {"198.18.0.0/15", "a benchmarking address", false},
      {"64:ff9b::/96", "a NAT64 address (it reaches an IPv4 address)", false},
      {"64:ff9b:1::/48", "a local-use NAT64 address", false},
      {"::/96", "an IPv4-compatible address (deprecated)", false},
      {"224.0.0.0/4", "a multicast address", true},
      {"ff00::/8", "a multicast address", true},
      {"240.0.0.0/4", "a reserved address (broadcast included)", true},
  };
  return ranges;
}

EgressVerdict CheckEndpointUrl(const EgressRules& rules, const EgressFacts& facts,
                               std::string_view url) {
  auto target = HostPortOfUrl(url);
  if (!target.has_value()) return Refused(target.error().message);
  const std::optional<IpAddress> literal = ParseIpAddress(target->host);
  for (const HostPort& shared : facts.shared_endpoints) {
    if (shared == *target) {
      return Refused(Where(*target) + kReserved);
    }
  }
  if (literal && IsSharedEndpointAddress(facts, *literal, target->port)) {
    return Refused(Where(*target) + kReserved);
  }
  const bool localhost = IsLocalhostName(target->host);
  const std::optional<IpAddress> address = literal     ? literal
                                           : localhost ? ParseIpAddress("127.0.0.1")
                                                       : std::nullopt;
  if (address) {
    if (IsPlatformListenerAddress(facts, *address, target->port)) {
      return Refused(Where(*target) + kReserved);
    }
  }
  const bool host_allowed =
      std::any_of(rules.allowed_hosts.begin(), rules.allowed_hosts.end(),
                  [&](const std::string& p) { return HostPatternMatches(p, target->host); });
  if (!host_allowed) {
    return Refused("host " + target->host + " matches none of egress.allowed_hosts");
  }
  if (address) {
    EgressVerdict v = CheckAddressRanges(rules, *address);
    if (!v.allowed && localhost) v.rule = target->host + " (" + v.rule + ")";
    return v;
  }
  return {};
}

EgressVerdict CheckResolvedAddress(const EgressRules& rules, const EgressFacts& facts,
                                   const HostPort& target, const IpAddress& address) {
  if (IsSharedEndpointAddress(facts, address, target.port)) {
    return Refused(Where(target) + " reaches " + address.ToString() + ", which" + kReserved);
  }
  if (IsPlatformListenerAddress(facts, address, target.port)) {
    return Refused(Where(target) + " reaches " + address.ToString() + ", which" + kReserved);
  }
  EgressVerdict v = CheckAddressRanges(rules, address);
  // Every rule of CheckAddressRanges begins with the address.
  const std::string text = address.ToString();
  if (!v.allowed && target.host != text && v.rule.rfind(text, 0) == 0) {
    v.rule = target.host + " resolves to " + text + ", which" + v.rule.substr(text.size());
  }
  return v;
}

void EgressPolicy::AddPlatformListener(HostPort listener) {
  listener.host = NormalHost(listener.host);
  std::lock_guard lock(mu_);
  listeners_.push_back(std::move(listener));
}

void EgressPolicy::SetLocalAddresses(std::vector<IpAddress> addresses) {
  std::lock_guard lock(mu_);
  local_addresses_ = std::move(addresses);
}

EgressFacts EgressPolicy::Facts(std::vector<HostPort> shared_endpoints) const {
  EgressFacts facts;
  facts.shared_endpoints = std::move(shared_endpoints);
  std::lock_guard lock(mu_);
  facts.platform_listeners = listeners_;
  facts.local_addresses = local_addresses_;
  return facts;
}

}  // namespace atrium::gateway
