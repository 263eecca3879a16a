#include "scheduler/placement.h"

#include <algorithm>

#include "capacity/mig.h"
#include "capacity/software_version.h"

namespace atrium::sched {
namespace {

IsolationTier TierOf(const TenantTable& tenants, std::string_view id) {
  auto it = tenants.find(id);
  // A tenant the scheduler no longer knows is treated as the strictest
  // sharing tier: nobody is co-located with its leftovers.
  return it == tenants.end() ? IsolationTier::kDedicatedGpu : it->second.tier;
}

bool MayJoinGpu(const PlacementContext& ctx, const GpuState& gs) {
  for (const GpuUse& u : gs.uses) {
    if (u.scrubbing) continue;  // nobody's work: room only
    if (!MayShareGpu(u.tenant, TierOf(ctx.tenants, u.tenant), ctx.tenant.id, ctx.tenant.tier)) {
      return false;
    }
  }
  return true;
}

uint64_t ModelMask(const PlacementContext& ctx) {
  const int32_t m = ModelIndex(ctx.model.name);
  return m >= 0 && m < 64 ? uint64_t{1} << m : 0;
}

Request EngineRequest(const PlacementContext& ctx) {
  Request r;
  r.cpu = ctx.request.cpu_milli;
  r.mem = ctx.request.memory_mib;
  r.model_mask = ModelMask(ctx);
  if (ctx.request.kind == AllocationKind::kShare) {
    r.num_gpu = 1;
    r.milli = ctx.request.milli;
  } else {
    r.num_gpu = ctx.request.kind == AllocationKind::kGpu ? ctx.request.gpus : 1;
    r.milli = kMilliPerGpu;
  }
  return r;
}

// The engine view with the GPUs this tenant's share may not use zeroed.
NodeState ShareView(const PlacementContext& ctx, int32_t i) {
  NodeState s = ctx.state.EngineView(i);
  const NodeRuntime& rt = ctx.state.runtime(i);
  for (int g = 0; g < s.gpu_count; ++g) {
    const GpuState& gs = rt.gpus[size_t(g)];
    if (s.gpu_free[size_t(g)] == 0) continue;
    const int64_t memory = ctx.state.node(i).gpus[size_t(g)].memory_mib;
    if (!MayJoinGpu(ctx, gs) || gs.used_memory_mib + ctx.request.mem_cap_mib > memory) {
      s.gpu_free[size_t(g)] = 0;
    }
  }
  return s;
}

// A GPU where a MIG instance of the request's profile can go, and its rank.
struct MigCandidate {
  int gpu = -1;
  int start = -1;
  bool in_mig_mode = false;
  bool holds_instances = false;
  int free_after = 0;  // compute slices left after placing
};

const capacity::MigProfile& ProfileOf(const PlacementContext& ctx) {
  return *ctx.model.FindMigProfile(ctx.request.mig_profile);
}

// Whether node i has the request's host CPU and memory free now.
bool HostRoom(const PlacementContext& ctx, int32_t i) {
  const NodeRuntime& rt = ctx.state.runtime(i);
  const capacity::Node& n = ctx.state.node(i);
  return rt.cpu_used + ctx.request.cpu_milli <= n.cpu_milli &&
         rt.memory_used + ctx.request.memory_mib <= n.memory_mib;
}

// Where an instance of the request's profile could go on node i, looking at
// its GPUs only (callers check HostRoom).
std::vector<MigCandidate> MigCandidates(const PlacementContext& ctx, int32_t i) {
  std::vector<MigCandidate> out;
  const NodeRuntime& rt = ctx.state.runtime(i);
  const capacity::MigProfile& profile = ProfileOf(ctx);
  for (size_t g = 0; g < rt.gpus.size(); ++g) {
    const GpuState& gs = rt.gpus[g];
    if (!ctx.state.GpuUsable(i, int(g)) || gs.whole) continue;
    if (!gs.mig) {
      if (!gs.uses.empty()) continue;  // shares: not switchable to MIG
      const capacity::MigLayout empty(ctx.model);
      if (auto s = capacity::ChooseStart(empty, profile)) {
        out.push_back(
            {int(g), *s, false, false, empty.free_compute_slices() - profile.compute_slices});
      }
      continue;
    }
    if (!MayJoinGpu(ctx, gs)) continue;
    if (auto s = capacity::ChooseStart(*gs.mig, profile)) {
      out.push_back({int(g), *s, true, !gs.mig->empty(),
                     gs.mig->free_compute_slices() - profile.compute_slices});
    }
  }
  return out;
}

bool HasFreshGpu(const std::vector<MigCandidate>& c) {
  return std::any_of(c.begin(), c.end(), [](const MigCandidate& m) { return !m.in_mig_mode; });
}

bool LeaseFits(const PlacementContext& ctx, int32_t i) {
  const NodeRuntime& rt = ctx.state.runtime(i);
  for (size_t g = 0; g < rt.gpus.size(); ++g) {
    if (!ctx.state.GpuUsable(i, int(g)) || !rt.gpus[g].uses.empty() || rt.gpus[g].mig) {
      return false;
    }
  }
  return rt.tenants.empty() && rt.cpu_used == 0 && rt.memory_used == 0;
}

// Node i has GPU room for the request's kind, its host CPU and memory aside
// (DiagnoseNoFit names which of the two is short).
bool GpuFit(const PlacementContext& ctx, int32_t i) {
  Request gpus_only = EngineRequest(ctx);
  gpus_only.cpu = 0;
  gpus_only.mem = 0;
  switch (ctx.request.kind) {
    case AllocationKind::kGpu:
      return Fits(ctx.state.EngineView(i), gpus_only);
    case AllocationKind::kShare:
      return Fits(ShareView(ctx, i), gpus_only);
    case AllocationKind::kMig:
      return !MigCandidates(ctx, i).empty();
    case AllocationKind::kNode:
      return LeaseFits(ctx, i);
  }
  return false;
}

// "host CPU: needs 24000 milli, 0 free" when node i lacks the request's host
// CPU or memory now, or empty.
std::string HostShortage(const PlacementContext& ctx, int32_t i) {
  const NodeRuntime& rt = ctx.state.runtime(i);
  const capacity::Node& n = ctx.state.node(i);
  const int64_t cpu_free = n.cpu_milli - rt.cpu_used;
  const int64_t memory_free = n.memory_mib - rt.memory_used;
  const bool cpu_short = ctx.request.cpu_milli > cpu_free;
  const bool memory_short = ctx.request.memory_mib > memory_free;
  const std::string cpu = std::to_string(ctx.request.cpu_milli) + " milli";
  const std::string memory = std::to_string(ctx.request.memory_mib) + " MiB";
  if (cpu_short && memory_short) {
    return "host CPU and memory: needs " + cpu + " and " + memory + ", " +
           std::to_string(cpu_free) + " milli and " + std::to_string(memory_free) + " MiB free";
  }
  if (cpu_short) return "host CPU: needs " + cpu + ", " + std::to_string(cpu_free) + " free";
  if (memory_short) {
    return "host memory: needs " + memory + ", " + std::to_string(memory_free) + " free";
  }
  return {};
}

// Fully free GPUs of node i, the tightest NVLink group first (see header).
std::vector<int> PickConnectedGpus(const PlacementContext& ctx, int32_t i, int count) {
  const NodeState view = ctx.state.EngineView(i);
  auto is_free = [&](int g) { return view.gpu_free[size_t(g)] == kMilliPerGpu; };
  const auto& groups = ctx.state.node(i).nvlink_groups;
  const std::vector<int>* best = nullptr;
  int best_free = 0;
  for (const auto& group : groups) {
    const int free = int(std::count_if(group.begin(), group.end(), is_free));
    if (free >= count && (best == nullptr || free < best_free)) {
      best = &group;
      best_free = free;
    }
  }
  std::vector<int> out;
  if (best != nullptr) {
    std::vector<int> members = *best;
    std::sort(members.begin(), members.end());
    for (int g : members) {
      if (is_free(g) && int(out.size()) < count) out.push_back(g);
    }
  } else {
    // No group holds them all: the fullest groups first, then ungrouped GPUs.
    std::vector<const std::vector<int>*> order;
    order.reserve(groups.size());
    for (const auto& group : groups) order.push_back(&group);
    std::stable_sort(order.begin(), order.end(), [&](const auto* a, const auto* b) {
      return std::count_if(a->begin(), a->end(), is_free) >
             std::count_if(b->begin(), b->end(), is_free);
    });
    std::vector<bool> taken(size_t(view.gpu_count), false);
    for (const auto* group : order) {
      std::vector<int> members = *group;
      std::sort(members.begin(), members.end());
      for (int g : members) {
        if (is_free(g) && int(out.size()) < count && !taken[size_t(g)]) {
          out.push_back(g);
          taken[size_t(g)] = true;
        }
      }
    }
    for (int g = 0; g < view.gpu_count; ++g) {
      if (is_free(g) && int(out.size()) < count && !taken[size_t(g)]) out.push_back(g);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool HasConnectedRoom(const PlacementContext& ctx, int32_t i, int count) {
  if (count <= 1) return true;
  const NodeState view = ctx.state.EngineView(i);
  for (const auto& group : ctx.state.node(i).nvlink_groups) {
    int free = 0;
    for (int g : group) free += view.gpu_free[size_t(g)] == kMilliPerGpu;
    if (free >= count) return true;
  }
  return false;
}

// The first node passing `filter` (engine-free search).
std::optional<int32_t> FirstNode(const PlacementContext& ctx, const NodeFilter& filter) {
  for (int32_t i = 0; i < ctx.state.node_count(); ++i) {
    if (filter(i)) return i;
  }
  return std::nullopt;
}

std::optional<int32_t> ChooseNode(const PlacementContext& ctx, Engine* engine,
                                  const Request& request, const NodeFilter& filter) {
  if (engine == nullptr) return FirstNode(ctx, filter);
  auto d = engine->Decide(request, &filter);
  if (!d) return std::nullopt;
  return d->node;
}

std::optional<Placement> PlaceWholeGpus(const PlacementContext& ctx, Engine* engine) {
  const Request r = EngineRequest(ctx);
  for (bool connected : {true, false}) {
    if (!connected && ctx.request.gpus <= 1) break;
    NodeFilter filter = [&](int32_t i) {
      return NodeRejection(ctx, i).empty() && Fits(ctx.state.EngineView(i), r) &&
             (!connected || HasConnectedRoom(ctx, i, ctx.request.gpus));
    };
    if (auto i = ChooseNode(ctx, engine, r, filter)) {
      return Placement{{{ctx.state.node(*i).name, PickConnectedGpus(ctx, *i, ctx.request.gpus)}}};
    }
  }
  return std::nullopt;
}

std::optional<Placement> PlaceGang(const PlacementContext& ctx, Engine* engine) {
  const Request r = EngineRequest(ctx);
  const int32_t n = ctx.state.node_count();
  std::vector<int32_t> candidates;
  for (int32_t i = 0; i < n; ++i) {
    if (NodeRejection(ctx, i).empty() && Fits(ctx.state.EngineView(i), r)) candidates.push_back(i);
  }
  const size_t want = size_t(ctx.request.nodes);
  if (candidates.size() < want) return std::nullopt;

  // Groups to try: racks, then pools, each ordered by how few candidates
  // they hold (tightest fit first), then the whole fleet.
  std::vector<std::vector<int32_t>> groups;
  auto add_groups = [&](auto key_of) {
    std::map<int32_t, std::vector<int32_t>> by_key;
    for (int32_t i : candidates) by_key[key_of(i)].push_back(i);
    std::vector<std::pair<int32_t, std::vector<int32_t>>> sorted(by_key.begin(), by_key.end());
    std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
      return a.second.size() < b.second.size();
    });
    for (auto& [key, members] : sorted) {
      if (members.size() >= want) groups.push_back(std::move(members));
    }
  };
  add_groups([&](int32_t i) { return ctx.state.rack_index(i); });
  const auto& pools = ctx.state.fleet().pools();
  add_groups([&](int32_t i) {
    for (size_t p = 0; p < pools.size(); ++p) {
      if (pools[p].name == ctx.state.node(i).pool) return int32_t(p);
    }
    return int32_t{-1};
  });
  groups.push_back(candidates);

  for (const auto& group : groups) {
    std::map<int32_t, int64_t> extra_rack, extra_site;
    std::vector<int32_t> chosen;
    while (chosen.size() < want) {
      NodeFilter filter = [&](int32_t i) {
        if (!std::binary_search(group.begin(), group.end(), i)) return false;
        if (std::find(chosen.begin(), chosen.end(), i) != chosen.end()) return false;
        const int32_t rack = ctx.state.rack_index(i), site = ctx.state.site_index(i);
        return NodeRejection(ctx, i, extra_rack[rack], extra_site[site]).empty() &&
               Fits(ctx.state.EngineView(i), r);
      };
      auto i = ChooseNode(ctx, engine, r, filter);
      if (!i) break;
      chosen.push_back(*i);
      const int64_t watts = RequestWattsPerNode(ctx, *i);
      extra_rack[ctx.state.rack_index(*i)] += watts;
      extra_site[ctx.state.site_index(*i)] += watts;
    }
    if (chosen.size() < want) continue;
    std::sort(chosen.begin(), chosen.end());
    Placement p;
    for (int32_t i : chosen) {
      p.nodes.push_back({ctx.state.node(i).name, PickConnectedGpus(ctx, i, ctx.request.gpus)});
    }
    return p;
  }
  return std::nullopt;
}

std::optional<Placement> PlaceShare(const PlacementContext& ctx, Engine* engine) {
  const Request r = EngineRequest(ctx);
  const int32_t n = ctx.state.node_count();
  std::vector<NodeState> views;
  views.reserve(size_t(n));
  for (int32_t i = 0; i < n; ++i) views.push_back(ShareView(ctx, i));
  NodeFilter filter = [&](int32_t i) {
    return NodeRejection(ctx, i).empty() && Fits(views[size_t(i)], r);
  };
  if (engine == nullptr) {
    auto i = FirstNode(ctx, filter);
    if (!i) return std::nullopt;
    const GpuPick pick = BestFitGpu(views[size_t(*i)], r);
    return Placement{{{ctx.state.node(*i).name, {int(pick.index[0])}}}};
  }
  // The tenant's view differs from the shared engine's, so a short-lived
  // engine with the same policy decides over it.
  Engine view_engine(views, {}, engine->policy(), /*seed=*/1);
  auto d = view_engine.Decide(r, &filter);
  if (!d || d->gpus.count != 1) return std::nullopt;
  return Placement{{{ctx.state.node(d->node).name, {int(d->gpus.index[0])}}}};
}

std::optional<Placement> PlaceMig(const PlacementContext& ctx, Engine* engine) {
  // GPUs already in MIG mode first.
  std::optional<std::pair<int32_t, MigCandidate>> best;
  auto better = [](const MigCandidate& a, const MigCandidate& b) {
    if (a.holds_instances != b.holds_instances) return a.holds_instances;
    return a.free_after < b.free_after;
  };
  for (int32_t i = 0; i < ctx.state.node_count(); ++i) {
    if (!NodeRejection(ctx, i).empty() || !HostRoom(ctx, i)) continue;
    for (const MigCandidate& c : MigCandidates(ctx, i)) {
      if (!c.in_mig_mode) continue;
      if (!best || better(c, best->second)) best = {i, c};
    }
  }
  if (best) {
    return Placement{{{ctx.state.node(best->first).name, {best->second.gpu}}}, best->second.start};
  }
  // Then a whole free GPU switched to MIG, on the node the engine prefers for
  // one whole GPU.
  NodeFilter filter = [&](int32_t i) {
    return NodeRejection(ctx, i).empty() && HostRoom(ctx, i) && HasFreshGpu(MigCandidates(ctx, i));
  };
  const Request r = EngineRequest(ctx);
  auto i = ChooseNode(ctx, engine, r, filter);
  if (!i) return std::nullopt;
  for (const MigCandidate& c : MigCandidates(ctx, *i)) {
    if (!c.in_mig_mode) return Placement{{{ctx.state.node(*i).name, {c.gpu}}}, c.start};
  }
  return std::nullopt;
}

std::optional<Placement> PlaceLease(const PlacementContext& ctx) {
  for (int32_t i = 0; i < ctx.state.node_count(); ++i) {
    if (!NodeRejection(ctx, i).empty() || !LeaseFits(ctx, i)) continue;
    NodePlacement p{ctx.state.node(i).name, {}};
    for (size_t g = 0; g < ctx.state.node(i).gpus.size(); ++g) p.gpus.push_back(int(g));
    return Placement{{p}};
  }
  return std::nullopt;
}

std::string PowerRefusal(std::string_view what, std::string_view name, int64_t budget, int64_t draw,
                         int64_t need) {
  return "power budget of " + std::string(what) + " " + std::string(name) + ": would need " +
         std::to_string(need) + " W, " + std::to_string(std::max<int64_t>(0, budget - draw)) +
         " W left";
}

// The request's share of a node's host resources: its GPU fraction of the
// node's n GPUs, numerator / denominator. See HostBoundRefusal.
struct HostFraction {
  int64_t numerator = 1;
  int64_t denominator = 1;
  std::string what;   // "2 whole GPUs", "a 250-milli-GPU share", "a 1g.10gb instance"
  std::string scale;  // how the per-GPU figure is scaled, in words
};

HostFraction HostFractionOf(const PlacementContext& ctx, const capacity::Node& n) {
  const AllocationRequest& r = ctx.request;
  const int64_t gpus = std::max<int64_t>(1, int64_t(n.gpus.size()));
  switch (r.kind) {
    case AllocationKind::kGpu:
      return {r.gpus, gpus, std::to_string(r.gpus) + (r.gpus == 1 ? " whole GPU" : " whole GPUs"),
              "× " + std::to_string(r.gpus)};
    case AllocationKind::kShare:
      return {r.milli, gpus * kMilliPerGpu, "a " + std::to_string(r.milli) + "-milli-GPU share",
              "scaled by the share"};
    case AllocationKind::kMig: {
      const int slices = ProfileOf(ctx).compute_slices;
      return {slices, gpus * capacity::kMigComputeSlices, "a " + r.mig_profile + " instance",
              "× " + std::to_string(slices) + "/" + std::to_string(capacity::kMigComputeSlices)};
    }
    case AllocationKind::kNode:
      return {1, 1, "a node lease", "× the node's GPUs"};
  }
  return {};
}

// Host CPU and memory are bounded per GPU fraction: a request may ask on one
// node at most its fraction of the node's GPUs (whole GPUs g/n, a share
// milli/1000/n, a MIG instance slices/7/n, a lease the whole node) times the
// node's CPU and memory, rounded down. The fractions of what one node holds
// add up to at most 1, and so do the rounded-down bounds, so host CPU and
// memory can never be what keeps a free GPU from being used; a tenant cannot
// block a node's GPUs for others with a 1-milli share asking for the whole
// host (issue 16, item 6). Rounding down loses under one milli-CPU and one
// MiB; rounding up could add up over many small shares and strand a GPU
// after all. (A node with fewer than one CPU per GPU gives a 1-milli share
// no CPU; it may still ask for none.)
std::string HostBoundRefusal(const PlacementContext& ctx, const capacity::Node& n) {
  const AllocationRequest& r = ctx.request;
  const HostFraction f = HostFractionOf(ctx, n);
  const int64_t cpu_bound = n.cpu_milli * f.numerator / f.denominator;
  const int64_t memory_bound = n.memory_mib * f.numerator / f.denominator;
  if (r.cpu_milli > cpu_bound) {
    return "asks " + std::to_string(r.cpu_milli) + " milli-CPU; " + f.what + " may ask at most " +
           std::to_string(cpu_bound) + " on this node (its CPU per GPU " + f.scale + ")";
  }
  if (r.memory_mib > memory_bound) {
    return "asks " + std::to_string(r.memory_mib) + " MiB of host memory; " + f.what +
           " may ask at most " + std::to_string(memory_bound) +
           " MiB on this node (its memory per GPU " + f.scale + ")";
  }
  return {};
}

}  // namespace

int64_t RequestWattsPerNode(const PlacementContext& ctx, int32_t i) {
  switch (ctx.request.kind) {
    case AllocationKind::kGpu:
      return ctx.request.gpus * ClusterState::GpuWatts(ctx.model, kMilliPerGpu);
    case AllocationKind::kNode:
      return int64_t(ctx.state.node(i).gpus.size()) *
             ClusterState::GpuWatts(ctx.model, kMilliPerGpu);
    case AllocationKind::kShare:
      return ClusterState::GpuWatts(ctx.model, ctx.request.milli);
    case AllocationKind::kMig:
      return ClusterState::MigWatts(ctx.model, ProfileOf(ctx).compute_slices);
  }
  return 0;
}

std::string RequirementRejection(const NodeRequirements& requirements, const capacity::Node& n) {
  auto check = [](std::string_view what, const std::string& have, const std::string& minimum) {
    if (capacity::SatisfiesMinimum(have, minimum)) return std::string();
    return std::string(what) + " " + (have.empty() ? "version unknown" : have) +
           ", needs >= " + minimum;
  };
  std::string why = check("driver", n.driver_version, requirements.min_driver_version);
  if (why.empty()) why = check("CUDA", n.cuda_version, requirements.min_cuda_version);
  return why;
}

std::string RequirementsShortfall(const NodeRequirements& requirements, const ClusterState& state,
                                  const std::vector<int32_t>& nodes) {
  const std::string& driver = requirements.min_driver_version;
  const std::string& cuda = requirements.min_cuda_version;
  bool driver_met = driver.empty(), cuda_met = cuda.empty();
  std::optional<capacity::SoftwareVersion> newest_driver, newest_cuda;
  auto note = [](std::optional<capacity::SoftwareVersion>& newest, const std::string& text) {
    auto v = capacity::SoftwareVersion::Parse(text);
    if (v && (!newest || *v > *newest)) newest = std::move(*v);
  };
  for (int32_t i : nodes) {
    const capacity::Node& n = state.node(i);
    driver_met = driver_met || capacity::SatisfiesMinimum(n.driver_version, driver);
    cuda_met = cuda_met || capacity::SatisfiesMinimum(n.cuda_version, cuda);
    note(newest_driver, n.driver_version);
    note(newest_cuda, n.cuda_version);
  }
  auto newest = [](const std::optional<capacity::SoftwareVersion>& v) {
    return " (newest: " + (v ? v->text() : std::string("none known")) + ")";
  };
  if (!driver_met && !cuda_met) {
    return "no node has driver >= " + driver + newest(newest_driver) + " or CUDA >= " + cuda +
           newest(newest_cuda);
  }
  if (!driver_met) return "no node has driver >= " + driver + newest(newest_driver);
  if (!cuda_met) return "no node has CUDA >= " + cuda + newest(newest_cuda);
  return "no node has both driver >= " + driver + " and CUDA >= " + cuda;
}

std::string StaticNodeRejection(const PlacementContext& ctx, int32_t i) {
  const capacity::Node& n = ctx.state.node(i);
  const capacity::NodePool& pool = ctx.state.pool(i);
  const AllocationRequest& r = ctx.request;
  const std::string& tenant = ctx.tenant.id;
  if (n.gpu_model != ctx.model.name) {
    return n.gpu_model.empty() ? "no GPUs" : "GPU model is " + n.gpu_model;
  }
  if (!r.pool.empty() && pool.name != r.pool) return "not in the requested pool " + r.pool;
  if (!r.region.empty() && pool.region != r.region) {
    return "not in the requested region " + r.region;
  }
  if (!ctx.tenant.AllowsRegion(pool.region)) {
    return "region " + pool.region + " is not among the tenant's regions";
  }
  if (!ctx.tenant.AllowsPool(pool.name))
    return "pool " + pool.name + " is not among the tenant's pools";
  if (pool.dedicated_tenant && *pool.dedicated_tenant != tenant) {
    return "pool " + pool.name + " is dedicated to another tenant";
  }
  if (!pool.Admits(tenant)) {
    return "pool " + pool.name +
           (pool.HasLabel(capacity::kLabelSensitive) ? " is sensitive and" : "") +
           " does not admit the tenant";
  }
  if (ctx.tenant.tier == IsolationTier::kDedicatedPool &&
      (!pool.dedicated_tenant || *pool.dedicated_tenant != tenant)) {
    return "tier dedicated-pool: pool " + pool.name + " is not dedicated to the tenant";
  }
  // Only requests with requirements pay for the check (the hot path).
  if (!r.requirements.Empty()) {
    if (std::string why = RequirementRejection(r.requirements, n); !why.empty()) return why;
  }
  if (r.kind == AllocationKind::kGpu && size_t(r.gpus) > n.gpus.size()) {
    return "has " + std::to_string(n.gpus.size()) + " GPUs";
  }
  if (r.kind == AllocationKind::kNode && size_t(r.gpus) != n.gpus.size()) {
    return "has " + std::to_string(n.gpus.size()) + " GPUs, the lease asks for " +
           std::to_string(r.gpus);
  }
  return HostBoundRefusal(ctx, n);
}

std::string NodeRejection(const PlacementContext& ctx, int32_t i, int64_t extra_rack_watts,
                          int64_t extra_site_watts) {
  std::string s = StaticNodeRejection(ctx, i);
  if (!s.empty()) return s;
  const capacity::Node& n = ctx.state.node(i);
  const NodeRuntime& rt = ctx.state.runtime(i);
  if (n.draining) return "draining";
  if (n.cordoned) return "cordoned";
  if (!rt.leased_by.empty()) return "leased whole";
  if (ctx.request.kind == AllocationKind::kNode && !rt.tenants.empty()) return "not empty";
  if (ctx.tenant.tier == IsolationTier::kDedicatedNode &&
      ctx.state.HoldsOtherTenant(i, ctx.tenant.id)) {
    return "tier dedicated-node: node holds other tenants' work";
  }
  for (const auto& [other, count] : rt.tenants) {
    if (other != ctx.tenant.id && TierOf(ctx.tenants, other) == IsolationTier::kDedicatedNode) {
      return "node holds a dedicated-node tenant's work";
    }
  }
  const int64_t watts = RequestWattsPerNode(ctx, i);
  const int32_t rack = ctx.state.rack_index(i);
  if (rack >= 0) {
    const capacity::Rack& r = ctx.state.fleet().racks()[size_t(rack)];
    const int64_t draw = ctx.state.RackDraw(rack) + extra_rack_watts;
    if (r.power_budget_watts > 0 && draw + watts > r.power_budget_watts) {
      return PowerRefusal("rack", r.name, r.power_budget_watts, draw, watts);
    }
  }
  const int32_t site = ctx.state.site_index(i);
  if (site >= 0) {
    const capacity::Site& st = ctx.state.fleet().sites()[size_t(site)];
    const int64_t draw = ctx.state.SiteDraw(site) + extra_site_watts;
    if (st.power_budget_watts > 0 && draw + watts > st.power_budget_watts) {
      return PowerRefusal("site", st.name, st.power_budget_watts, draw, watts);
    }
  }
  return {};
}

std::optional<Placement> FindPlacement(const PlacementContext& ctx, Engine* engine) {
  switch (ctx.request.kind) {
    case AllocationKind::kGpu:
      return ctx.request.nodes > 1 ? PlaceGang(ctx, engine) : PlaceWholeGpus(ctx, engine);
    case AllocationKind::kShare:
      return PlaceShare(ctx, engine);
    case AllocationKind::kMig:
      return PlaceMig(ctx, engine);
    case AllocationKind::kNode:
      return PlaceLease(ctx);
  }
  return std::nullopt;
}

std::string DiagnoseNoFit(const PlacementContext& ctx) {
  std::vector<std::pair<std::string, int>> reasons;
  int fitting = 0;
  for (int32_t i = 0; i < ctx.state.node_count(); ++i) {
    std::string reason = NodeRejection(ctx, i);
    // The GPUs first: when they are short too, more host room would not help.
    const bool gpus_fit = reason.empty() && GpuFit(ctx, i);
    if (gpus_fit) reason = HostShortage(ctx, i);
    if (reason.empty() && !gpus_fit) {
      switch (ctx.request.kind) {
        case AllocationKind::kGpu:
          reason = "not " + std::to_string(ctx.request.gpus) + " free GPUs";
          break;
        case AllocationKind::kShare:
          reason = "no GPU with " + std::to_string(ctx.request.milli) + " milli and " +
                   std::to_string(ctx.request.mem_cap_mib) + " MiB free that the tenant may share";
          break;
        case AllocationKind::kMig:
          reason = "no GPU with room for a " + ctx.request.mig_profile + " instance";
          break;
        case AllocationKind::kNode:
          reason = "GPUs unhealthy or cordoned";
          break;
      }
    }
    if (reason.empty()) {
      ++fitting;
      continue;
    }
    auto it = std::find_if(reasons.begin(), reasons.end(),
                           [&](const auto& r) { return r.first == reason; });
    if (it == reasons.end()) {
      reasons.emplace_back(reason, 1);
    } else {
      ++it->second;
    }
  }
  std::string out;
  if (ctx.request.kind == AllocationKind::kGpu && ctx.request.nodes > 1) {
    out = "gang needs " + std::to_string(ctx.request.nodes) + " nodes with " +
          std::to_string(ctx.request.gpus) + " free GPUs, " + std::to_string(fitting) +
          " have them" + (fitting >= ctx.request.nodes ? " (power budgets refuse the gang)" : "");
  } else if (fitting > 0) {
    out = std::to_string(fitting) + " nodes fit";
  } else {
    out = "no node fits";
  }
  for (const auto& [reason, count] : reasons) {
    out += "; " + std::to_string(count) + (count == 1 ? " node: " : " nodes: ") + reason;
  }
  return out;
}

}  // namespace atrium::sched
