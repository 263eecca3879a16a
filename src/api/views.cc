#include "api/views.h"

#include "audit/chain.h"
#include "common/clock.h"

namespace atrium::api {

Json TenantView(const Tenant& t) {
  return {{"id", t.id},
          {"name", t.name},
          {"display_name", t.display_name},
          {"tier", t.tier},
          {"regions", t.regions},
          {"weight", t.weight},
          {"labels", t.labels},
          {"state", t.state},
          {"created_at", FormatTimestamp(t.created_at)},
          {"updated_at", FormatTimestamp(t.updated_at)}};
}

Json UserView(const User& u) {
  return {{"id", u.id},
          {"tenant_id", u.tenant_id.empty() ? Json(nullptr) : Json(u.tenant_id)},
          {"username", u.username},
          {"display_name", u.display_name},
          {"email", u.email},
          {"role", u.role},
          {"kind", u.kind},
          {"state", u.state},
          {"created_at", FormatTimestamp(u.created_at)},
          {"updated_at", FormatTimestamp(u.updated_at)}};
}

Json ApiKeyView(const ApiKey& k, int64_t now_ms) {
  std::string state = "active";
  if (k.revoked_at != 0) {
    state = "revoked";
  } else if (k.expires_at != 0 && now_ms >= k.expires_at) {
    state = "expired";
  }
  return {{"id", k.id},
          {"tenant_id", k.tenant_id.empty() ? Json(nullptr) : Json(k.tenant_id)},
          {"owner_user_id", k.owner_user_id},
          {"name", k.name},
          {"role", k.role},
          {"scopes", k.scopes},
          {"prefix", "atr_" + k.id},
          {"state", state},
          {"created_at", FormatTimestamp(k.created_at)},
          {"expires_at", k.expires_at ? Json(FormatTimestamp(k.expires_at)) : Json(nullptr)},
          {"revoked_at", k.revoked_at ? Json(FormatTimestamp(k.revoked_at)) : Json(nullptr)}};
}

Json AuditView(const AuditRecord& a) {
  Json j = audit::ToJson(a);
  j["time_text"] = FormatTimestamp(a.time);
  return j;
}

}  // namespace atrium::api
