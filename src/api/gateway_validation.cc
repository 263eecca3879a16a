#include "api/gateway_validation.h"

#include <set>

namespace atrium::api {

bool IsPrintableAscii(std::string_view s, bool allow_space) {
  for (char c : s) {
    if (c == ' ' && allow_space) continue;
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

Status ValidateModelName(std::string_view name, const std::string& what) {
  if (name.empty() || name.size() > kMaxModelNameBytes || !IsPrintableAscii(name, false) ||
      name.find('/') != std::string_view::npos) {
    return Error::InvalidArgument(what +
                                  " must be 1-200 printable ASCII characters without spaces or "
                                  "'/'");
  }
  return OkStatus();
}

namespace {

bool IsHostChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_';
}

bool ValidPort(std::string_view port) {
  if (port.empty() || port.size() > 5) return false;
  int v = 0;
  for (char c : port) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  return v >= 1 && v <= 65535;
}

}  // namespace

Status ValidateEndpointUrl(std::string_view url) {
  auto bad = [&](const std::string& why) {
    return Error::InvalidArgument("endpoint URL '" + std::string(url.substr(0, 200)) + "' " + why);
  };
  if (url.size() > kMaxEndpointUrlBytes) return bad("is too long");
  if (!IsPrintableAscii(url, false)) return bad("must be printable ASCII without spaces");
  std::string_view rest;
  if (url.rfind("http://", 0) == 0) {
    rest = url.substr(7);
  } else if (url.rfind("https://", 0) == 0) {
    rest = url.substr(8);
  } else {
    return bad("must start with http:// or https://");
  }
  if (url.find('?') != std::string_view::npos || url.find('#') != std::string_view::npos) {
    return bad("must not have a query or fragment");
  }
  std::string_view authority = rest.substr(0, rest.find('/'));
  if (authority.find('@') != std::string_view::npos) {
    return bad("must not carry credentials (user@host)");
  }
  std::string_view host = authority;
  std::string_view port;
  if (!authority.empty() && authority.front() == '[') {
    size_t close = authority.find(']');
    if (close == std::string_view::npos || close == 1) return bad("has a malformed IPv6 host");
    for (char c : authority.substr(1, close - 1)) {
      bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
      if (!hex && c != ':' && c != '.') return bad("has a malformed IPv6 host");
    }
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return bad("has a malformed host");
      port = after.substr(1);
      if (!ValidPort(port)) return bad("has a bad port");
    }
  } else {
    size_t colon = authority.find(':');
    if (colon != std::string_view::npos) {
      host = authority.substr(0, colon);
      port = authority.substr(colon + 1);
      if (!ValidPort(port)) return bad("has a bad port");
    }
    if (host.empty()) return bad("has no host");
    for (char c : host) {
      if (!IsHostChar(c)) return bad("has a malformed host");
    }
  }
  return OkStatus();
}

Result<std::optional<std::vector<DeploymentEndpoint>>> EndpointsOf(const Json& body,
                                                                   JsonObjectReader& reader,
                                                                   bool required) {
  // The reader cannot read arrays of objects; IsNull marks the field known.
  bool is_null = reader.IsNull("endpoints");
  if (!body.is_object()) return std::optional<std::vector<DeploymentEndpoint>>();
  auto it = body.find("endpoints");
  if (it == body.end()) {
    if (required) return Error::InvalidArgument("missing required field 'endpoints'");
    return std::optional<std::vector<DeploymentEndpoint>>();
  }
  if (is_null || !it->is_array()) {
    return Error::InvalidArgument(
        "field 'endpoints' must be an array of {url, capacity, max_prefill, burst}");
  }
  if (it->empty() || it->size() > kMaxEndpoints) {
    return Error::InvalidArgument("field 'endpoints' must hold 1 to 64 endpoints");
  }
  std::vector<DeploymentEndpoint> out;
  std::set<std::string> seen;
  for (size_t i = 0; i < it->size(); ++i) {
    const std::string where = "endpoints[" + std::to_string(i) + "]";
    JsonObjectReader e((*it)[i], "field '" + where + "'");
    DeploymentEndpoint endpoint;
    auto url = e.String("url", true, kMaxEndpointUrlBytes);
    auto capacity = e.Int("capacity", false, 1, kMaxEndpointCapacity);
    auto max_prefill = e.Int("max_prefill", false, 0, kMaxEndpointCapacity);
    auto burst = e.Int("burst", false, 0, kMaxEndpointCapacity);
    Status read = e.Finish();
    if (!read.has_value()) {
      Error err = std::move(read).error();
      err.message = where + ": " + err.message;
      return err;
    }
    ATRIUM_RETURN_IF_ERROR(ValidateEndpointUrl(*url));
    if (!seen.insert(*url).second) {
      return Error::InvalidArgument("endpoint URL '" + *url + "' is listed twice");
    }
    endpoint.url = *url;
    if (capacity) endpoint.capacity = *capacity;
    if (max_prefill) endpoint.max_prefill = *max_prefill;
    if (burst) endpoint.burst = *burst;
    out.push_back(std::move(endpoint));
  }
  return std::optional<std::vector<DeploymentEndpoint>>(std::move(out));
}

}  // namespace atrium::api
