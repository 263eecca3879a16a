// Prefix-cache isolation between tenants. An engine that caches prompt
// prefixes (vLLM's automatic prefix caching) answers a prompt that begins
// like one it saw faster, and says so (cached_tokens): across tenants that
// is a timing side channel telling one tenant what another asked. vLLM keys
// its cache by the request's `cache_salt`, so the gateway sets it on every
// chat, completions and Responses request (WithCacheSalt in openai.h) to a value
// derived from a platform key and the tenant's id: a tenant's requests
// share their cache, no two tenants share one. A client's own cache_salt is
// replaced, never trusted. Pure.
#pragma once

#include <string>
#include <string_view>

namespace atrium::gateway {

// The key the salts come from: HMAC-SHA256(platform_key, a fixed label), so
// the salt key says nothing of the platform key (the signing-key file every
// server of a platform shares) and every gateway derives the same.
std::string CacheSaltKey(std::string_view platform_key);
// The tenant's salt: base64url of HMAC-SHA256(salt_key, tenant_id), 43
// characters.
std::string CacheSalt(std::string_view salt_key, std::string_view tenant_id);

}  // namespace atrium::gateway
