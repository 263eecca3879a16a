#include "scheduler/request_json.h"

#include "capacity/gpu_catalog.h"
#include "common/strings.h"

namespace atrium::sched {
namespace {

constexpr int64_t kMaxCpuMilli = 1'000'000'000;
constexpr int64_t kMaxMemoryMib = int64_t{1} << 40;

// A field the kind does not take: refused rather than ignored.
Status NotFor(const std::string& field, const std::string& kind, bool present) {
  if (!present) return OkStatus();
  return Error::InvalidArgument("field '" + field + "' does not apply to kind " + kind);
}

}  // namespace

AllocationFields ReadAllocationFields(JsonObjectReader& r, bool with_project_and_priority) {
  AllocationFields f;
  f.kind = r.String("kind", true, 16);
  f.model = r.String("model", true, 64);
  if (with_project_and_priority) {
    f.priority = r.String("priority", false, 16);
    f.project = r.String("project", false, 63);
  }
  f.gpus = r.Int("gpus", false, 1, kMaxGpusPerRequestNode);
  f.nodes = r.Int("nodes", false, 1, kMaxGangNodes);
  f.mig_profile = r.String("mig_profile", false, 32);
  f.milli = r.Int("milli", false, 1, 999);
  f.gpu_memory_mib = r.Int("gpu_memory_mib", false, 1, kMaxMemoryMib);
  f.cpu_milli = r.Int("cpu_milli", false, 0, kMaxCpuMilli);
  f.memory_mib = r.Int("memory_mib", false, 0, kMaxMemoryMib);
  f.pool = r.String("pool", false, 63);
  f.region = r.String("region", false, 63);
  return f;
}

Result<AllocationRequest> AllocationRequestOf(const AllocationFields& f) {
  if (!f.kind || !f.model) return Error::InvalidArgument("'kind' and 'model' are required");
  AllocationRequest q;
  const capacity::GpuModel* m = capacity::FindGpuModel(*f.model);
  if (m == nullptr) {
    return Error::InvalidArgument("unknown GPU model '" + *f.model +
                                  "' (known: " + capacity::KnownGpuModelNames() + ")");
  }
  q.model = m->name;
  if (f.priority) {
    ATRIUM_ASSIGN_OR_RETURN(q.priority, ParsePriority(*f.priority));
  }
  if (f.project) {
    if (!IsValidSlug(*f.project)) return Error::InvalidArgument("project is not a valid name");
    q.project = *f.project;
  }
  const std::string& k = *f.kind;
  if (k == "gpu" || k == "gang") {
    q.kind = AllocationKind::kGpu;
    q.gpus = static_cast<int32_t>(f.gpus.value_or(1));
    if (k == "gpu") {
      if (f.nodes && *f.nodes != 1) {
        return Error::InvalidArgument("kind gpu runs on one node; use kind gang for 'nodes' > 1");
      }
    } else {
      if (!f.nodes || *f.nodes < 2) {
        return Error::InvalidArgument("kind gang needs 'nodes' of at least 2");
      }
      q.nodes = static_cast<int32_t>(*f.nodes);
    }
    ATRIUM_RETURN_IF_ERROR(NotFor("mig_profile", k, f.mig_profile.has_value()));
    ATRIUM_RETURN_IF_ERROR(NotFor("milli", k, f.milli.has_value()));
    ATRIUM_RETURN_IF_ERROR(NotFor("gpu_memory_mib", k, f.gpu_memory_mib.has_value()));
  } else if (k == "mig") {
    q.kind = AllocationKind::kMig;
    if (!f.mig_profile) return Error::InvalidArgument("kind mig needs 'mig_profile'");
    ATRIUM_ASSIGN_OR_RETURN(const capacity::MigProfile* profile,
                            capacity::FindMigProfile(*m, *f.mig_profile));
    q.mig_profile = profile->name;
    ATRIUM_RETURN_IF_ERROR(NotFor("gpus", k, f.gpus.has_value()));
    ATRIUM_RETURN_IF_ERROR(NotFor("nodes", k, f.nodes.has_value()));
    ATRIUM_RETURN_IF_ERROR(NotFor("milli", k, f.milli.has_value()));
    ATRIUM_RETURN_IF_ERROR(NotFor("gpu_memory_mib", k, f.gpu_memory_mib.has_value()));
  } else if (k == "share") {
    q.kind = AllocationKind::kShare;
    if (!f.milli) return Error::InvalidArgument("kind share needs 'milli' (1..999 of one GPU)");
    if (!f.gpu_memory_mib) return Error::InvalidArgument("kind share needs 'gpu_memory_mib'");
    q.milli = static_cast<int32_t>(*f.milli);
    q.mem_cap_mib = *f.gpu_memory_mib;
    ATRIUM_RETURN_IF_ERROR(NotFor("gpus", k, f.gpus.has_value()));
    ATRIUM_RETURN_IF_ERROR(NotFor("nodes", k, f.nodes.has_value()));
    ATRIUM_RETURN_IF_ERROR(NotFor("mig_profile", k, f.mig_profile.has_value()));
  } else if (k == "node") {
    q.kind = AllocationKind::kNode;
    // The node's GPU count; 0 lets the scheduling service pick the model's node size.
    q.gpus = static_cast<int32_t>(f.gpus.value_or(0));
    ATRIUM_RETURN_IF_ERROR(NotFor("nodes", k, f.nodes.has_value()));
    ATRIUM_RETURN_IF_ERROR(NotFor("mig_profile", k, f.mig_profile.has_value()));
    ATRIUM_RETURN_IF_ERROR(NotFor("milli", k, f.milli.has_value()));
    ATRIUM_RETURN_IF_ERROR(NotFor("gpu_memory_mib", k, f.gpu_memory_mib.has_value()));
  } else {
    return Error::InvalidArgument("kind must be one of gpu, gang, mig, share, node");
  }
  q.cpu_milli = f.cpu_milli.value_or(0);
  q.memory_mib = f.memory_mib.value_or(0);
  q.pool = f.pool.value_or("");
  q.region = f.region.value_or("");
  return q;
}

Json AllocationRequestJson(const AllocationRequest& q, bool with_project_and_priority) {
  Json j = Json::object();
  j["model"] = q.model;
  switch (q.kind) {
    case AllocationKind::kGpu:
      j["kind"] = q.nodes > 1 ? "gang" : "gpu";
      j["gpus"] = q.gpus;
      if (q.nodes > 1) j["nodes"] = q.nodes;
      break;
    case AllocationKind::kMig:
      j["kind"] = "mig";
      j["mig_profile"] = q.mig_profile;
      break;
    case AllocationKind::kShare:
      j["kind"] = "share";
      j["milli"] = q.milli;
      j["gpu_memory_mib"] = q.mem_cap_mib;
      break;
    case AllocationKind::kNode:
      j["kind"] = "node";
      if (q.gpus > 0) j["gpus"] = q.gpus;
      break;
  }
  if (q.cpu_milli > 0) j["cpu_milli"] = q.cpu_milli;
  if (q.memory_mib > 0) j["memory_mib"] = q.memory_mib;
  if (!q.pool.empty()) j["pool"] = q.pool;
  if (!q.region.empty()) j["region"] = q.region;
  if (with_project_and_priority) {
    j["priority"] = std::string(PriorityName(q.priority));
    if (!q.project.empty()) j["project"] = q.project;
  }
  return j;
}

}  // namespace atrium::sched
