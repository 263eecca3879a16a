#include "scheduler/shape_memo.h"

#include <tuple>

namespace atrium::sched {
namespace {

auto ShapeOf(const AllocationRequest& r) {
  return std::tie(r.tenant, r.project, r.kind, r.priority, r.model, r.gpus, r.nodes, r.mig_profile,
                  r.milli, r.mem_cap_mib, r.cpu_milli, r.memory_mib, r.pool, r.region);
}

}  // namespace

bool ShapeMemo::ShapeLess::operator()(const AllocationRequest& x,
                                      const AllocationRequest& y) const {
  return ShapeOf(x) < ShapeOf(y);
}

bool ShapeMemo::KnownNotToFit(const AllocationRequest& request, uint64_t generation) const {
  return generation == generation_ && failed_.contains(request);
}

void ShapeMemo::NoteNoFit(const AllocationRequest& request, uint64_t generation) {
  if (generation != generation_) {
    failed_.clear();
    generation_ = generation;
  }
  AllocationRequest shape = request;
  shape.id.clear();
  failed_.insert(std::move(shape));
}

}  // namespace atrium::sched
