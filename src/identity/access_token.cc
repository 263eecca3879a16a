#include "identity/access_token.h"

#include <nlohmann/json.hpp>

#include "common/strings.h"
#include "crypto/crypto.h"

namespace atrium {
namespace {
using Json = nlohmann::json;

std::string SecretBytes(const SigningKey& k) {
  std::string raw;
  if (!crypto::HexDecode(k.secret, raw)) return k.secret;
  return raw;
}
}  // namespace

Result<std::string> SignAccessToken(const TokenClaims& c, const std::vector<SigningKey>& keys) {
  if (keys.empty()) return Error::Internal("no token signing key");
  const SigningKey& key = keys.front();
  Json header = {{"alg", "HS256"}, {"typ", "JWT"}, {"kid", key.id}};
  Json payload = {{"sub", c.subject},    {"tid", c.tenant_id}, {"role", c.role},
                  {"sid", c.session_id}, {"iat", c.issued_at}, {"exp", c.expires_at}};
  std::string signing_input =
      crypto::Base64UrlEncode(header.dump()) + "." + crypto::Base64UrlEncode(payload.dump());
  std::string sig = crypto::HmacSha256(SecretBytes(key), signing_input);
  return signing_input + "." + crypto::Base64UrlEncode(sig);
}

Result<TokenClaims> VerifyAccessToken(const std::string& token, const std::vector<SigningKey>& keys,
                                      int64_t now_seconds) {
  const auto invalid = [] { return Error::Unauthenticated("invalid access token"); };
  if (token.size() > 4096) return invalid();
  auto parts = SplitString(token, '.');
  if (parts.size() != 3) return invalid();
  std::string header_text, payload_text, sig;
  if (!crypto::Base64UrlDecode(parts[0], header_text) ||
      !crypto::Base64UrlDecode(parts[1], payload_text) || !crypto::Base64UrlDecode(parts[2], sig)) {
    return invalid();
  }
  Json header = Json::parse(header_text, nullptr, false);
  if (!header.is_object() || header.value("alg", "") != "HS256" || !header.contains("kid") ||
      !header["kid"].is_string()) {
    return invalid();
  }
  std::string kid = header["kid"].get<std::string>();
  const SigningKey* key = nullptr;
  for (const auto& k : keys) {
    if (k.id == kid) key = &k;
  }
  if (!key) return invalid();
  std::string signing_input = std::string(parts[0]) + "." + std::string(parts[1]);
  if (!crypto::ConstantTimeEquals(crypto::HmacSha256(SecretBytes(*key), signing_input), sig)) {
    return invalid();
  }
  Json p = Json::parse(payload_text, nullptr, false);
  if (!p.is_object()) return invalid();
  auto str = [&](const char* k, std::string& out) {
    auto it = p.find(k);
    if (it == p.end() || !it->is_string()) return false;
    out = it->get<std::string>();
    return true;
  };
  auto num = [&](const char* k, int64_t& out) {
    auto it = p.find(k);
    if (it == p.end() || !it->is_number_integer()) return false;
    out = it->get<int64_t>();
    return true;
  };
  TokenClaims c;
  if (!str("sub", c.subject) || !str("tid", c.tenant_id) || !str("role", c.role) ||
      !str("sid", c.session_id) || !num("iat", c.issued_at) || !num("exp", c.expires_at)) {
    return invalid();
  }
  if (now_seconds >= c.expires_at) return Error::Unauthenticated("access token expired");
  return c;
}

}  // namespace atrium
