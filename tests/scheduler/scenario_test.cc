// Runs every scenario file under tests/scheduler/scenarios: a fleet, tenants
// and a sequence of requests and events at given times, each step with the
// decision records it must produce (substring per record, in order, and no
// more), queue contents, allocation states and Explain() fragments. A
// "restart" step rebuilds the scheduler from its exported allocations; from
// then on every step runs on both the old and the rebuilt scheduler and
// their decisions must be identical.
//
// File format (JSON; times in seconds):
// {
//   "grace_s": 30,
//   "max_pending_per_tenant": 1000, "max_pending_per_project": 500,  // optional
//   "scrub_gpus": false,  // optional: ended allocations' GPUs wait for their scrub
//   "fleet": {"spec": "2xH100-80GBx8"}            // or explicit lists:
//   "fleet": {"sites": [{"name","region","power_budget_watts"}],
//             "racks": [{"name","site","power_budget_watts"}],
//             "pools": [{"name","region","site","labels","dedicated_tenant","allowed_tenants"}],
//             "nodes": [{"name","pool","rack","model","gpus","mig":[gpu...],
//                        "nvlink":[[...]],"idle_power_watts","cordoned",
//                        "driver","cuda"}]},  // versions default to the simulated fleet's
//   "tenants": [{"id","tier","weight","regions","pools","suspended",
//                "quotas": {"H100-80GB/gpu": [guarantee, limit]},
//                "projects": {"p": {"H100-80GB/gpu": [g, l]}}}],
//   "stored": [{...request..., "on": [{"node", "gpus": [...]}], "mig_start"}],
//     // optional: running allocations restored (Scheduler::Restore) before
//     // the first step, as a store written by an earlier version holds them
//     // (placed whatever today's admission rules say); charged ChargeMilli
//   // a request may carry "requirements": {"min_driver", "min_cuda", "gpu_models": [...]}
//   "steps": [{"t": 0, "submit": {...request...}, "expect": ["queued a", "placed a on n gpu 0"]},
//             {"t": 1, "release": "a"} | {"advance": true} | {"tenant": {...}} |
//             {"suspend": "x"} | {"resume": "x"} | {"evict": "x"} | {"cordon": "n"} |
//             {"drain": "n"} | {"uncordon": "n"} | {"gpu_health":
//             {"node","gpu","healthy","reason"}} |
//             {"scrub": {"allocation","node","gpu","ok","detail"}} (FinishScrub) |
//             {"restart": true} |
//             {"tenant_split": {...tenant...}} (a tenant as the shell hands it over:
//             its projects' split clamped to its quota by ClampProjectSplit; with
//             optional "clamped": {"project": ["model/kind", ...]}, exactly the
//             classes it clamps) |
//             {"tier_conflicts": {"tenant", "tier"}, "conflicts": [ids]} (what
//             Scheduler::TierConflicts answers, in order; changes nothing),
//             optional on any step: "queue": [ids], "state": {"id": "substring of
//             state + placement" | "absent"}, "explain": {"id": ["substring", ...]}
//             (as platform staff see it), "tenant_explain": {"id": [...]} and
//             "tenant_explain_lacks": {"id": [...]} (as the allocation's tenant
//             sees it), "records_lack": {"id": ["substring", ...]} (no record of
//             that allocation in this step contains one), "gpu_used":
//             {"node/gpu": milli} (the GPU's used milli as node and capacity
//             views show it),
//             "scrubs": ["n1 gpu 0 (a) scrubbing", ...] (every scrub hold, as
//             DescribeScrub and its state, and the reason of a failed one),
//             "error": "substring" (the call fails and changes nothing)]
// }
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "capacity/fleet_spec.h"
#include "scheduler/scheduler.h"
#include "support/result_matchers.h"
#include "support/scenario_files.h"

namespace atrium::sched {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

Result<capacity::Fleet> BuildFleet(const json& j) {
  capacity::Fleet fleet;
  if (j.contains("spec")) {
    auto f = capacity::ParseFleetSpec(j.at("spec").get<std::string>());
    if (!f) return std::move(f).error();
    fleet = std::move(*f);
  }
  for (const json& s : j.value("sites", json::array())) {
    ATRIUM_RETURN_IF_ERROR(fleet.AddSite(
        {s.at("name"), s.value("region", "local"), s.value("power_budget_watts", int64_t{0})}));
  }
  for (const json& r : j.value("racks", json::array())) {
    ATRIUM_RETURN_IF_ERROR(fleet.AddRack(
        {r.at("name"), r.value("site", "local-1"), r.value("power_budget_watts", int64_t{0})}));
  }
  for (const json& p : j.value("pools", json::array())) {
    capacity::NodePool pool;
    pool.name = p.at("name");
    pool.region = p.value("region", "local");
    pool.site = p.value("site", "local-1");
    for (const auto& l : p.value("labels", json::array())) pool.labels.insert(l.get<std::string>());
    if (p.contains("dedicated_tenant")) pool.dedicated_tenant = p.at("dedicated_tenant");
    pool.allowed_tenants = p.value("allowed_tenants", std::vector<std::string>{});
    ATRIUM_RETURN_IF_ERROR(fleet.AddPool(std::move(pool)));
  }
  for (const json& n : j.value("nodes", json::array())) {
    capacity::Node node;
    node.name = n.at("name");
    node.pool = n.value("pool", "default");
    node.rack = n.value("rack", "rack-0");
    const capacity::GpuModel* model = capacity::FindGpuModel(n.at("model").get<std::string>());
    if (model == nullptr) return Error::InvalidArgument("unknown model in scenario");
    const int gpus = n.value("gpus", 8);
    node.gpu_model = model->name;
    auto shape = capacity::SimulatedShapeFor(*model, gpus);
    node.cpu_milli = n.value("cpu_milli", shape->cpu_milli);
    node.memory_mib = n.value("memory_mib", shape->memory_mib);
    node.idle_power_watts = n.value("idle_power_watts", shape->idle_power_watts);
    node.cordoned = n.value("cordoned", false);
    node.driver_version = n.value("driver", std::string(capacity::kSimulatedDriverVersion));
    node.cuda_version = n.value("cuda", std::string(capacity::kSimulatedCudaVersion));
    const auto mig = n.value("mig", std::vector<int>{});
    for (int g = 0; g < gpus; ++g) {
      capacity::Gpu gpu;
      gpu.index = g;
      gpu.model = model->name;
      gpu.memory_mib = model->memory_mib;
      gpu.mig_enabled = std::find(mig.begin(), mig.end(), g) != mig.end();
      node.gpus.push_back(gpu);
    }
    if (n.contains("nvlink")) {
      node.nvlink_groups = n.at("nvlink").get<std::vector<std::vector<int>>>();
    } else if (model->interconnect == capacity::Interconnect::kNvlink) {
      node.nvlink_groups.emplace_back();
      for (int g = 0; g < gpus; ++g) node.nvlink_groups.back().push_back(g);
    }
    ATRIUM_RETURN_IF_ERROR(fleet.AddNode(std::move(node)));
  }
  return fleet;
}

QuotaTable ParseQuotas(const json& j) {
  QuotaTable t;
  for (const auto& [cls, v] : j.items()) {
    auto rc = ResourceClass::Parse(cls);
    EXPECT_TRUE(rc.has_value()) << cls;
    if (rc) t[*rc] = Quota{v.at(0).get<int64_t>(), v.at(1).get<int64_t>()};
  }
  return t;
}

TenantPolicy ParseTenant(const json& j) {
  TenantPolicy p;
  p.id = j.at("id");
  auto tier = ParseTier(j.value("tier", "shared"));
  EXPECT_TRUE(tier.has_value());
  if (tier) p.tier = *tier;
  p.weight = j.value("weight", 1.0);
  p.regions = j.value("regions", std::vector<std::string>{});
  p.pools = j.value("pools", std::vector<std::string>{});
  p.suspended = j.value("suspended", false);
  p.quotas = ParseQuotas(j.value("quotas", json::object()));
  const json projects = j.value("projects", json::object());
  for (const auto& [name, q] : projects.items()) {
    p.projects[name] = ParseQuotas(q);
  }
  return p;
}

AllocationRequest ParseRequest(const json& j) {
  AllocationRequest r;
  r.id = j.at("id");
  r.tenant = j.at("tenant");
  r.project = j.value("project", "");
  auto kind = ParseKind(j.value("kind", "gpu"));
  EXPECT_TRUE(kind.has_value());
  if (kind) r.kind = *kind;
  auto prio = ParsePriority(j.value("priority", "batch"));
  EXPECT_TRUE(prio.has_value());
  if (prio) r.priority = *prio;
  r.model = j.value("model", "");
  r.gpus = j.value("gpus", 1);
  r.nodes = j.value("nodes", 1);
  r.mig_profile = j.value("profile", "");
  r.milli = j.value("milli", 0);
  r.mem_cap_mib = j.value("mem_cap_mib", int64_t{0});
  r.cpu_milli = j.value("cpu_milli", int64_t{0});
  r.memory_mib = j.value("memory_mib", int64_t{0});
  r.pool = j.value("pool", "");
  r.region = j.value("region", "");
  if (j.contains("requirements")) {
    const json& q = j.at("requirements");
    r.requirements.min_driver_version = q.value("min_driver", "");
    r.requirements.min_cuda_version = q.value("min_cuda", "");
    r.requirements.gpu_models = q.value("gpu_models", std::vector<std::string>{});
  }
  return r;
}

std::string Describe(const Allocation& a) {
  std::string s = std::string(StateName(a.state));
  if (!a.placement.empty()) s += " on " + DescribePlacement(a.placement);
  if (a.mig_start >= 0) s += " mig " + a.request.mig_profile + "@" + std::to_string(a.mig_start);
  return s;
}

// Applies one step's action; returns its records.
Result<DecisionRecords> Act(Scheduler& s, const json& step, int64_t now) {
  if (step.contains("submit")) return s.Submit(ParseRequest(step.at("submit")), now);
  if (step.contains("release")) return s.Release(step.at("release").get<std::string>(), now);
  if (step.contains("tenant")) return s.SetTenant(ParseTenant(step.at("tenant")), now);
  if (step.contains("tenant_split")) {
    const json& j = step.at("tenant_split");
    EffectiveSplit split = ClampProjectSplit(ParseTenant(j));
    if (j.contains("clamped")) {
      std::map<std::string, std::vector<std::string>> got;
      for (const auto& [project, classes] : split.clamped) {
        for (const ResourceClass& rc : classes) got[project].push_back(rc.ToString());
      }
      EXPECT_EQ(got, (j.at("clamped").get<std::map<std::string, std::vector<std::string>>>()));
    }
    return s.SetTenant(std::move(split.policy), now);
  }
  if (step.contains("tier_conflicts")) {
    const json& j = step.at("tier_conflicts");
    auto tier = ParseTier(j.at("tier").get<std::string>());
    if (!tier) return std::move(tier).error();
    EXPECT_EQ(s.TierConflicts(j.at("tenant").get<std::string>(), *tier),
              step.value("conflicts", std::vector<std::string>{}));
    return DecisionRecords{};
  }
  if (step.contains("suspend")) return s.Suspend(step.at("suspend").get<std::string>(), now);
  if (step.contains("resume")) return s.Resume(step.at("resume").get<std::string>(), now);
  if (step.contains("evict")) return s.Evict(step.at("evict").get<std::string>(), now);
  if (step.contains("cordon")) return s.Cordon(step.at("cordon").get<std::string>(), now);
  if (step.contains("drain")) return s.Drain(step.at("drain").get<std::string>(), now);
  if (step.contains("uncordon")) return s.Uncordon(step.at("uncordon").get<std::string>(), now);
  if (step.contains("gpu_health")) {
    const json& g = step.at("gpu_health");
    return s.SetGpuHealth(g.at("node").get<std::string>(), g.at("gpu").get<int>(),
                          g.at("healthy").get<bool>(), now, g.value("reason", ""));
  }
  if (step.contains("scrub")) {
    const json& g = step.at("scrub");
    return s.FinishScrub(g.at("allocation").get<std::string>(), g.at("node").get<std::string>(),
                         g.at("gpu").get<int>(), g.value("ok", true), now, g.value("detail", ""));
  }
  return s.AdvanceTime(now);
}

std::vector<std::string> DescribeScrubs(const Scheduler& s) {
  std::vector<std::string> out;
  for (const ScrubHold& h : s.Scrubs()) {
    std::string line = DescribeScrub(h) + " " + std::string(ScrubStateName(h.state));
    if (!h.reason.empty()) line += ": " + h.reason;
    out.push_back(std::move(line));
  }
  return out;
}

std::unique_ptr<Scheduler> Rebuild(const Scheduler& old, const SchedulerOptions& options) {
  auto fresh = Scheduler::Create(old.fleet(), options);
  EXPECT_TRUE(fresh.has_value());
  if (!fresh) return nullptr;
  for (const auto& [id, t] : old.tenants()) EXPECT_OK((*fresh)->SetTenant(t, 0));
  EXPECT_OK((*fresh)->Restore(old.Allocations(), old.Scrubs()));
  return std::move(*fresh);
}

void RunScenario(const fs::path& path) {
  std::ifstream in(path);
  json doc = json::parse(in, nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  auto fleet = BuildFleet(doc.at("fleet"));
  ASSERT_TRUE(fleet.has_value()) << fleet.error().message;
  SchedulerOptions options;
  options.grace_ms = doc.value("grace_s", int64_t{30}) * 1000;
  options.max_pending_per_tenant =
      doc.value("max_pending_per_tenant", options.max_pending_per_tenant);
  options.max_pending_per_project =
      doc.value("max_pending_per_project", options.max_pending_per_project);
  options.scrub_gpus = doc.value("scrub_gpus", false);
  auto created = Scheduler::Create(std::move(*fleet), options);
  ASSERT_TRUE(created.has_value()) << created.error().message;
  std::unique_ptr<Scheduler> sched = std::move(*created);
  std::unique_ptr<Scheduler> shadow;  // the pre-restart scheduler, kept in step
  for (const json& t : doc.value("tenants", json::array())) {
    ASSERT_OK(sched->SetTenant(ParseTenant(t), 0));
  }
  std::vector<Allocation> stored;
  for (const json& j : doc.value("stored", json::array())) {
    Allocation a;
    a.request = ParseRequest(j);
    a.state = AllocationState::kRunning;
    a.seq = stored.size() + 1;
    a.placed_ms = 0;
    for (const json& p : j.at("on")) {
      a.placement.push_back(
          {p.at("node").get<std::string>(), p.at("gpus").get<std::vector<int>>()});
    }
    a.mig_start = j.value("mig_start", -1);
    const capacity::GpuModel* model = capacity::FindGpuModel(a.request.model);
    ASSERT_NE(model, nullptr) << a.id();
    a.charge_milli = ChargeMilli(a.request, *model);
    stored.push_back(std::move(a));
  }
  if (!stored.empty()) ASSERT_OK(sched->Restore(stored));
  int index = 0;
  for (const json& step : doc.at("steps")) {
    SCOPED_TRACE("step " + std::to_string(index++) + ": " + step.dump());
    const int64_t now = step.value("t", 0.0) * 1000;
    if (step.value("restart", false)) {
      std::unique_ptr<Scheduler> rebuilt = Rebuild(*sched, options);
      ASSERT_NE(rebuilt, nullptr);
      EXPECT_EQ(rebuilt->Allocations(), sched->Allocations());
      EXPECT_TRUE(rebuilt->cluster() == sched->cluster());
      EXPECT_TRUE(rebuilt->ledger() == sched->ledger());
      EXPECT_EQ(rebuilt->Queue(), sched->Queue());
      EXPECT_EQ(rebuilt->Scrubs(), sched->Scrubs());
      shadow = std::move(sched);
      sched = std::move(rebuilt);
      continue;
    }
    auto records = Act(*sched, step, now);
    if (step.contains("error")) {
      ASSERT_FALSE(records.has_value());
      EXPECT_NE(records.error().message.find(step.at("error").get<std::string>()),
                std::string::npos)
          << records.error().message;
      continue;
    }
    ASSERT_TRUE(records.has_value()) << records.error().message;
    std::vector<std::string> got;
    for (const DecisionRecord& r : *records) got.push_back(r.ToString());
    if (shadow != nullptr) {
      auto again = Act(*shadow, step, now);
      ASSERT_TRUE(again.has_value());
      EXPECT_EQ(*again, *records) << "the restored scheduler decided differently";
    }
    std::string all;
    for (const std::string& g : got) all += "\n  " + g;
    if (step.contains("expect")) {
      const auto want = step.at("expect").get<std::vector<std::string>>();
      EXPECT_EQ(got.size(), want.size()) << "records:" << all;
      for (size_t k = 0; k < std::min(got.size(), want.size()); ++k) {
        EXPECT_NE(got[k].find(want[k]), std::string::npos)
            << "record " << k << " is \"" << got[k] << "\", expected to contain \"" << want[k]
            << "\"; records:" << all;
      }
    }
    if (step.contains("scrubs")) {
      EXPECT_EQ(DescribeScrubs(*sched), step.at("scrubs").get<std::vector<std::string>>());
    }
    if (step.contains("queue")) {
      EXPECT_EQ(sched->Queue(), step.at("queue").get<std::vector<std::string>>());
    }
    const json states = step.value("state", json::object());
    for (const auto& [id, want] : states.items()) {
      const Allocation* a = sched->Find(id);
      if (want == "absent") {
        EXPECT_EQ(a, nullptr) << id;
        continue;
      }
      ASSERT_NE(a, nullptr) << id;
      EXPECT_NE(Describe(*a).find(want.get<std::string>()), std::string::npos)
          << id << " is \"" << Describe(*a) << "\"";
    }
    const json gpu_used = step.value("gpu_used", json::object());
    for (const auto& [key, want] : gpu_used.items()) {
      const size_t slash = key.rfind('/');
      ASSERT_NE(slash, std::string::npos) << "gpu_used key " << key << " is not node/gpu";
      auto node = sched->cluster().NodeIndex(key.substr(0, slash));
      ASSERT_TRUE(node.has_value()) << key;
      const auto& gpus = sched->cluster().runtime(*node).gpus;
      const size_t g = std::stoul(key.substr(slash + 1));
      ASSERT_LT(g, gpus.size()) << key;
      EXPECT_EQ(gpus[g].used_milli, want.get<int32_t>()) << key;
    }
    const json lacks = step.value("records_lack", json::object());
    for (const auto& [id, words] : lacks.items()) {
      for (const DecisionRecord& r : *records) {
        if (r.allocation_id != id) continue;
        for (const auto& w : words) {
          EXPECT_EQ(r.ToString().find(w.get<std::string>()), std::string::npos)
              << "record \"" << r.ToString() << "\" must not contain " << w;
        }
      }
    }
    const json tenant_explains = step.value("tenant_explain", json::object());
    for (const auto& [id, wants] : tenant_explains.items()) {
      auto text = sched->Explain(id, Scheduler::Audience::kOwner);
      ASSERT_TRUE(text.has_value()) << id << ": " << text.error().message;
      for (const auto& w : wants) {
        EXPECT_NE(text->find(w.get<std::string>()), std::string::npos)
            << "tenant explain " << id << ":\n"
            << *text << "\nexpected to contain: " << w.get<std::string>();
      }
    }
    const json tenant_lacks = step.value("tenant_explain_lacks", json::object());
    for (const auto& [id, words] : tenant_lacks.items()) {
      auto text = sched->Explain(id, Scheduler::Audience::kOwner);
      ASSERT_TRUE(text.has_value()) << id << ": " << text.error().message;
      for (const auto& w : words) {
        EXPECT_EQ(text->find(w.get<std::string>()), std::string::npos)
            << "tenant explain " << id << ":\n"
            << *text << "\nmust not contain: " << w.get<std::string>();
      }
    }
    const json explains = step.value("explain", json::object());
    for (const auto& [id, wants] : explains.items()) {
      auto text = sched->Explain(id, Scheduler::Audience::kStaff);
      ASSERT_TRUE(text.has_value()) << id << ": " << text.error().message;
      for (const auto& w : wants) {
        EXPECT_NE(text->find(w.get<std::string>()), std::string::npos)
            << "explain " << id << ":\n"
            << *text << "\nexpected to contain: " << w.get<std::string>();
      }
    }
  }
}

class ScenarioTest : public testing::TestWithParam<fs::path> {};

TEST_P(ScenarioTest, Runs) { RunScenario(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Scenarios, ScenarioTest,
    testing::ValuesIn(testing_support::JsonFilesIn(ATRIUM_SCHEDULER_SCENARIOS)),
    testing_support::NameOfFile);

}  // namespace
}  // namespace atrium::sched
