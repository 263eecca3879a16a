// The serving controller over a real store (SQLite and PostgreSQL), the
// scheduling and job services, the jobs' in-memory backend and a
// ManualClock; the health and metrics probes answer what the test says.
// Replicas become endpoints only once they answer; a crash leaves the list
// and is replaced after the backoff; scaling down drains first; a rolling
// update never leaves the deployment without a ready replica, and a
// version that never becomes ready is rolled back; a deleted deployment's
// replicas stop; a shared deployment runs as the platform's tenant; a
// preempted replica shrinks the deployment without counting as a failure.
#include "serving/deployment_controller.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "jobs/fake_backend.h"
#include "metering/gpu_meter.h"
#include "store/test_databases.h"
#include "support/store_rows.h"
#include "support/test_directory.h"

namespace atrium::serving {
namespace {

using jobs::testing::FakeBackend;
using testdb::Backend;
using testdb::BackendName;

constexpr char kFleet[] = "1xH100-80GBx8";
constexpr char kGpu[] = R"("resources":{"kind":"gpu","model":"H100-80GB","gpus":1})";

class DeploymentControllerTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    database_.Create(GetParam());
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_NO_FATAL_FAILURE(testdb::OpenStore(database_, &store_));
    scheduling::SchedulingOptions so;
    so.fleet_spec = kFleet;
    so.tick_ms = 0;
    so.grace_ms = 5'000;
    scheduling_ = std::make_unique<scheduling::SchedulingService>(*store_, clock_, so);
    ASSERT_TRUE(scheduling_->Start().has_value());
    for (const auto& [id, name] :
         {std::pair{"tn_a", "acme"}, std::pair{"tn_p", "platform-serving"}}) {
      const Tenant t = testing_rows::ActiveTenant(id, name, clock_.NowMillis());
      ASSERT_TRUE(store_->CreateTenant(t).has_value());
      scheduling_->TenantChanged(t);
      ASSERT_TRUE(
          scheduling_->SetQuota(admin_, id, "", {"H100-80GB", "gpu", 4000, 8000}).has_value());
    }
    jobs::JobServiceOptions jo;
    jo.tick_ms = 0;
    jobs_ = std::make_unique<jobs::JobService>(*store_, *scheduling_, backend_, clock_, jo);
    ASSERT_TRUE(jobs_->Start().has_value());
    StartController();
  }
  void TearDown() override {
    controller_.reset();
    jobs_.reset();
    scheduling_.reset();
    store_.reset();
    database_.Drop();
  }

  void StartController(const std::string& platform_tenant = "platform-serving") {
    controller_.reset();
    ServingOptions o;
    o.tick_ms = 0;
    o.platform_tenant = platform_tenant;
    o.port_min = 20'000;
    o.port_max = 20'009;
    o.probe_health = [this](const std::string& url, const std::string& path) {
      EXPECT_EQ(path, "/v1/models");
      auto it = health_.find(url);
      return it == health_.end() ? unknown_health_ : it->second;
    };
    o.probe_running = [this](const std::string& url, const std::string&, const std::string&) {
      auto it = running_.find(url);
      return it == running_.end() ? int64_t{0} : it->second;
    };
    o.endpoints_changed = [this] { ++endpoint_changes_; };
    o.port_free = [this](int64_t port) { return taken_ports_.count(port) == 0; };
    o.autoscale = rules_;
    if (!adapter_root_.empty()) {
      o.adapter_root = adapter_root_;
      o.adapter_dir_inside = "/opt/atrium/adapters";
      // An artifact "archive:bad" cannot be unpacked; any other is.
      o.unpack_adapter = [this](const std::string& tenant, const std::string& archive,
                                const std::string&, const std::string& dest) -> Status {
        unpacked_.push_back(tenant + "/" + archive);
        if (archive == "bad") return Error::InvalidArgument("not a tar archive");
        std::filesystem::create_directories(dest);
        std::ofstream(dest + "/adapter_config.json") << "{}";
        return OkStatus();
      };
      o.list_models = [this](const std::string& url) -> Result<std::set<std::string>> {
        if (mute_.count(url) != 0) return Error::Unavailable("no answer");
        std::set<std::string> listed = engines_[url];
        listed.insert("chat");
        return listed;
      };
      o.post_json = [this](const std::string& url, const std::string& path,
                           const std::string& body) -> Status {
        Json j = Json::parse(body);
        const std::string name = j["lora_name"];
        calls_.push_back(url + " " + path + " " + name +
                         (j.contains("lora_path") ? " " + j["lora_path"].get<std::string>() : ""));
        if (refused_.count(name) != 0) return Error::FailedPrecondition("bad weights");
        if (path == "/v1/load_lora_adapter") {
          engines_[url].insert(name);
        } else {
          engines_[url].erase(name);
        }
        return OkStatus();
      };
    }
    controller_ = std::make_unique<DeploymentController>(*store_, *jobs_, clock_, o);
  }

  DeploymentRecord Create(const std::string& tenant, const std::string& spec_fields) {
    auto spec = ReadManagedSpec(Json::parse("{" + spec_fields + "}"), SpecAuthor::kPlatform);
    EXPECT_TRUE(spec.has_value()) << spec.error().message;
    DeploymentRecord d;
    d.id = "dep_" + std::to_string(++deployments_);
    d.model = "chat";
    d.region = "eu";
    d.latency_tier = "interactive";
    d.visibility = tenant.empty() ? "shared" : "dedicated";
    d.tenant_id = tenant;
    d.created_at = d.updated_at = clock_.NowMillis();
    d.serving = ManagedSpecJson(*spec).dump();
    EXPECT_TRUE(controller_->CheckSpec(*spec, tenant).has_value());
    EXPECT_TRUE(store_->CreateDeployment(d).has_value());
    return d;
  }

  DeploymentRecord Get(const DeploymentRecord& d) {
    auto got = store_->GetDeployment(TenantScope::Of(d.tenant_id), d.id);
    EXPECT_TRUE(got.has_value());
    return got.has_value() ? *got : DeploymentRecord{};
  }

  ManagedSpec SpecOf(const DeploymentRecord& d) {
    auto s = ParseStoredSpec(Get(d).serving);
    EXPECT_TRUE(s.has_value());
    return s.has_value() ? *s : ManagedSpec{};
  }

  void Update(const DeploymentRecord& d, const std::function<void(ManagedSpec&)>& change) {
    DeploymentRecord now = Get(d);
    ManagedSpec before = SpecOf(d);
    ManagedSpec spec = before;
    change(spec);
    if (!spec.SameRun(before)) spec.generation = before.generation + 1;
    now.serving = ManagedSpecJson(spec).dump();
    now.updated_at = clock_.NowMillis();
    ASSERT_TRUE(store_->UpdateDeployment(TenantScope::Of(d.tenant_id), now).has_value());
  }

  // One round: the jobs see their workloads, then the controller acts.
  void Round(int64_t advance_ms = 0) {
    clock_.AdvanceMillis(advance_ms);
    auto s = scheduling_->Tick();
    EXPECT_TRUE(s.has_value()) << s.error().message;
    auto j = jobs_->Tick();
    EXPECT_TRUE(j.has_value()) << j.error().message;
    auto c = controller_->Tick();
    EXPECT_TRUE(c.has_value()) << c.error().message;
    // Cancels the controller asked for end at the jobs' next round.
    j = jobs_->Tick();
    EXPECT_TRUE(j.has_value()) << j.error().message;
  }

  std::vector<DeploymentReplicaRecord> Replicas(const DeploymentRecord& d) {
    auto r = store_->ListReplicas(d.id, 100);
    EXPECT_TRUE(r.has_value());
    return r.has_value() ? *r : std::vector<DeploymentReplicaRecord>{};
  }

  std::vector<DeploymentReplicaRecord> InState(const DeploymentRecord& d,
                                               const std::string& state) {
    std::vector<DeploymentReplicaRecord> out;
    for (auto& r : Replicas(d)) {
      if (r.state == state) out.push_back(r);
    }
    return out;
  }

  std::vector<std::string> Endpoints(const DeploymentRecord& d) {
    std::vector<std::string> out;
    for (const auto& e : Get(d).endpoints) out.push_back(e.url);
    std::sort(out.begin(), out.end());
    return out;
  }

  JobRecord JobOf(const DeploymentReplicaRecord& r) {
    auto j = store_->GetJob(TenantScope::Of(r.tenant_id), r.job_id);
    EXPECT_TRUE(j.has_value()) << r.job_id;
    return j.has_value() ? *j : JobRecord{};
  }

  // Rounds of `step_ms` until `done` or `max_rounds`; `each` runs after every round.
  template <class Done>
  bool RoundsUntil(Done done, int max_rounds = 200, int64_t step_ms = 1'000,
                   const std::function<void()>& each = {}) {
    for (int i = 0; i < max_rounds; ++i) {
      if (done()) return true;
      Round(step_ms);
      if (each) each();
    }
    return done();
  }

  testdb::TestDatabase database_;
  ManualClock clock_{1'700'000'000'000};
  FakeBackend backend_{clock_};
  std::unique_ptr<Store> store_;
  std::unique_ptr<scheduling::SchedulingService> scheduling_;
  std::unique_ptr<jobs::JobService> jobs_;
  std::unique_ptr<DeploymentController> controller_;
  std::map<std::string, Health> health_;
  Health unknown_health_ = Health::kOk;  // of a URL not in health_
  AutoscaleRules rules_;                 // the controller's, at StartController
  std::map<std::string, int64_t> running_;
  int endpoint_changes_ = 0;
  int deployments_ = 0;
  std::set<int64_t> taken_ports_;  // held by other programs where replicas run
  // Adapters: the folder (set before StartController), what each engine
  // lists besides its model, engines that do not answer, adapter ids an
  // engine refuses, and the calls made.
  std::string adapter_root_;
  std::map<std::string, std::set<std::string>> engines_;
  std::set<std::string> mute_;
  std::set<std::string> refused_;
  std::vector<std::string> calls_;
  std::vector<std::string> unpacked_;
  RequestOrigin admin_{
      .actor = "user:usr_op", .actor_role = "platform-admin", .request_id = "", .source = ""};
};

TEST_P(DeploymentControllerTest, ReplicasAreJobsOfTheTenantAndEndpointsOnlyOnceTheyAnswer) {
  DeploymentRecord d = Create("tn_a", std::string(R"("template":"engine-sim",)") + kGpu +
                                          R"(,"replicas":2,"max_replicas":2)");
  health_["http://127.0.0.1:20000"] = Health::kFailed;
  health_["http://127.0.0.1:20001"] = Health::kFailed;
  Round();
  auto replicas = Replicas(d);
  ASSERT_EQ(replicas.size(), 2U);
  for (const auto& r : replicas) {
    EXPECT_EQ(r.tenant_id, "tn_a");
    EXPECT_EQ(r.generation, 1);
    EXPECT_EQ(r.spec, d.serving);
    JobRecord job = JobOf(r);
    EXPECT_EQ(job.name, d.id + "-" + r.id);
    EXPECT_EQ(job.tenant_id, "tn_a");
    FakeBackend::Workload w = backend_.Get(job.workload_id());
    EXPECT_EQ(w.spec.gpus.size(), 1U);
    EXPECT_EQ(w.spec.argv[1], "engine-sim");
  }
  Round(100);
  EXPECT_EQ(InState(d, "starting").size(), 2U);
  EXPECT_TRUE(Get(d).endpoints.empty());  // running, but not answering

  health_["http://127.0.0.1:20000"] = Health::kOk;
  Round(100);
  EXPECT_EQ(Endpoints(d), (std::vector<std::string>{"http://127.0.0.1:20000"}));
  EXPECT_GE(endpoint_changes_, 1);
  health_.clear();
  Round(100);
  EXPECT_EQ(Endpoints(d),
            (std::vector<std::string>{"http://127.0.0.1:20000", "http://127.0.0.1:20001"}));
  // The simulator's batch of 64: 32 slots, 8 burst slots, two prefills.
  EXPECT_EQ(Get(d).endpoints[0].capacity, 32);
  EXPECT_EQ(Get(d).endpoints[0].burst, 8);
  EXPECT_EQ(Get(d).endpoints[0].max_prefill, 2);
  // Nothing more to do: a quiet round writes nothing.
  const int changes = endpoint_changes_;
  Round(1'000);
  EXPECT_EQ(endpoint_changes_, changes);
  EXPECT_EQ(Replicas(d).size(), 2U);
}

TEST_P(DeploymentControllerTest, ACrashedReplicaLeavesTheListFirstAndIsReplacedAfterTheBackoff) {
  DeploymentRecord d = Create("tn_a", std::string(R"("template":"engine-sim",)") + kGpu +
                                          R"(,"replicas":2,"max_replicas":2)");
  Round();
  Round(100);
  ASSERT_EQ(Endpoints(d).size(), 2U);
  DeploymentReplicaRecord victim = InState(d, "ready").front();
  backend_.Crash(JobOf(victim).workload_id(), 9);
  Round(100);
  // Out of the endpoints, ended with why, not yet replaced (backoff: 1 s).
  const std::vector<std::string> left = Endpoints(d);
  EXPECT_EQ(left.size(), 1U);
  EXPECT_EQ(std::count(left.begin(), left.end(), victim.url), 0);
  auto ended = InState(d, "ended");
  ASSERT_EQ(ended.size(), 1U);
  EXPECT_NE(ended[0].reason.find("the model server ended"), std::string::npos);
  EXPECT_EQ(Replicas(d).size(), 2U);
  Round(1'000);
  ASSERT_EQ(Replicas(d).size(), 3U);
  Round(100);
  EXPECT_EQ(Endpoints(d).size(), 2U);

  // A replica that stops answering leaves after two failed checks.
  DeploymentReplicaRecord sick = InState(d, "ready").front();
  health_[sick.url] = Health::kFailed;
  Round(100);
  EXPECT_EQ(Endpoints(d).size(), 2U);  // one failed check is forgiven
  Round(100);
  EXPECT_EQ(Endpoints(d).size(), 1U);
  EXPECT_EQ(JobOf(sick).state, "cancelled");
}

TEST_P(DeploymentControllerTest, ScalingDownDrainsAReplicaBeforeItsJobStops) {
  DeploymentRecord d = Create("tn_a", std::string(R"("template":"engine-sim",)") + kGpu +
                                          R"(,"replicas":2,"max_replicas":3)");
  Round();
  Round(100);
  ASSERT_EQ(Endpoints(d).size(), 2U);
  Update(d, [](ManagedSpec& s) { ASSERT_TRUE(ScaleTo(s, 1).has_value()); });
  for (auto& r : Replicas(d)) running_[r.url] = 3;  // busy
  Round(100);
  auto draining = InState(d, "draining");
  ASSERT_EQ(draining.size(), 1U);
  EXPECT_EQ(Endpoints(d).size(), 1U);  // out of the list at once
  EXPECT_EQ(JobOf(draining[0]).state, "running");
  Round(5'000);
  EXPECT_EQ(JobOf(draining[0]).state, "running");  // still busy, within 30 s
  running_[draining[0].url] = 0;
  Round(100);
  EXPECT_EQ(JobOf(draining[0]).state, "cancelled");
  Round(100);
  EXPECT_EQ(InState(d, "ended").size(), 1U);
  EXPECT_EQ(InState(d, "ended")[0].reason, "scaled down (drained: no request in flight)");

  // Scale to zero: no endpoint at all, no replica left running.
  Update(d, [](ManagedSpec& s) { ASSERT_TRUE(ScaleTo(s, 0).has_value()); });
  running_.clear();
  ASSERT_TRUE(RoundsUntil([&] { return InState(d, "ended").size() == 2U; }, 10));
  EXPECT_TRUE(Get(d).endpoints.empty());
}

TEST_P(DeploymentControllerTest, ARollingUpdateNeverLeavesTheDeploymentWithoutAReadyReplica) {
  DeploymentRecord d = Create("tn_a", std::string(R"("template":"engine-sim",)") + kGpu +
                                          R"(,"replicas":2,"max_replicas":2)");
  Round();
  Round(100);
  ASSERT_EQ(Endpoints(d).size(), 2U);
  Update(d, [](ManagedSpec& s) { s.source = "/models/v2"; });
  bool never_empty = true;
  ASSERT_TRUE(RoundsUntil(
      [&] {
        auto reps = InState(d, "ready");
        return reps.size() == 2U && reps[0].generation == 2 && reps[1].generation == 2 &&
               InState(d, "draining").empty() && InState(d, "stopping").empty();
      },
      100, 500, [&] { never_empty = never_empty && !Get(d).endpoints.empty(); }));
  EXPECT_TRUE(never_empty);
  for (const auto& r : InState(d, "ended")) {
    EXPECT_EQ(r.generation, 1);
    EXPECT_EQ(r.reason.rfind("replaced by generation 2 (", 0), 0U) << r.reason;
  }
  EXPECT_EQ(Get(d).endpoints.size(), 2U);
}

TEST_P(DeploymentControllerTest, AVersionThatNeverBecomesReadyIsRolledBack) {
  DeploymentRecord d = Create("tn_a", std::string(R"("template":"engine-sim",)") + kGpu +
                                          R"(,"source":"/models/v1","replicas":1)");
  Round();
  Round(100);
  ASSERT_EQ(Endpoints(d).size(), 1U);
  const DeploymentReplicaRecord v1 = InState(d, "ready").front();
  Update(d, [](ManagedSpec& s) { s.source = "/models/broken"; });
  // Every new replica runs but never answers.
  health_[v1.url] = Health::kOk;
  unknown_health_ = Health::kFailed;
  bool never_empty = true;
  const bool done = RoundsUntil(
      [&] { return SpecOf(d).rolled_back_from == 2; }, 400, 5'000,
      [&] { never_empty = never_empty && Endpoints(d) == std::vector<std::string>{v1.url}; });
  if (!done) {
    for (const auto& r : Replicas(d)) {
      ADD_FAILURE() << r.id << " gen " << r.generation << " " << r.state << ": " << r.reason;
    }
    FAIL() << "not rolled back: " << Get(d).serving;
  }
  EXPECT_TRUE(never_empty);
  ManagedSpec now = SpecOf(d);
  EXPECT_EQ(now.source, "/models/v1");
  EXPECT_EQ(now.generation, 3);
  // The old replica carries on as the new generation: no restart.
  Round(100);
  auto ready = InState(d, "ready");
  ASSERT_EQ(ready.size(), 1U);
  EXPECT_EQ(ready[0].id, v1.id);
  EXPECT_EQ(ready[0].generation, 3);
  EXPECT_EQ(JobOf(ready[0]).state, "running");
  ASSERT_TRUE(RoundsUntil(
      [&] { return InState(d, "starting").empty() && InState(d, "stopping").empty(); }, 20));
  EXPECT_EQ(Replicas(d).size(), 1U + kRollbackAfterFailures);
  // Audited in the tenant's chain, by the controller.
  auto audit = store_->ListAudit("tn_a", {.limit = 1000});
  ASSERT_TRUE(audit.has_value());
  int rolled_back = 0;
  for (const auto& a : audit->items) {
    if (a.action == "serving.rolled_back") {
      ++rolled_back;
      EXPECT_EQ(a.actor, kServingActor);
      EXPECT_EQ(a.target, "deployment/" + d.id);
      EXPECT_NE(a.detail.find("generation 2 never became ready"), std::string::npos) << a.detail;
    }
  }
  EXPECT_EQ(rolled_back, 1);
}

TEST_P(DeploymentControllerTest, ARollBackLosesToAnUpdateWrittenMeanwhile) {
  DeploymentRecord d = Create("tn_a", std::string(R"("template":"engine-sim",)") + kGpu);
  const std::string stale = Get(d).serving;
  Update(d, [](ManagedSpec& s) { s.replicas = 1; });
  Update(d, [](ManagedSpec& s) { s.source = "/models/v9"; });
  AuditRecord a;
  a.time = clock_.NowMillis();
  a.actor = kServingActor;
  a.action = "serving.rolled_back";
  a.outcome = "allowed";
  Status lost = store_->ReplaceServing(d.id, stale, stale, clock_.NowMillis(), a);
  ASSERT_FALSE(lost.has_value());
  EXPECT_EQ(lost.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_EQ(SpecOf(d).source, "/models/v9");
}

TEST_P(DeploymentControllerTest, APortAnotherProgramHoldsIsNeverGivenToAReplica) {
  taken_ports_ = {20'000, 20'002};
  DeploymentRecord d = Create("tn_a", std::string(R"("template":"engine-sim",)") + kGpu +
                                          R"(,"replicas":2,"max_replicas":2)");
  Round();
  std::set<int64_t> ports;
  for (const auto& r : Replicas(d)) ports.insert(r.port);
  EXPECT_EQ(ports, (std::set<int64_t>{20'001, 20'003}));
  // Every port taken: the replica waits, saying why.
  for (int64_t p = 20'000; p <= 20'009; ++p) taken_ports_.insert(p);
  Update(d, [](ManagedSpec& s) { ASSERT_TRUE(ScaleTo(s, 3).has_value()); });
  Status refused = controller_->Tick();
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("another program"), std::string::npos)
      << refused.error().message;
  EXPECT_EQ(Replicas(d).size(), 2U);
}

// The default check: a port a listener holds here is not free.
TEST(ServingPortTest, APortBoundHereIsNotFree) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t length = sizeof address;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const int64_t held = ntohs(address.sin_port);
  EXPECT_FALSE(CanBindHere("127.0.0.1", held));
  ::close(fd);
  EXPECT_TRUE(CanBindHere("127.0.0.1", held));
  // Not an address this check can judge: not refused.
  EXPECT_TRUE(CanBindHere("node-7.cluster", held));
}

TEST_P(DeploymentControllerTest, ADeletedDeploymentsReplicasStop) {
  DeploymentRecord d = Create("tn_a", std::string(R"("template":"engine-sim",)") + kGpu +
                                          R"(,"replicas":2,"max_replicas":2)");
  Round();
  Round(100);
  auto replicas = Replicas(d);
  ASSERT_EQ(replicas.size(), 2U);
  ASSERT_TRUE(store_->DeleteDeployment(TenantScope::Of("tn_a"), d.id).has_value());
  ASSERT_TRUE(RoundsUntil([&] { return InState(d, "ended").size() == 2U; }, 5, 100));
  for (const auto& r : replicas) EXPECT_EQ(JobOf(r).state, "cancelled");
  EXPECT_EQ(InState(d, "ended")[0].reason, "its deployment was deleted");
}

TEST_P(DeploymentControllerTest, ASharedDeploymentRunsAsThePlatformsServingTenant) {
  DeploymentRecord d = Create("", std::string(R"("template":"engine-sim",)") + kGpu);
  Round();
  auto replicas = Replicas(d);
  ASSERT_EQ(replicas.size(), 1U);
  EXPECT_EQ(replicas[0].tenant_id, "tn_p");
  EXPECT_EQ(JobOf(replicas[0]).tenant_id, "tn_p");

  // Without a serving tenant, a shared managed deployment is refused.
  StartController("");
  auto spec = ParseStoredSpec(d.serving);
  ASSERT_TRUE(spec.has_value());
  Status refused = controller_->CheckSpec(*spec, "");
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_TRUE(controller_->CheckSpec(*spec, "tn_a").has_value());
  ManagedSpec unknown = *spec;
  unknown.template_name = "triton";
  EXPECT_EQ(controller_->CheckSpec(unknown, "tn_a").error().code, ErrorCode::kNotFound);
}

TEST_P(DeploymentControllerTest, AReplicaItsTenantsQuotaCannotHoldEndsWithWhyAndBacksOff) {
  // Four GPUs: more than the tenant's limit of two.
  ASSERT_TRUE(
      scheduling_->SetQuota(admin_, "tn_a", "", {"H100-80GB", "gpu", 1000, 2000}).has_value());
  DeploymentRecord d =
      Create("tn_a", R"("template":"engine-sim","resources":{"kind":"gpu","model":"H100-80GB",
                         "gpus":4})");
  Status first = controller_->Tick();
  auto replicas = Replicas(d);
  ASSERT_EQ(replicas.size(), 1U);
  EXPECT_EQ(replicas[0].state, "ended");
  EXPECT_NE(replicas[0].reason.find("its job was refused"), std::string::npos);
  EXPECT_FALSE(first.has_value());
  // Within the backoff nothing more is tried; after it, once more.
  clock_.AdvanceMillis(500);
  (void)controller_->Tick();
  EXPECT_EQ(Replicas(d).size(), 1U);
  clock_.AdvanceMillis(600);
  (void)controller_->Tick();
  EXPECT_EQ(Replicas(d).size(), 2U);
}

TEST_P(DeploymentControllerTest, APreemptedReplicaShrinksTheDeploymentWithoutBackoff) {
  DeploymentRecord d =
      Create("tn_a", std::string(R"("template":"engine-sim",)") + kGpu +
                         R"(,"replicas":2,"max_replicas":2,"priority":"preemptible")");
  Round();
  Round(100);
  ASSERT_EQ(Endpoints(d).size(), 2U);
  // The serving tenant claims a guarantee of the whole node: acme's
  // borrowed replicas are reclaimed.
  ASSERT_TRUE(scheduling_->SetQuota(admin_, "tn_a", "", {"H100-80GB", "gpu", 0, 8000}).has_value());
  ASSERT_TRUE(
      scheduling_->SetQuota(admin_, "tn_p", "", {"H100-80GB", "gpu", 8000, 8000}).has_value());
  auto reclaim = scheduling_->Submit(admin_, "tn_p", "usr_p", [] {
    sched::AllocationRequest r;
    r.model = "H100-80GB";
    r.gpus = 8;
    r.priority = sched::Priority::kInteractive;
    return r;
  }());
  ASSERT_TRUE(reclaim.has_value()) << reclaim.error().message;
  ASSERT_TRUE(RoundsUntil([&] { return InState(d, "ended").size() == 2U; }, 40, 1'000));
  EXPECT_TRUE(Get(d).endpoints.empty());
  for (const auto& r : InState(d, "ended")) {
    EXPECT_NE(r.reason.find("reclaimed"), std::string::npos) << r.reason;
  }
  // New replicas wait for GPUs: asked for at once, queued, not routed.
  Round(100);
  EXPECT_EQ(InState(d, "starting").size(), 2U);
  EXPECT_TRUE(Get(d).endpoints.empty());
}

// A replica's GPU time is the tenant's, recorded with the deployment: the
// allocation it held and the job run within it both carry the id, and
// the tenant's own job does not.
TEST_P(DeploymentControllerTest, AReplicasGpuTimeIsRecordedWithItsDeployment) {
  DeploymentRecord d = Create("tn_a", std::string(R"("template":"engine-sim",)") + kGpu);
  Round();
  Round(100);
  ASSERT_EQ(Endpoints(d).size(), 1U);
  jobs::JobSpec own;
  own.name = "train";
  own.command = {"train"};
  own.time_limit_s = 3 * 3600;
  own.resources.model = "H100-80GB";
  own.resources.gpus = 1;
  auto job = jobs_->Submit(admin_, "tn_a", "", own);
  ASSERT_TRUE(job.has_value()) << job.error().message;
  Round(100);
  Round(2 * 60 * 60 * 1000);  // two hours on: past the meter's lag
  metering::GpuMeterOptions mo;
  mo.interval_ms = 0;
  metering::GpuMeter meter(*store_, clock_, mo);
  meter.AddSource(std::make_unique<metering::AllocationSubjectSource>(*store_));
  meter.AddSource(std::make_unique<metering::JobSubjectSource>(*store_));
  auto round = meter.Tick();
  ASSERT_TRUE(round.has_value()) << round.error().message;
  GpuUsageFilter f;
  f.deployment_id = d.id;
  auto replica = store_->ListGpuUsage(TenantScope::Of("tn_a"), f, {});
  ASSERT_TRUE(replica.has_value());
  std::set<std::string> kinds;
  for (const auto& g : replica->items) {
    EXPECT_EQ(g.deployment_id, d.id);
    kinds.insert(g.subject_kind);
  }
  EXPECT_EQ(kinds, (std::set<std::string>{"allocation", "job"}));
  auto per = store_->SummarizeGpuUsage(TenantScope::Of("tn_a"), {}, "deployment");
  ASSERT_TRUE(per.has_value());
  ASSERT_EQ(per->size(), 2U);  // the tenant's own job, and the deployment's replica
  EXPECT_EQ(per->at(0).deployment_id, "");
  EXPECT_EQ(per->at(1).deployment_id, d.id);
  EXPECT_GT(per->at(1).gpu_milli_ms, 1000 * 60 * 60 * 1000LL);
}

// Autoscaling: up at once for what the gateways report (audited with the
// numbers), down one step per cooldown when the load is gone, to zero
// after idling, and back to one as soon as a request waits.
TEST_P(DeploymentControllerTest, AnAutoscalingDeploymentFollowsTheGatewaysAndSaysWhy) {
  rules_.allow_zero = true;
  rules_.up_cooldown_ms = 5'000;
  rules_.down_cooldown_ms = 10'000;
  rules_.idle_to_zero_ms = 20'000;
  StartController();
  DeploymentRecord d =
      Create("tn_a", std::string(R"("template":"engine-sim",)") + kGpu +
                         R"(,"autoscale":true,"replicas":1,"min_replicas":0,"max_replicas":3,)"
                         R"("capacity":4)");
  Round();
  Round(100);
  ASSERT_EQ(Endpoints(d).size(), 1U);
  auto report = [&](int64_t queued, int64_t wait_ms, int64_t in_flight) {
    ASSERT_TRUE(store_
                    ->ReportDeploymentLoad(
                        {{d.id, "gw_1", queued, wait_ms, in_flight, clock_.NowMillis()}}, 0)
                    .has_value());
  };
  report(30, 2'000, 4);
  Round(100);
  EXPECT_EQ(SpecOf(d).replicas, 3);
  ASSERT_TRUE(RoundsUntil([&] { return Endpoints(d).size() == 3U; }, 20, 100));
  auto audit = store_->ListAudit("tn_a", {.limit = 1000});
  ASSERT_TRUE(audit.has_value());
  std::vector<std::string> details;
  for (const auto& a : audit->items) {
    if (a.action != "serving.autoscaled") continue;
    EXPECT_EQ(a.actor, kServingActor);
    EXPECT_EQ(a.target, "deployment/" + d.id);
    details.push_back(a.detail);
  }
  ASSERT_EQ(details.size(), 1U);
  EXPECT_NE(details[0].find("30 queued (oldest waited 2000 ms), 4 in flight"), std::string::npos)
      << details[0];
  EXPECT_NE(details[0].find("1 -> 3 replicas"), std::string::npos) << details[0];

  // The load is gone: one step down per cooldown, then zero once idle.
  std::vector<int64_t> seen{3};
  ASSERT_TRUE(RoundsUntil([&] { return SpecOf(d).replicas == 0; }, 200, 1'000,
                          [&] {
                            report(0, 0, 0);
                            if (SpecOf(d).replicas != seen.back())
                              seen.push_back(SpecOf(d).replicas);
                          }));
  if (seen.back() != 0) seen.push_back(0);
  EXPECT_EQ(seen, (std::vector<int64_t>{3, 2, 1, 0}));
  ASSERT_TRUE(RoundsUntil([&] { return InState(d, "ended").size() == 3U; }, 60, 1'000,
                          [&] { report(0, 0, 0); }));
  EXPECT_TRUE(Get(d).endpoints.empty());

  // A request waits at the gateway: one replica at once, cooldown or not.
  report(1, 50, 0);
  Round(100);
  EXPECT_EQ(SpecOf(d).replicas, 1);
  ASSERT_TRUE(RoundsUntil([&] { return Endpoints(d).size() == 1U; }, 20, 100));

  // The gateways fall silent (their reports stale): nothing changes.
  const int64_t before = SpecOf(d).replicas;
  for (int i = 0; i < 30; ++i) Round(10'000);
  EXPECT_EQ(SpecOf(d).replicas, before);
}

INSTANTIATE_TEST_SUITE_P(Drivers, DeploymentControllerTest,
                         ::testing::Values(Backend::kSqlite, Backend::kPostgres), BackendName);

// ------------------------------------------------------------- LoRA adapters

class AdapterControllerTest : public DeploymentControllerTest {
 protected:
  void SetUp() override {
    adapter_root_ = TestDirectory("adapters").string();
    DeploymentControllerTest::SetUp();
  }
  void TearDown() override {
    DeploymentControllerTest::TearDown();
    // The test's name holds the driver's: "<dir>/Sqlite".
    std::filesystem::remove_all(TestDirectory("adapters").parent_path());
  }
  AdapterRecord Register(const DeploymentRecord& d, const std::string& tenant,
                         const std::string& name, const std::string& archive = "arc_1") {
    AdapterRecord a;
    a.id = "ad_" + name;
    a.deployment_id = d.id;
    a.name = name;
    a.artifact = "archive:" + archive;
    a.sha256 = std::string(64, 'a');
    a.status = "loading";
    a.created_at = a.updated_at = clock_.NowMillis();
    auto made = store_->CreateAdapter(TenantScope::Of(tenant), a, 8, 20);
    EXPECT_TRUE(made.has_value()) << made.error().message;
    return made.has_value() ? *made : a;
  }
  AdapterRecord Reread(const AdapterRecord& a) {
    auto got = store_->GetAdapter(TenantScope::Of(a.tenant_id), a.id);
    EXPECT_TRUE(got.has_value());
    return got.has_value() ? *got : AdapterRecord{};
  }
  bool Called(const std::string& call) {
    return std::find(calls_.begin(), calls_.end(), call) != calls_.end();
  }
};

TEST_P(AdapterControllerTest, AReplicaServesOnlyOnceItHasLoadedEveryAdapterFromItsFolder) {
  DeploymentRecord d =
      Create("tn_a", std::string(R"("template":"engine-sim","max_adapters":4,)") + kGpu);
  AdapterRecord a = Register(d, "tn_a", "support");
  const std::string url = "http://127.0.0.1:20000";
  mute_.insert(url);  // answers its health check, but not what it lists
  Round();
  Round(100);
  EXPECT_EQ(InState(d, "starting").size(), 1U);
  EXPECT_TRUE(Get(d).endpoints.empty());
  // The archive was unpacked into the deployment's folder, which the
  // replica's sandbox shows read-only.
  EXPECT_EQ(unpacked_, std::vector<std::string>{"tn_a/arc_1"});
  EXPECT_TRUE(
      std::filesystem::exists(adapter_root_ + "/" + d.id + "/ad_support/adapter_config.json"));
  auto replica = Replicas(d).at(0);
  FakeBackend::Workload w = backend_.Get(JobOf(replica).workload_id());
  EXPECT_NE(std::find(w.spec.argv.begin(), w.spec.argv.end(), "--enable-lora"), w.spec.argv.end());
  EXPECT_EQ(w.spec.read_only_binds, (std::vector<std::pair<std::string, std::string>>{
                                        {"/opt/atrium/adapters", adapter_root_ + "/" + d.id}}));

  mute_.clear();
  Round(100);
  EXPECT_TRUE(Called(url + " /v1/load_lora_adapter ad_support /opt/atrium/adapters/ad_support"));
  EXPECT_EQ(Endpoints(d), std::vector<std::string>{url});
  EXPECT_EQ(Reread(a).status, "ready");
  EXPECT_EQ(Reread(a).detail, "");

  // A second replica: ready only with the adapter loaded too.
  Update(d, [](ManagedSpec& s) { ASSERT_TRUE(ScaleTo(s, 2).has_value()); });
  const std::string url2 = "http://127.0.0.1:20001";
  mute_.insert(url2);
  Round(100);
  Round(100);
  EXPECT_EQ(Endpoints(d), std::vector<std::string>{url});
  mute_.clear();
  Round(100);
  EXPECT_EQ(Endpoints(d), (std::vector<std::string>{url, url2}));
  EXPECT_EQ(engines_[url2], std::set<std::string>{"ad_support"});
  EXPECT_EQ(Reread(a).status, "ready");
}

TEST_P(AdapterControllerTest, AnAdapterNotOnEveryReadyReplicaIsNotRoutedAndADeletedOneIsUnloaded) {
  DeploymentRecord d = Create("", std::string(R"("template":"engine-sim","max_adapters":4,)") +
                                      kGpu + R"(,"replicas":2,"max_replicas":2)");
  Round();
  Round(100);
  ASSERT_EQ(Get(d).endpoints.size(), 2U);
  const std::string url = "http://127.0.0.1:20000";
  const std::string url2 = "http://127.0.0.1:20001";
  // Registered while both serve; one of them cannot be asked this round.
  mute_.insert(url2);
  AdapterRecord a = Register(d, "tn_a", "support");
  Round(100);
  // A replica that did not answer is not counted: loaded on the one asked.
  EXPECT_EQ(Reread(a).status, "ready");
  EXPECT_EQ(engines_[url], std::set<std::string>{"ad_support"});
  mute_.clear();
  Round(100);
  EXPECT_EQ(engines_[url2], std::set<std::string>{"ad_support"});
  // An engine that drops it (restarted in place, say) and will not load it
  // again: the adapter fails.
  engines_[url2].clear();
  refused_.insert("ad_support");
  Round(100);
  EXPECT_EQ(Reread(a).status, "failed");
  EXPECT_NE(Reread(a).detail.find("the engine would not load it: bad weights"), std::string::npos);
  // A failed adapter blocks no replica and is not retried.
  const size_t calls = calls_.size();
  Round(100);
  EXPECT_EQ(calls_.size(), calls);
  EXPECT_EQ(Get(d).endpoints.size(), 2U);

  // Deleted: unloaded from every engine that lists it, its files gone.
  refused_.clear();
  AdapterRecord b = Register(d, "tn_a", "second");
  Round(100);
  EXPECT_EQ(Reread(b).status, "ready");
  ASSERT_TRUE(store_->DeleteAdapter(TenantScope::Of("tn_a"), b.id).has_value());
  Round(100);
  EXPECT_TRUE(Called(url + " /v1/unload_lora_adapter ad_second"));
  EXPECT_TRUE(Called(url2 + " /v1/unload_lora_adapter ad_second"));
  EXPECT_FALSE(std::filesystem::exists(adapter_root_ + "/" + d.id + "/ad_second"));
  // What an engine lists that is not an adapter id is never unloaded.
  engines_[url].insert("some-model");
  Round(100);
  EXPECT_FALSE(Called(url + " /v1/unload_lora_adapter some-model"));
}

TEST_P(AdapterControllerTest,
       AnArtifactThatCannotBeUnpackedFailsWithWhyAndTheFolderGoesWithItsDeployment) {
  DeploymentRecord d =
      Create("tn_a", std::string(R"("template":"engine-sim","max_adapters":4,)") + kGpu);
  AdapterRecord a = Register(d, "tn_a", "broken", "bad");
  std::filesystem::create_directories(adapter_root_ + "/" + d.id + "/ad_gone.part-123");
  Round();
  Round(100);
  EXPECT_EQ(Reread(a).status, "failed");
  EXPECT_EQ(Reread(a).detail, "its artifact could not be unpacked: not a tar archive");
  EXPECT_EQ(Get(d).endpoints.size(), 1U);  // the broken adapter holds no replica back
  // A crash's half-unpacked folder is removed.
  EXPECT_FALSE(std::filesystem::exists(adapter_root_ + "/" + d.id + "/ad_gone.part-123"));
  // Without a folder for adapters, a spec allowing them is refused.
  adapter_root_.clear();
  StartController();
  Status refused = controller_->CheckSpec(SpecOf(d), "tn_a");
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("adapter_dir"), std::string::npos);
  adapter_root_ = TestDirectory("adapters").string();
  StartController();
  // The deployment deleted: its folder goes once its replicas have.
  ASSERT_TRUE(store_->DeleteDeployment(TenantScope::Of("tn_a"), d.id).has_value());
  EXPECT_TRUE(RoundsUntil([&] { return InState(d, "ended").size() == 1U; }, 5, 100));
  Round(100);
  EXPECT_FALSE(std::filesystem::exists(adapter_root_ + "/" + d.id));
  // Its adapters' rows went with it.
  auto left = store_->ListAdaptersForServing(d.id);
  ASSERT_TRUE(left.has_value());
  EXPECT_TRUE(left->empty());
}

INSTANTIATE_TEST_SUITE_P(Drivers, AdapterControllerTest,
                         ::testing::Values(Backend::kSqlite, Backend::kPostgres), BackendName);

}  // namespace
}  // namespace atrium::serving
