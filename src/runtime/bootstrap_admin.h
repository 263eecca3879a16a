// The platform's first administrator, created outside the API (`atrium
// bootstrap-admin`, `atrium dev`). What the API would audit is audited here
// too, in the platform chain: the account's creation and every key it is
// given or loses. A key that could not be recorded is revoked again.
#pragma once

#include <string>

#include "common/clock.h"
#include "common/result.h"
#include "identity/identity_service.h"
#include "store/store.h"

namespace atrium {

inline constexpr char kBootstrapAdminName[] = "bootstrap-admin";

struct BootstrapAdminRequest {
  // Replace the account's keys: a new one is created and every older active
  // one revoked. Without it, an account that still has an active key is
  // refused, so a second run never adds a key silently.
  bool rotate = false;
  // What ran it, recorded as the audit records' source ("cli:bootstrap-admin").
  std::string source;
};

struct BootstrapAdminResult {
  std::string key_text;  // shown once
  std::string key_id;
  bool created_account = false;
  int revoked_keys = 0;
};

// Errors: kAlreadyExists when the account has an active key and !rotate
// (nothing changes); store errors.
Result<BootstrapAdminResult> BootstrapPlatformAdmin(Store& store, IdentityService& identity,
                                                    const Clock& clock,
                                                    const BootstrapAdminRequest& request);

}  // namespace atrium
