// Input rules for the gateway's control-plane objects (deployments,
// entitlements), shared by their handlers. Pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/json_reader.h"
#include "common/result.h"
#include "model/gateway_records.h"

namespace atrium::api {

inline constexpr size_t kMaxModelNameBytes = 200;
inline constexpr size_t kMaxEndpoints = 64;
inline constexpr int64_t kMaxEndpointCapacity = 100'000;
inline constexpr size_t kMaxEndpointUrlBytes = 2048;

// Printable ASCII (0x21..0x7e, and ' ' when allowed).
bool IsPrintableAscii(std::string_view s, bool allow_space);

// A model name as clients send it in "model": 1..200 printable ASCII
// characters, no spaces and no '/', since the name is one path segment of
// /tenants/{tenant_id}/entitlements/{model} (serve Hugging Face style names
// under another name, e.g. vLLM's --served-model-name). `what` names the
// field in the message.
Status ValidateModelName(std::string_view name, const std::string& what);

// An upstream base URL: http:// or https://, a host (name, IPv4 or
// [IPv6]) with an optional port 1..65535, an optional path; no userinfo, no
// query, no fragment, no spaces.
Status ValidateEndpointUrl(std::string_view url);

// The "endpoints" field of a deployment body: 1..64 objects
// {"url": ..., "capacity": 1..100000 (default 8), "max_prefill": 0..100000
// (default 0: no limit), "burst": 0..100000 (default 0)}, URLs valid and
// distinct.
// Marks the field as known to `reader`. nullopt when absent and not
// required.
Result<std::optional<std::vector<DeploymentEndpoint>>> EndpointsOf(const Json& body,
                                                                   JsonObjectReader& reader,
                                                                   bool required);

}  // namespace atrium::api
