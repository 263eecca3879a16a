// GPU scrub before reuse, in the shell: the scrub runner's command (run
// without a shell, killed at its timeout) and the SchedulingService around
// it — a GPU an allocation left is handed to nobody until its scrub
// finished; a failed scrub takes the GPU out of service with the reason
// until an operator clears it; a restart mid-scrub runs it again; the node
// views show it. The commands are the small scripts beside this file.
//
// Scrubs run on the runner's threads, with real processes, so the service
// tests wait (bounded) for what those threads report.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "scheduling/scheduling_service.h"
#include "scheduling/scrub_runner.h"
#include "store/test_databases.h"

namespace atrium::scheduling {
namespace {

namespace fs = std::filesystem;
using testdb::Backend;
using testdb::BackendName;

const std::string kScripts = ATRIUM_SCRUB_SCRIPTS;

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path TempFile(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("atrium-scrub-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::path p = dir / name;
  fs::remove(p);
  return p;
}

// Waits (bounded) for what another thread does; true when `done` held.
template <typename F>
bool Eventually(F done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return done();
}

// ------------------------------------------------------------ the command

TEST(ScrubCommand, RunsArgvWithoutAShellAndRecordsEveryArgumentAsGiven) {
  const fs::path log = TempFile("argv.log");
  ScrubOptions o;
  o.default_command = {kScripts + "/record_scrub.sh",
                       log.string(),
                       "{node}",
                       "{index}",
                       "{kind}",
                       "{mig_profile}",
                       "{mig_start}",
                       "{milli}"};
  // A node name that a shell would run.
  ScrubJob job{"alloc_1", "n0;touch$(x)", 3, "H100-80GB", "mig", "3g.40gb", 4, 0};
  auto argv = ScrubArgv(o, job);
  ASSERT_TRUE(argv.has_value()) << argv.error().message;
  ScrubOutcome out = RunScrubCommand(*argv, 10'000);
  EXPECT_TRUE(out.ok) << out.detail;
  EXPECT_EQ(ReadFile(log), "n0;touch$(x) 3 mig 3g.40gb 4 1000\n");
  // A share's milli; another model's own command wins over the default.
  o.commands["L40S"] = {kScripts + "/record_scrub.sh", log.string(), "share", "{milli}"};
  ScrubJob share{"alloc_2", "n1", 0, "L40S", "share", "", -1, 250};
  argv = ScrubArgv(o, share);
  ASSERT_TRUE(argv.has_value());
  EXPECT_TRUE(RunScrubCommand(*argv, 10'000).ok);
  EXPECT_EQ(ReadFile(log), "n0;touch$(x) 3 mig 3g.40gb 4 1000\nshare 250\n");
}

TEST(ScrubCommand, AFailureSaysTheExitStatusAndTheLastLineWritten) {
  ScrubOutcome out = RunScrubCommand({kScripts + "/failing_scrub.sh", "2"}, 10'000);
  EXPECT_FALSE(out.ok);
  EXPECT_EQ(out.detail, "exit status 3: reset refused: the GPU is in use");
  out = RunScrubCommand({"/nonexistent/atrium-scrub"}, 10'000);
  EXPECT_FALSE(out.ok);
  EXPECT_NE(out.detail.find("cannot run /nonexistent/atrium-scrub"), std::string::npos)
      << out.detail;
}

TEST(ScrubCommand, ACommandPastItsTimeoutIsKilledWithWhatItStarted) {
  const auto start = std::chrono::steady_clock::now();
  // The shell's child (sleep) is in the same process group and dies with it.
  ScrubOutcome out = RunScrubCommand({"sh", "-c", "sleep 30; echo late"}, 300);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_FALSE(out.ok);
  EXPECT_EQ(out.detail, "timed out after 300 ms");
  EXPECT_LT(took, std::chrono::seconds(10));
}

TEST(ScrubCommand, BadOptionsAreRefusedNamingWhatIsWrong) {
  ScrubOptions o;
  EXPECT_TRUE(ValidateScrubOptions(o).has_value());  // no command: immediate scrubs
  o.default_command = {"nvidia-smi", "--gpu-reset", "-i", "{index}"};
  EXPECT_TRUE(ValidateScrubOptions(o).has_value());
  o.default_command = {"reset", "{uuid}"};
  auto bad = ValidateScrubOptions(o);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("{uuid}"), std::string::npos);
  o.default_command = {"reset", "{index"};
  EXPECT_FALSE(ValidateScrubOptions(o).has_value());
  o.default_command = {""};
  EXPECT_FALSE(ValidateScrubOptions(o).has_value());
  o.default_command = {};
  o.commands["H200-NOPE"] = {"reset"};
  EXPECT_FALSE(ValidateScrubOptions(o).has_value());
  o.commands.clear();
  o.timeout_ms = 0;
  EXPECT_FALSE(ValidateScrubOptions(o).has_value());
}

// ------------------------------------------------------------ the service

class ScrubServiceTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    database_.Create(GetParam());
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_NO_FATAL_FAILURE(testdb::OpenStore(database_, &store_));
    log_ = TempFile(GetParam() == Backend::kSqlite ? "sqlite.log" : "postgres.log");
  }
  void TearDown() override {
    service_.reset();
    store_.reset();
    database_.Drop();
  }

  void StartService(ScrubOptions scrub, bool gate_workloads = false) {
    service_.reset();
    SchedulingOptions o;
    o.fleet_spec = "1xH100-80GBx2";
    o.tick_ms = 0;
    o.scrub = std::move(scrub);
    o.scrub.workload_poll_ms = 5;
    service_ = std::make_unique<SchedulingService>(*store_, clock_, o);
    if (gate_workloads) {
      service_->SetWorkloadProbe([this](const std::string& id) {
        (void)id;
        ++probes_;
        return workloads_gone_.load();
      });
    }
    auto started = service_->Start();
    ASSERT_TRUE(started.has_value()) << started.error().message;
    if (!store_->GetTenant("tn_a").has_value()) {
      Tenant t;
      t.id = "tn_a";
      t.name = t.display_name = "acme";
      t.tier = "shared";
      t.weight = 1;
      t.state = "active";
      ASSERT_TRUE(store_->CreateTenant(t).has_value());
      service_->TenantChanged(t);
      auto set = service_->SetQuota(by_, "tn_a", "", {"H100-80GB", "gpu", 2000, 2000});
      ASSERT_TRUE(set.has_value()) << set.error().message;
    }
  }

  ScrubOptions Recording() {
    ScrubOptions o;
    o.default_command = {kScripts + "/record_scrub.sh", log_.string(), "{node}", "{index}"};
    return o;
  }

  AllocationRecord Submit(int gpus) {
    sched::AllocationRequest r;
    r.model = "H100-80GB";
    r.gpus = gpus;
    auto a = service_->Submit(by_, "tn_a", "usr_1", r);
    EXPECT_TRUE(a.has_value()) << a.error().message;
    return a.has_value() ? *a : AllocationRecord{};
  }
  std::string StateOf(const std::string& id) {
    auto r = store_->GetAllocation(TenantScope::Of("tn_a"), id);
    return r.has_value() ? r->state : r.error().message;
  }
  GpuInfo Gpu(int index, std::string_view viewer = "") {
    auto n = service_->Node(viewer, "h100-80gb-0");
    EXPECT_TRUE(n.has_value());
    return n.has_value() ? n->gpus.at(size_t(index)) : GpuInfo{};
  }
  int Audited(const std::string& action) {
    auto page = store_->ListAudit(std::nullopt, {.after = "", .limit = 1000});
    EXPECT_TRUE(page.has_value());
    int n = 0;
    for (const auto& r : page->items) n += r.action == action;
    return n;
  }
  bool Scrubbed() {
    for (const auto& h : service_->Scrubs()) {
      if (h.state == sched::ScrubState::kScrubbing) return false;
    }
    return true;
  }

  testdb::TestDatabase database_;
  ManualClock clock_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<SchedulingService> service_;
  fs::path log_;
  std::atomic<bool> workloads_gone_{false};
  std::atomic<int> probes_{0};  // times the runner asked the probe
  RequestOrigin by_{.actor = "user:usr_1", .actor_role = "tenant-admin", .request_id = "req-1"};
};

TEST_P(ScrubServiceTest, AGpuIsScrubbedAfterTheWorkloadsAreGoneAndOnlyThenPlacedAgain) {
  ASSERT_NO_FATAL_FAILURE(StartService(Recording(), /*gate_workloads=*/true));
  AllocationRecord a = Submit(2);
  ASSERT_EQ(a.state, "running");
  ASSERT_TRUE(service_->Release(by_, "tn_a", a.id).has_value());
  // Ended for history and metering at release; the GPUs wait.
  auto ended = store_->GetAllocation(TenantScope::Of("tn_a"), a.id);
  ASSERT_TRUE(ended.has_value());
  EXPECT_EQ(ended->state, "released");
  EXPECT_EQ(ended->ended_ms, clock_.NowMillis());
  for (int g : {0, 1}) {
    GpuInfo platform = Gpu(g);
    EXPECT_EQ(platform.state, "scrubbing");
    EXPECT_TRUE(platform.scrubbing);
    EXPECT_FALSE(platform.free);
    EXPECT_EQ(platform.scrubbing_for, std::vector<std::string>{a.id});
    EXPECT_TRUE(platform.uses.empty());
    // A tenant sees the state, never whose allocation it was.
    GpuInfo tenant = Gpu(g, "tn_b");
    EXPECT_EQ(tenant.state, "scrubbing");
    EXPECT_TRUE(tenant.scrubbing_for.empty());
  }
  auto stored = store_->ListGpuScrubsForScheduler();
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->size(), 2u);
  AllocationRecord b = Submit(1);
  EXPECT_EQ(b.state, "pending");
  // Nothing is scrubbed while the workloads run.
  ASSERT_TRUE(Eventually([&] { return probes_ > 0; }));
  EXPECT_FALSE(fs::exists(log_));
  EXPECT_EQ(StateOf(b.id), "pending");

  workloads_gone_ = true;
  ASSERT_TRUE(Eventually([&] { return StateOf(b.id) == "running"; }));
  ASSERT_TRUE(Eventually([&] { return service_->Scrubs().empty(); }));
  std::string lines = ReadFile(log_);
  EXPECT_TRUE(lines == "h100-80gb-0 0\nh100-80gb-0 1\n" ||
              lines == "h100-80gb-0 1\nh100-80gb-0 0\n")
      << lines;
  EXPECT_EQ(Audited("scheduler.scrubbed"), 2);
  stored = store_->ListGpuScrubsForScheduler();
  ASSERT_TRUE(stored.has_value());
  EXPECT_TRUE(stored->empty());
}

TEST_P(ScrubServiceTest, AFailedScrubTakesTheGpuOutOfServiceUntilAnOperatorClearsIt) {
  ScrubOptions o;
  o.default_command = {kScripts + "/failing_scrub.sh", "{index}"};
  ASSERT_NO_FATAL_FAILURE(StartService(o));
  AllocationRecord a = Submit(2);
  ASSERT_TRUE(service_->Release(by_, "tn_a", a.id).has_value());
  ASSERT_TRUE(Eventually([&] { return Scrubbed(); }));
  for (int g : {0, 1}) {
    GpuInfo gpu = Gpu(g);
    EXPECT_FALSE(gpu.healthy);
    EXPECT_EQ(gpu.state, "unhealthy");
    EXPECT_EQ(gpu.health_reason, "scrub failed: exit status 3: reset refused: the GPU is in use");
    // A tenant reads that it failed, never the command's output.
    EXPECT_EQ(Gpu(g, "tn_a").health_reason, "scrub failed");
    EXPECT_EQ(Gpu(g, "tn_b").health_reason, "scrub failed");
  }
  EXPECT_EQ(Audited("scheduler.scrub_failed"), 2);
  AllocationRecord b = Submit(1);
  EXPECT_EQ(b.state, "pending");
  // A restart keeps it out of service: the flag and the hold are stored.
  ASSERT_NO_FATAL_FAILURE(StartService(o));
  EXPECT_EQ(Gpu(0).health_reason, "scrub failed: exit status 3: reset refused: the GPU is in use");
  EXPECT_EQ(StateOf(b.id), "pending");
  // The operator's word brings it back.
  ASSERT_TRUE(service_->SetGpuHealth(by_, "h100-80gb-0", 1, true, "reset by hand").has_value());
  EXPECT_EQ(StateOf(b.id), "running");
  EXPECT_EQ(Gpu(1).health_reason, "");
  EXPECT_EQ(Gpu(0).state, "unhealthy");
  auto stored = store_->ListGpuScrubsForScheduler();
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->size(), 1u);
}

TEST_P(ScrubServiceTest, AScrubPastItsTimeoutFails) {
  ScrubOptions o;
  o.default_command = {"sleep", "30"};
  o.timeout_ms = 300;
  ASSERT_NO_FATAL_FAILURE(StartService(o));
  AllocationRecord a = Submit(1);
  ASSERT_TRUE(service_->Release(by_, "tn_a", a.id).has_value());
  ASSERT_TRUE(Eventually([&] { return Scrubbed(); }));
  const int g = a.placement.at(0).gpus.at(0);
  EXPECT_EQ(Gpu(g).health_reason, "scrub failed: timed out after 300 ms");
}

TEST_P(ScrubServiceTest, ARestartMidScrubHandsNoGpuOutAndRunsTheScrubAgain) {
  ASSERT_NO_FATAL_FAILURE(StartService(Recording(), /*gate_workloads=*/true));
  AllocationRecord a = Submit(2);
  ASSERT_TRUE(service_->Release(by_, "tn_a", a.id).has_value());
  // Down mid-scrub (waiting for workloads), up again with them still there.
  ASSERT_NO_FATAL_FAILURE(StartService(Recording(), /*gate_workloads=*/true));
  EXPECT_EQ(Gpu(0).state, "scrubbing");
  EXPECT_EQ(Gpu(1).state, "scrubbing");
  AllocationRecord b = Submit(2);
  EXPECT_EQ(b.state, "pending");
  workloads_gone_ = true;
  ASSERT_TRUE(Eventually([&] { return StateOf(b.id) == "running"; }));
  EXPECT_EQ(Audited("scheduler.scrubbed"), 2);
}

TEST_P(ScrubServiceTest, WithoutACommandTheScrubIsImmediateButStillRecorded) {
  ASSERT_NO_FATAL_FAILURE(StartService(ScrubOptions{}));
  AllocationRecord a = Submit(2);
  ASSERT_TRUE(service_->Release(by_, "tn_a", a.id).has_value());
  EXPECT_TRUE(service_->Scrubs().empty());
  EXPECT_EQ(Audited("scheduler.scrubbed"), 2);
  EXPECT_EQ(Submit(2).state, "running");
}

INSTANTIATE_TEST_SUITE_P(Drivers, ScrubServiceTest,
                         ::testing::Values(Backend::kSqlite, Backend::kPostgres), BackendName);

}  // namespace
}  // namespace atrium::scheduling
