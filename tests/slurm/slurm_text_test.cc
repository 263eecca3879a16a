// The parsers over captures of the real Slurm 22.05 CLIs (data/README.md).
#include "slurm/slurm_text.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

namespace atrium::slurm {
namespace {

using exec::WorkloadPhase;

std::string Data(const std::string& name) {
  std::ifstream in(std::string(SLURM_TEST_DATA) + "/" + name);
  EXPECT_TRUE(in.good()) << name;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

const SlurmJobRecord& ById(const std::vector<SlurmJobRecord>& jobs, const std::string& id) {
  for (const auto& job : jobs) {
    if (job.job_id == id) return job;
  }
  static SlurmJobRecord none;
  ADD_FAILURE() << "no job " << id;
  return none;
}

TEST(SbatchJobId, ReadsTheIdWithOrWithoutACluster) {
  EXPECT_EQ(*ParseSbatchJobId("24000003\n"), "24000003");
  EXPECT_EQ(*ParseSbatchJobId("17;gpaas\n"), "17");
  EXPECT_FALSE(ParseSbatchJobId("").has_value());
  EXPECT_FALSE(ParseSbatchJobId("sbatch: error: Batch job submission failed").has_value());
  EXPECT_FALSE(ParseSbatchJobId("12abc").has_value());
  EXPECT_FALSE(ParseSbatchJobId("-5").has_value());
}

TEST(ScontrolJobs, ReadsEveryStateOfTheCapture) {
  auto jobs = ParseScontrolJobs(Data("scontrol_show_job_d_o.txt"));
  ASSERT_TRUE(jobs.has_value()) << jobs.error().message;
  ASSERT_EQ(jobs->size(), 5u);

  const auto& exit3 = ById(*jobs, "24000001");
  EXPECT_EQ(exit3.name, "cap-exit3");
  EXPECT_EQ(exit3.state, "FAILED");
  EXPECT_EQ(exit3.reason, "NonZeroExitCode");
  EXPECT_EQ(exit3.exit_code, 3);
  EXPECT_EQ(exit3.exit_signal, 0);
  EXPECT_EQ(exit3.start_s, 1796197944);
  EXPECT_EQ(exit3.account, "probe");

  const auto& killed = ById(*jobs, "24000002");
  EXPECT_EQ(killed.exit_signal, 9);

  const auto& running = ById(*jobs, "24000003");
  EXPECT_EQ(running.state, "RUNNING");
  EXPECT_EQ(running.gpu_indices, std::vector<int>{2});
  EXPECT_EQ(running.gpus, 1);
  EXPECT_EQ(running.end_s, -1);  // its EndTime is the time limit, not an end

  const auto& pending = ById(*jobs, "24000005");
  EXPECT_EQ(pending.state, "PENDING");
  EXPECT_EQ(pending.reason, "Resources");
  EXPECT_EQ(pending.start_s, -1);  // its StartTime is a forecast
  EXPECT_TRUE(pending.gpu_indices.empty());
}

TEST(ScontrolJobs, RefusesALineWithoutAJobId) {
  EXPECT_FALSE(ParseScontrolJobs("JobName=x JobState=RUNNING\n").has_value());
  auto none = ParseScontrolJobs("No jobs in the system\n");
  ASSERT_TRUE(none.has_value());
  EXPECT_TRUE(none->empty());
}

TEST(JobsById, KeepsTheFirstRecordOfEachIdAndStepsApart) {
  auto records = ParseSacct(
      "42|wl.1|COMPLETED|0:0|1|2|1|gres/gpu=1|a\n"
      "42.batch|batch|COMPLETED|0:0|1|2|1||a\n"
      "42|wl.1|FAILED|1:0|1|2|1||a\n"
      "43|wl.2|RUNNING|0:0|1|Unknown|1||a\n");
  ASSERT_TRUE(records.has_value()) << records.error().message;
  auto jobs = JobsById(std::move(*records));
  ASSERT_EQ(jobs.size(), 3u);
  EXPECT_EQ(jobs.at("42").state, "COMPLETED");
  EXPECT_EQ(jobs.at("42.batch").name, "batch");
  EXPECT_EQ(jobs.at("43").name, "wl.2");
}

TEST(ScontrolJobs, MalformedExitCodeAndTimesAreIgnoredNotTrusted) {
  auto jobs = ParseScontrolJobs(
      "JobId=7 JobName=w JobState=FAILED ExitCode=999:77777 StartTime=Unknown EndTime=None\n");
  ASSERT_TRUE(jobs.has_value());
  EXPECT_EQ((*jobs)[0].exit_code, 0);
  EXPECT_EQ((*jobs)[0].exit_signal, 0);
  EXPECT_EQ((*jobs)[0].start_s, -1);
  EXPECT_EQ((*jobs)[0].end_s, -1);
}

TEST(GresIndices, ReadsCountsRangesListsAndTypedGres) {
  EXPECT_EQ(*ParseGresIndices("gpu:2(IDX:0-1)"), (std::vector<int>{0, 1}));
  EXPECT_EQ(*ParseGresIndices("gpu:idx1:1(IDX:1),gpu:idx3:1(IDX:3)"), (std::vector<int>{1, 3}));
  EXPECT_EQ(*ParseGresIndices("gpu:3(IDX:0,2-3)"), (std::vector<int>{0, 2, 3}));
  EXPECT_TRUE(ParseGresIndices("")->empty());
  EXPECT_TRUE(ParseGresIndices("(null)")->empty());
  EXPECT_TRUE(ParseGresIndices("gpu:1(IDX:N/A)")->empty());
  EXPECT_FALSE(ParseGresIndices("gpu:1(IDX:3-1)").has_value());
  EXPECT_FALSE(ParseGresIndices("gpu:1(IDX:x)").has_value());
  EXPECT_FALSE(ParseGresIndices("gpu:1(IDX:0-99999999)").has_value());
  EXPECT_FALSE(ParseGresIndices("gpu:1(IDX:1").has_value());
}

TEST(Sacct, ReadsTheCaptureWithStepsAndCancelledBy) {
  auto jobs = ParseSacct(Data("sacct_p.txt"));
  ASSERT_TRUE(jobs.has_value()) << jobs.error().message;
  EXPECT_EQ(ById(*jobs, "24000004").state, "CANCELLED");  // "CANCELLED by 0"
  EXPECT_EQ(ById(*jobs, "24000001").exit_code, 3);
  EXPECT_EQ(ById(*jobs, "24000002").exit_signal, 9);
  EXPECT_EQ(ById(*jobs, "24000005").start_s, -1);
  EXPECT_EQ(ById(*jobs, "24000006").gpus, 2);
  EXPECT_EQ(ById(*jobs, "24000006").elapsed_s, 2);
  EXPECT_EQ(ById(*jobs, "24000006.batch").name, "batch");
}

TEST(Sacct, RefusesALineWithAnotherFieldCount) {
  EXPECT_FALSE(ParseSacct("1|a|COMPLETED\n").has_value());
}

TEST(Sacct, GpuSecondsCountTheAllocationLineOnly) {
  auto jobs = ParseSacct(Data("sacct_p.txt"));
  ASSERT_TRUE(jobs.has_value());
  // 2 GPUs × 2 s; the .batch step (also 2 GPUs × 2 s) is not counted again.
  EXPECT_EQ(GpuSecondsFromSacct(*jobs, "24000006"), 4);
  EXPECT_EQ(GpuSecondsFromSacct(*jobs, "24000003"), 4);  // 1 GPU × 4 s so far
  EXPECT_EQ(GpuSecondsFromSacct(*jobs, "24000001"), 0);  // no GPU
  EXPECT_EQ(GpuSecondsFromSacct(*jobs, "99"), 0);
}

// slurmdbd names a job "allocation" until it hears the real name.
TEST(Sacct, GpuSecondsOfAJobStillNamedAllocation) {
  auto jobs = ParseSacct(
      "24000039|allocation|COMPLETED|0:0|1796199015|1796199017|2|billing=21,cpu=1,gres/gpu=2,"
      "node=1|tn_a\n");
  ASSERT_TRUE(jobs.has_value());
  EXPECT_EQ(GpuSecondsFromSacct(*jobs, "24000039"), 4);
}

TEST(Phase, MapsSlurmStates) {
  EXPECT_EQ(PhaseOfSlurmState("PENDING"), WorkloadPhase::kStarting);
  EXPECT_EQ(PhaseOfSlurmState("REQUEUED"), WorkloadPhase::kStarting);
  EXPECT_EQ(PhaseOfSlurmState("RUNNING"), WorkloadPhase::kRunning);
  EXPECT_EQ(PhaseOfSlurmState("COMPLETING"), WorkloadPhase::kRunning);
  EXPECT_EQ(PhaseOfSlurmState("COMPLETED"), WorkloadPhase::kExited);
  EXPECT_EQ(PhaseOfSlurmState("TIMEOUT"), WorkloadPhase::kExited);
  EXPECT_EQ(PhaseOfSlurmState("PREEMPTED"), WorkloadPhase::kExited);
  EXPECT_EQ(PhaseOfSlurmState("OUT_OF_MEMORY"), WorkloadPhase::kExited);
  EXPECT_EQ(PhaseOfSlurmState("NODE_FAIL"), WorkloadPhase::kLost);
}

TEST(Status, ASandboxReportTurnsExit128PlusNIntoSignalNOnlyWhenTheyAgree) {
  const auto exited = [](int code) {
    exec::WorkloadStatus status;
    status.phase = WorkloadPhase::kExited;
    status.exit_code = code;
    return status;
  };
  auto killed = exited(143);
  ApplySandboxReport("signal 15\n", killed);
  EXPECT_EQ(killed.signal, 15);
  EXPECT_EQ(killed.exit_code, -1);
  // The command itself said `exit 143`: an exit, not a signal.
  auto plain = exited(143);
  ApplySandboxReport("exit 143\n", plain);
  EXPECT_EQ(plain.exit_code, 143);
  EXPECT_EQ(plain.signal, 0);
  // A report that does not match the exit code (forged, or of another
  // run) changes nothing; neither does one for a low exit code.
  for (const char* report : {"signal 9\n", "signal 15", "signal 15\nsignal 9\n", ""}) {
    auto other = exited(143);
    ApplySandboxReport(report, other);
    EXPECT_EQ(other.exit_code, 143) << report;
    EXPECT_EQ(other.signal, 0) << report;
  }
  auto low = exited(1);
  ApplySandboxReport("signal 1\n", low);
  EXPECT_EQ(low.exit_code, 1);
  auto running = exited(143);
  running.phase = WorkloadPhase::kRunning;
  ApplySandboxReport("signal 15\n", running);
  EXPECT_EQ(running.signal, 0);
}

TEST(Status, ExitCodeOrSignalAndTimesFromTheRecord) {
  auto jobs = ParseScontrolJobs(Data("scontrol_show_job_d_o.txt"));
  ASSERT_TRUE(jobs.has_value());
  auto exit3 = StatusFromRecord("w1", ById(*jobs, "24000001"));
  EXPECT_EQ(exit3.phase, WorkloadPhase::kExited);
  EXPECT_EQ(exit3.exit_code, 3);
  EXPECT_EQ(exit3.signal, 0);
  EXPECT_EQ(exit3.started_ms, 1796197944000);
  EXPECT_EQ(exit3.backend_ref, "24000001");

  auto killed = StatusFromRecord("w2", ById(*jobs, "24000002"));
  EXPECT_EQ(killed.signal, 9);
  EXPECT_EQ(killed.exit_code, -1);

  auto running = StatusFromRecord("w3", ById(*jobs, "24000003"));
  EXPECT_EQ(running.phase, WorkloadPhase::kRunning);
  EXPECT_EQ(running.gpus, std::vector<int>{2});
  EXPECT_EQ(running.ended_ms, -1);

  auto pending = StatusFromRecord("w5", ById(*jobs, "24000005"));
  EXPECT_EQ(pending.phase, WorkloadPhase::kStarting);
  EXPECT_EQ(pending.started_ms, -1);
  EXPECT_NE(pending.detail.find("Resources"), std::string::npos);

  SlurmJobRecord timeout;
  timeout.job_id = "9";
  timeout.state = "TIMEOUT";
  EXPECT_EQ(StatusFromRecord("w", timeout).signal, 15);
}

TEST(Confinement, ReadsWhatTheClusterConfines) {
  EXPECT_TRUE(MissingConfinement("JobContainerType        = job_container/tmpfs\n"
                                 "ProctrackType           = proctrack/cgroup\n"
                                 "TaskPlugin              = task/cgroup,task/affinity\n")
                  .empty());
  // The fallback scripts/slurm-dev.sh takes where cgroups are refused.
  auto missing = MissingConfinement(
      "JobContainerType        = job_container/none\n"
      "ProctrackType           = proctrack/linuxproc\nTaskPlugin              = task/none\n");
  EXPECT_EQ(missing.size(), 3u);
}

}  // namespace
}  // namespace atrium::slurm
