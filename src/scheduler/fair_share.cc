#include "scheduler/fair_share.h"

#include <algorithm>

namespace atrium::sched {

double WeightedDominantShare(const std::map<std::string, int64_t>& usage,
                             const std::map<std::string, int64_t>& capacity, double weight) {
  double dominant = 0;
  for (const auto& [model, used] : usage) {
    auto c = capacity.find(model);
    if (c == capacity.end() || c->second <= 0) continue;
    dominant = std::max(dominant, static_cast<double>(used) / static_cast<double>(c->second));
  }
  return dominant / weight;
}

}  // namespace atrium::sched
