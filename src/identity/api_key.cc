#include "identity/api_key.h"

#include "crypto/crypto.h"

namespace atrium {
namespace {
constexpr size_t kIdLen = 12;
constexpr size_t kSecretLen = 32;
constexpr size_t kCheckLen = 6;
constexpr size_t kTotalLen = kApiKeyPrefix.size() + kIdLen + 1 + kSecretLen + kCheckLen;

std::string Checksum(std::string_view body) {
  return crypto::Base62Fixed(crypto::Crc32(body), kCheckLen);
}

bool IsBase62(std::string_view s) {
  for (char c : s) {
    bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (!ok) return false;
  }
  return true;
}
}  // namespace

GeneratedApiKey GenerateApiKey() {
  GeneratedApiKey k;
  k.key_id = crypto::RandomBase62(kIdLen);
  std::string secret = crypto::RandomBase62(kSecretLen);
  std::string body = std::string(kApiKeyPrefix) + k.key_id + "_" + secret;
  k.text = body + Checksum(body);
  k.secret_hash = HashApiKeySecret(secret);
  return k;
}

bool LooksLikeApiKey(std::string_view text) {
  return text.size() == kTotalLen && text.substr(0, kApiKeyPrefix.size()) == kApiKeyPrefix;
}

Result<ParsedApiKey> ParseApiKey(std::string_view text) {
  if (!LooksLikeApiKey(text)) return Error::Unauthenticated("malformed API key");
  std::string_view rest = text.substr(kApiKeyPrefix.size());
  std::string_view id = rest.substr(0, kIdLen);
  if (rest[kIdLen] != '_') return Error::Unauthenticated("malformed API key");
  std::string_view secret = rest.substr(kIdLen + 1, kSecretLen);
  std::string_view check = rest.substr(kIdLen + 1 + kSecretLen);
  if (!IsBase62(id) || !IsBase62(secret) || !IsBase62(check)) {
    return Error::Unauthenticated("malformed API key");
  }
  if (!crypto::ConstantTimeEquals(Checksum(text.substr(0, kTotalLen - kCheckLen)), check)) {
    return Error::Unauthenticated("malformed API key (bad checksum)");
  }
  return ParsedApiKey{std::string(id), std::string(secret)};
}

std::string HashApiKeySecret(std::string_view secret) { return crypto::Sha256Hex(secret); }

}  // namespace atrium
