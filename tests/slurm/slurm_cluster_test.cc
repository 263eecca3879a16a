// The Slurm backend against a real Slurm 22.05 started by
// scripts/slurm-dev.sh (scripts/test.sh starts one per run and sets
// ATRIUM_TEST_SLURM_DIR). Without it these tests skip, or fail when
// ATRIUM_TEST_REQUIRE_SLURM=1: a skipped backend is a failure in CI.
//
// Waiting here polls the real cluster with a deadline: Slurm's scheduler
// is the clock these tests cannot inject. The SIGKILL-after-grace deadline
// is Atrium's own and runs on a ManualClock.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "common/clock.h"
#include "slurm/command_runner.h"
#include "slurm/slurm_backend.h"

namespace atrium::slurm {
namespace {

using exec::WorkloadPhase;
using exec::WorkloadStatus;

std::string RandomSuffix() {
  std::random_device rd;
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back("abcdefghijklmnopqrstuvwxyz0123456789"[rd() % 36]);
  return s;
}

exec::GpuGrant Gpu(int index) {
  exec::GpuGrant grant;
  grant.index = index;
  return grant;
}

class SlurmClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* dir = std::getenv("ATRIUM_TEST_SLURM_DIR");
    if (!dir || !*dir) {
      const char* require = std::getenv("ATRIUM_TEST_REQUIRE_SLURM");
      if (require && std::string(require) == "1") {
        FAIL() << "ATRIUM_TEST_REQUIRE_SLURM=1 but ATRIUM_TEST_SLURM_DIR is not set";
      }
      GTEST_SKIP() << "Slurm not configured (ATRIUM_TEST_SLURM_DIR; scripts/slurm-dev.sh)";
    }
    slurm_dir_ = dir;
    const char* node = std::getenv("ATRIUM_SLURM_NODE");
    node_ = node && *node ? node : "localhost";
    runner_ = std::make_unique<ProcessCommandRunner>(
        std::vector<std::pair<std::string, std::string>>{
            {"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
            {"SLURM_CONF", slurm_dir_ + "/slurm.conf"},
            {"SLURM_TIME_FORMAT", "%s"}},
        30000);
    run_ = RandomSuffix();
    root_ = slurm_dir_ + "/jobs/run-" + run_;
    std::filesystem::create_directories(root_);
    ::chmod(root_.c_str(), 0711);
    SlurmBackendOptions options;
    options.workload_root = root_;
    options.unix_user_prefix = "atr_";
    options.create_unix_users = true;
    options.preempt_grace_s = 5;
    backend_ = std::make_unique<SlurmBackend>(options, *runner_, clock_);
    // Fixed tenants: their Unix users are created once per host and kept
    // (the backend never deletes a user: its uid could be reused), their
    // Slurm accounts live in this run's cluster.
    tenant_a_ = "tn_slurmtest_a";
    tenant_b_ = "tn_slurmtest_b";
    for (const auto& t : {tenant_a_, tenant_b_}) {
      exec::TenantAccount account{t, "active", {{"", 2}}};
      auto synced = backend_->SyncTenant(account);
      ASSERT_TRUE(synced.has_value()) << synced.error().message;
    }
  }

  void TearDown() override {
    if (!backend_) return;
    for (const auto& t : {tenant_a_, tenant_b_}) {
      exec::TenantAccount gone{t, "deleted", {}};
      // Deletion waits for the cancelled jobs to end in Slurm.
      for (int i = 0; i < 100; ++i) {
        auto s = backend_->SyncTenant(gone);
        if (s || s.error().code != ErrorCode::kFailedPrecondition) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
    }
    std::filesystem::remove_all(root_);
  }

  exec::LaunchSpec Spec(const std::string& tenant, const std::string& name) {
    exec::LaunchSpec spec;
    spec.workload_id = "wl_" + name + "." + run_;
    spec.job_id = "jb_" + name;
    spec.tenant_id = tenant;
    spec.node = node_;
    spec.priority = "batch";
    return spec;
  }

  // Polls Inspect until `done` holds or 30 s pass.
  template <typename Pred>
  WorkloadStatus WaitFor(const std::string& id, Pred done) {
    WorkloadStatus last;
    for (int i = 0; i < 300; ++i) {
      auto s = backend_->Inspect(id);
      EXPECT_TRUE(s.has_value()) << s.error().message;
      if (!s) return last;
      last = *s;
      if (done(last)) return last;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "timed out waiting on " << id << ": " << exec::PhaseName(last.phase) << " "
                  << last.detail;
    return last;
  }
  WorkloadStatus WaitForExit(const std::string& id) {
    return WaitFor(id, [](const WorkloadStatus& s) { return s.phase == WorkloadPhase::kExited; });
  }
  WorkloadStatus WaitForRunning(const std::string& id) {
    return WaitFor(id, [](const WorkloadStatus& s) { return s.phase != WorkloadPhase::kStarting; });
  }
  std::string Log(const std::string& id) {
    auto chunk = backend_->ReadLog(id, 0, 1 << 20);
    EXPECT_TRUE(chunk.has_value()) << chunk.error().message;
    return chunk ? chunk->data : "";
  }
  std::string FakeGpu(int index) { return slurm_dir_ + "/fakedev/nvidia" + std::to_string(index); }

  std::string slurm_dir_, node_, run_, root_, tenant_a_, tenant_b_;
  ManualClock clock_{1'700'000'000'000};
  std::unique_ptr<ProcessCommandRunner> runner_;
  std::unique_ptr<SlurmBackend> backend_;
};

TEST_F(SlurmClusterTest, RunsOnTheChosenGpusAndReadsTheirIndicesBack) {
  auto spec = Spec(tenant_a_, "gpus");
  spec.gpus = {Gpu(1), Gpu(3)};
  spec.script = "echo CVD=$CUDA_VISIBLE_DEVICES; sleep 2\n";
  // The cluster of scripts/slurm-dev.sh confines devices and /tmp here.
  spec.require_full_confinement = true;
  auto started = backend_->Start(spec);
  ASSERT_TRUE(started.has_value()) << started.error().message;
  auto running = WaitForRunning(spec.workload_id);
  EXPECT_EQ(running.gpus, (std::vector<int>{1, 3})) << running.detail;
  auto ended = WaitForExit(spec.workload_id);
  EXPECT_EQ(ended.exit_code, 0) << ended.detail;
  EXPECT_EQ(ended.gpus, (std::vector<int>{1, 3}));  // kept after Slurm stops showing them
  EXPECT_GT(ended.started_ms, 0);
  EXPECT_GE(ended.ended_ms, ended.started_ms);
  EXPECT_NE(Log(spec.workload_id).find("CVD=0,1"), std::string::npos) << Log(spec.workload_id);
  // The metering cross-check: two GPUs for as long as Slurm says it ran.
  auto gpu_seconds = backend_->SacctGpuSeconds(spec.workload_id);
  for (int i = 0; i < 100 && !gpu_seconds && gpu_seconds.error().code == ErrorCode::kUnavailable;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    gpu_seconds = backend_->SacctGpuSeconds(spec.workload_id);
  }
  ASSERT_TRUE(gpu_seconds.has_value()) << gpu_seconds.error().message;
  if (*gpu_seconds == 0) {
    auto raw = runner_->Run(SacctJobArgv(ended.backend_ref));
    ADD_FAILURE() << "sacct: " << (raw ? raw->out : raw.error().message);
  }
  EXPECT_EQ(*gpu_seconds, 2 * ((ended.ended_ms - ended.started_ms) / 1000));
  EXPECT_GE(*gpu_seconds, 2 * 2);
}

TEST_F(SlurmClusterTest, HostileArgumentsAndEnvironmentArriveVerbatimAndRunNothing) {
  const std::string canary = "/tmp/atrium-slurm-pwned-" + run_;
  auto spec = Spec(tenant_a_, "hostile");
  const std::string nasty = "$(touch " + canary + ") `touch " + canary + "` ; touch " + canary +
                            " | \"quoted\" 'single' a,b=c\nsecond line %j %u";
  spec.argv = {"/usr/bin/printf", "[%s]\\n", "a b", nasty, "", "--export=ALL", "-"};
  spec.env = {{"HOSTILE", nasty}, {"SPACES", "  x  "}};
  auto started = backend_->Start(spec);
  ASSERT_TRUE(started.has_value()) << started.error().message;
  auto ended = WaitForExit(spec.workload_id);
  EXPECT_EQ(ended.exit_code, 0) << ended.detail;
  EXPECT_EQ(Log(spec.workload_id), "[a b]\n[" + nasty + "]\n[]\n[--export=ALL]\n[-]\n");
  EXPECT_FALSE(std::filesystem::exists(canary));

  auto env_spec = Spec(tenant_a_, "hostileenv");
  env_spec.script = "printf '<%s><%s>' \"$HOSTILE\" \"$SPACES\"\n";
  env_spec.env = spec.env;
  ASSERT_TRUE(backend_->Start(env_spec).has_value());
  EXPECT_EQ(WaitForExit(env_spec.workload_id).exit_code, 0);
  EXPECT_EQ(Log(env_spec.workload_id), "<" + nasty + "><  x  >");
  EXPECT_FALSE(std::filesystem::exists(canary));
}

TEST_F(SlurmClusterTest, ReportsExitCodeAndSignalAndRunsAsTheTenantsUser) {
  auto spec = Spec(tenant_a_, "exit7");
  spec.script = "id -un; exit 7\n";
  ASSERT_TRUE(backend_->Start(spec).has_value());
  auto ended = WaitForExit(spec.workload_id);
  EXPECT_EQ(ended.exit_code, 7) << ended.detail;
  EXPECT_EQ(ended.signal, 0);
  EXPECT_EQ(Log(spec.workload_id), "atr_" + tenant_a_ + "\n");

  auto killed = Spec(tenant_a_, "selfkill");
  killed.script = "kill -KILL $$\n";
  ASSERT_TRUE(backend_->Start(killed).has_value());
  auto k = WaitForExit(killed.workload_id);
  EXPECT_EQ(k.signal, 9) << k.detail;
  EXPECT_EQ(k.exit_code, -1);
}

TEST_F(SlurmClusterTest, StartTwiceSubmitsOnceAndAdoptsAJobItDidNotRecord) {
  auto spec = Spec(tenant_a_, "twice");
  spec.argv = {"/bin/sleep", "30"};
  auto first = backend_->Start(spec);
  ASSERT_TRUE(first.has_value()) << first.error().message;
  auto second = backend_->Start(spec);
  ASSERT_TRUE(second.has_value()) << second.error().message;
  EXPECT_EQ(first->backend_ref, second->backend_ref);
  // A control plane killed between sbatch and recording the job id: the
  // state file has no job id; the next Start finds the job by name.
  const std::string state = root_ + "/" + spec.workload_id + "/state";
  std::ofstream(state, std::ios::trunc) << "job_id=\ntenant_id=" << tenant_a_ << "\n";
  auto third = backend_->Start(spec);
  ASSERT_TRUE(third.has_value()) << third.error().message;
  EXPECT_EQ(third->backend_ref, first->backend_ref);
  // Another tenant cannot take the workload id over.
  auto other = spec;
  other.tenant_id = tenant_b_;
  EXPECT_FALSE(backend_->Start(other).has_value());
  // Forget is refused while it runs; List finds it (the reconcile after a restart).
  EXPECT_EQ(backend_->Forget(spec.workload_id).error().code, ErrorCode::kFailedPrecondition);
  auto listed = backend_->List();
  ASSERT_TRUE(listed.has_value()) << listed.error().message;
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].backend_ref, first->backend_ref);
  ASSERT_TRUE(backend_->Stop(spec.workload_id, 0).has_value());
  auto ended = WaitForExit(spec.workload_id);
  EXPECT_NE(ended.signal, 0) << ended.detail;
  EXPECT_TRUE(backend_->Forget(spec.workload_id).has_value());
  EXPECT_EQ(backend_->Inspect(spec.workload_id).error().code, ErrorCode::kNotFound);
}

TEST_F(SlurmClusterTest, StopSendsTermThenKillAfterTheGrace) {
  auto spec = Spec(tenant_a_, "stubborn");
  // Ignores SIGTERM: only the SIGKILL after the grace ends it.
  spec.script = "trap 'echo got-term' TERM\necho ready\nwhile :; do sleep 0.2; done\n";
  ASSERT_TRUE(backend_->Start(spec).has_value());
  WaitFor(spec.workload_id, [&](const WorkloadStatus& s) {
    return s.phase == WorkloadPhase::kRunning &&
           Log(spec.workload_id).find("ready") != std::string::npos;
  });
  ASSERT_TRUE(backend_->Stop(spec.workload_id, 60'000).has_value());
  auto termed = WaitFor(spec.workload_id, [&](const WorkloadStatus&) {
    return Log(spec.workload_id).find("got-term") != std::string::npos;
  });
  EXPECT_EQ(termed.phase, WorkloadPhase::kRunning) << "ended before the grace: " << termed.detail;
  clock_.AdvanceSeconds(60);
  auto ended = WaitForExit(spec.workload_id);
  EXPECT_EQ(ended.signal, 9) << ended.detail;
  // Stopping an ended workload is not an error.
  EXPECT_TRUE(backend_->Stop(spec.workload_id, 1000).has_value());
}

TEST_F(SlurmClusterTest, AWorkloadCannotTouchAnotherTenantsGpuFilesOrProcesses) {
  auto victim = Spec(tenant_a_, "victim");
  victim.gpus = {Gpu(0)};
  victim.script = "echo $$ > /dev/null; echo secret > mine.txt; echo ready; sleep 60\n";
  ASSERT_TRUE(backend_->Start(victim).has_value());
  WaitFor(victim.workload_id, [&](const WorkloadStatus& s) {
    return s.phase == WorkloadPhase::kRunning &&
           Log(victim.workload_id).find("ready") != std::string::npos;
  });
  // The victim's pid, as the host sees it (the attacker finds it with ps).
  auto victim_status = backend_->Inspect(victim.workload_id);
  ASSERT_TRUE(victim_status.has_value());

  auto attacker = Spec(tenant_b_, "attacker");
  attacker.gpus = {Gpu(2)};
  const std::string victim_dir = root_ + "/" + victim.workload_id;
  attacker.env = {{"VICTIM_DIR", victim_dir}, {"VICTIM_USER", "atr_" + tenant_a_},
                  {"GPU_MINE", FakeGpu(2)},   {"GPU_THEIRS", FakeGpu(0)},
                  {"GPU_FREE", FakeGpu(3)},   {"ROOT", root_}};
  attacker.script =
      "try() { if \"$@\" 2>/dev/null; then echo \"ALLOWED $*\"; else echo \"refused\"; fi; }\n"
      "# A fake GPU has no driver: opening one the device cgroup lets through\n"
      "# fails with ENXIO, one it refuses with EPERM.\n"
      "gpu() { python3 -c 'import os,sys\ntry: os.open(sys.argv[1], os.O_RDWR)\n"
      "except OSError as e: print(os.strerror(e.errno))' \"$1\"; }\n"
      "echo \"mine: $(gpu \"$GPU_MINE\")\"\n"
      "echo \"theirs: $(gpu \"$GPU_THEIRS\")\"\n"
      "echo \"free: $(gpu \"$GPU_FREE\")\"\n"
      "try ls \"$VICTIM_DIR/work\"\n"
      "try cat \"$VICTIM_DIR/work/mine.txt\"\n"
      "try cat \"$VICTIM_DIR/log\"\n"
      "try ls \"$ROOT\"\n"
      "try touch \"$VICTIM_DIR/planted\"\n"
      "for p in $(pgrep -u \"$VICTIM_USER\"); do try kill -TERM $p; done\n"
      "echo done\n";
  ASSERT_TRUE(backend_->Start(attacker).has_value());
  auto ended = WaitForExit(attacker.workload_id);
  std::string log = Log(attacker.workload_id);
  EXPECT_EQ(log.find("ALLOWED"), std::string::npos) << log;
  EXPECT_NE(log.find("done"), std::string::npos) << log;
  EXPECT_NE(log.find("mine: No such device or address"), std::string::npos) << log;
  EXPECT_NE(log.find("theirs: Operation not permitted"), std::string::npos) << log;
  EXPECT_NE(log.find("free: Operation not permitted"), std::string::npos) << log;
  // Five reads and writes refused, at least one signal refused.
  size_t refused = 0;
  for (size_t at = 0; (at = log.find("refused", at)) != std::string::npos; ++at) ++refused;
  EXPECT_GE(refused, 6u) << log;
  (void)ended;
  auto still = backend_->Inspect(victim.workload_id);
  ASSERT_TRUE(still.has_value());
  EXPECT_EQ(still->phase, WorkloadPhase::kRunning) << still->detail;
  EXPECT_FALSE(std::filesystem::exists(victim_dir + "/planted"));
  ASSERT_TRUE(backend_->Stop(victim.workload_id, 0).has_value());
  WaitForExit(victim.workload_id);
}

// A workload runs as its tenant's user, whom munge vouches for: without
// the cluster's job_submit.lua it could sbatch GPUs Atrium believes free
// (unplaced, unmetered) or raise its own job's time limit.
TEST_F(SlurmClusterTest, AWorkloadCannotSubmitOrChangeSlurmJobsItself) {
  auto rogue = Spec(tenant_a_, "rogue");
  rogue.gpus = {Gpu(1)};
  rogue.env = {{"CONF", slurm_dir_ + "/slurm.conf"}, {"NODE", node_}};
  rogue.script =
      "export SLURM_CONF=\"$CONF\"\n"
      "if sbatch --parsable --nodelist=\"$NODE\" --gres=gpu:idx3:1 --wrap 'sleep 60' "
      ">out 2>err; then echo \"ALLOWED sbatch $(cat out)\"; else echo \"refused: $(cat err)\"; fi\n"
      "if scontrol update JobId=\"$SLURM_JOB_ID\" TimeLimit=UNLIMITED 2>err; then "
      "echo 'ALLOWED update'; else echo \"refused: $(cat err)\"; fi\n"
      "echo done\n";
  ASSERT_TRUE(backend_->Start(rogue).has_value());
  WaitForExit(rogue.workload_id);
  std::string log = Log(rogue.workload_id);
  EXPECT_EQ(log.find("ALLOWED"), std::string::npos) << log;
  EXPECT_NE(log.find("submitted through Atrium"), std::string::npos) << log;
  EXPECT_NE(log.find("done"), std::string::npos) << log;
}

TEST_F(SlurmClusterTest, APreemptibleJobIsPreemptedThroughItsQosWithTermFirst) {
  auto low = Spec(tenant_a_, "low");
  low.priority = "preemptible";
  low.gpus = {Gpu(3)};
  low.script = "trap 'echo got-term' TERM\necho ready\nwhile :; do sleep 0.2; done\n";
  ASSERT_TRUE(backend_->Start(low).has_value());
  WaitFor(low.workload_id, [&](const WorkloadStatus& s) {
    return s.phase == WorkloadPhase::kRunning &&
           Log(low.workload_id).find("ready") != std::string::npos;
  });
  auto high = Spec(tenant_b_, "high");
  high.priority = "interactive";
  high.gpus = {Gpu(3)};
  high.argv = {"/bin/true"};
  ASSERT_TRUE(backend_->Start(high).has_value());
  // SIGTERM at once, SIGKILL after the QOS's GraceTime (preempt_grace_s);
  // submitted --no-requeue, the workload ends and the job service's restart
  // policy decides whether a new one starts.
  auto preempted = WaitForExit(low.workload_id);
  EXPECT_NE(preempted.detail.find("PREEMPTED"), std::string::npos) << preempted.detail;
  EXPECT_NE(preempted.signal, 0);
  EXPECT_NE(Log(low.workload_id).find("got-term"), std::string::npos);
  EXPECT_EQ(WaitForExit(high.workload_id).exit_code, 0);
}

TEST_F(SlurmClusterTest, TenantLimitsSuspensionAndDeletionReachSlurm) {
  // GrpTRES=gres/gpu=2 (SetUp): a third GPU waits on the account's limit.
  auto two = Spec(tenant_a_, "two");
  two.gpus = {Gpu(0), Gpu(1)};
  two.argv = {"/bin/sleep", "60"};
  ASSERT_TRUE(backend_->Start(two).has_value());
  WaitForRunning(two.workload_id);
  auto third = Spec(tenant_a_, "third");
  third.gpus = {Gpu(2)};
  third.argv = {"/bin/true"};
  auto pending = backend_->Start(third);
  ASSERT_TRUE(pending.has_value()) << pending.error().message;
  auto waiting = WaitFor(third.workload_id, [](const WorkloadStatus& s) {
    return s.detail.find("AssocGrpGRES") != std::string::npos;
  });
  EXPECT_EQ(waiting.phase, WorkloadPhase::kStarting) << waiting.detail;

  // Suspended: running work is cancelled, new work refused.
  ASSERT_TRUE(backend_->SyncTenant({tenant_a_, "suspended", {{"", 2}}}).has_value());
  EXPECT_NE(WaitForExit(two.workload_id).signal, 0);
  auto refused = backend_->Start(Spec(tenant_a_, "after"));
  EXPECT_FALSE(refused.has_value());
  // Active again: it runs.
  ASSERT_TRUE(backend_->SyncTenant({tenant_a_, "active", {}}).has_value());
  auto again = Spec(tenant_a_, "again");
  again.argv = {"/bin/true"};
  ASSERT_TRUE(backend_->Start(again).has_value());
  EXPECT_EQ(WaitForExit(again.workload_id).exit_code, 0);
}

}  // namespace
}  // namespace atrium::slurm
