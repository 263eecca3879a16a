// The gateway's last good policy on disk: the rows of every snapshot the
// PolicyLoader builds are saved to a file (written to a temporary name,
// synced, renamed: a crash leaves the old file or the new one), so that a
// gateway started while the control plane's store cannot be read serves on
// the policy it last saw instead of nothing. The file holds what the
// snapshot holds (API key hashes, never secrets; tenants, deployments,
// entitlements, limits) and is readable by its owner only.
#pragma once

#include <string>

#include "common/result.h"
#include "model/gateway_records.h"

namespace atrium::gateway_server {

Status SavePolicyRows(const std::string& path, const GatewayPolicyRows& rows, int64_t now_ms);

struct CachedPolicy {
  GatewayPolicyRows rows;
  int64_t saved_at = 0;  // ms since epoch
};
// kNotFound when there is no file; kInvalidArgument when it cannot be read
// as one SavePolicyRows wrote.
Result<CachedPolicy> LoadPolicyRows(const std::string& path);

}  // namespace atrium::gateway_server
