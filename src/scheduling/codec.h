// Conversions between the store's plain rows (model/records.h) and the pure
// scheduler's values (capacity::Fleet, sched::Allocation, sched::TenantPolicy).
// Pure functions; every one round-trips: To(From(x)) == x for what the store
// keeps.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "capacity/inventory.h"
#include "common/result.h"
#include "model/records.h"
#include "scheduler/allocation.h"
#include "scheduler/tenant_policy.h"

namespace atrium::scheduling {

FleetRecord FleetToRecord(const capacity::Fleet& fleet, const std::string& spec);
// InvalidArgument when the rows do not make a valid fleet (ValidateFleet).
Result<capacity::Fleet> FleetFromRecord(const FleetRecord& record);
// The flags (node cordon/drain, GPU health/cordon/MIG) of one node.
FleetNodeRecord NodeFlagsOf(const capacity::Node& node);
// `given` (a fleet found at start) with what the operator set on `stored`
// for the same nodes and GPUs (by name and index): node cordon and drain,
// GPU cordon, and a GPU marked unhealthy stays unhealthy (a failed scrub or
// an operator's mark is cleared only by an operator, not by a restart).
FleetRecord WithStoredOperatorFlags(FleetRecord given, const FleetRecord& stored);

// The record of a held allocation, with who asked (created_by) and the last
// decision's words (reason); state is the scheduler's.
AllocationRecord AllocationToRecord(const sched::Allocation& a, const std::string& created_by,
                                    int64_t now_ms);
// InvalidArgument for a kind, priority or state the scheduler does not know
// (an ended allocation is not something Restore takes).
Result<sched::Allocation> AllocationFromRecord(const AllocationRecord& record);

// A scrub hold as stored, and back. InvalidArgument for a kind or state the
// scheduler does not know, or a GPU index out of range.
GpuScrubRecord ScrubToRecord(const sched::ScrubHold& hold);
Result<sched::ScrubHold> ScrubFromRecord(const GpuScrubRecord& record);

// The kind as the API names it: "gang" for kind gpu over more than one node.
std::string ApiKindOf(const AllocationRecord& record);

// A tenant's scheduling policy from its row and its quota and project rows
// (rows of other tenants are ignored). Suspended unless the tenant is
// active. InvalidArgument for an unknown tier or a quota row naming an
// unknown model or kind.
Result<sched::TenantPolicy> PolicyFromRecords(const Tenant& tenant,
                                              const std::vector<QuotaRecord>& quotas,
                                              const std::vector<ProjectRecord>& projects);

// A quota row with the figures the scheduler enforces. A tenant admin's
// project row that the tenant's quota no longer covers (the operator lowered
// or removed it) is clamped (sched::ClampProjectSplit): `row` holds the
// effective guarantee and limit, `over_committed` is set and `requested_*`
// keep what the admin set. A tenant row lists, in `clamped_projects`, the
// projects its class clamps.
struct EffectiveQuota {
  QuotaRecord row;
  bool over_committed = false;
  int64_t requested_guarantee_milli = 0;
  int64_t requested_limit_milli = 0;
  std::vector<std::string> clamped_projects;  // tenant rows only
};
// One tenant's rows (ListQuotas), in their order. Rows naming an unknown
// class are passed through unchanged.
std::vector<EffectiveQuota> EffectiveQuotas(const std::vector<QuotaRecord>& rows);

}  // namespace atrium::scheduling
