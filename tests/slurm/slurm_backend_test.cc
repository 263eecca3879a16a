// The backend's shell over a runner that replays Slurm's answers: which
// commands it runs, in which order, and what it makes of the answers.
#include "slurm/slurm_backend.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "support/test_directory.h"

namespace atrium::slurm {
namespace {

using exec::WorkloadPhase;

std::string Join(const Argv& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

// Answers a command by the first registered prefix of its joined argv;
// an unregistered command fails the test and exits 1.
class FakeRunner : public CommandRunner {
 public:
  // The first answer whose prefix matches is given; On with a prefix
  // already known replaces its answer.
  void On(const std::string& prefix, CommandOutput output) {
    for (auto& answer : answers_) {
      if (answer.first == prefix) {
        answer.second = std::move(output);
        return;
      }
    }
    answers_.push_back({prefix, std::move(output)});
  }
  Result<CommandOutput> Run(const Argv& argv) override {
    std::string line = Join(argv);
    calls.push_back(line);
    for (const auto& [prefix, output] : answers_) {
      if (line.rfind(prefix, 0) == 0) return output;
    }
    ADD_FAILURE() << "unexpected command: " << line;
    return CommandOutput{1, "", "unexpected"};
  }
  std::vector<std::string> calls;

 private:
  std::vector<std::pair<std::string, CommandOutput>> answers_;
};

std::string Running(const std::string& id, const std::string& name) {
  return "JobId=" + id + " JobName=" + name +
         " JobState=RUNNING Reason=None ExitCode=0:0 StartTime=1700000000 EndTime=1700003600 "
         "Nodes=n1 CPU_IDs=0 Mem=0 GRES=gpu:idx1:1(IDX:1)\n";
}

class SlurmBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = TestDirectory("atrium-slurm-unit").string();
    std::filesystem::create_directories(root_);
    SlurmBackendOptions options;
    options.workload_root = root_;
    options.preempt_grace_s = 30;
    backend_ = std::make_unique<SlurmBackend>(options, runner_, clock_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  // A workload the backend submitted earlier as Slurm job `job_id`.
  void Known(const std::string& workload_id, const std::string& job_id) {
    std::filesystem::create_directories(root_ + "/" + workload_id);
    std::ofstream(root_ + "/" + workload_id + "/state")
        << "job_id=" << job_id << "\ntenant_id=tn_a\nkill_at_ms=-1\n";
  }

  std::string root_;
  FakeRunner runner_;
  ManualClock clock_{1'700'000'000'000};
  std::unique_ptr<SlurmBackend> backend_;
};

TEST_F(SlurmBackendTest, InspectReadsTheRunningJobAndItsGpus) {
  Known("wl.1", "42");
  runner_.On("scontrol show job -d -o 42", {0, Running("42", "wl.1"), ""});
  auto status = backend_->Inspect("wl.1");
  ASSERT_TRUE(status.has_value()) << status.error().message;
  EXPECT_EQ(status->phase, WorkloadPhase::kRunning);
  EXPECT_EQ(status->backend_ref, "42");
  EXPECT_EQ(status->gpus, std::vector<int>{1});
  EXPECT_EQ(status->started_ms, 1'700'000'000'000);
}

TEST_F(SlurmBackendTest, AnEndedJobTheControllerForgotComesFromSacctWithItsGpus) {
  Known("wl.1", "42");
  runner_.On("scontrol show job -d -o 42", {0, Running("42", "wl.1"), ""});
  ASSERT_TRUE(backend_->Inspect("wl.1").has_value());  // records GPU index 1
  FakeRunner later;
  later.On("scontrol", {1, "", "slurm_load_jobs error: Invalid job id specified\n"});
  later.On("sacct",
           {0, "42|wl.1|TIMEOUT|0:0|1700000000|1700000600|600|cpu=1,gres/gpu=1|tn_a\n", ""});
  SlurmBackendOptions options;
  options.workload_root = root_;
  SlurmBackend restarted(options, later, clock_);
  auto status = restarted.Inspect("wl.1");
  ASSERT_TRUE(status.has_value()) << status.error().message;
  EXPECT_EQ(status->phase, WorkloadPhase::kExited);
  EXPECT_EQ(status->signal, 15);
  EXPECT_EQ(status->ended_ms, 1'700'000'600'000);
  EXPECT_EQ(status->gpus, std::vector<int>{1});
}

TEST_F(SlurmBackendTest, AJobNobodyKnowsOrThatIsAnotherNowIsLost) {
  Known("wl.1", "42");
  runner_.On("scontrol show job -d -o 42", {1, "", "Invalid job id specified"});
  runner_.On("sacct", {0, "", ""});
  auto gone = backend_->Inspect("wl.1");
  ASSERT_TRUE(gone.has_value());
  EXPECT_EQ(gone->phase, WorkloadPhase::kLost);

  Known("wl.2", "43");
  runner_.On("scontrol show job -d -o 43", {0, Running("43", "someone-else"), ""});
  auto reused = backend_->Inspect("wl.2");
  ASSERT_TRUE(reused.has_value());
  EXPECT_EQ(reused->phase, WorkloadPhase::kLost);
}

TEST_F(SlurmBackendTest, ControllerDownIsUnavailableNotLost) {
  Known("wl.1", "42");
  runner_.On("scontrol", {1, "", "slurm_load_jobs error: Unable to contact slurm controller\n"});
  auto status = backend_->Inspect("wl.1");
  ASSERT_FALSE(status.has_value());
  EXPECT_EQ(status.error().code, ErrorCode::kUnavailable);
}

TEST_F(SlurmBackendTest, UnknownAndHostileIdsAreNotFound) {
  EXPECT_EQ(backend_->Inspect("nope").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(backend_->Inspect("../etc").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(backend_->ReadLog("../../etc/shadow", 0, 10).error().code, ErrorCode::kNotFound);
  EXPECT_TRUE(runner_.calls.empty());
}

TEST_F(SlurmBackendTest, StopSendsTermNowAndKillOnceTheGraceHasPassed) {
  Known("wl.1", "42");
  runner_.On("scontrol show job -d -o 42", {0, Running("42", "wl.1"), ""});
  runner_.On("scancel", {0, "", ""});
  ASSERT_TRUE(backend_->Stop("wl.1", 30'000).has_value());
  EXPECT_EQ(runner_.calls.back(), "scancel --full --signal=TERM 42");
  // A second Stop keeps the first deadline and signals nothing new.
  ASSERT_TRUE(backend_->Stop("wl.1", 1).has_value());
  EXPECT_EQ(runner_.calls.back(), "scontrol show job -d -o 42");
  clock_.AdvanceMillis(29'999);
  ASSERT_TRUE(backend_->Inspect("wl.1").has_value());
  EXPECT_EQ(runner_.calls.back(), "scontrol show job -d -o 42");
  clock_.AdvanceMillis(1);
  ASSERT_TRUE(backend_->Inspect("wl.1").has_value());
  ASSERT_GE(runner_.calls.size(), 2u);
  EXPECT_EQ(runner_.calls[runner_.calls.size() - 2], "scancel --full --signal=KILL 42");
  EXPECT_EQ(runner_.calls.back(), "scancel 42");
}

// The control plane's reconcile at start: one question to the controller
// for every workload, one to accounting for those the controller forgot,
// and a stop's SIGKILL due by now is sent on the way.
TEST_F(SlurmBackendTest, ListAsksSlurmOnceForAllWorkloads) {
  Known("wl.1", "42");
  Known("wl.2", "43");
  Known("wl.3", "44");
  std::filesystem::create_directories(root_ + "/wl.4");  // never reached Slurm: no state
  std::ofstream(root_ + "/wl.2/state")
      << "job_id=43\ntenant_id=tn_a\nkill_at_ms=" << clock_.NowMillis() << "\n";
  runner_.On("scontrol show job -d -o 4", {1, "", "unexpected: one call for all"});
  runner_.On("scontrol show job -d -o",
             {0, Running("42", "wl.1") + Running("43", "wl.2") + Running("99", "not-ours"), ""});
  runner_.On("sacct", {0, "44|wl.3|COMPLETED|0:0|1700000000|1700000060|60|gres/gpu=1|tn_a\n", ""});
  runner_.On("scancel", {0, "", ""});
  auto all = backend_->List();
  ASSERT_TRUE(all.has_value()) << all.error().message;
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].workload_id, "wl.1");
  EXPECT_EQ((*all)[0].phase, WorkloadPhase::kRunning);
  EXPECT_EQ((*all)[0].gpus, std::vector<int>{1});
  EXPECT_NE((*all)[1].detail.find("SIGKILL sent after the grace"), std::string::npos);
  EXPECT_EQ((*all)[2].phase, WorkloadPhase::kExited);
  EXPECT_EQ((*all)[2].ended_ms, 1'700'000'060'000);
  const auto sacct =
      std::string("sacct -a -n -P -S 1970-01-01T00:00:00 --format=") + kSacctFormat + " -j 44";
  EXPECT_EQ(runner_.calls,
            (std::vector<std::string>{"scontrol show job -d -o", sacct,
                                      "scancel --full --signal=KILL 43", "scancel 43"}));
}

// Months of ended jobs do not fit one command line: accounting is asked
// about them in slices.
TEST_F(SlurmBackendTest, ListAsksAccountingInSlicesOfAtMost256Jobs) {
  for (int i = 0; i < 600; ++i) Known("wl." + std::to_string(i), std::to_string(1000 + i));
  runner_.On("scontrol show job -d -o", {0, "", ""});
  runner_.On("sacct", {0, "", ""});
  auto all = backend_->List();
  ASSERT_TRUE(all.has_value()) << all.error().message;
  EXPECT_EQ(all->size(), 600u);         // all lost (neither knows them), none missing
  ASSERT_EQ(runner_.calls.size(), 4u);  // scontrol, then 256 + 256 + 88
  size_t ids = 0;
  for (size_t i = 1; i < runner_.calls.size(); ++i) {
    const std::string& call = runner_.calls[i];
    ASSERT_EQ(call.rfind("sacct", 0), 0u) << call;
    const std::string list = call.substr(call.rfind(" -j ") + 4);
    const size_t n = static_cast<size_t>(std::count(list.begin(), list.end(), ',')) + 1;
    EXPECT_LE(n, 256u);
    ids += n;
  }
  EXPECT_EQ(ids, 600u);
}

TEST_F(SlurmBackendTest, InspectManyAsksTheControllerOnceForAllItsJobs) {
  // The job service's tick looks at every live job this way: one scontrol
  // for a thousand running jobs, not a thousand.
  for (int i = 0; i < 50; ++i) Known("wl." + std::to_string(i), std::to_string(1000 + i));
  Known("other.1", "2000");  // not asked about: not in the answer
  std::string all;
  for (int i = 0; i < 50; ++i) all += Running(std::to_string(1000 + i), "wl." + std::to_string(i));
  all += Running("2000", "other.1");
  runner_.On("scontrol show job -d -o", {0, all, ""});
  std::vector<std::string> ids;
  for (int i = 0; i < 50; ++i) ids.push_back("wl." + std::to_string(i));
  ids.push_back("never.1");  // never started here: left out
  ids.push_back("../etc");   // not a workload id: left out, never a path
  auto seen = backend_->InspectMany(ids);
  ASSERT_TRUE(seen.has_value()) << seen.error().message;
  EXPECT_EQ(seen->size(), 50u);
  for (int i = 0; i < 50; ++i) {
    const auto& status = seen->at("wl." + std::to_string(i));
    EXPECT_EQ(status.phase, exec::WorkloadPhase::kRunning);
    EXPECT_EQ(status.backend_ref, std::to_string(1000 + i));
  }
  EXPECT_FALSE(seen->contains("other.1"));
  ASSERT_EQ(runner_.calls.size(), 1u);
  EXPECT_EQ(runner_.calls[0], "scontrol show job -d -o");
}

TEST_F(SlurmBackendTest, ListWithNothingKnownAsksNothing) {
  auto all = backend_->List();
  ASSERT_TRUE(all.has_value());
  EXPECT_TRUE(all->empty());
  EXPECT_TRUE(runner_.calls.empty());
}

TEST_F(SlurmBackendTest, StoppingAnEndedWorkloadSignalsNothing) {
  Known("wl.1", "42");
  runner_.On("scontrol show job -d -o 42",
             {0, "JobId=42 JobName=wl.1 JobState=COMPLETED ExitCode=0:0\n", ""});
  ASSERT_TRUE(backend_->Stop("wl.1", 1000).has_value());
  for (const auto& call : runner_.calls) EXPECT_EQ(call.rfind("scancel", 0), std::string::npos);
}

TEST_F(SlurmBackendTest, ForgetIsRefusedWhileItRunsAndRemovesTheFolderAfter) {
  Known("wl.1", "42");
  runner_.On("scontrol show job -d -o 42", {0, Running("42", "wl.1"), ""});
  EXPECT_EQ(backend_->Forget("wl.1").error().code, ErrorCode::kFailedPrecondition);
  EXPECT_TRUE(std::filesystem::exists(root_ + "/wl.1"));
  Known("wl.2", "43");
  runner_.On("scontrol show job -d -o 43",
             {0, "JobId=43 JobName=wl.2 JobState=FAILED ExitCode=1:0\n", ""});
  ASSERT_TRUE(backend_->Forget("wl.2").has_value());
  EXPECT_FALSE(std::filesystem::exists(root_ + "/wl.2"));
}

TEST_F(SlurmBackendTest, ReleaseFreesTheTenantsFilesKeepsTheLogAndExpiresTheRest) {
  const auto make = [&](const std::string& wid, const std::string& job_id) {
    Known(wid, job_id);
    std::filesystem::create_directories(root_ + "/" + wid + "/work/sub");
    std::ofstream(root_ + "/" + wid + "/work/sub/data") << "tenant data";
    std::ofstream(root_ + "/" + wid + "/archive") << "tar";
    std::ofstream(root_ + "/" + wid + "/job.sbatch") << "#!/bin/sh";
    std::ofstream(root_ + "/" + wid + "/log") << "hello";
  };
  // A link the tenant left pointing at a file that is not its own.
  std::filesystem::create_directories(root_ + "-outside");
  std::ofstream(root_ + "-outside/keep") << "not the tenant's";
  make("wl.1", "42");
  std::filesystem::create_directory_symlink(root_ + "-outside", root_ + "/wl.1/work/escape");
  runner_.On("scontrol show job -d -o 42", {0, Running("42", "wl.1"), ""});
  EXPECT_EQ(backend_->Release("wl.1").error().code, ErrorCode::kFailedPrecondition);
  EXPECT_TRUE(std::filesystem::exists(root_ + "/wl.1/work/sub/data"));

  runner_.On("scontrol show job -d -o 42",
             {0, "JobId=42 JobName=wl.1 JobState=COMPLETED ExitCode=0:0\n", ""});
  ASSERT_TRUE(backend_->Release("wl.1").has_value());
  ASSERT_TRUE(backend_->Release("wl.1").has_value());  // twice is fine
  EXPECT_FALSE(std::filesystem::exists(root_ + "/wl.1/work"));
  EXPECT_FALSE(std::filesystem::exists(root_ + "/wl.1/archive"));
  EXPECT_FALSE(std::filesystem::exists(root_ + "/wl.1/job.sbatch"));
  EXPECT_TRUE(std::filesystem::exists(root_ + "-outside/keep"));
  auto log = backend_->ReadLog("wl.1", 0, 100);
  ASSERT_TRUE(log.has_value()) << log.error().message;
  EXPECT_EQ(log->data, "hello");
  EXPECT_EQ(backend_->Inspect("wl.1")->phase, WorkloadPhase::kExited);

  // Thirty days later the next release deletes the first folder whole.
  clock_.AdvanceSeconds(int64_t{30} * 24 * 3600);
  make("wl.2", "43");
  runner_.On("scontrol show job -d -o 43",
             {0, "JobId=43 JobName=wl.2 JobState=FAILED ExitCode=1:0\n", ""});
  ASSERT_TRUE(backend_->Release("wl.2").has_value());
  EXPECT_FALSE(std::filesystem::exists(root_ + "/wl.1"));
  EXPECT_TRUE(std::filesystem::exists(root_ + "/wl.2/log"));
  EXPECT_TRUE(std::filesystem::exists(root_ + "-outside/keep"));
  std::filesystem::remove_all(root_ + "-outside");
}

TEST_F(SlurmBackendTest, ReadLogReadsFromTheOffsetAndSaysWhenComplete) {
  Known("wl.1", "42");
  std::ofstream(root_ + "/wl.1/log") << "hello world";
  runner_.On("scontrol show job -d -o 42",
             {0, "JobId=42 JobName=wl.1 JobState=COMPLETED ExitCode=0:0\n", ""});
  auto first = backend_->ReadLog("wl.1", 0, 5);
  ASSERT_TRUE(first.has_value()) << first.error().message;
  EXPECT_EQ(first->data, "hello");
  EXPECT_EQ(first->next_offset, 5);
  EXPECT_FALSE(first->complete);
  auto rest = backend_->ReadLog("wl.1", 5, 100);
  ASSERT_TRUE(rest.has_value());
  EXPECT_EQ(rest->data, " world");
  EXPECT_TRUE(rest->complete);
  EXPECT_EQ(backend_->ReadLog("wl.1", -1, 5).error().code, ErrorCode::kInvalidArgument);
}

TEST_F(SlurmBackendTest, ReadLogShowsOnlyTheNewestBytesOfABoundedLog) {
  SlurmBackendOptions options;
  options.workload_root = root_;
  options.log_max_bytes = 4;
  SlurmBackend bounded(options, runner_, clock_);
  Known("wl.1", "42");
  std::ofstream(root_ + "/wl.1/log") << "0123456789";
  runner_.On("scontrol show job -d -o 42",
             {0, "JobId=42 JobName=wl.1 JobState=COMPLETED ExitCode=0:0\n", ""});
  auto all = bounded.ReadLog("wl.1", 0, 100);
  ASSERT_TRUE(all.has_value()) << all.error().message;
  EXPECT_EQ(all->data, "6789");
  EXPECT_EQ(all->offset, 6);
  EXPECT_EQ(all->dropped, 6);
  EXPECT_EQ(all->next_offset, 10);
  EXPECT_TRUE(all->complete);
  auto kept = bounded.ReadLog("wl.1", 7, 2);
  ASSERT_TRUE(kept.has_value());
  EXPECT_EQ(kept->data, "78");
  EXPECT_EQ(kept->dropped, 0);
  EXPECT_FALSE(kept->complete);
  auto past = bounded.ReadLog("wl.1", 50, 2);
  ASSERT_TRUE(past.has_value());
  EXPECT_TRUE(past->data.empty());
  EXPECT_EQ(past->next_offset, 10);
}

// Slurm keeps whole seconds; a workload the backend SIGKILLed ended no
// earlier than that SIGKILL (the conformance suite's grace check).
TEST_F(SlurmBackendTest, AWorkloadItKilledEndsNoEarlierThanTheKill) {
  Known("wl.1", "42");
  runner_.On("scontrol show job -d -o 42", {0, Running("42", "wl.1"), ""});
  runner_.On("scancel", {0, "", ""});
  clock_.AdvanceMillis(900);  // 1700000000.900
  ASSERT_TRUE(backend_->Stop("wl.1", 700).has_value());
  clock_.AdvanceMillis(700);  // 1700000001.600
  ASSERT_TRUE(backend_->Inspect("wl.1").has_value());
  FakeRunner later;
  later.On("scontrol", {0,
                        "JobId=42 JobName=wl.1 JobState=CANCELLED ExitCode=0:9 "
                        "StartTime=1700000000 EndTime=1700000001\n",
                        ""});
  SlurmBackendOptions options;
  options.workload_root = root_;
  SlurmBackend restarted(options, later, clock_);
  auto ended = restarted.Inspect("wl.1");
  ASSERT_TRUE(ended.has_value());
  EXPECT_EQ(ended->signal, 9);
  EXPECT_EQ(ended->ended_ms, 1'700'000'001'600);
}

TEST_F(SlurmBackendTest, ReadLogNeverFollowsALinkPlantedAsTheLog) {
  Known("wl.1", "42");
  std::filesystem::create_symlink("/etc/passwd", root_ + "/wl.1/log");
  runner_.On("scontrol show job -d -o 42",
             {0, "JobId=42 JobName=wl.1 JobState=COMPLETED ExitCode=0:0\n", ""});
  auto chunk = backend_->ReadLog("wl.1", 0, 100);
  EXPECT_FALSE(chunk.has_value());
}

TEST_F(SlurmBackendTest, StartRefusesAHostileSpecBeforeRunningOrWritingAnything) {
  exec::LaunchSpec spec;
  spec.workload_id = "wl.1";
  spec.tenant_id = "tn_a";
  spec.node = "n1";
  spec.argv = {"/bin/true"};
  spec.env = {{"BAD NAME", "x"}};
  EXPECT_EQ(backend_->Start(spec).error().code, ErrorCode::kInvalidArgument);
  spec.env = {};
  spec.node = "n1,n2";
  EXPECT_EQ(backend_->Start(spec).error().code, ErrorCode::kInvalidArgument);
  spec.node = "n1";
  spec.tenant_id = "tn_a,tn_b";
  EXPECT_EQ(backend_->Start(spec).error().code, ErrorCode::kInvalidArgument);
  spec.tenant_id = "tn_a";
  spec.priority = "root";
  EXPECT_EQ(backend_->Start(spec).error().code, ErrorCode::kInvalidArgument);
  EXPECT_TRUE(runner_.calls.empty());
  EXPECT_FALSE(std::filesystem::exists(root_ + "/wl.1"));
}

TEST_F(SlurmBackendTest, StartOfAKnownWorkloadSubmitsNothingAndAnotherTenantIsRefused) {
  Known("wl.1", "42");
  runner_.On("scontrol show job -d -o 42", {0, Running("42", "wl.1"), ""});
  exec::LaunchSpec spec;
  spec.workload_id = "wl.1";
  spec.tenant_id = "tn_a";
  spec.node = "n1";
  spec.argv = {"/bin/true"};
  auto status = backend_->Start(spec);
  ASSERT_TRUE(status.has_value()) << status.error().message;
  EXPECT_EQ(status->backend_ref, "42");
  for (const auto& call : runner_.calls) EXPECT_EQ(call.rfind("sbatch", 0), std::string::npos);
  spec.tenant_id = "tn_b";
  EXPECT_EQ(backend_->Start(spec).error().code, ErrorCode::kAlreadyExists);
}

// The tenant "nobody" runs as the host's user nobody: a real unprivileged
// user the files can be given to.
exec::LaunchSpec NobodysSpec() {
  exec::LaunchSpec spec;
  spec.workload_id = "wl.1";
  spec.tenant_id = "nobody";
  spec.node = "n1";
  spec.argv = {"/bin/echo", "$(id)"};
  spec.env = {{"SECRET", "a b;c"}};
  exec::GpuGrant gpu;
  gpu.index = 2;
  spec.gpus = {gpu};
  return spec;
}

TEST_F(SlurmBackendTest, AFreshStartIsOneSbatchAndItsFilesBelongToTheTenantsUser) {
  runner_.On("sbatch", {0, "77\n", ""});
  auto status = backend_->Start(NobodysSpec());
  ASSERT_TRUE(status.has_value()) << status.error().message;
  ASSERT_EQ(runner_.calls.size(), 1u);
  EXPECT_EQ(runner_.calls[0].rfind("sbatch --parsable --job-name=wl.1 --nodelist=n1", 0), 0u);
  EXPECT_EQ(runner_.calls[0].find("SECRET"), std::string::npos);
  EXPECT_EQ(status->backend_ref, "77");
  EXPECT_EQ(status->phase, WorkloadPhase::kStarting);
  EXPECT_EQ(status->gpus, std::vector<int>{2});
  struct stat work {};
  ASSERT_EQ(::stat((root_ + "/wl.1/work").c_str(), &work), 0);
  EXPECT_EQ(work.st_uid, 65534u);
  EXPECT_EQ(work.st_mode & 0777, 0700u);
  struct stat dir {};
  ASSERT_EQ(::stat((root_ + "/wl.1").c_str(), &dir), 0);
  EXPECT_EQ(dir.st_uid, 0u);
  EXPECT_EQ(dir.st_mode & 0777, 0711u);
  std::ifstream launch(root_ + "/wl.1/work/launch.argv");
  std::string text((std::istreambuf_iterator<char>(launch)), {});
  EXPECT_NE(text.find(std::string("SECRET=a b;c\0", 13)), std::string::npos);
}

// The workload's directory belongs to the tenant's user, whose other jobs
// may plant files there before root writes the launch files: a FIFO (an
// open that never returns would stall every job), a symbolic link or a
// hard link to a file elsewhere. Each is refused, nothing is submitted and
// nothing outside is written.
TEST_F(SlurmBackendTest, StartRefusesFilesATenantPlantedInsteadOfWritingThroughThem) {
  const std::string outside = root_ + "/outside";
  std::ofstream(outside) << "keep";
  const std::string target = root_ + "/wl.1/work/launch.argv";
  for (const std::string& plant : {"fifo", "symlink", "hardlink"}) {
    std::filesystem::remove_all(root_ + "/wl.1");
    std::filesystem::create_directories(root_ + "/wl.1/work");
    if (plant == "fifo") {
      ASSERT_EQ(::mkfifo(target.c_str(), 0666), 0);
    } else if (plant == "symlink") {
      std::filesystem::create_symlink(outside, target);
    } else {
      std::filesystem::create_hard_link(outside, target);
    }
    auto status = backend_->Start(NobodysSpec());
    ASSERT_FALSE(status.has_value()) << plant;
    EXPECT_NE(status.error().message.find("not a plain file"), std::string::npos)
        << plant << ": " << status.error().message;
    EXPECT_TRUE(runner_.calls.empty()) << plant;
    std::ifstream kept(outside);
    std::string text((std::istreambuf_iterator<char>(kept)), {});
    EXPECT_EQ(text, "keep") << plant;
  }
}

TEST_F(SlurmBackendTest, FullConfinementIsRefusedOnAClusterWithoutCgroups) {
  runner_.On("scontrol show config",
             {0, "ProctrackType = proctrack/linuxproc\nTaskPlugin = task/none\n", ""});
  auto spec = NobodysSpec();
  spec.require_full_confinement = true;
  auto refused = backend_->Start(spec);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_NE(refused.error().message.find("GPU devices not confined"), std::string::npos);
  for (const auto& call : runner_.calls) EXPECT_EQ(call.rfind("sbatch", 0), std::string::npos);
}

// The launch file's NUL-terminated entries.
std::vector<std::string> LaunchEntries(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  std::vector<std::string> entries;
  size_t start = 0;
  for (size_t end = text.find('\0'); end != std::string::npos; end = text.find('\0', start)) {
    entries.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return entries;
}

bool HasSequence(const std::vector<std::string>& all, const std::vector<std::string>& seq) {
  return std::search(all.begin(), all.end(), seq.begin(), seq.end()) != all.end();
}

TEST_F(SlurmBackendTest, AnEnvironmentTemplatesRootIsRefusedWithoutASandboxInit) {
  auto spec = NobodysSpec();
  spec.root_fs = "/srv/templates/pytorch";
  auto refused = backend_->Start(spec);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_NE(refused.error().message.find("atrium-sandbox-init"), std::string::npos);
  EXPECT_TRUE(runner_.calls.empty());
  EXPECT_FALSE(std::filesystem::exists(root_ + "/wl.1"));
}

TEST_F(SlurmBackendTest, AnEnvironmentTemplatesRootBecomesTheRootOfABubblewrapSandbox) {
  SlurmBackendOptions options;
  options.workload_root = root_;
  options.sandbox.init_path = "/opt/atrium/atrium-sandbox-init";
  options.sandbox.device_dir = "/srv/fakedev";
  SlurmBackend backend(options, runner_, clock_);
  runner_.On("sbatch", {0, "78\n", ""});
  auto spec = NobodysSpec();
  spec.root_fs = "/srv/templates/pytorch";
  auto status = backend.Start(spec);
  ASSERT_TRUE(status.has_value()) << status.error().message;
  const auto entries = LaunchEntries(root_ + "/wl.1/work/launch.argv");
  ASSERT_GE(entries.size(), 4u);
  // A clean environment: the sandbox's, nothing of the batch script's.
  EXPECT_EQ((std::vector<std::string>(entries.begin(), entries.begin() + 3)),
            (std::vector<std::string>{"/usr/bin/env", "-i", "--"}));
  const auto has = [&](const std::string& e) {
    return std::find(entries.begin(), entries.end(), e) != entries.end();
  };
  EXPECT_TRUE(has("SECRET=a b;c"));
  EXPECT_TRUE(has("HOME=/work"));
  EXPECT_TRUE(has("CUDA_VISIBLE_DEVICES=0"));
  EXPECT_TRUE(has("NVIDIA_VISIBLE_DEVICES=2"));
  EXPECT_TRUE(has("/usr/bin/bwrap"));
  EXPECT_TRUE(HasSequence(entries, {"--ro-bind", "/srv/templates/pytorch", "/"}));
  EXPECT_TRUE(HasSequence(entries, {"--dev-bind", "/srv/fakedev/nvidia2", "/dev/nvidia2"}));
  EXPECT_TRUE(HasSequence(entries, {"--dev-bind-try", "/srv/fakedev/nvidiactl", "/dev/nvidiactl"}));
  EXPECT_TRUE(HasSequence(entries, {"--bind", root_ + "/wl.1/work", "/work"}));
  EXPECT_TRUE(HasSequence(entries, {"--ro-bind", "/opt/atrium/atrium-sandbox-init"}));
  EXPECT_TRUE(HasSequence(entries, {"--report-fd", "3", "--", "/bin/echo", "$(id)"}));
  for (const auto& e : entries) {
    EXPECT_EQ(e.find("/srv/fakedev/nvidia0"), std::string::npos) << "only the granted GPU";
    EXPECT_NE(e, "/usr") << "no host system path in a template's sandbox";
  }
  // The init's report goes to a file of the tenant's beside its directory.
  struct stat report {};
  ASSERT_EQ(::stat((root_ + "/wl.1/report").c_str(), &report), 0);
  EXPECT_EQ(report.st_uid, 65534u);
  EXPECT_EQ(report.st_mode & 0777, 0600u);
}

TEST_F(SlurmBackendTest, ATemplatesSpecTheSandboxCannotConfineIsRefusedBeforeAnything) {
  SlurmBackendOptions options;
  options.workload_root = root_;
  options.sandbox.init_path = "/opt/atrium/atrium-sandbox-init";
  SlurmBackend backend(options, runner_, clock_);
  auto spec = NobodysSpec();
  spec.root_fs = "/srv/templates/../../etc";
  EXPECT_EQ(backend.Start(spec).error().code, ErrorCode::kInvalidArgument);
  spec.root_fs = "/srv/templates/pytorch";
  spec.env = {{"CUDA_VISIBLE_DEVICES", "0,1,2,3"}};
  EXPECT_EQ(backend.Start(spec).error().code, ErrorCode::kInvalidArgument);
  EXPECT_TRUE(runner_.calls.empty());
  EXPECT_FALSE(std::filesystem::exists(root_ + "/wl.1"));
}

TEST_F(SlurmBackendTest, ASandboxedJobKilledByASignalSaysSoThoughBubblewrapExited128PlusN) {
  Known("wl.1", "42");
  std::ofstream(root_ + "/wl.1/report") << "signal 9\n";
  runner_.On("scontrol show job -d -o 42",
             {0,
              "JobId=42 JobName=wl.1 JobState=FAILED Reason=NonZeroExitCode ExitCode=137:0 "
              "StartTime=1700000000 EndTime=1700000060 Nodes=n1\n",
              ""});
  auto status = backend_->Inspect("wl.1");
  ASSERT_TRUE(status.has_value()) << status.error().message;
  EXPECT_EQ(status->signal, 9);
  EXPECT_EQ(status->exit_code, -1);
}

TEST_F(SlurmBackendTest, AStartThatDiedAfterSbatchIsAdoptedNotSubmittedAgain) {
  std::filesystem::create_directories(root_ + "/wl.1");
  std::ofstream(root_ + "/wl.1/state") << "job_id=\ntenant_id=nobody\n";
  runner_.On("squeue -h -t all -o %A --name=wl.1", {0, "88\n", ""});
  runner_.On("scontrol show job -d -o 88", {0, Running("88", "wl.1"), ""});
  auto status = backend_->Start(NobodysSpec());
  ASSERT_TRUE(status.has_value()) << status.error().message;
  EXPECT_EQ(status->backend_ref, "88");
  for (const auto& call : runner_.calls) EXPECT_EQ(call.rfind("sbatch", 0), std::string::npos);
}

TEST_F(SlurmBackendTest, SyncTenantSetsUpQosOnceThenSyncsTheAccount) {
  runner_.On("sacctmgr -n -P show qos", {0, "normal\n", ""});
  runner_.On("sacctmgr -n -P show account", {0, "tn_a\n", ""});
  runner_.On("sacctmgr -n -P show association", {0, "\n", ""});
  runner_.On("sacctmgr -i", {0, "", ""});
  ASSERT_TRUE(backend_->SyncTenant({"tn_a", "active", {{"", 2}}}).has_value());
  ASSERT_TRUE(backend_->SyncTenant({"tn_a", "active", {{"", 3}}}).has_value());
  int qos_lists = 0;
  for (const auto& call : runner_.calls) {
    if (call.rfind("sacctmgr -n -P show qos", 0) == 0) ++qos_lists;
  }
  EXPECT_EQ(qos_lists, 1);
  EXPECT_EQ(runner_.calls.back(),
            "sacctmgr -i modify account where name=tn_a set GrpTRES=gres/gpu=3 GrpSubmitJobs=-1");
}

TEST_F(SlurmBackendTest, DeletingATenantWithJobsStillEndingAsksForARetry) {
  runner_.On("sacctmgr -n -P show qos", {0, "preemptible\nbatch\ninteractive\n", ""});
  runner_.On("sacctmgr -n -P show account", {0, "tn_a\n", ""});
  runner_.On("sacctmgr -n -P show association", {0, "tn_a\n", ""});
  runner_.On("sacctmgr -i modify qos", {0, "", ""});
  runner_.On("scancel", {0, "", ""});
  runner_.On("sacctmgr -i delete",
             {1, "", " Error with request: Job(s) active, cancel job(s) before remove\n"});
  auto deleted = backend_->SyncTenant({"tn_a", "deleted", {}});
  ASSERT_FALSE(deleted.has_value());
  EXPECT_EQ(deleted.error().code, ErrorCode::kFailedPrecondition);
}

}  // namespace
}  // namespace atrium::slurm
