// Short-lived signed access tokens (JWT, HS256, with "kid"). A keyset holds
// every signing key still trusted; the newest signs. Rotation adds a key and
// keeps the older ones verifying until tokens they signed have expired, so
// nobody is logged out by a rotation. Pure: the clock is a parameter.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "model/records.h"

namespace atrium {

struct TokenClaims {
  std::string subject;    // user id
  std::string tenant_id;  // "" for platform staff
  std::string role;
  std::string session_id;
  int64_t issued_at = 0;   // seconds
  int64_t expires_at = 0;  // seconds
};

// Signs with keys[0] (the newest). kInternal if there is no key.
Result<std::string> SignAccessToken(const TokenClaims& claims, const std::vector<SigningKey>& keys);

// Verifies signature (any key in `keys`, by kid) and expiry against
// now_seconds. kUnauthenticated on any failure.
Result<TokenClaims> VerifyAccessToken(const std::string& token, const std::vector<SigningKey>& keys,
                                      int64_t now_seconds);

}  // namespace atrium
