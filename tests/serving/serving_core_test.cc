// The pure rules of managed serving: templates, the managed spec as the API
// and the store read it, the replica's state machine, the deployment's plan
// (scale, rolling update, roll back), slots, backoff and the engine's gauge.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/json_reader.h"
#include "serving/replica_plan.h"
#include "serving/serving_spec.h"

namespace atrium::serving {
namespace {

constexpr int64_t kT0 = 1'700'000'000'000;

ServingTemplate SimTemplate() {
  auto t = FindTemplate(BuiltinTemplates(), "engine-sim");
  EXPECT_TRUE(t.has_value());
  return t.has_value() ? *t : ServingTemplate{};
}

Result<ManagedSpec> Read(const std::string& body, SpecAuthor author = SpecAuthor::kPlatform,
                         bool stored = false) {
  return ReadManagedSpec(Json::parse(body), author, stored);
}

ManagedSpec Spec(const std::string& extra = "") {
  auto s =
      Read(R"({"template":"engine-sim","resources":{"kind":"gpu","model":"H100-80GB","gpus":1})" +
           extra + "}");
  EXPECT_TRUE(s.has_value()) << s.error().message;
  return s.has_value() ? *s : ManagedSpec{};
}

std::string ErrorOf(const Result<ManagedSpec>& r) {
  return r.has_value() ? "(accepted)" : r.error().message;
}

// ------------------------------------------------------------------ templates

TEST(ServingTemplateTest, EveryBuiltinTemplateIsValidAndTakesItsPort) {
  std::vector<std::string> names;
  for (const ServingTemplate& t : BuiltinTemplates()) {
    names.push_back(t.name);
    EXPECT_TRUE(ValidateTemplate(t).has_value()) << t.name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"engine-sim", "vllm", "sglang", "tgi", "llama-cpp"}));
}

TEST(ServingTemplateTest, RefusesWhatCouldNotStartOrCheckAReplica) {
  auto refused = [](auto change) {
    ServingTemplate t = SimTemplate();
    change(t);
    Status s = ValidateTemplate(t);
    return s.has_value() ? std::string("(accepted)") : s.error().message;
  };
  EXPECT_NE(refused([](ServingTemplate& t) { t.name = "Bad Name"; }).find("name"),
            std::string::npos);
  EXPECT_NE(refused([](ServingTemplate& t) { t.engine = "triton"; }).find("engine"),
            std::string::npos);
  EXPECT_NE(refused([](ServingTemplate& t) { t.command.clear(); }).find("empty"),
            std::string::npos);
  EXPECT_NE(refused([](ServingTemplate& t) { t.command.push_back("{secret}"); }).find("{secret}"),
            std::string::npos);
  EXPECT_NE(refused([](ServingTemplate& t) { t.command.push_back("{port"); }).find("unclosed"),
            std::string::npos);
  EXPECT_NE(refused([](ServingTemplate& t) {
              t.command = {"server", "--host", "{host}"};
            }).find("{port}"),
            std::string::npos);
  EXPECT_NE(refused([](ServingTemplate& t) { t.command.push_back("a\nb"); }).find("control"),
            std::string::npos);
  EXPECT_NE(refused([](ServingTemplate& t) {
              t.env = {{"ATRIUM_JOB_ID", "x"}};
            }).find("reserved"),
            std::string::npos);
  EXPECT_NE(refused([](ServingTemplate& t) {
              t.read_only_binds = {{"/opt/x", "../etc"}};
            }).find("absolute"),
            std::string::npos);
  EXPECT_NE(refused([](ServingTemplate& t) { t.health_path = "v1/models"; }).find("health_path"),
            std::string::npos);
  EXPECT_NE(refused([](ServingTemplate& t) { t.metrics_path = "/m etrics"; }).find("metrics_path"),
            std::string::npos);
  EXPECT_NE(refused([](ServingTemplate& t) { t.readiness_timeout_s = 0; }).find("readiness"),
            std::string::npos);
  EXPECT_NE(
      refused([](ServingTemplate& t) { t.max_batch = kMaxReplicaCapacity + 1; }).find("max_batch"),
      std::string::npos);
  EXPECT_EQ(refused([](ServingTemplate& t) { t.metrics_path = ""; }), "(accepted)");
}

TEST(ServingTemplateTest, FindTemplateNamesTheOnesThereAre) {
  auto missing = FindTemplate(BuiltinTemplates(), "triton");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  EXPECT_NE(missing.error().message.find("engine-sim, vllm, sglang, tgi, llama-cpp"),
            std::string::npos);
}

TEST(ServingTemplateTest, PlaceholdersFillOnceAndAValueIsNeverReadAsOne) {
  const LaunchValues v{20'001, "127.0.0.1", "llama{port}", ""};
  EXPECT_EQ(*FillPlaceholders("{host}:{port}", v), "127.0.0.1:20001");
  EXPECT_EQ(*FillPlaceholders("--port={port}", v), "--port=20001");
  // A model name holding a placeholder is written as it is.
  EXPECT_EQ(*FillPlaceholders("{model}", v), "llama{port}");
  // No source: the engine loads the model name.
  EXPECT_EQ(*FillPlaceholders("{source}", v), "llama{port}");
  const LaunchValues with_source{1, "h", "m", "/models/m"};
  EXPECT_EQ(*FillPlaceholders("{source}", with_source), "/models/m");
  EXPECT_FALSE(FillPlaceholders("{nope}", v).has_value());
  EXPECT_FALSE(FillPlaceholders("{port", v).has_value());
  EXPECT_EQ(*FillPlaceholders("plain", v), "plain");
}

TEST(ServingTemplateTest, AReplicaIsAJobOfTheFilledCommandOnTheNodesNetworkWithoutTimeLimit) {
  ServingTemplate t = SimTemplate();
  t.env = {{"Z_LAST", "1"}, {"A_FIRST", "2"}};
  t.read_only_binds = {{"/opt/b", "/srv/b"}, {"/opt/a", "/srv/a"}};
  ManagedSpec spec = Spec();
  spec.extra_args = {"--max-tokens", "64"};
  auto job = ReplicaJobSpec(t, spec, "dep_1-rep_1", {20'002, "0.0.0.0", "chat", ""});
  ASSERT_TRUE(job.has_value()) << job.error().message;
  EXPECT_EQ(job->name, "dep_1-rep_1");
  EXPECT_EQ(job->command, (std::vector<std::string>{"atrium"}));
  EXPECT_EQ(job->args, (std::vector<std::string>{"engine-sim", "--listen", "0.0.0.0:20002",
                                                 "--model", "chat", "--profile", "h100-llama3-8b",
                                                 "--max-batch", "64", "--max-tokens", "64"}));
  EXPECT_EQ(job->env,
            (std::vector<std::pair<std::string, std::string>>{{"A_FIRST", "2"}, {"Z_LAST", "1"}}));
  EXPECT_EQ(job->resources, spec.resources);
  EXPECT_EQ(job->time_limit_s, 0);
  EXPECT_TRUE(job->platform.host_network);
  EXPECT_TRUE(job->platform.no_time_limit);
  EXPECT_EQ(job->platform.read_only_binds, (std::vector<std::pair<std::string, std::string>>{
                                               {"/opt/a", "/srv/a"}, {"/opt/b", "/srv/b"}}));
}

// ---------------------------------------------------------------- managed spec

TEST(ManagedSpecTest, DefaultsAndTheCanonicalFormReadBackEqual) {
  ManagedSpec s = Spec();
  EXPECT_EQ(s.template_name, "engine-sim");
  EXPECT_EQ(s.replicas, 1);
  EXPECT_EQ(s.min_replicas, 1);
  EXPECT_EQ(s.max_replicas, 1);
  EXPECT_FALSE(s.autoscale);
  EXPECT_EQ(s.drain_timeout_s, 30);
  EXPECT_EQ(s.capacity, 0);
  EXPECT_EQ(s.generation, 1);
  EXPECT_EQ(s.rolled_back_from, 0);

  ManagedSpec full = Spec(R"(,"source":"/models/llama","extra_args":["--x"],"priority":"batch",
      "replicas":3,"autoscale":true,"min_replicas":0,"max_replicas":5,"drain_timeout_s":5,
      "capacity":12)");
  full.generation = 7;
  full.rolled_back_from = 6;
  auto back = ParseStoredSpec(ManagedSpecJson(full).dump());
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(*back, full);
  EXPECT_EQ(ManagedSpecJson(Spec()).count("rolled_back_from"), 0U);
}

TEST(ManagedSpecTest, ATenantCannotPassArgumentsOrWriteWhatOnlyTheStoreKeeps) {
  const std::string base =
      R"({"template":"vllm","resources":{"kind":"gpu","model":"H100-80GB","gpus":1})";
  EXPECT_NE(ErrorOf(Read(base + R"(,"extra_args":["--port","1"]})", SpecAuthor::kTenant))
                .find("extra_args"),
            std::string::npos);
  EXPECT_TRUE(Read(base + R"(,"extra_args":["--x"]})", SpecAuthor::kPlatform).has_value());
  // Generation and the roll back mark are the platform's own, never an author's.
  EXPECT_NE(ErrorOf(Read(base + R"(,"generation":9})")).find("generation"), std::string::npos);
  EXPECT_NE(ErrorOf(Read(base + R"(,"rolled_back_from":2})")).find("rolled_back_from"),
            std::string::npos);
  EXPECT_TRUE(Read(base + R"(,"generation":9,"rolled_back_from":2})", SpecAuthor::kPlatform, true)
                  .has_value());
}

TEST(ManagedSpecTest, RefusesEveryMalformedFieldNamingIt) {
  const std::string gpu = R"("resources":{"kind":"gpu","model":"H100-80GB","gpus":1})";
  struct Case {
    std::string body;
    std::string names;
  };
  const std::vector<Case> cases = {
      {R"({"resources":{"kind":"gpu","model":"H100-80GB","gpus":1}})", "template"},
      {R"({"template":"Bad Name",)" + gpu + "}", "template"},
      {R"({"template":"vllm"})", "resources"},
      {R"({"template":"vllm","resources":null})", "resources"},
      {R"({"template":"vllm","resources":[]})", "resources"},
      {R"({"template":"vllm","resources":{"kind":"gpu","model":"H100-80GB","gpus":8,"nodes":2}})",
       "gang"},
      {R"({"template":"vllm",)" + gpu + R"(,"source":"--trust-remote-code"})", "source"},
      {R"({"template":"vllm",)" + gpu + R"(,"source":"a\u0000b"})", "source"},
      {R"({"template":"vllm",)" + gpu + R"(,"replicas":65})", "replicas"},
      {R"({"template":"vllm",)" + gpu + R"(,"replicas":-1})", "replicas"},
      {R"({"template":"vllm",)" + gpu + R"(,"replicas":"2"})", "replicas"},
      {R"({"template":"vllm",)" + gpu + R"(,"min_replicas":3,"max_replicas":2})", "min_replicas"},
      {R"({"template":"vllm",)" + gpu + R"(,"replicas":4,"max_replicas":2})", "replicas"},
      {R"({"template":"vllm",)" + gpu + R"(,"drain_timeout_s":3601})", "drain_timeout_s"},
      {R"({"template":"vllm",)" + gpu + R"(,"capacity":4097})", "capacity"},
      {R"({"template":"vllm",)" + gpu + R"(,"priority":"urgent"})", "priorit"},
      {R"({"template":"vllm",)" + gpu + R"(,"replica":2})", "replica"},
  };
  for (const Case& c : cases) {
    auto r = Read(c.body);
    ASSERT_FALSE(r.has_value()) << c.body;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument) << c.body;
    EXPECT_NE(r.error().message.find(c.names), std::string::npos)
        << c.body << " -> " << r.error().message;
  }
  EXPECT_FALSE(ReadManagedSpec(Json::array(), SpecAuthor::kPlatform).has_value());
  EXPECT_FALSE(ParseStoredSpec("").has_value());
  EXPECT_FALSE(ParseStoredSpec("{").has_value());
}

TEST(ManagedSpecTest, ScalingAFixedSpecMovesItsBoundsAndAnAutoscalingOneStaysWithinThem) {
  ManagedSpec fixed = Spec();
  ASSERT_TRUE(ScaleTo(fixed, 5).has_value());
  EXPECT_EQ(fixed.replicas, 5);
  EXPECT_EQ(fixed.max_replicas, 5);
  ASSERT_TRUE(ScaleTo(fixed, 0).has_value());
  EXPECT_EQ(fixed.min_replicas, 0);
  EXPECT_EQ(fixed.max_replicas, 5);
  EXPECT_TRUE(ParseStoredSpec(ManagedSpecJson(fixed).dump()).has_value());
  EXPECT_FALSE(ScaleTo(fixed, kMaxReplicas + 1).has_value());
  EXPECT_FALSE(ScaleTo(fixed, -1).has_value());
  ManagedSpec scaling = Spec();
  scaling.autoscale = true;
  scaling.min_replicas = 1;
  scaling.max_replicas = 3;
  auto outside = ScaleTo(scaling, 4);
  ASSERT_FALSE(outside.has_value());
  EXPECT_NE(outside.error().message.find("autoscales between 1 and 3"), std::string::npos);
  EXPECT_EQ(scaling.replicas, 1);  // unchanged
  EXPECT_TRUE(ScaleTo(scaling, 3).has_value());
  EXPECT_EQ(scaling.max_replicas, 3);
}

TEST(ManagedSpecTest, SameRunIgnoresScaleAndSlots) {
  ManagedSpec a = Spec();
  ManagedSpec b = a;
  b.replicas = 4;
  b.max_replicas = 4;
  b.capacity = 9;
  b.drain_timeout_s = 1;
  EXPECT_TRUE(a.SameRun(b));
  b.source = "/models/other";
  EXPECT_FALSE(a.SameRun(b));
  b = a;
  b.resources.gpus = 2;
  EXPECT_FALSE(a.SameRun(b));
  b = a;
  b.extra_args = {"--x"};
  EXPECT_FALSE(a.SameRun(b));
}

// ------------------------------------------------------------ replica steps

DeploymentReplicaRecord Replica(const std::string& id, const std::string& state,
                                int64_t generation = 1, int64_t created_at = kT0) {
  DeploymentReplicaRecord r;
  r.id = id;
  r.deployment_id = "dep_1";
  r.tenant_id = "tn_a";
  r.job_id = "job_" + id;
  r.port = 20'000;
  r.url = "http://127.0.0.1:2000" + id.substr(id.size() - 1);
  r.state = state;
  r.generation = generation;
  r.created_at = r.updated_at = created_at;
  return r;
}

ReplicaObservation Seen(const std::string& job_state, Health health = Health::kNotChecked,
                        int64_t started = kT0, int64_t running = -1) {
  ReplicaObservation o;
  o.job_state = job_state;
  o.job_started_ms = started;
  o.health = health;
  o.running = running;
  return o;
}

const ReplicaTiming kTiming{};

TEST(ReplicaStepTest, AStartingReplicaIsReadyOnlyOnceItsJobRunsAndItAnswers) {
  auto r = Replica("rep_1", "starting");
  EXPECT_FALSE(StepReplica(r, Seen("pending"), kTiming, kT0 + 10).changed);
  EXPECT_FALSE(StepReplica(r, Seen("starting", Health::kOk), kTiming, kT0 + 10).changed);
  EXPECT_FALSE(StepReplica(r, Seen("running", Health::kFailed), kTiming, kT0 + 10).changed);
  ReplicaStep ready = StepReplica(r, Seen("running", Health::kOk), kTiming, kT0 + 10);
  EXPECT_TRUE(ready.changed);
  EXPECT_EQ(ready.next.state, "ready");
  EXPECT_EQ(ready.next.ready_at, kT0 + 10);
  EXPECT_FALSE(ready.cancel_job);
  EXPECT_FALSE(ready.failure);
}

TEST(ReplicaStepTest, AReplicaNeverReadyWithinItsTimeoutIsStoppedAsAFailure) {
  auto r = Replica("rep_1", "starting");
  const int64_t started = kT0 + 1'000;
  EXPECT_FALSE(StepReplica(r, Seen("running", Health::kFailed, started), kTiming,
                           started + kTiming.readiness_timeout_ms - 1)
                   .changed);
  ReplicaStep late = StepReplica(r, Seen("running", Health::kFailed, started), kTiming,
                                 started + kTiming.readiness_timeout_ms);
  EXPECT_EQ(late.next.state, "stopping");
  EXPECT_TRUE(late.cancel_job);
  EXPECT_TRUE(late.failure);
  EXPECT_NE(late.next.reason.find("not ready within 600 s"), std::string::npos);
  // Waiting for a GPU is not starting: no timeout while the job is queued.
  EXPECT_FALSE(
      StepReplica(r, Seen("pending", Health::kNotChecked, -1), kTiming, kT0 + 10'000'000).changed);
}

TEST(ReplicaStepTest, AReadyReplicaLeavesAfterFailedChecksInARowAndOneAnswerForgivesThem) {
  auto r = Replica("rep_1", "ready");
  ReplicaStep one = StepReplica(r, Seen("running", Health::kFailed), kTiming, kT0 + 1);
  EXPECT_EQ(one.next.state, "ready");
  EXPECT_EQ(one.next.health_failures, 1);
  EXPECT_FALSE(one.cancel_job);
  ReplicaStep forgiven = StepReplica(one.next, Seen("running", Health::kOk), kTiming, kT0 + 2);
  EXPECT_TRUE(forgiven.changed);
  EXPECT_EQ(forgiven.next.health_failures, 0);
  ReplicaStep again = StepReplica(one.next, Seen("running", Health::kFailed), kTiming, kT0 + 2);
  EXPECT_EQ(again.next.state, "stopping");
  EXPECT_TRUE(again.cancel_job);
  EXPECT_TRUE(again.failure);
  EXPECT_NE(again.next.reason.find("2 health checks in a row failed"), std::string::npos);
  // Nothing to say when all is well.
  EXPECT_FALSE(StepReplica(r, Seen("running", Health::kOk), kTiming, kT0 + 3).changed);
}

TEST(ReplicaStepTest, AJobThatEndsEndsItsReplicaAFailureUnlessItWasAskedTo) {
  for (const std::string state : {"starting", "ready"}) {
    ReplicaStep crashed = StepReplica(Replica("rep_1", state), Seen("failed"), kTiming, kT0 + 5);
    EXPECT_EQ(crashed.next.state, "ended") << state;
    EXPECT_EQ(crashed.next.ended_at, kT0 + 5);
    EXPECT_TRUE(crashed.failure) << state;
    EXPECT_NE(crashed.next.reason.find("the model server ended: its job ended failed"),
              std::string::npos);
  }
  ReplicaStep gone = StepReplica(Replica("rep_1", "ready"), Seen(""), kTiming, kT0 + 5);
  EXPECT_NE(gone.next.reason.find("its job is gone"), std::string::npos);
  for (const std::string state : {"draining", "stopping"}) {
    auto r = Replica("rep_1", state);
    r.reason = "scaled down";
    ReplicaStep asked = StepReplica(r, Seen("cancelled"), kTiming, kT0 + 5);
    EXPECT_EQ(asked.next.state, "ended");
    EXPECT_FALSE(asked.failure) << state;
    EXPECT_EQ(asked.next.reason, "scaled down");
  }
  // Preempted: the deployment shrinks; not the version's failure.
  ReplicaStep reclaimed = StepReplica(Replica("rep_1", "ready"), Seen("preempted"), kTiming, kT0);
  EXPECT_EQ(reclaimed.next.state, "ended");
  EXPECT_FALSE(reclaimed.failure);
  EXPECT_NE(reclaimed.next.reason.find("reclaimed"), std::string::npos);
  auto ended = Replica("rep_1", "ended");
  EXPECT_FALSE(StepReplica(ended, Seen(""), kTiming, kT0 + 5).changed);
}

TEST(ReplicaStepTest, ADrainingReplicaStopsOnceIdleAfterTheSettleOrAtItsTimeout) {
  auto r = Replica("rep_1", "draining");
  r.drain_started_at = kT0;
  // Idle at once, but every gateway may not have dropped it yet.
  EXPECT_FALSE(
      StepReplica(r, Seen("running", Health::kNotChecked, kT0, 0), kTiming, kT0 + 100).changed);
  ReplicaStep idle = StepReplica(r, Seen("running", Health::kNotChecked, kT0, 0), kTiming,
                                 kT0 + kTiming.drain_settle_ms);
  EXPECT_EQ(idle.next.state, "stopping");
  EXPECT_TRUE(idle.cancel_job);
  EXPECT_FALSE(idle.failure);
  EXPECT_NE(idle.next.reason.find("drained"), std::string::npos);
  // Busy (or unknown): waits for the drain timeout.
  for (int64_t running : {3, -1}) {
    EXPECT_FALSE(StepReplica(r, Seen("running", Health::kNotChecked, kT0, running), kTiming,
                             kT0 + kTiming.drain_timeout_ms - 1)
                     .changed);
    ReplicaStep timeout = StepReplica(r, Seen("running", Health::kNotChecked, kT0, running),
                                      kTiming, kT0 + kTiming.drain_timeout_ms);
    EXPECT_EQ(timeout.next.state, "stopping");
    EXPECT_NE(timeout.next.reason.find("drain timeout"), std::string::npos);
  }
}

TEST(ReplicaStepTest, AStoppingReplicaAsksItsJobToStopEveryRoundUntilItEnds) {
  auto r = Replica("rep_1", "stopping");
  ReplicaStep step = StepReplica(r, Seen("running"), kTiming, kT0 + 1);
  EXPECT_TRUE(step.cancel_job);
  EXPECT_FALSE(step.changed);
}

TEST(ReplicaStateTest, NamesReadBack) {
  for (ReplicaState s : {ReplicaState::kStarting, ReplicaState::kReady, ReplicaState::kDraining,
                         ReplicaState::kStopping, ReplicaState::kEnded}) {
    auto back = ParseReplicaState(ReplicaStateName(s));
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, s);
  }
  EXPECT_FALSE(ParseReplicaState("running").has_value());
  EXPECT_TRUE(IsJobEnded(""));
  EXPECT_TRUE(IsJobEnded("succeeded"));
  EXPECT_FALSE(IsJobEnded("running"));
  EXPECT_FALSE(IsJobEnded("pending"));
}

// ------------------------------------------------------------ deployment plan

std::vector<std::string> Urls(const DeploymentPlan& plan) {
  std::vector<std::string> out;
  for (const auto& e : plan.endpoints) out.push_back(e.url);
  return out;
}

TEST(DeploymentPlanTest, StartsWhatIsMissingOnlyWhenTheBackoffAllows) {
  ManagedSpec spec = Spec(R"(,"replicas":3,"max_replicas":3)");
  const ServingTemplate t = SimTemplate();
  std::vector<DeploymentReplicaRecord> replicas = {Replica("rep_1", "ready")};
  EXPECT_EQ(PlanDeployment(spec, t, replicas, true).to_start, 2);
  EXPECT_EQ(PlanDeployment(spec, t, replicas, false).to_start, 0);
  replicas.push_back(Replica("rep_2", "starting"));
  DeploymentPlan plan = PlanDeployment(spec, t, replicas, true);
  EXPECT_EQ(plan.to_start, 1);
  // Only the ready one is routed to.
  EXPECT_EQ(Urls(plan), (std::vector<std::string>{"http://127.0.0.1:20001"}));
}

TEST(DeploymentPlanTest, ScalingDownStopsTheNotYetReadyFirstThenDrainsTheNewest) {
  ManagedSpec spec = Spec(R"(,"replicas":1,"max_replicas":4)");
  const ServingTemplate t = SimTemplate();
  std::vector<DeploymentReplicaRecord> replicas = {
      Replica("rep_1", "ready", 1, kT0), Replica("rep_2", "ready", 1, kT0 + 1),
      Replica("rep_3", "ready", 1, kT0 + 2), Replica("rep_4", "starting", 1, kT0 + 3)};
  DeploymentPlan plan = PlanDeployment(spec, t, replicas, true);
  EXPECT_EQ(plan.to_start, 0);
  EXPECT_EQ(plan.to_stop, (std::vector<std::string>{"rep_4"}));
  EXPECT_EQ(plan.to_drain, (std::vector<std::string>{"rep_3", "rep_2"}));
  EXPECT_EQ(Urls(plan), (std::vector<std::string>{"http://127.0.0.1:20001"}));
  spec.replicas = 0;
  spec.min_replicas = 0;
  EXPECT_TRUE(PlanDeployment(spec, t, replicas, true).endpoints.empty());
}

TEST(DeploymentPlanTest, ARollingUpdateKeepsTheOldVersionRoutedUntilTheNewIsReady) {
  ManagedSpec spec = Spec(R"(,"replicas":2,"max_replicas":2)");
  spec.generation = 2;
  const ServingTemplate t = SimTemplate();
  std::vector<DeploymentReplicaRecord> replicas = {Replica("rep_1", "ready", 1, kT0),
                                                   Replica("rep_2", "ready", 1, kT0 + 1)};
  // Nothing new yet: two to start, both old ones still routed.
  DeploymentPlan plan = PlanDeployment(spec, t, replicas, true);
  EXPECT_EQ(plan.to_start, 2);
  EXPECT_TRUE(plan.to_drain.empty());
  EXPECT_EQ(plan.endpoints.size(), 2U);
  // One new one ready: one old one drains, the other stays.
  replicas.push_back(Replica("rep_3", "ready", 2, kT0 + 2));
  replicas.push_back(Replica("rep_4", "starting", 2, kT0 + 3));
  plan = PlanDeployment(spec, t, replicas, true);
  EXPECT_EQ(plan.to_start, 0);
  EXPECT_EQ(plan.to_drain, (std::vector<std::string>{"rep_1"}));
  EXPECT_EQ(Urls(plan),
            (std::vector<std::string>{"http://127.0.0.1:20002", "http://127.0.0.1:20003"}));
  // Both new ones ready: the last old one drains.
  replicas[3].state = "ready";
  replicas[0].state = "draining";
  plan = PlanDeployment(spec, t, replicas, true);
  EXPECT_EQ(plan.to_drain, (std::vector<std::string>{"rep_2"}));
  EXPECT_EQ(plan.endpoints.size(), 2U);
  // An old one still starting is not waited for: stopped.
  std::vector<DeploymentReplicaRecord> stale = {Replica("rep_9", "starting", 1)};
  EXPECT_EQ(PlanDeployment(spec, t, stale, true).to_stop, (std::vector<std::string>{"rep_9"}));
}

TEST(DeploymentPlanTest, SlotsFollowTheEngineBatchUnlessTheSpecSetsThem) {
  ServingTemplate t = SimTemplate();
  t.max_batch = 64;
  DeploymentEndpoint e = EndpointOf(Spec(), t, "http://h:1");
  EXPECT_EQ(e.url, "http://h:1");
  EXPECT_EQ(e.capacity, 32);
  EXPECT_EQ(e.burst, 8);
  EXPECT_EQ(e.max_prefill, 2);
  DeploymentEndpoint set = EndpointOf(Spec(R"(,"capacity":12)"), t, "http://h:1");
  EXPECT_EQ(set.capacity, 12);
  EXPECT_EQ(set.burst, 3);
  t.max_batch = 1;
  DeploymentEndpoint tiny = EndpointOf(Spec(), t, "http://h:1");
  EXPECT_EQ(tiny.capacity, 1);
  EXPECT_EQ(tiny.burst, 1);
}

TEST(DeploymentPlanTest, BackoffDoublesToAMinute) {
  EXPECT_EQ(BackoffMs(0), 0);
  EXPECT_EQ(BackoffMs(1), 1'000);
  EXPECT_EQ(BackoffMs(2), 2'000);
  EXPECT_EQ(BackoffMs(6), 32'000);
  EXPECT_EQ(BackoffMs(7), 60'000);
  EXPECT_EQ(BackoffMs(1'000'000), 60'000);
}

// ------------------------------------------------------------------ roll back

TEST(RollbackTest, AVersionThatNeverBecomesReadyGoesBackToWhatTheReadyReplicasRun) {
  ManagedSpec v1 = Spec(R"(,"source":"/models/v1","replicas":2,"max_replicas":4)");
  ManagedSpec v3 = v1;
  v3.source = "/models/broken";
  v3.replicas = 3;
  v3.generation = 3;
  auto old = Replica("rep_1", "ready", 1);
  old.spec = ManagedSpecJson(v1).dump();
  ManagedSpec v2 = v1;
  v2.source = "/models/v2";
  v2.generation = 2;
  auto older_draining = Replica("rep_0", "draining", 2);
  older_draining.spec = ManagedSpecJson(v2).dump();
  std::vector<DeploymentReplicaRecord> replicas = {old, older_draining,
                                                   Replica("rep_2", "starting", 3)};

  EXPECT_FALSE(PlanRollback(v3, replicas, kRollbackAfterFailures - 1));
  auto rb = PlanRollback(v3, replicas, kRollbackAfterFailures);
  ASSERT_TRUE(rb);
  EXPECT_EQ(rb->revived_generation, 1);  // the draining one does not serve
  EXPECT_EQ(rb->spec.source, "/models/v1");
  EXPECT_EQ(rb->spec.replicas, 3);  // the scale asked last stays
  EXPECT_EQ(rb->spec.generation, 4);
  EXPECT_EQ(rb->spec.rolled_back_from, 3);
  EXPECT_TRUE(rb->spec.SameRun(v1));
}

TEST(RollbackTest, NoRollBackWhileTheNewVersionServesOrNothingOlderDoes) {
  ManagedSpec v2 = Spec();
  v2.generation = 2;
  auto old = Replica("rep_1", "ready", 1);
  old.spec = ManagedSpecJson(Spec()).dump();
  // A replica of the new version is ready: it works, only some failed.
  EXPECT_FALSE(PlanRollback(v2, {old, Replica("rep_2", "ready", 2)}, 10));
  // Nothing older serves: nothing to go back to (it keeps trying).
  EXPECT_FALSE(PlanRollback(v2, {Replica("rep_2", "starting", 2)}, 10));
  // An older replica whose spec was not kept cannot be returned to.
  EXPECT_FALSE(PlanRollback(v2, {Replica("rep_3", "ready", 1)}, 10));
}

// ------------------------------------------------------------------- metrics

TEST(ReadGaugeTest, SumsTheGaugeOverItsLabelSetsAndRefusesWhatItCannotRead) {
  const std::string text =
      "# HELP vllm:num_requests_running Running.\n"
      "# TYPE vllm:num_requests_running gauge\n"
      "vllm:num_requests_running{model_name=\"a\"} 3.0\n"
      "vllm:num_requests_running{model_name=\"b\"} 2\n"
      "vllm:num_requests_running_total 99\n"
      "vllm:num_requests_waiting 7.0\n";
  EXPECT_EQ(ReadGauge(text, "vllm:num_requests_running"), 5);
  EXPECT_EQ(ReadGauge(text, "vllm:num_requests_waiting"), 7);
  EXPECT_EQ(ReadGauge(text, "sglang:num_running_reqs"), -1);
  EXPECT_EQ(ReadGauge("m{a=\"b\" 3\n", "m"), -1);
  EXPECT_EQ(ReadGauge("m abc\n", "m"), -1);
  EXPECT_EQ(ReadGauge("m -1\n", "m"), -1);
  EXPECT_EQ(ReadGauge("m 99999999999999999999\n", "m"), -1);
  EXPECT_EQ(ReadGauge("m 0 1700000000\n", "m"), 0);  // with a timestamp
  EXPECT_EQ(ReadGauge("", "m"), -1);
}

}  // namespace
}  // namespace atrium::serving
