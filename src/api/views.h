// JSON shapes of the API's objects. Secrets and hashes never appear.
#pragma once

#include "common/json_reader.h"
#include "store/records.h"

namespace atrium::api {

Json TenantView(const Tenant& t);
Json UserView(const User& u);
Json ApiKeyView(const ApiKey& k, int64_t now_ms);
Json AuditView(const AuditRecord& a);

template <typename T, typename ViewFn>
Json PageView(const Page<T>& page, ViewFn view) {
  Json items = Json::array();
  for (const auto& item : page.items) items.push_back(view(item));
  Json out = {{"items", items}};
  out["next_cursor"] = page.next_cursor.empty() ? Json(nullptr) : Json(page.next_cursor);
  return out;
}

}  // namespace atrium::api
