#include "scheduler/shape_memo.h"

#include <tuple>

namespace atrium::sched {
namespace {

// What the quota reads (see SameQuotaKey), then the rest of the shape.
auto QuotaKeyOf(const AllocationRequest& r) {
  return std::tie(r.tenant, r.project, r.kind, r.priority, r.model, r.gpus, r.nodes, r.mig_profile,
                  r.milli);
}

auto ShapeOf(const AllocationRequest& r) {
  return std::tuple_cat(QuotaKeyOf(r), std::tie(r.mem_cap_mib, r.cpu_milli, r.memory_mib, r.pool,
                                                r.region, r.requirements));
}

}  // namespace

bool ShapeLess::operator()(const AllocationRequest& x, const AllocationRequest& y) const {
  return ShapeOf(x) < ShapeOf(y);
}

bool SameQuotaKey(const AllocationRequest& x, const AllocationRequest& y) {
  return QuotaKeyOf(x) == QuotaKeyOf(y);
}

}  // namespace atrium::sched
