#include "scheduler/allocation.h"

#include <array>
#include <utility>

#include "capacity/gpu_catalog.h"
#include "capacity/mig.h"

namespace atrium::sched {
namespace {

template <typename E, size_t N>
Result<E> ParseName(std::string_view name,
                    const std::array<std::pair<std::string_view, E>, N>& table,
                    std::string_view what) {
  std::string known;
  for (const auto& [n, e] : table) {
    if (n == name) return e;
    if (!known.empty()) known += ", ";
    known += n;
  }
  return Error::InvalidArgument("unknown " + std::string(what) + " \"" + std::string(name) +
                                "\" (known: " + known + ")");
}

constexpr std::array<std::pair<std::string_view, AllocationKind>, 4> kKinds{{
    {"gpu", AllocationKind::kGpu},
    {"mig", AllocationKind::kMig},
    {"share", AllocationKind::kShare},
    {"node", AllocationKind::kNode},
}};
constexpr std::array<std::pair<std::string_view, Priority>, 3> kPriorities{{
    {"interactive", Priority::kInteractive},
    {"batch", Priority::kBatch},
    {"preemptible", Priority::kPreemptible},
}};
constexpr std::array<std::pair<std::string_view, AllocationState>, 3> kStates{{
    {"pending", AllocationState::kPending},
    {"running", AllocationState::kRunning},
    {"preempting", AllocationState::kPreempting},
}};
constexpr std::array<std::pair<std::string_view, ScrubState>, 2> kScrubStates{{
    {"scrubbing", ScrubState::kScrubbing},
    {"failed", ScrubState::kFailed},
}};
constexpr std::array<std::pair<std::string_view, DecisionKind>, 3> kEndedStates{{
    {"released", DecisionKind::kReleased},
    {"preempted", DecisionKind::kPreempted},
    {"rejected", DecisionKind::kRejected},
}};

template <typename E, size_t N>
std::string_view NameOf(E e, const std::array<std::pair<std::string_view, E>, N>& table) {
  for (const auto& [n, v] : table) {
    if (v == e) return n;
  }
  return "?";
}

}  // namespace

std::string DescribeRequirements(const NodeRequirements& requirements) {
  std::string out;
  auto add = [&](const std::string& part) { out += (out.empty() ? "" : ", ") + part; };
  if (!requirements.min_driver_version.empty()) {
    add("driver >= " + requirements.min_driver_version);
  }
  if (!requirements.min_cuda_version.empty()) add("CUDA >= " + requirements.min_cuda_version);
  if (!requirements.gpu_models.empty()) {
    std::string models;
    for (const std::string& m : requirements.gpu_models) {
      models += (models.empty() ? "" : " or ") + m;
    }
    add((requirements.gpu_models.size() == 1 ? "GPU model " : "GPU models ") + models);
  }
  return out;
}

std::string_view KindName(AllocationKind kind) { return NameOf(kind, kKinds); }
std::string_view PriorityName(Priority priority) { return NameOf(priority, kPriorities); }
std::string_view StateName(AllocationState state) { return NameOf(state, kStates); }
Result<AllocationKind> ParseKind(std::string_view name) {
  return ParseName(name, kKinds, "allocation kind");
}
Result<Priority> ParsePriority(std::string_view name) {
  return ParseName(name, kPriorities, "priority class");
}
Result<AllocationState> ParseState(std::string_view name) {
  return ParseName(name, kStates, "allocation state");
}

std::string_view ScrubStateName(ScrubState state) { return NameOf(state, kScrubStates); }

std::string TenantReasonOf(std::string_view reason) {
  const std::string_view failed = kScrubFailed;
  if (reason.substr(0, failed.size()) == failed &&
      (reason.size() == failed.size() || reason[failed.size()] == ':')) {
    return std::string(failed);
  }
  return std::string(reason);
}
Result<ScrubState> ParseScrubState(std::string_view name) {
  return ParseName(name, kScrubStates, "scrub state");
}

std::vector<ScrubHold> ScrubHoldsOf(const Allocation& a, int64_t now_ms) {
  std::vector<ScrubHold> out;
  for (const NodePlacement& p : a.placement) {
    for (int g : p.gpus) {
      ScrubHold h;
      h.allocation = a.id();
      h.tenant = a.request.tenant;
      h.node = p.node;
      h.gpu = g;
      h.model = a.request.model;
      h.since_ms = now_ms;
      switch (a.request.kind) {
        case AllocationKind::kMig:
          h.kind = AllocationKind::kMig;
          h.mig_profile = a.request.mig_profile;
          h.mig_start = a.mig_start;
          break;
        case AllocationKind::kShare:
          h.kind = AllocationKind::kShare;
          h.milli = a.request.milli;
          h.mem_cap_mib = a.request.mem_cap_mib;
          break;
        default:  // whole GPUs, gangs and a lease's GPUs
          h.kind = AllocationKind::kGpu;
          break;
      }
      out.push_back(std::move(h));
    }
  }
  return out;
}

std::string DescribeScrub(const ScrubHold& hold) {
  return hold.node + " gpu " + std::to_string(hold.gpu) + " (" + hold.allocation + ")";
}

std::string ResourceClass::ToString() const { return model + "/" + std::string(KindName(kind)); }

Result<ResourceClass> ResourceClass::Parse(std::string_view text) {
  const size_t slash = text.rfind('/');
  if (slash == std::string_view::npos) {
    return Error::InvalidArgument("resource class \"" + std::string(text) +
                                  "\" is not MODEL/KIND (e.g. H100-80GB/gpu)");
  }
  const capacity::GpuModel* model = capacity::FindGpuModel(text.substr(0, slash));
  if (model == nullptr) {
    return Error::InvalidArgument("unknown GPU model \"" + std::string(text.substr(0, slash)) +
                                  "\" (known: " + capacity::KnownGpuModelNames() + ")");
  }
  auto kind = ParseKind(text.substr(slash + 1));
  if (!kind) return std::move(kind).error();
  return ResourceClass{model->name, *kind};
}

int32_t MigMilli(int compute_slices) { return compute_slices * 1000 / capacity::kMigComputeSlices; }

std::string_view DecisionKindName(DecisionKind kind) {
  switch (kind) {
    case DecisionKind::kQueued:
      return "queued";
    case DecisionKind::kPlaced:
      return "placed";
    case DecisionKind::kRejected:
      return "rejected";
    case DecisionKind::kPreemptionScheduled:
      return "preemption-scheduled";
    case DecisionKind::kPreemptionCancelled:
      return "preemption-cancelled";
    case DecisionKind::kPreempted:
      return "preempted";
    case DecisionKind::kReleased:
      return "released";
    case DecisionKind::kMoveRequested:
      return "move-requested";
  }
  return "?";
}

std::string_view EndedStateName(DecisionKind kind) {
  for (const auto& [name, ends] : kEndedStates) {
    if (ends == kind) return name;
  }
  return {};
}

const std::vector<std::string>& AllAllocationStateNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    out.reserve(kStates.size() + kEndedStates.size());
    for (const auto& [name, state] : kStates) out.emplace_back(name);
    for (const auto& [name, kind] : kEndedStates) out.emplace_back(name);
    return out;
  }();
  return names;
}

std::string DescribePlacement(const std::vector<NodePlacement>& placement) {
  std::string out;
  for (const NodePlacement& p : placement) {
    if (!out.empty()) out += "; ";
    out += p.node;
    if (p.gpus.empty()) continue;
    out += p.gpus.size() == 1 ? " gpu " : " gpus ";
    for (size_t i = 0; i < p.gpus.size(); ++i) {
      if (i > 0) out += ",";
      out += std::to_string(p.gpus[i]);
    }
  }
  return out;
}

std::string DecisionRecord::ToString() const {
  std::string out = std::string(DecisionKindName(kind)) + " " + allocation_id;
  if (!placement.empty()) out += " on " + DescribePlacement(placement);
  if (!mig_profile.empty() && mig_start >= 0) {
    out += " mig " + mig_profile + "@" + std::to_string(mig_start);
  }
  if (preempt_at_ms >= 0) out += " at " + std::to_string(preempt_at_ms);
  if (!reason.empty()) out += ": " + reason;
  return out;
}

}  // namespace atrium::sched
