// API key text: "atr_" + key id (12 base62) + "_" + secret (32 base62) +
// checksum (6 base62 of CRC-32 over everything before it). The prefix and
// checksum let secret scanners recognise a leaked Atrium key offline without
// false positives; only the SHA-256 of the secret is ever stored. Secrets are
// 190 bits of randomness, so a fast hash is as safe as a slow one here and
// keeps verification cheap on the gateway's hot path.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"

namespace atrium {

inline constexpr std::string_view kApiKeyPrefix = "atr_";

struct GeneratedApiKey {
  std::string text;  // shown to the user once
  std::string key_id;
  std::string secret_hash;
};

struct ParsedApiKey {
  std::string key_id;
  std::string secret;
};

GeneratedApiKey GenerateApiKey();
// Checks shape and checksum; kUnauthenticated on anything malformed.
Result<ParsedApiKey> ParseApiKey(std::string_view text);
bool LooksLikeApiKey(std::string_view text);
std::string HashApiKeySecret(std::string_view secret);

}  // namespace atrium
