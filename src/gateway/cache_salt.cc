#include "gateway/cache_salt.h"

#include "crypto/crypto.h"

namespace atrium::gateway {

std::string CacheSaltKey(std::string_view platform_key) {
  return crypto::HmacSha256(platform_key, "atrium gateway: prefix-cache salt key v1");
}

std::string CacheSalt(std::string_view salt_key, std::string_view tenant_id) {
  return crypto::Base64UrlEncode(crypto::HmacSha256(salt_key, tenant_id));
}

}  // namespace atrium::gateway
