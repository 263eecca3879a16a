// JSON shapes of the API's objects. Secrets and hashes never appear.
#pragma once

#include "common/json_reader.h"
#include "scheduling/inventory_report.h"
#include "store/records.h"

namespace atrium::api {

Json TenantView(const Tenant& t);
Json UserView(const User& u);
Json ApiKeyView(const ApiKey& k, int64_t now_ms);
Json AuditView(const AuditRecord& a);
Json AllocationView(const AllocationRecord& a);
Json QuotaView(const QuotaRecord& q, int64_t used_milli);
// A project with its quota split (`quotas` may hold other rows; only the
// project's are shown) and the usage of each row, in `quotas` order.
Json ProjectView(const ProjectRecord& p, const std::vector<QuotaRecord>& quotas,
                 const std::vector<int64_t>& used);
// with_gpus: the GPUs and who holds what on them (GET one); lists show the
// allocation ids on the node instead.
Json NodeView(const scheduling::NodeInfo& n, bool with_gpus);
Json GpuView(const scheduling::GpuInfo& g);
Json CapacityView(const scheduling::CapacityRow& c);

template <typename T, typename ViewFn>
Json PageView(const Page<T>& page, ViewFn view) {
  Json items = Json::array();
  for (const auto& item : page.items) items.push_back(view(item));
  Json out = {{"items", items}};
  out["next_cursor"] = page.next_cursor.empty() ? Json(nullptr) : Json(page.next_cursor);
  return out;
}

}  // namespace atrium::api
