// JSON shapes of the API's objects. Secrets and hashes never appear.
#pragma once

#include "common/json_reader.h"
#include "model/gateway_records.h"
#include "model/job_records.h"
#include "model/records.h"
#include "scheduling/codec.h"
#include "scheduling/inventory_report.h"
#include "store/queries.h"

namespace atrium::api {

Json TenantView(const Tenant& t);
Json UserView(const User& u);
Json ApiKeyView(const ApiKey& k, int64_t now_ms);
Json AuditView(const AuditRecord& a);
Json AllocationView(const AllocationRecord& a);
// with_env_values false: env names only (platform staff reading a tenant's job).
Json JobView(const JobRecord& j, bool with_env_values);
Json JobEventView(const JobEventRecord& e);
// The figures the scheduler enforces. A project row the tenant's quota
// clamps shows "over_committed": true and, under "requested", what the
// tenant admin set; a tenant row lists the projects its class clamps
// ("clamped_projects").
Json QuotaView(const scheduling::EffectiveQuota& q, int64_t used_milli);
// A project with its quota split (`quotas`: the tenant's rows, from
// scheduling::EffectiveQuotas; only the project's are shown) and the usage
// of each row, in `quotas` order.
Json ProjectView(const ProjectRecord& p, const std::vector<scheduling::EffectiveQuota>& quotas,
                 const std::vector<int64_t>& used);
// with_gpus: the GPUs and who holds what on them (GET one); lists show the
// allocation ids on the node instead.
Json NodeView(const scheduling::NodeInfo& n, bool with_gpus);
Json GpuView(const scheduling::GpuInfo& g);
Json CapacityView(const scheduling::CapacityRow& c);
// with_endpoints false: the endpoint URLs are left out (null), as for a
// tenant looking at a shared deployment, whose servers are the operator's.
Json DeploymentView(const DeploymentRecord& d, bool with_endpoints);
Json DeploymentReplicaView(const DeploymentReplicaRecord& r);
Json EntitlementView(const EntitlementRecord& e);
// A stored limit row, or (key_id "" with updated_at 0) the tenant's
// implicit "no limits" row.
Json GatewayLimitView(const GatewayLimitRecord& l);
// with_endpoint false: the upstream URL is left out (tenants).
Json UsageView(const UsageRecord& u, bool with_endpoint);
Json UsageTotalsView(const UsageTotals& t);
Json RefusalTotalsView(const RefusalTotals& t);

template <typename T, typename ViewFn>
Json PageView(const Page<T>& page, ViewFn view) {
  Json items = Json::array();
  for (const auto& item : page.items) items.push_back(view(item));
  Json out = {{"items", items}};
  out["next_cursor"] = page.next_cursor.empty() ? Json(nullptr) : Json(page.next_cursor);
  return out;
}

}  // namespace atrium::api
