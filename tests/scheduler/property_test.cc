// Property tests: seeded random streams of requests, releases and events,
// with the invariants checked from the exported allocations after every
// step (not from the scheduler's own bookkeeping):
//  - no GPU over-committed: a whole GPU holds nothing else; shares sum to at
//    most 1000 milli and their memory caps to at most the GPU's memory; MIG
//    instances never overlap, use at most 7 compute slices, never mix with
//    whole or shared use;
//    MIG instances start at a valid slot of their profile;
//  - no tenant or project above its limit; non-preemptible use never above
//    the guarantee (borrowed capacity is held only by preemptible work),
//    nor, outside a tenant's projects' quotas, above what their
//    guarantees leave of the tenant's;
//  - isolation tiers hold; rack and site power budgets hold, and the
//    scheduler's own power figures equal the ones recomputed here;
//  - a request within its tenant's guarantee is placed within the grace
//    period (on a fleet whose guarantees add up to its capacity);
//  - host CPU and memory never keep a free GPU from use: a node's host use is
//    at most its GPU fraction in use (whole 1, share milli/1000, MIG
//    slices/7, over the node's GPUs) times its CPU and memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include "capacity/fleet_spec.h"
#include "scheduler/scheduler.h"
#include "support/result_matchers.h"

namespace atrium::sched {
namespace {

capacity::Fleet WithPowerBudgets(const capacity::Fleet& base, int64_t rack_watts,
                                 int64_t site_watts) {
  capacity::Fleet f;
  for (auto s : base.sites()) {
    s.power_budget_watts = site_watts;
    EXPECT_OK(f.AddSite(s));
  }
  for (auto r : base.racks()) {
    r.power_budget_watts = rack_watts;
    EXPECT_OK(f.AddRack(r));
  }
  for (const auto& p : base.pools()) EXPECT_OK(f.AddPool(p));
  for (auto n : base.nodes()) {
    // One MIG-enabled GPU per MIG-capable node exercises fleet-set MIG mode.
    if (capacity::FindGpuModel(n.gpu_model)->mig_capable) n.gpus[7].mig_enabled = true;
    EXPECT_OK(f.AddNode(n));
  }
  return f;
}

void CheckInvariants(const Scheduler& s, const std::string& where) {
  struct GpuCheck {
    int whole = 0, shares = 0, mig = 0;
    int64_t milli = 0, memory = 0;
    uint32_t slots = 0;
    int compute = 0;
    std::set<std::string> tenants;
  };
  std::map<std::pair<std::string, int>, GpuCheck> gpus;
  std::map<std::string, std::set<std::string>> node_tenants;
  std::map<std::pair<std::string, ResourceClass>, ClassUsage> usage;
  std::map<std::tuple<std::string, std::string, ResourceClass>, ClassUsage> project_usage;
  // Non-preemptible use outside the projects' quotas of tenants that split
  // the class.
  std::map<std::pair<std::string, ResourceClass>, int64_t> rest_non_preemptible;
  std::map<std::string, int64_t> rack_watts;
  std::map<std::string, int64_t> node_fraction;
  for (const auto& n : s.fleet().nodes()) rack_watts[n.rack] += n.idle_power_watts;
  std::map<std::string, std::string> site_of_rack;
  for (const auto& r : s.fleet().racks()) site_of_rack[r.name] = r.site;
  for (const Allocation& a : s.Allocations()) {
    if (!a.Placed()) continue;
    const capacity::GpuModel& model = *capacity::FindGpuModel(a.request.model);
    auto& u = usage[{a.request.tenant, ResourceClass{a.request.model, a.request.kind}}];
    u.used += a.charge_milli;
    if (a.request.priority != Priority::kPreemptible) u.non_preemptible += a.charge_milli;
    const TenantPolicy& policy = s.tenants().find(a.request.tenant)->second;
    const ResourceClass rc{a.request.model, a.request.kind};
    const bool split = std::any_of(policy.projects.begin(), policy.projects.end(),
                                   [&](const auto& p) { return p.second.contains(rc); });
    if (split && policy.ProjectQuotaFor(a.request.project, rc) == nullptr &&
        a.request.priority != Priority::kPreemptible) {
      rest_non_preemptible[{a.request.tenant, rc}] += a.charge_milli;
    }
    if (!a.request.project.empty()) {
      auto& pu = project_usage[{a.request.tenant, a.request.project,
                                ResourceClass{a.request.model, a.request.kind}}];
      pu.used += a.charge_milli;
      if (a.request.priority != Priority::kPreemptible) pu.non_preemptible += a.charge_milli;
    }
    for (const NodePlacement& p : a.placement) {
      node_tenants[p.node].insert(a.request.tenant);
      // In 1/7000 of a GPU, so that shares (milli) and MIG (sevenths) add exactly.
      int64_t& fraction = node_fraction[p.node];
      if (a.request.kind == AllocationKind::kShare) {
        fraction += 7 * int64_t{a.request.milli};
      } else if (a.request.kind == AllocationKind::kMig) {
        fraction += 1000 * model.FindMigProfile(a.request.mig_profile)->compute_slices;
      } else {
        fraction += 7000 * int64_t(p.gpus.size());
      }
      const std::string rack = s.fleet().FindNode(p.node)->rack;
      for (int g : p.gpus) {
        GpuCheck& c = gpus[{p.node, g}];
        c.tenants.insert(a.request.tenant);
        switch (a.request.kind) {
          case AllocationKind::kGpu:
          case AllocationKind::kNode:
            ++c.whole;
            c.milli += 1000;
            rack_watts[rack] += model.tdp_watts;
            break;
          case AllocationKind::kShare:
            ++c.shares;
            c.milli += a.request.milli;
            c.memory += a.request.mem_cap_mib;
            rack_watts[rack] += ClusterState::GpuWatts(model, a.request.milli);
            break;
          case AllocationKind::kMig: {
            const capacity::MigProfile* prof = model.FindMigProfile(a.request.mig_profile);
            ASSERT_NE(prof, nullptr) << where << ": " << a.id();
            ASSERT_TRUE(std::count(prof->valid_start_slots.begin(), prof->valid_start_slots.end(),
                                   a.mig_start) == 1)
                << where << ": " << a.id() << " starts at invalid slot " << a.mig_start;
            ++c.mig;
            const uint32_t mask = ((1u << prof->memory_slices) - 1) << a.mig_start;
            ASSERT_EQ(c.slots & mask, 0u) << where << ": MIG overlap on " << p.node << "/" << g;
            c.slots |= mask;
            c.compute += prof->compute_slices;
            c.milli += a.charge_milli;
            rack_watts[rack] += ClusterState::MigWatts(model, prof->compute_slices);
            break;
          }
        }
      }
    }
  }
  // Scrub holds take the room their allocation held (no tenant, power or
  // host), and a failed scrub's GPU is out of service.
  for (const ScrubHold& h : s.Scrubs()) {
    const capacity::GpuModel& model = *capacity::FindGpuModel(h.model);
    GpuCheck& c = gpus[{h.node, h.gpu}];
    if (h.state == ScrubState::kFailed) {
      ASSERT_FALSE(s.fleet().FindNode(h.node)->gpus[size_t(h.gpu)].healthy)
          << where << ": failed scrub " << DescribeScrub(h) << " on a healthy GPU";
    }
    switch (h.kind) {
      case AllocationKind::kShare:
        ++c.shares;
        c.milli += h.milli;
        c.memory += h.mem_cap_mib;
        break;
      case AllocationKind::kMig: {
        const capacity::MigProfile* prof = model.FindMigProfile(h.mig_profile);
        ASSERT_NE(prof, nullptr) << where << ": " << DescribeScrub(h);
        ++c.mig;
        const uint32_t mask = ((1u << prof->memory_slices) - 1) << h.mig_start;
        ASSERT_EQ(c.slots & mask, 0u) << where << ": MIG overlap with scrub " << DescribeScrub(h);
        c.slots |= mask;
        c.compute += prof->compute_slices;
        c.milli += MigMilli(prof->compute_slices);
        break;
      }
      default:
        ++c.whole;
        c.milli += 1000;
        break;
    }
  }
  for (const auto& [key, c] : gpus) {
    const std::string gpu = where + ": GPU " + key.first + "/" + std::to_string(key.second);
    ASSERT_LE(c.whole, 1) << gpu;
    if (c.whole == 1) {
      ASSERT_EQ(c.shares + c.mig, 0) << gpu;
    }
    ASSERT_TRUE(c.shares == 0 || c.mig == 0) << gpu;
    ASSERT_LE(c.milli, 1000) << gpu;
    ASSERT_LE(c.compute, 7) << gpu;
    // What node and capacity views show: the charges, or in MIG mode the
    // compute slices in use; never above one GPU.
    const int32_t node = *s.cluster().NodeIndex(key.first);
    const int32_t used = s.cluster().runtime(node).gpus[size_t(key.second)].used_milli;
    ASSERT_EQ(used, c.mig > 0 ? MigModeUsedMilli(c.compute) : c.milli) << gpu;
    ASSERT_LE(used, 1000) << gpu;
    const int64_t memory = s.fleet().FindNode(key.first)->gpus[size_t(key.second)].memory_mib;
    ASSERT_LE(c.memory, memory) << gpu;
    if (c.tenants.size() > 1) {
      for (const std::string& t : c.tenants) {
        auto it = s.tenants().find(t);
        ASSERT_TRUE(it != s.tenants().end());
        ASSERT_EQ(it->second.tier, IsolationTier::kShared) << gpu << " shared by " << t;
      }
    }
  }
  for (int32_t i = 0; i < s.cluster().node_count(); ++i) {
    const capacity::Node& n = s.cluster().node(i);
    const NodeRuntime& rt = s.cluster().runtime(i);
    const int64_t in_use = node_fraction[n.name];
    const int64_t whole = 7000 * int64_t(n.gpus.size());
    ASSERT_LE(rt.cpu_used * whole, n.cpu_milli * in_use) << where << ": host CPU on " << n.name;
    ASSERT_LE(rt.memory_used * whole, n.memory_mib * in_use)
        << where << ": host memory on " << n.name;
  }
  for (const auto& [node, tenants] : node_tenants) {
    if (tenants.size() < 2) continue;
    for (const std::string& t : tenants) {
      ASSERT_NE(s.tenants().find(t)->second.tier, IsolationTier::kDedicatedNode)
          << where << ": node " << node;
    }
  }
  for (const auto& [key, u] : usage) {
    const Quota* q = s.tenants().find(key.first)->second.QuotaFor(key.second);
    ASSERT_NE(q, nullptr);
    ASSERT_LE(u.used, q->limit) << where << ": " << key.first << " " << key.second.ToString();
    ASSERT_LE(u.non_preemptible, q->guarantee)
        << where << ": " << key.first << " " << key.second.ToString();
  }
  for (const auto& [key, u] : project_usage) {
    const auto& [tenant, project, rc] = key;
    const Quota* q = s.tenants().find(tenant)->second.ProjectQuotaFor(project, rc);
    if (q == nullptr) continue;  // limited by the tenant's quota only
    ASSERT_LE(u.used, q->limit) << where << ": project " << project << " " << rc.ToString();
    ASSERT_LE(u.non_preemptible, q->guarantee)
        << where << ": project " << project << " " << rc.ToString();
  }
  for (const auto& [key, non_preemptible] : rest_non_preemptible) {
    const TenantPolicy& policy = s.tenants().find(key.first)->second;
    int64_t guarantee = policy.QuotaFor(key.second)->guarantee;
    for (const auto& [name, table] : policy.projects) {
      if (auto q = table.find(key.second); q != table.end()) guarantee -= q->second.guarantee;
    }
    ASSERT_LE(non_preemptible, guarantee)
        << where << ": " << key.first << " outside its projects " << key.second.ToString();
  }
  std::map<std::string, int64_t> site_watts;
  for (size_t r = 0; r < s.fleet().racks().size(); ++r) {
    const capacity::Rack& rack = s.fleet().racks()[r];
    site_watts[rack.site] += rack_watts[rack.name];
    ASSERT_EQ(s.cluster().RackDraw(int32_t(r)), rack_watts[rack.name]) << where << " " << rack.name;
    if (rack.power_budget_watts > 0) {
      ASSERT_LE(rack_watts[rack.name], rack.power_budget_watts) << where << " rack " << rack.name;
    }
  }
  for (size_t i = 0; i < s.fleet().sites().size(); ++i) {
    const capacity::Site& site = s.fleet().sites()[i];
    ASSERT_EQ(s.cluster().SiteDraw(int32_t(i)), site_watts[site.name]) << where << " " << site.name;
    if (site.power_budget_watts > 0) {
      ASSERT_LE(site_watts[site.name], site.power_budget_watts) << where << " site " << site.name;
    }
  }
}

void RandomStreamsNeverOvercommit(bool scrub_gpus) {
  auto base = capacity::ParseFleetSpec("3xH100-80GBx8,2xA100-80GBx8,2xL40Sx4");
  ASSERT_TRUE(base.has_value());
  for (uint64_t seed : {1u, 2u, 3u, 4u, 5u}) {
    SchedulerOptions options;
    options.grace_ms = 10'000;
    options.scrub_gpus = scrub_gpus;
    auto created = Scheduler::Create(WithPowerBudgets(*base, 14'000, 20'000), options);
    ASSERT_TRUE(created.has_value()) << created.error().message;
    Scheduler& s = **created;
    const std::vector<std::string> models = {"H100-80GB", "A100-80GB", "L40S"};
    const std::vector<IsolationTier> tiers = {IsolationTier::kShared, IsolationTier::kShared,
                                              IsolationTier::kDedicatedGpu,
                                              IsolationTier::kDedicatedNode};
    std::vector<std::string> tenant_ids;
    for (size_t t = 0; t < tiers.size(); ++t) {
      TenantPolicy p;
      p.id = "t" + std::to_string(t);
      p.tier = tiers[t];
      p.weight = 1.0 + double(t);
      for (const auto& m : models) {
        for (AllocationKind k : {AllocationKind::kGpu, AllocationKind::kMig, AllocationKind::kShare,
                                 AllocationKind::kNode}) {
          p.quotas[{m, k}] = Quota{6000, 16000};
          // Tenant t0 splits its quota between two projects; requests
          // without a project are limited by the tenant's quota and (their
          // non-preemptible work) the 1000 the projects leave of its
          // guarantee.
          if (t == 0) {
            p.projects["p1"][{m, k}] = Quota{3000, 6000};
            p.projects["p2"][{m, k}] = Quota{2000, 16000};
          }
        }
      }
      ASSERT_OK(s.SetTenant(p, 0));
      tenant_ids.push_back(p.id);
    }
    std::mt19937_64 rng(seed);
    auto pick = [&](size_t n) { return size_t(rng() % n); };
    // Host asks come from their own stream, so the rest of the stream is the
    // one these seeds always drew.
    std::mt19937_64 host_rng(seed * 7919);
    std::mt19937_64 scrub_rng(seed * 104729);
    auto host_ask = [&](int64_t per_node, int64_t num, int64_t den) {
      const int64_t bound = per_node * num / den;
      return host_rng() % 3 == 0 ? 0 : int64_t(host_rng() % uint64_t(bound + bound / 8 + 2));
    };
    int64_t now = 0;
    int next_id = 0;
    std::vector<std::string> held;
    for (int step = 0; step < 1500; ++step) {
      now += int64_t(pick(4000));
      const size_t op = pick(100);
      if (op < 55) {
        AllocationRequest r;
        r.id = "r" + std::to_string(next_id++);
        r.tenant = tenant_ids[pick(tenant_ids.size())];
        r.model = models[pick(models.size())];
        r.priority = static_cast<Priority>(pick(3));
        if (r.tenant == "t0") r.project = std::vector<std::string>{"", "p1", "p2"}[pick(3)];
        const size_t kind = pick(10);
        const capacity::GpuModel& model = *capacity::FindGpuModel(r.model);
        if (kind < 3) {
          r.kind = AllocationKind::kGpu;
          r.gpus = int32_t(1 + pick(4));
          if (pick(8) == 0) r.nodes = 2;
        } else if (kind < 6 && model.mig_capable) {
          r.kind = AllocationKind::kMig;
          r.mig_profile = model.mig_profiles[pick(model.mig_profiles.size())].name;
        } else if (kind < 9) {
          r.kind = AllocationKind::kShare;
          r.milli = int32_t(100 + pick(800));
          r.mem_cap_mib = int64_t(1 + pick(size_t(model.memory_mib / 2)));
        } else {
          r.kind = AllocationKind::kNode;
          r.gpus = r.model == "L40S" ? 4 : 8;
        }
        // Up to a little over the request's GPU fraction of its nodes' host
        // (above it: rejected at once).
        const capacity::Node* shape = nullptr;
        for (const auto& n : s.fleet().nodes()) {
          if (n.gpu_model == model.name) shape = &n;
        }
        ASSERT_NE(shape, nullptr);
        int64_t num = 1, den = 1;
        const int64_t gpus = int64_t(shape->gpus.size());
        if (r.kind == AllocationKind::kGpu) num = r.gpus, den = gpus;
        if (r.kind == AllocationKind::kShare) num = r.milli, den = 1000 * gpus;
        if (r.kind == AllocationKind::kMig) {
          num = model.FindMigProfile(r.mig_profile)->compute_slices, den = 7 * gpus;
        }
        r.cpu_milli = host_ask(shape->cpu_milli, num, den);
        r.memory_mib = host_ask(shape->memory_mib, num, den);
        auto out = s.Submit(r, now);
        ASSERT_TRUE(out.has_value());
        held.push_back(r.id);
      } else if (op < 85 && !held.empty()) {
        const size_t k = pick(held.size());
        (void)s.Release(held[k], now);  // may be gone already (rejected, preempted)
        held.erase(held.begin() + std::ptrdiff_t(k));
      } else if (op < 90) {
        const auto& nodes = s.fleet().nodes();
        const std::string node = nodes[pick(nodes.size())].name;
        if (pick(2) == 0) {
          ASSERT_OK(s.Cordon(node, now));
        } else {
          ASSERT_OK(s.Uncordon(node, now));
        }
      } else if (op < 94) {
        const auto& nodes = s.fleet().nodes();
        const auto& n = nodes[pick(nodes.size())];
        ASSERT_OK(s.SetGpuHealth(n.name, int(pick(n.gpus.size())), pick(3) != 0, now));
      } else if (op < 97) {
        const std::string& t = tenant_ids[pick(tenant_ids.size())];
        if (pick(2) == 0) {
          ASSERT_OK(s.Suspend(t, now));
        } else {
          ASSERT_OK(s.Resume(t, now));
        }
      } else {
        (void)s.AdvanceTime(now);
      }
      CheckInvariants(s, "seed " + std::to_string(seed) + " step " + std::to_string(step));
      if (testing::Test::HasFatalFailure()) return;
      // Scrubs finish from their own stream (so the rest of the stream is
      // the one these seeds always drew): about one in three per step, one
      // in ten of them failing.
      std::vector<ScrubHold> scrubbing;
      for (const ScrubHold& h : s.Scrubs()) {
        if (h.state == ScrubState::kScrubbing) scrubbing.push_back(h);
      }
      if (!scrubbing.empty() && scrub_rng() % 3 != 0) {
        const ScrubHold& h = scrubbing[scrub_rng() % scrubbing.size()];
        ASSERT_OK(s.FinishScrub(h.allocation, h.node, h.gpu, scrub_rng() % 10 != 0, now,
                                "exit status 1"));
        CheckInvariants(s, "seed " + std::to_string(seed) + " step " + std::to_string(step) +
                               " scrub " + DescribeScrub(h));
        if (testing::Test::HasFatalFailure()) return;
      }
    }
    if (scrub_gpus) {
      EXPECT_FALSE(s.Scrubs().empty()) << "seed " << seed << " left no scrub to restore";
    }
    // Restore reproduces the state exactly, scrubs in flight included.
    auto fresh = Scheduler::Create(s.fleet(), options);
    ASSERT_TRUE(fresh.has_value());
    for (const auto& [id, t] : s.tenants()) ASSERT_OK((*fresh)->SetTenant(t, now));
    ASSERT_OK((*fresh)->Restore(s.Allocations(), s.Scrubs()));
    EXPECT_EQ((*fresh)->Allocations(), s.Allocations());
    EXPECT_EQ((*fresh)->Scrubs(), s.Scrubs());
    EXPECT_TRUE((*fresh)->cluster() == s.cluster());
  }
}

TEST(SchedulerProperty, RandomStreamsNeverOvercommit) { RandomStreamsNeverOvercommit(false); }

// The same streams with scrub before reuse: an ended allocation's room is
// held until its scrub finishes (or, failed, until the GPU is healthy
// again), and never overlaps what is placed meanwhile.
TEST(SchedulerProperty, RandomStreamsWithScrubsNeverOvercommit) {
  RandomStreamsNeverOvercommit(true);
}

// A reclaim planned anew because one of its victims' tenant fell back
// within its guarantee (its other work released, its guarantee raised): the
// victim is not taken, and the replacement gets a full grace period, so a
// reclaimer may wait longer than one grace period from its entitlement.
bool ReplannedForAVictimsGuarantee(const DecisionRecords& records) {
  return std::any_of(records.begin(), records.end(), [](const DecisionRecord& r) {
    return r.kind == DecisionKind::kPreemptionCancelled &&
           r.reason.find("is no longer above its guarantee") != std::string::npos;
  });
}

// One H100 GPU for tenant t0..t<tenants-1> at a random priority; with
// `projects`, one of "", "p1", "p2" drawn for every request and kept for t0.
AllocationRequest RandomGpuRequest(std::mt19937_64& rng, int& next_id, int tenants, bool projects) {
  AllocationRequest r;
  r.id = "r" + std::to_string(next_id++);
  r.tenant = "t" + std::to_string(rng() % uint64_t(tenants));
  r.model = "H100-80GB";
  r.priority = static_cast<Priority>(rng() % 3);
  if (projects) {
    const std::string project = std::vector<std::string>{"", "p1", "p2"}[rng() % 3];
    if (r.tenant == "t0") r.project = project;
  }
  return r;
}

void RestartClocks(std::map<std::string, int64_t>& since, int64_t now) {
  for (auto& [id, t] : since) t = now;
}

// One step of the whole-GPU streams: time moves on by up to 5 s, then a
// RandomGpuRequest is submitted (55 %) or a held allocation released.
// `clocks` restart when a reclaim is planned anew for a victim's guarantee.
void RandomSubmitOrRelease(Scheduler& s, std::mt19937_64& rng, int64_t& now, int& next_id,
                           int tenants, bool projects, std::map<std::string, int64_t>& clocks) {
  now += int64_t(rng() % 5000);
  DecisionRecords records;
  if (rng() % 100 < 55) {
    auto out = s.Submit(RandomGpuRequest(rng, next_id, tenants, projects), now);
    ASSERT_TRUE(out.has_value());
    records = std::move(*out);
  } else {
    std::vector<Allocation> all = s.Allocations();
    if (all.empty()) return;
    auto out = s.Release(all[rng() % all.size()].id(), now);  // may be gone already
    if (out) records = std::move(*out);
  }
  if (ReplannedForAVictimsGuarantee(records)) RestartClocks(clocks, now);
}

// Regression: seeds 11 and 12 once failed. Entitlement was computed once at
// the start of a pass, so a request that became entitled during it (its
// tenant's older preemptible reclaimer placed) started its reclaim at the
// next decision; and a tenant's own reclaimer displacing its own borrowed
// work made the rest of that tenant's excess look taken, so another
// tenant's entitled request found no victim until that reclaim ended.
// Checked over 400 seeds while fixing; the seeds below keep it quick.
TEST(SchedulerProperty, GuaranteeHonouredWithinGrace) {
  auto fleet = capacity::ParseFleetSpec("2xH100-80GBx8");
  ASSERT_TRUE(fleet.has_value());
  SchedulerOptions options;
  options.grace_ms = 30'000;
  for (uint64_t seed = 11; seed <= 30; ++seed) {
    auto created = Scheduler::Create(*fleet, options);
    ASSERT_TRUE(created.has_value());
    Scheduler& s = **created;
    const ResourceClass rc{"H100-80GB", AllocationKind::kGpu};
    for (int t = 0; t < 4; ++t) {  // guarantees add up to the fleet's 16 GPUs
      TenantPolicy p;
      p.id = "t" + std::to_string(t);
      p.quotas[rc] = Quota{4000, 16000};
      ASSERT_OK(s.SetTenant(p, 0));
    }
    std::mt19937_64 rng(seed);
    int64_t now = 0;
    int next_id = 0;
    std::map<std::string, int64_t> entitled_since;
    for (int step = 0; step < 1500; ++step) {
      ASSERT_NO_FATAL_FAILURE(
          RandomSubmitOrRelease(s, rng, now, next_id, 4, /*projects=*/false, entitled_since));
      // Every request that has been within its guarantee (counting its
      // tenant's older queued requests) for longer than the grace period
      // (from when it became entitled, or from the last time a reclaim was
      // planned anew because a victim's tenant fell back within its own
      // guarantee) must have been placed.
      std::map<std::string, int64_t> ahead;
      std::set<std::string> seen;
      for (const Allocation& a : s.Allocations()) {
        if (a.Placed()) continue;
        seen.insert(a.id());
        const ClassUsage u = s.ledger().Tenant(a.request.tenant, rc);
        const int64_t base =
            a.request.priority == Priority::kPreemptible ? u.used : u.non_preemptible;
        int64_t& before = ahead[a.request.tenant];
        if (base + before + a.charge_milli > 4000) {
          entitled_since.erase(a.id());
          continue;
        }
        before += a.charge_milli;
        auto [it, inserted] = entitled_since.emplace(a.id(), now);
        ASSERT_LE(now - it->second, options.grace_ms)
            << "seed " << seed << " step " << step << ": " << a.id() << " of " << a.request.tenant
            << " waited past the grace period\n"
            << s.Explain(a.id()).value();
      }
      std::erase_if(entitled_since, [&](const auto& e) { return !seen.contains(e.first); });
    }
  }
}

// Issue 16, items 2 and 3: guarantees are honoured per sub-level (each
// project with its own quota, and the rest of the tenant; see quota.h).
// Tenant t0 splits its guarantee among p1, p2 and the rest, and its limit
// is low enough for one sub-level's borrowed work to fill it. Every request
// within its sub-level's guarantee (counting the older such requests of its
// sub-level) is placed within the grace period when the tenant's limit
// allows it, or when the other sub-levels' reclaimable use above their own
// guarantees covers what it is over; counted here from the exported
// allocations, not the scheduler's books.
TEST(SchedulerProperty, ProjectGuaranteesHonouredWithinGrace) {
  auto fleet = capacity::ParseFleetSpec("2xH100-80GBx8");
  ASSERT_TRUE(fleet.has_value());
  SchedulerOptions options;
  options.grace_ms = 30'000;
  const ResourceClass rc{"H100-80GB", AllocationKind::kGpu};
  std::map<std::string, TenantPolicy> policies;
  policies["t0"].quotas[rc] = Quota{8000, 10000};  // guarantees add up to the fleet's 16 GPUs
  policies["t0"].projects["p1"][rc] = Quota{3000, 10000};
  policies["t0"].projects["p2"][rc] = Quota{3000, 6000};  // the rest: 2000
  policies["t1"].quotas[rc] = Quota{4000, 16000};
  policies["t2"].quotas[rc] = Quota{4000, 16000};
  for (auto& [id, p] : policies) p.id = id;
  auto sub_guarantee = [&](const std::string& tenant, const std::string& sub) {
    const TenantPolicy& p = policies.at(tenant);
    if (!sub.empty()) return p.projects.at(sub).at(rc).guarantee;
    int64_t g = p.quotas.at(rc).guarantee;
    for (const auto& [name, table] : p.projects) g -= table.at(rc).guarantee;
    return g;
  };
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    auto created = Scheduler::Create(*fleet, options);
    ASSERT_TRUE(created.has_value());
    Scheduler& s = **created;
    for (const auto& [id, p] : policies) ASSERT_OK(s.SetTenant(p, 0));
    std::mt19937_64 rng(seed);
    int64_t now = 0;
    int next_id = 0;
    std::map<std::string, int64_t> owed_since;
    for (int step = 0; step < 1500; ++step) {
      ASSERT_NO_FATAL_FAILURE(
          RandomSubmitOrRelease(s, rng, now, next_id, 3, /*projects=*/true, owed_since));
      const std::vector<Allocation> all = s.Allocations();                  // in submission order
      std::map<std::pair<std::string, std::string>, ClassUsage> sub_usage;  // (tenant, sub-level)
      std::map<std::string, int64_t> tenant_used;
      for (const Allocation& a : all) {
        if (!a.Placed()) continue;
        ClassUsage& u = sub_usage[{a.request.tenant, a.request.project}];
        u.used += a.charge_milli;
        if (a.request.priority != Priority::kPreemptible) u.non_preemptible += a.charge_milli;
        tenant_used[a.request.tenant] += a.charge_milli;
      }
      std::map<std::pair<std::string, std::string>, int64_t> before_sub;
      std::map<std::string, int64_t> before_tenant;
      std::set<std::string> seen;
      for (const Allocation& a : all) {
        if (a.Placed()) continue;
        seen.insert(a.id());
        const std::string& tenant = a.request.tenant;
        const std::string& sub = a.request.project;
        const ClassUsage u = sub_usage[{tenant, sub}];
        const int64_t base =
            a.request.priority == Priority::kPreemptible ? u.used : u.non_preemptible;
        bool owed = base + before_sub[{tenant, sub}] + a.charge_milli <= sub_guarantee(tenant, sub);
        const int64_t over = tenant_used[tenant] + before_tenant[tenant] + a.charge_milli -
                             policies.at(tenant).quotas.at(rc).limit;
        if (owed && over > 0) {
          int64_t siblings_excess = 0;
          for (const std::string other : {"", "p1", "p2"}) {
            if (other == sub || (tenant != "t0" && !other.empty())) continue;
            const ClassUsage o = sub_usage[{tenant, other}];
            siblings_excess += std::max<int64_t>(
                0, o.used - std::max(sub_guarantee(tenant, other), o.non_preemptible));
          }
          owed = tenant == "t0" && over <= siblings_excess;
        }
        if (!owed) {
          owed_since.erase(a.id());
          continue;
        }
        before_sub[{tenant, sub}] += a.charge_milli;
        before_tenant[tenant] += a.charge_milli;
        auto [it, inserted] = owed_since.emplace(a.id(), now);
        ASSERT_LE(now - it->second, options.grace_ms)
            << "seed " << seed << " step " << step << ": " << a.id() << " of " << tenant << "/"
            << sub << " waited past the grace period\n"
            << s.Explain(a.id(), Scheduler::Audience::kStaff).value();
      }
      std::erase_if(owed_since, [&](const auto& e) { return !seen.contains(e.first); });
    }
  }
}

// The scheduler's promises under every kind of event at once:
// random interleavings of submit / release / quota change / project split
// change / tier change / cordon / drain / GPU health / suspend, checking
// after every step, besides CheckInvariants (no GPU over 1,000 milli, no
// co-location against a tier, quotas and power budgets):
//  - a request within its guarantee (its tenant's, or its project's when
//    the project has a row for the class; the tenant's other work shares
//    what the projects leave) is placed within the grace period of becoming
//    entitled, or of the last change to the fleet or the policies, whichever
//    is later;
//  - no idle usable GPU while a reclaimer that its quota lets run waits;
//  - a victim preempted when its grace ends was borrowed.
// The guarantee class is H100 whole GPUs, one GPU per request, on a fleet
// whose usable H100 GPUs never drop below the sum of the guarantees, so
// room can always be made; other models carry shares, MIG instances and a
// tenant that changes tier, for the co-location and over-commit checks.
namespace promises {

const ResourceClass kGuaranteed{"H100-80GB", AllocationKind::kGpu};
constexpr int64_t kGuaranteeSum = 16'000;  // of the fleet's 24 H100 GPUs

// Where a request's guarantee comes from: its project when the project has
// a row for the class, else the tenant's rest ("").
std::string LevelOf(const TenantPolicy& t, const AllocationRequest& r) {
  if (!r.project.empty() && t.ProjectQuotaFor(r.project, kGuaranteed) != nullptr) return r.project;
  return "";
}

int64_t LevelGuarantee(const TenantPolicy& t, const std::string& level) {
  if (!level.empty()) return t.ProjectQuotaFor(level, kGuaranteed)->guarantee;
  const Quota* q = t.QuotaFor(kGuaranteed);
  int64_t rest = q == nullptr ? 0 : q->guarantee;
  for (const auto& [name, table] : t.projects) {
    if (auto it = table.find(kGuaranteed); it != table.end()) rest -= it->second.guarantee;
  }
  return rest;
}

using LevelKey = std::pair<std::string, std::string>;  // tenant, level

std::map<LevelKey, ClassUsage> LevelUsage(const Scheduler& s) {
  std::map<LevelKey, ClassUsage> out;
  for (const Allocation& a : s.Allocations()) {
    if (!a.Placed() || a.request.model != kGuaranteed.model || a.request.kind != kGuaranteed.kind) {
      continue;
    }
    ClassUsage& u = out[{a.request.tenant, LevelOf(s.tenants().at(a.request.tenant), a.request)}];
    u.used += a.charge_milli;
    if (a.request.priority != Priority::kPreemptible) u.non_preemptible += a.charge_milli;
  }
  return out;
}

// H100 GPUs that take no new work: on a cordoned or draining node, or
// unhealthy.
int UnusableGpus(const capacity::Fleet& fleet) {
  int n = 0;
  for (const capacity::Node& node : fleet.nodes()) {
    if (node.gpu_model != kGuaranteed.model) continue;
    for (const capacity::Gpu& g : node.gpus) n += node.cordoned || node.draining || !g.healthy;
  }
  return n;
}

int IdleUsableGpus(const Scheduler& s) {
  int n = 0;
  const ClusterState& c = s.cluster();
  for (int32_t i = 0; i < c.node_count(); ++i) {
    const capacity::Node& node = c.node(i);
    if (node.gpu_model != kGuaranteed.model || node.cordoned || node.draining ||
        !c.runtime(i).leased_by.empty()) {
      continue;
    }
    for (size_t g = 0; g < c.node(i).gpus.size(); ++g) {
      n += c.GpuUsable(i, int(g)) && c.runtime(i).gpus[g].uses.empty();
    }
  }
  return n;
}

}  // namespace promises

TEST(SchedulerProperty, PromisesHoldUnderEveryEvent) {
  using namespace promises;
  auto fleet = capacity::ParseFleetSpec("3xH100-80GBx8,2xA100-80GBx8,2xL40Sx4");
  ASSERT_TRUE(fleet.has_value());
  constexpr int kH100Gpus = 24;
  SchedulerOptions options;
  options.grace_ms = 20'000;
  const std::vector<ResourceClass> side_classes = {{"A100-80GB", AllocationKind::kMig},
                                                   {"A100-80GB", AllocationKind::kGpu},
                                                   {"L40S", AllocationKind::kShare}};
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    auto created = Scheduler::Create(*fleet, options);
    ASSERT_TRUE(created.has_value()) << created.error().message;
    Scheduler& s = **created;
    // t0..t3 hold the H100 guarantees (t0 split between projects p1, p2);
    // t4 uses only the side classes and moves between every tier.
    for (int t = 0; t < 5; ++t) {
      TenantPolicy p;
      p.id = "t" + std::to_string(t);
      if (t < 4) p.quotas[kGuaranteed] = Quota{4000, 16000};
      for (const ResourceClass& rc : side_classes) p.quotas[rc] = Quota{4000, 12000};
      if (t == 0) {
        p.projects["p1"][kGuaranteed] = Quota{2000, 8000};
        p.projects["p2"][kGuaranteed] = Quota{1000, 16000};
      }
      ASSERT_OK(s.SetTenant(p, 0));
    }
    std::mt19937_64 rng(seed);
    auto pick = [&](int64_t n) { return n <= 0 ? int64_t{0} : int64_t(rng() % uint64_t(n)); };
    auto thousands = [&](int64_t lo, int64_t hi) { return lo + 1000 * pick((hi - lo) / 1000 + 1); };
    int64_t now = 0;
    int next_id = 0;
    std::map<std::string, int64_t> entitled_since;
    for (int step = 0; step < 1200; ++step) {
      const std::string where = "seed " + std::to_string(seed) + " step " + std::to_string(step);
      now += pick(4000);
      const std::vector<Allocation> before = s.Allocations();
      const auto usage = LevelUsage(s);
      auto np = [&](const std::string& t, const std::string& level) {
        auto it = usage.find({t, level});
        return it == usage.end() ? int64_t{0} : it->second.non_preemptible;
      };
      const int64_t op = pick(100);
      Result<DecisionRecords> out = DecisionRecords{};
      bool change = true;  // to the fleet or the policies
      if (op < 45) {
        change = false;
        AllocationRequest r;
        r.id = "r" + std::to_string(next_id++);
        r.priority = static_cast<Priority>(pick(3));
        if (pick(10) < 6) {
          r.tenant = "t" + std::to_string(pick(4));
          r.model = kGuaranteed.model;
          if (r.tenant == "t0") r.project = std::vector<std::string>{"", "p1", "p2"}[pick(3)];
        } else {
          r.tenant = "t" + std::to_string(pick(5));
          const ResourceClass& rc = side_classes[size_t(pick(int64_t(side_classes.size())))];
          r.model = rc.model;
          r.kind = rc.kind;
          const capacity::GpuModel& model = *capacity::FindGpuModel(r.model);
          if (rc.kind == AllocationKind::kMig) {
            r.mig_profile =
                model.mig_profiles[size_t(pick(int64_t(model.mig_profiles.size())))].name;
          } else if (rc.kind == AllocationKind::kShare) {
            r.milli = int32_t(100 + pick(800));
            r.mem_cap_mib = 1 + pick(model.memory_mib / 2);
          } else {
            r.gpus = int32_t(1 + pick(4));
          }
        }
        out = s.Submit(r, now);
        if (!out && out.error().code == ErrorCode::kResourceExhausted) out = DecisionRecords{};
      } else if (op < 70) {
        change = false;
        if (!before.empty())
          out = s.Release(before[size_t(pick(int64_t(before.size())))].id(), now);
      } else if (op < 74) {
        // Cordon or drain a node, or uncordon one, keeping at least the
        // guarantees' worth of H100 GPUs usable.
        const auto& nodes = s.fleet().nodes();
        const capacity::Node& n = nodes[size_t(pick(int64_t(nodes.size())))];
        const int64_t how = pick(3);
        capacity::Fleet trial = s.fleet();
        trial.FindMutableNode(n.name)->cordoned = how != 2;
        if (how == 2) {
          out = s.Uncordon(n.name, now);
        } else if (kH100Gpus - UnusableGpus(trial) >= kGuaranteeSum / 1000) {
          out = how == 0 ? s.Cordon(n.name, now) : s.Drain(n.name, now);
        }
      } else if (op < 78) {
        const auto& nodes = s.fleet().nodes();
        const capacity::Node& n = nodes[size_t(pick(int64_t(nodes.size())))];
        const int gpu = int(pick(int64_t(n.gpus.size())));
        const bool healthy = pick(2) == 0;
        capacity::Fleet trial = s.fleet();
        trial.FindMutableNode(n.name)->gpus[size_t(gpu)].healthy = healthy;
        if (kH100Gpus - UnusableGpus(trial) >= kGuaranteeSum / 1000) {
          out = s.SetGpuHealth(n.name, gpu, healthy, now);
        }
      } else if (op < 81) {
        const std::string t = "t" + std::to_string(pick(5));
        out = pick(2) == 0 ? s.Suspend(t, now) : s.Resume(t, now);
      } else if (op < 88) {
        // The operator moves 1 GPU of guarantee from one H100 tenant to
        // another (never below what the giver's non-preemptible work holds
        // at the level it comes from) and sets the receiver's limit (never
        // below its use or its projects' limits).
        const std::string from = "t" + std::to_string(pick(4));
        const std::string to = "t" + std::to_string(pick(4));
        TenantPolicy a = s.tenants().at(from);
        if (from != to && LevelGuarantee(a, "") - 1000 >= np(from, "")) {
          a.quotas[kGuaranteed].guarantee -= 1000;
          out = s.SetTenant(a, now);
          if (out) {
            TenantPolicy b = s.tenants().at(to);
            Quota& q = b.quotas[kGuaranteed];
            q.guarantee += 1000;
            int64_t low = std::max(q.guarantee, s.ledger().Tenant(to, kGuaranteed).used);
            for (const auto& [name, table] : b.projects) {
              if (auto it = table.find(kGuaranteed); it != table.end()) {
                low = std::max(low, it->second.limit);
              }
            }
            q.limit = thousands((low + 999) / 1000 * 1000, 24'000);
            auto more = s.SetTenant(b, now);
            if (!more) {
              out = std::move(more);
            } else {
              out->insert(out->end(), more->begin(), more->end());
            }
          }
        }
      } else if (op < 94) {
        // t0's tenant admin changes the projects' split, never below what a
        // level's non-preemptible work holds.
        TenantPolicy t = s.tenants().at("t0");
        const Quota q = t.quotas[kGuaranteed];
        const int64_t slack = q.guarantee - np("t0", "") - np("t0", "p1") - np("t0", "p2");
        const int64_t g1 = np("t0", "p1") + thousands(0, slack);
        const int64_t g2 = np("t0", "p2") + thousands(0, slack - (g1 - np("t0", "p1")));
        for (const auto& [name, g] : {std::pair{"p1", g1}, std::pair{"p2", g2}}) {
          const int64_t used = s.ledger().Project("t0", name, kGuaranteed).used;
          t.projects[name][kGuaranteed] = Quota{g, thousands(std::max(g, used), q.limit)};
        }
        out = s.SetTenant(t, now);
      } else {
        // Tier changes: t1 between shared and dedicated-gpu (whole H100 GPUs
        // are exclusive either way), t4 among shared, dedicated-gpu and
        // dedicated-node.
        const std::string id = pick(2) == 0 ? "t1" : "t4";
        TenantPolicy p = s.tenants().at(id);
        const std::vector<IsolationTier> tiers = {
            IsolationTier::kShared, IsolationTier::kDedicatedGpu, IsolationTier::kDedicatedNode};
        p.tier = tiers[size_t(pick(id == "t1" ? 2 : 3))];
        // A raise its placements would break is refused.
        out = s.SetTenant(p, now);
        if (!out && out.error().code == ErrorCode::kFailedPrecondition) {
          EXPECT_FALSE(s.TierConflicts(id, p.tier).empty()) << where << ": " << out.error().message;
          out = DecisionRecords{};
        }
      }
      ASSERT_TRUE(out.has_value()) << where << ": " << out.error().message;
      // The timer's pass at the same time (the service runs one a second).
      DecisionRecords records = std::move(*out);
      DecisionRecords tick = s.AdvanceTime(now);
      records.insert(records.end(), tick.begin(), tick.end());

      CheckInvariants(s, where);
      if (testing::Test::HasFatalFailure()) return;

      const auto after = LevelUsage(s);

      // Within grace of entitlement (or of the last change, or of the last
      // reclaim planned anew for a victim's guarantee), placed.
      if (change || ReplannedForAVictimsGuarantee(records)) {
        for (auto& [id, since] : entitled_since) since = now;
      }
      std::map<LevelKey, int64_t> ahead;
      std::set<std::string> seen;
      bool placeable_waits = false;
      std::string placeable_id;
      for (const Allocation& a : s.Allocations()) {
        if (a.Placed() || a.request.model != kGuaranteed.model) continue;
        const TenantPolicy& t = s.tenants().at(a.request.tenant);
        if (t.suspended) continue;
        const std::string level = LevelOf(t, a.request);
        auto u = after.find({t.id, level});
        const ClassUsage lu = u == after.end() ? ClassUsage{} : u->second;
        const bool preemptible = a.request.priority == Priority::kPreemptible;
        // Whether its quota lets it run now (then no usable GPU may idle).
        const ClassUsage tu = s.ledger().Tenant(t.id, kGuaranteed);
        bool quota_ok =
            tu.used + a.charge_milli <= t.QuotaFor(kGuaranteed)->limit &&
            (preemptible || lu.non_preemptible + a.charge_milli <= LevelGuarantee(t, level));
        if (const Quota* pq = t.ProjectQuotaFor(a.request.project, kGuaranteed)) {
          quota_ok = quota_ok && s.ledger().Project(t.id, a.request.project, kGuaranteed).used +
                                         a.charge_milli <=
                                     pq->limit;
        }
        if (quota_ok && !placeable_waits) {
          placeable_waits = true;
          placeable_id = a.id();
        }
        int64_t& queued = ahead[{t.id, level}];
        const int64_t base = preemptible ? lu.used : lu.non_preemptible;
        if (base + queued + a.charge_milli > LevelGuarantee(t, level)) continue;
        queued += a.charge_milli;
        seen.insert(a.id());
        auto [it, inserted] = entitled_since.emplace(a.id(), now);
        ASSERT_LE(now - it->second, options.grace_ms)
            << where << ": " << a.id() << " of " << t.id << (level.empty() ? "" : "/" + level)
            << " waited past the grace period\n"
            << s.Explain(a.id(), Scheduler::Audience::kStaff).value();
      }
      std::erase_if(entitled_since, [&](const auto& e) { return !seen.contains(e.first); });

      // A victim preempted when its grace ended was borrowed: its level,
      // with the level's queued requests within the guarantee (placed ahead
      // of everything else), stays at or above its guarantee without it.
      for (const DecisionRecord& r : records) {
        if (r.kind != DecisionKind::kPreempted || r.reason.find("grace") == std::string::npos) {
          continue;
        }
        auto v = std::find_if(before.begin(), before.end(),
                              [&](const Allocation& a) { return a.id() == r.allocation_id; });
        if (v == before.end() || v->request.model != kGuaranteed.model) continue;
        const TenantPolicy& t = s.tenants().at(v->request.tenant);
        const std::string level = LevelOf(t, v->request);
        auto u = after.find({t.id, level});
        const int64_t used = (u == after.end() ? 0 : u->second.used) + ahead[{t.id, level}];
        ASSERT_GT(used + v->charge_milli, LevelGuarantee(t, level))
            << where << ": " << r.ToString() << " took work within " << t.id << "'s guarantee";
      }

      if (placeable_waits) {
        ASSERT_EQ(IdleUsableGpus(s), 0)
            << where << ": " << placeable_id << " waits while a usable H100 GPU idles\n"
            << s.Explain(placeable_id, Scheduler::Audience::kStaff).value();
      }
    }
    // Restore reproduces the state exactly.
    auto fresh = Scheduler::Create(s.fleet(), options);
    ASSERT_TRUE(fresh.has_value());
    for (const auto& [id, t] : s.tenants()) ASSERT_OK((*fresh)->SetTenant(t, now));
    ASSERT_OK((*fresh)->Restore(s.Allocations()));
    EXPECT_EQ((*fresh)->Allocations(), s.Allocations());
    EXPECT_TRUE((*fresh)->cluster() == s.cluster());
  }
}

}  // namespace
}  // namespace atrium::sched
