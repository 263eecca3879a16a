#include "scheduler/admission.h"

#include "capacity/gpu_catalog.h"
#include "capacity/software_version.h"

namespace atrium::sched {
namespace {

std::string ShapeRefusal(const AllocationRequest& r, const capacity::GpuModel& model) {
  if (r.cpu_milli < 0 || r.memory_mib < 0) return "negative host CPU or memory";
  switch (r.kind) {
    case AllocationKind::kGpu:
      if (r.gpus < 1 || r.gpus > kMaxGpusPerRequestNode) {
        return "asks for " + std::to_string(r.gpus) + " GPUs per node; 1 to " +
               std::to_string(kMaxGpusPerRequestNode) + " are allowed";
      }
      if (r.nodes < 1 || r.nodes > kMaxGangNodes) {
        return "asks for a gang of " + std::to_string(r.nodes) + " nodes; 1 to " +
               std::to_string(kMaxGangNodes) + " are allowed";
      }
      return {};
    case AllocationKind::kShare:
      if (r.milli < 1 || r.milli >= kMilliPerGpu) {
        return "a share is 1 to 999 milli-GPU, not " + std::to_string(r.milli);
      }
      if (r.mem_cap_mib < 1 || r.mem_cap_mib > model.memory_mib) {
        return "a share's GPU memory cap must be 1 to " + std::to_string(model.memory_mib) +
               " MiB on " + model.name + ", not " + std::to_string(r.mem_cap_mib);
      }
      return {};
    case AllocationKind::kMig: {
      if (!model.mig_capable) return model.name + " does not support MIG";
      auto p = capacity::FindMigProfile(model, r.mig_profile);
      if (!p) return "unknown MIG profile: " + p.error().message;
      return {};
    }
    case AllocationKind::kNode:
      if (r.gpus < 1 || r.gpus > kMaxGpusPerNode) {
        return "a node lease names the node's GPU count, not " + std::to_string(r.gpus);
      }
      return {};
  }
  return {};
}

// Malformed requirements (the template service validates them first; this
// guards every other caller), or a GPU model the requirements do not allow.
std::string RequirementsRefusal(AllocationRequest& r) {
  NodeRequirements& q = r.requirements;
  if (!q.min_driver_version.empty()) {
    auto v = capacity::SoftwareVersion::Parse(q.min_driver_version, "minimum driver version");
    if (!v) return v.error().message;
  }
  if (!q.min_cuda_version.empty()) {
    auto v = capacity::SoftwareVersion::Parse(q.min_cuda_version, "minimum CUDA version");
    if (!v) return v.error().message;
  }
  if (q.gpu_models.empty()) return {};
  if (q.gpu_models.size() > capacity::AllGpuModels().size()) {
    return "the requirements name " + std::to_string(q.gpu_models.size()) +
           " GPU models; the catalog has " + std::to_string(capacity::AllGpuModels().size());
  }
  std::string allowed;
  bool found = false;
  for (std::string& name : q.gpu_models) {
    const capacity::GpuModel* m = capacity::FindGpuModel(name);
    if (m == nullptr) return "the requirements name an unknown GPU model \"" + name + "\"";
    name = m->name;
    found = found || name == r.model;
    allowed += (allowed.empty() ? "" : ", ") + name;
  }
  if (!found) return "the requirements allow GPU models " + allowed + ", not " + r.model;
  return {};
}

}  // namespace

std::string AdmissionRefusal(AllocationRequest& request, const TenantPolicy* tenant,
                             const ClusterState& state, const TenantTable& tenants,
                             const QuotaLedger& ledger) {
  if (tenant == nullptr) return "unknown tenant " + request.tenant;
  if (tenant->suspended) return "tenant " + tenant->id + " is suspended";
  const capacity::GpuModel* model = capacity::FindGpuModel(request.model);
  if (model == nullptr) {
    return "unknown GPU model \"" + request.model + "\" (known: " + capacity::KnownGpuModelNames() +
           ")";
  }
  request.model = model->name;
  if (std::string s = ShapeRefusal(request, *model); !s.empty()) return s;
  if (!request.requirements.Empty()) {
    if (std::string s = RequirementsRefusal(request); !s.empty()) return s;
  }
  const ResourceClass rc{model->name, request.kind};
  const QuotaCheck q = CheckQuota(*tenant, ledger, request, rc, ChargeMilli(request, *model));
  if (q.verdict == QuotaVerdict::kNeverFits) return q.reason;

  return NodeScopeRefusal(request, *tenant, *model, state, tenants);
}

std::string NodeScopeRefusal(const AllocationRequest& request, const TenantPolicy& tenant,
                             const capacity::GpuModel& model, const ClusterState& state,
                             const TenantTable& tenants) {
  // Is there hardware the tenant may ever use for it?
  PlacementContext ctx{state, tenants, tenant, request, model};
  int in_scope = 0;
  std::string first_reason;
  bool first_outside = false;
  // Nodes refused only for the requirements: when they are what is short,
  // the refusal says what the fleet lacks (RequirementsShortfall).
  std::vector<int32_t> refused_for_requirements;
  AllocationRequest without_requirements = request;
  without_requirements.requirements = {};
  const PlacementContext without_ctx{state, tenants, tenant, without_requirements, model};
  for (int32_t i = 0; i < state.node_count(); ++i) {
    std::string why = StaticNodeRejection(ctx, i);
    if (!why.empty() && !request.requirements.Empty() &&
        !RequirementRejection(request.requirements, state.node(i)).empty() &&
        StaticNodeRejection(without_ctx, i).empty()) {
      refused_for_requirements.push_back(i);
    }
    if (why.empty()) {
      ++in_scope;
    } else if (state.node(i).gpu_model == model.name) {
      // The request's own pool or region narrows the fleet; a reason from a
      // node inside them says more than "not in the requested pool".
      const bool outside = why.starts_with("not in the requested");
      if (first_reason.empty() || (first_outside && !outside)) {
        first_reason = why;
        first_outside = outside;
      }
    }
  }
  const bool gang = request.kind == AllocationKind::kGpu && request.nodes > 1;
  if (in_scope == 0 || (gang && in_scope < request.nodes)) {
    std::string what = model.name + " nodes";
    if (request.kind == AllocationKind::kGpu) {
      what = model.name + " nodes with " + std::to_string(request.gpus) + " GPUs";
    }
    if (request.kind == AllocationKind::kNode) {
      what = model.name + " nodes of exactly " + std::to_string(request.gpus) + " GPUs";
    }
    std::string out = gang ? "the gang needs " + std::to_string(request.nodes) + " " + what +
                                 " the tenant may use; the fleet has " + std::to_string(in_scope)
                           : "no " + what + " that the tenant may use";
    std::string scope;
    if (!tenant.regions.empty()) {
      scope += " regions:";
      for (const auto& r : tenant.regions) scope += " " + r;
    }
    if (!tenant.pools.empty()) {
      scope += " pools:";
      for (const auto& p : tenant.pools) scope += " " + p;
    }
    if (!scope.empty()) out += " (tenant" + scope + ")";
    if (!refused_for_requirements.empty()) {
      // Hardware the tenant could use exists; the requirements rule it out.
      out += gang
                 ? " meeting the environment's requirements (the others: " +
                       RequirementRejection(request.requirements,
                                            state.node(refused_for_requirements.front())) +
                       ")"
                 : " meeting the environment's requirements: " +
                       RequirementsShortfall(request.requirements, state, refused_for_requirements);
      return out;
    }
    if (!first_reason.empty()) out += " (e.g. " + first_reason + ")";
    return out;
  }
  return {};
}

}  // namespace atrium::sched
