// Weighted dominant-resource fair share (DRF, Ghodsi et al., NSDI 2011) over
// GPU models: a tenant's share of model m is the milli-GPU of m it holds
// divided by the fleet's milli-GPU of m; its dominant share is the largest
// of those, divided by its weight. The queue serves the tenant with the
// smallest weighted dominant share first, so capacity above guarantees is
// split in proportion to weights.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace atrium::sched {

// usage: model → milli-GPU held; capacity: model → milli-GPU in the fleet.
// Models without capacity are ignored. weight > 0.
double WeightedDominantShare(const std::map<std::string, int64_t>& usage,
                             const std::map<std::string, int64_t>& capacity, double weight);

}  // namespace atrium::sched
