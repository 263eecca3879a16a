// What the local backend does beyond the shared conformance suite: the
// network namespace, cgroup limits, a uid and a 0700 directory per workload,
// what it records or refuses when the host will not enforce a mechanism,
// a supervisor that outlives a control plane killed with SIGKILL, a
// template's root filesystem as the sandbox's root.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "exec_local/cgroups.h"
#include "exec_local/local_harness.h"
#include "exec_local/workload_files.h"
#include "support/wait.h"

namespace atrium::exec_local {
namespace {

using exec::LaunchSpec;
using exec::WorkloadPhase;
using exec::WorkloadStatus;
using exec::conformance::Contains;
using exec::conformance::PathExists;
using exec::conformance::ReadHostFile;
using testing::LocalHarness;
using testing_support::WaitUntil;

class LocalBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto backend = harness_.NewLocalBackend();
    ASSERT_TRUE(backend.has_value()) << backend.error().message;
    backend_ = std::move(*backend);
  }
  void TearDown() override {
    if (backend_ == nullptr) return;
    auto all = backend_->List();
    if (!all.has_value()) return;
    for (const auto& s : *all) (void)backend_->Stop(s.workload_id, 0);
    for (const auto& s : *all) {
      WaitUntil([&] {
        auto now = backend_->Inspect(s.workload_id);
        return !now.has_value() || now->phase != WorkloadPhase::kRunning;
      });
      (void)backend_->Forget(s.workload_id);
    }
  }

  LaunchSpec Spec(const std::string& id, const std::string& script) {
    LaunchSpec spec;
    spec.workload_id = id;
    spec.job_id = id;
    spec.tenant_id = "tenant-a";
    spec.node = "local";
    spec.script = script;
    return spec;
  }

  WorkloadStatus Ended(const std::string& id) {
    WorkloadStatus last;
    EXPECT_TRUE(WaitUntil(
        [&] {
          auto s = backend_->Inspect(id);
          if (s.has_value()) last = *s;
          return s.has_value() && s->phase != WorkloadPhase::kRunning &&
                 s->phase != WorkloadPhase::kStarting;
        },
        std::chrono::seconds(60)))
        << id;
    return last;
  }

  std::string Log(const std::string& id) {
    auto chunk = backend_->ReadLog(id, 0, 1 << 20);
    return chunk.has_value() ? chunk->data : "";
  }

  void WaitLogged(const std::string& id, const std::string& line) {
    ASSERT_TRUE(WaitUntil([&] { return Contains(Log(id), line); }, std::chrono::seconds(60)))
        << Log(id);
  }

  std::string CgroupFile(const char* controller, const std::string& id, const char* file) {
    return harness_.options().cgroup_root + "/" + controller + "/" +
           harness_.options().cgroup_parent + "/" + id + "/" + file;
  }

  LocalHarness harness_;
  std::unique_ptr<LocalBackend> backend_;
};

TEST_F(LocalBackendTest, TheNetworkIsLoopbackOnly) {
  ASSERT_TRUE(backend_->Start(Spec("net", "grep ':' /proc/net/dev | cut -d: -f1 | tr -d ' '\n"))
                  .has_value());
  const auto status = Ended("net");
  EXPECT_EQ(status.exit_code, 0) << Log("net");
  EXPECT_EQ(Log("net"), "lo\n") << "no interface but loopback";
}

TEST_F(LocalBackendTest, CgroupLimitsAndTheDeviceAllowListAreWrittenAndRemovedAtTheEnd) {
  auto spec = Spec("limits", "echo ready\nexec sleep 100000\n");
  spec.memory_mib = 64;
  spec.pids_max = 32;
  spec.cpu_milli = 500;
  exec::GpuGrant gpu;
  gpu.index = 2;
  spec.gpus = {gpu};
  auto started = backend_->Start(spec);
  ASSERT_TRUE(started.has_value()) << started.error().message;
  EXPECT_EQ(started->detail, "") << "this host enforces every mechanism";
  WaitLogged("limits", "ready");
  EXPECT_EQ(ReadHostFile(CgroupFile("memory", "limits", "memory.limit_in_bytes")), "67108864\n");
  EXPECT_EQ(ReadHostFile(CgroupFile("pids", "limits", "pids.max")), "32\n");
  EXPECT_EQ(ReadHostFile(CgroupFile("cpu", "limits", "cpu.cfs_quota_us")), "50000\n");
  const auto devices = ReadHostFile(CgroupFile("devices", "limits", "devices.list"));
  EXPECT_TRUE(Contains(devices, "c 195:2 rw")) << devices;
  EXPECT_FALSE(Contains(devices, "c 195:0 ")) << devices;
  EXPECT_FALSE(Contains(devices, "a *:* rwm")) << devices;
  // Every process of the workload is in its cgroup, the supervisor is not.
  auto pids = backend_->HostPids("limits");
  ASSERT_TRUE(pids.has_value());
  const auto procs = ReadHostFile(CgroupFile("freezer", "limits", "cgroup.procs"));
  EXPECT_GE(std::count(procs.begin(), procs.end(), '\n'), 3)
      << "bwrap, its init, ours, sleep: " << procs;
  EXPECT_FALSE(Contains("\n" + procs, "\n" + started->backend_ref + "\n"));

  ASSERT_TRUE(backend_->Stop("limits", 0).has_value());
  Ended("limits");
  EXPECT_TRUE(WaitUntil([&] { return !PathExists(CgroupFile("memory", "limits", "")); }))
      << "the supervisor removes the cgroups once the workload is gone";
}

TEST_F(LocalBackendTest, ThePidsLimitHoldsInsideTheSandbox) {
  auto spec = Spec("forkbomb",
                   // The shell that meets the limit dies of it: a subshell forks.
                   "(i=0; while [ $i -lt 40 ]; do sleep 100000 & i=$((i+1)); done) 2>/dev/null\n"
                   // Counted with builtins only: at the limit nothing forks.
                   "c=0\nfor p in /proc/[0-9]*; do c=$((c+1)); done\necho procs=$c\nexit 0\n");
  spec.pids_max = 12;
  ASSERT_TRUE(backend_->Start(spec).has_value());
  Ended("forkbomb");
  const auto log = Log("forkbomb");
  const auto at = log.find("procs=");
  ASSERT_NE(at, std::string::npos) << log << " exit " << Ended("forkbomb").exit_code;
  EXPECT_LE(std::stoi(log.substr(at + 6)), 12) << log;
}

TEST_F(LocalBackendTest, EachWorkloadRunsAsItsOwnUidInA0700Directory) {
  ASSERT_TRUE(backend_->Start(Spec("first", "echo ready\nexec sleep 100000\n")).has_value());
  ASSERT_TRUE(backend_->Start(Spec("second", "id -u\n")).has_value());
  Ended("second");
  WaitLogged("first", "ready");
  struct stat first {
  }, second{}, record{};
  ASSERT_EQ(::stat(backend_->WorkDirOf("first").c_str(), &first), 0);
  ASSERT_EQ(::stat(backend_->WorkDirOf("second").c_str(), &second), 0);
  ASSERT_EQ(::stat((harness_.options().state_dir + "/workloads/first").c_str(), &record), 0);
  EXPECT_EQ(first.st_mode & 07777, 0700u);
  EXPECT_EQ(second.st_mode & 07777, 0700u);
  EXPECT_NE(first.st_uid, 0u);
  EXPECT_NE(first.st_uid, second.st_uid) << "two workloads never share a uid";
  EXPECT_EQ(Log("second"), std::to_string(second.st_uid) + "\n")
      << "it runs as the owner of its directory";
  EXPECT_EQ(record.st_uid, 0u);
  EXPECT_EQ(record.st_mode & 07777, 0711u) << "its records are the control plane's";
  for (const auto& entry :
       std::filesystem::directory_iterator(harness_.options().state_dir + "/workloads/second")) {
    if (entry.path().filename() == "work") continue;
    struct stat st {};
    ASSERT_EQ(::stat(entry.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 077, 0u) << entry.path() << " is readable by others";
    EXPECT_EQ(st.st_uid, 0u) << entry.path();
  }
}

TEST_F(LocalBackendTest,
       AMechanismTheHostRefusesIsRecordedAndRefusedWhenFullConfinementIsRequired) {
  // A cgroup root with no controller mounted: the host "refuses" cgroups.
  const std::string no_cgroups = harness_.root() + "/no-cgroups";
  std::filesystem::create_directories(no_cgroups);
  harness_.options().cgroup_root = no_cgroups;
  auto backend = harness_.NewLocalBackend();
  ASSERT_TRUE(backend.has_value());

  auto strict = Spec("strict", "exit 0\n");
  strict.require_full_confinement = true;
  auto refused = (*backend)->Start(strict);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(refused.error().message, "memory limit")) << refused.error().message;
  EXPECT_FALSE((*backend)->Inspect("strict").has_value()) << "nothing of it is left";
  EXPECT_FALSE(PathExists(harness_.options().state_dir + "/workloads/.staging-strict"));

  auto lenient = Spec("lenient", "echo ran\n");
  auto started = (*backend)->Start(lenient);
  ASSERT_TRUE(started.has_value()) << started.error().message;
  EXPECT_TRUE(Contains(started->detail, "not enforced")) << started->detail;
  EXPECT_TRUE(Contains(started->detail, "pids limit")) << started->detail;
  EXPECT_TRUE(Contains(started->detail, "device allow-list")) << started->detail;
  backend_ = std::move(*backend);
  const auto status = Ended("lenient");
  EXPECT_EQ(status.exit_code, 0);
  EXPECT_TRUE(Contains(status.detail, "not enforced")) << "the ended workload still says so";

  // The backend-wide option refuses every such workload.
  harness_.options().require_full_confinement = true;
  auto all_strict = harness_.NewLocalBackend();
  ASSERT_TRUE(all_strict.has_value());
  auto refused_again = (*all_strict)->Start(Spec("lenient2", "exit 0\n"));
  ASSERT_FALSE(refused_again.has_value());
  EXPECT_EQ(refused_again.error().code, ErrorCode::kFailedPrecondition);
}

TEST_F(LocalBackendTest, AGpuShareIsRefusedUnderFullConfinement) {
  auto spec = Spec("share", "exit 0\n");
  exec::GpuGrant gpu;
  gpu.index = 1;
  gpu.share_milli = 250;
  spec.gpus = {gpu};
  spec.require_full_confinement = true;
  auto refused = backend_->Start(spec);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(refused.error().message, "GPU share")) << refused.error().message;
}

TEST_F(LocalBackendTest, AShareRunsAndItsStatusSaysWhatIsNotEnforced) {
  auto spec = Spec("share-runs", "exit 0\n");
  exec::GpuGrant gpu;
  gpu.index = 1;
  gpu.share_milli = 250;
  spec.gpus = {gpu};
  auto started = backend_->Start(spec);
  ASSERT_TRUE(started.has_value()) << started.error().message;
  EXPECT_TRUE(Contains(started->detail, "not enforced: GPU share limits")) << started->detail;
  EXPECT_EQ(Ended("share-runs").exit_code, 0) << Log("share-runs");
}

TEST_F(LocalBackendTest, AMigInstanceAdmitsExactlyItsCapabilitiesInTheDeviceCgroup) {
  auto spec = Spec("mig-cgroup", "echo ready\nexec sleep 100000\n");
  exec::GpuGrant gpu;
  gpu.index = 3;
  gpu.mig_profile = "2g.20gb";
  gpu.mig_start = 4;
  spec.gpus = {gpu};
  auto started = backend_->Start(spec);
  ASSERT_TRUE(started.has_value()) << started.error().message;
  EXPECT_EQ(started->detail, "") << "a MIG instance is confined by the hardware";
  WaitLogged("mig-cgroup", "ready");
  // Simulated layout: GPU instance 4 (its start slot), compute instance 0.
  const int gi_minor = 3 + 3 * 135 + 4 * 9;
  const auto devices = ReadHostFile(CgroupFile("devices", "mig-cgroup", "devices.list"));
  EXPECT_TRUE(Contains(devices, "c 195:3 rw")) << devices;
  EXPECT_TRUE(Contains(devices, "c 60:" + std::to_string(gi_minor) + " rw")) << devices;
  EXPECT_TRUE(Contains(devices, "c 60:" + std::to_string(gi_minor + 1) + " rw")) << devices;
  EXPECT_EQ(std::count(devices.begin(), devices.end(), '\n'), 8 + 1 + 1 + 2)
      << "the standard nodes, the GPU, nvidiactl, two capabilities: " << devices;
  ASSERT_TRUE(backend_->Stop("mig-cgroup", 0).has_value());
  Ended("mig-cgroup");
}

TEST_F(LocalBackendTest, AMigGrantIsRefusedWhereNoMigLayoutIsKnown) {
  harness_.options().resolve_mig = nullptr;
  auto backend = harness_.NewLocalBackend();
  ASSERT_TRUE(backend.has_value());
  auto spec = Spec("mig-unknown", "exit 0\n");
  exec::GpuGrant gpu;
  gpu.index = 0;
  gpu.mig_profile = "1g.10gb";
  gpu.mig_start = 0;
  spec.gpus = {gpu};
  auto refused = (*backend)->Start(spec);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(refused.error().message, "1g.10gb@0")) << refused.error().message;
  EXPECT_FALSE((*backend)->Inspect("mig-unknown").has_value());

  // Ids given with the grant need no layout, but do need the driver's table.
  gpu.mig_gi = 1;
  gpu.mig_ci = 0;
  spec.gpus = {gpu};
  harness_.options().mig_minors_path = harness_.root() + "/no-such-table";
  backend = harness_.NewLocalBackend();
  ASSERT_TRUE(backend.has_value());
  refused = (*backend)->Start(spec);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(refused.error().message, "MIG is not usable")) << refused.error().message;
}

TEST_F(LocalBackendTest, AGpuWithoutADeviceFileOnThisNodeIsRefused) {
  auto spec = Spec("nodevice", "exit 0\n");
  exec::GpuGrant gpu;
  gpu.index = 9;  // the harness made nvidia0..3
  spec.gpus = {gpu};
  auto refused = backend_->Start(spec);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_FALSE(backend_->Inspect("nodevice").has_value());
}

TEST_F(LocalBackendTest, WorkloadsSurviveAControlPlaneKilledWithSigkill) {
  const pid_t control_plane = ::fork();
  ASSERT_GE(control_plane, 0);
  if (control_plane == 0) {
    auto backend = harness_.NewLocalBackend();
    if (!backend.has_value() ||
        !(*backend)->Start(Spec("survivor", "echo ready\nexec sleep 100000\n")).has_value()) {
      ::_exit(1);
    }
    ::kill(::getpid(), SIGKILL);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(control_plane, &status, 0), control_plane);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "the child failed to start the workload";
  WaitLogged("survivor", "ready");
  auto found = backend_->Inspect("survivor");
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->phase, WorkloadPhase::kRunning);
  ASSERT_TRUE(backend_->Stop("survivor", 5000).has_value());
  EXPECT_EQ(Ended("survivor").signal, SIGTERM);
}

TEST_F(LocalBackendTest, AWorkloadWhoseSupervisorIsKilledIsLostAndItsProcessesEnd) {
  ASSERT_TRUE(backend_->Start(Spec("orphan", "echo ready\nexec sleep 100000\n")).has_value());
  WaitLogged("orphan", "ready");
  auto pids = backend_->HostPids("orphan");
  ASSERT_TRUE(pids.has_value());
  ASSERT_GE(pids->size(), 2u);
  const int supervisor = pids->front();
  ASSERT_EQ(::kill(supervisor, SIGKILL), 0);
  const auto status = Ended("orphan");
  EXPECT_EQ(status.phase, WorkloadPhase::kLost);
  EXPECT_TRUE(Contains(status.detail, "supervisor")) << status.detail;
  // --die-with-parent: the sandbox goes with its supervisor.
  for (size_t i = 1; i < pids->size(); ++i) {
    const int pid = (*pids)[i];
    EXPECT_TRUE(WaitUntil([&] {
      auto ticks = ProcessStartTicks(pid);
      return !ticks.has_value();
    })) << "process "
        << pid << " outlived its supervisor";
  }
  EXPECT_TRUE(backend_->Forget("orphan").has_value()) << "a lost workload can be forgotten";
}

TEST_F(LocalBackendTest, ATemplateRootFilesystemReplacesTheHostsSystemPaths) {
  // A bare root with one static program (the init itself) and the mount
  // points the sandbox needs.
  const std::string rootfs = harness_.root() + "/rootfs";
  for (const char* dir : {"/bin", "/proc", "/dev", "/tmp", "/work"}) {
    std::filesystem::create_directories(rootfs + dir);
  }
  std::filesystem::copy_file(ATRIUM_SANDBOX_INIT_PATH, rootfs + "/bin/probe");
  ::chmod(harness_.root().c_str(), 0711);
  ::chmod(rootfs.c_str(), 0755);
  auto spec = Spec("template", "");
  spec.root_fs = rootfs;
  // The probe runs /usr/bin/true, which only the host has, and reports
  // how that went on stdout (fd 1): the log.
  spec.argv = {"/bin/probe", "--report-fd", "1", "--", "/usr/bin/true"};
  auto started = backend_->Start(spec);
  ASSERT_TRUE(started.has_value()) << started.error().message;
  const auto status = Ended("template");
  const auto log = Log("template");
  EXPECT_EQ(status.exit_code, 127) << log;
  EXPECT_TRUE(Contains(log, "cannot run /usr/bin/true")) << log;
  EXPECT_TRUE(Contains(log, "exit 127")) << log;
}

TEST_F(LocalBackendTest, AnArchiveIsUnpackedIntoTheWorkloadsDirectoryBeforeItStarts) {
  const std::string src = harness_.root() + "/upload";
  std::filesystem::create_directories(src + "/data");
  std::ofstream(src + "/data/hello.txt") << "hello from the archive\n";
  const std::string archive = harness_.root() + "/upload.tar.gz";
  ASSERT_EQ(std::system(("tar -czf " + archive + " -C " + src + " data").c_str()), 0);
  auto spec = Spec("unpacked", "cat data/hello.txt\nls -ln data/hello.txt | cut -d' ' -f3\n");
  spec.archive_path = archive;
  ASSERT_TRUE(backend_->Start(spec).has_value());
  const auto status = Ended("unpacked");
  EXPECT_EQ(status.exit_code, 0) << Log("unpacked");
  struct stat work {};
  ASSERT_EQ(::stat(backend_->WorkDirOf("unpacked").c_str(), &work), 0);
  EXPECT_EQ(Log("unpacked"), "hello from the archive\n" + std::to_string(work.st_uid) + "\n")
      << "its files are the workload's own, not the archive's owner's";
}

TEST_F(LocalBackendTest, AnArchiveWhoseMembersEscapeTheDirectoryIsRefusedAndNothingRuns) {
  const std::string src = harness_.root() + "/upload";
  std::filesystem::create_directories(src + "/data");
  std::ofstream(src + "/data/hello.txt") << "planted\n";
  const std::string archive = harness_.root() + "/hostile.tar";
  ASSERT_EQ(std::system(("tar -cf " + archive + " -C " + src +
                         " --transform 's,^data,../escaped,' data/hello.txt")
                            .c_str()),
            0);
  auto spec = Spec("hostile", "echo workload-ran\n");
  spec.archive_path = archive;
  ASSERT_TRUE(backend_->Start(spec).has_value());
  const auto status = Ended("hostile");
  EXPECT_NE(status.exit_code, 0);
  EXPECT_TRUE(Contains(status.detail, "unpacking its archive failed")) << status.detail;
  EXPECT_TRUE(Contains(Log("hostile"), "Member name contains '..'")) << Log("hostile");
  EXPECT_FALSE(Contains(Log("hostile"), "workload-ran"));
  EXPECT_FALSE(PathExists(harness_.options().state_dir + "/workloads/hostile/escaped"));
  EXPECT_FALSE(PathExists(harness_.options().state_dir + "/workloads/escaped"));
}

TEST_F(LocalBackendTest, LogFilesAreTheControlPlanesOnly) {
  ASSERT_TRUE(backend_->Start(Spec("logged", "echo private-output\n")).has_value());
  Ended("logged");
  EXPECT_EQ(Log("logged"), "private-output\n");
  struct stat st {};
  ASSERT_EQ(::stat((harness_.options().state_dir + "/workloads/logged/log.0").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(LocalBackendOptions, RefusesOptionsItCannotWorkWith) {
  LocalHarness harness;
  const std::vector<std::pair<const char*, void (*)(LocalBackendOptions&)>> cases = {
      {"relative state dir", [](LocalBackendOptions& o) { o.state_dir = "state"; }},
      {"uid range with root", [](LocalBackendOptions& o) { o.uid_base = 0; }},
      {"empty uid range", [](LocalBackendOptions& o) { o.uid_count = 0; }},
      {"cgroup parent escaping", [](LocalBackendOptions& o) { o.cgroup_parent = "../x"; }},
      {"no log", [](LocalBackendOptions& o) { o.log_max_bytes = 0; }},
  };
  for (const auto& [what, mutate] : cases) {
    auto options = harness.options();
    mutate(options);
    auto backend = LocalBackend::Create(options);
    ASSERT_FALSE(backend.has_value()) << what;
    EXPECT_EQ(backend.error().code, ErrorCode::kInvalidArgument) << what;
  }
}

TEST(LocalBackendOptions, RefusesAStateDirTheWorkloadsCannotReach) {
  LocalHarness harness;
  ::chmod(harness.root().c_str(), 0700);
  auto backend = LocalBackend::Create(harness.options());
  ASSERT_FALSE(backend.has_value());
  EXPECT_EQ(backend.error().code, ErrorCode::kInvalidArgument);
  EXPECT_TRUE(Contains(backend.error().message, harness.root() + " does not let others search it"))
      << backend.error().message;
}

TEST_F(LocalBackendTest, TheTimeLimitHoldsWithoutTheControlPlane) {
  auto spec = Spec("limited", "echo ready\nexec sleep 100000\n");
  spec.time_limit_s = 1;
  ASSERT_TRUE(backend_->Start(spec).has_value());
  backend_.reset();  // nobody watches
  auto backend = harness_.NewLocalBackend();
  ASSERT_TRUE(backend.has_value());
  backend_ = std::move(*backend);
  const auto status = Ended("limited");
  EXPECT_EQ(status.signal, SIGTERM);
  EXPECT_GE(status.ended_ms - status.started_ms, 1000);
  EXPECT_TRUE(Contains(status.detail, "time limit of 1 s")) << status.detail;
}

// The uid range was used up by workloads that had long ended: a uid was
// freed only by Forget, which runs for orphans and evicted tenants alone,
// so every tenant's Start ended in ResourceExhausted.
TEST_F(LocalBackendTest, ReleaseFreesTheUidAndDirectoryOfAnEndedWorkloadAndKeepsItsLog) {
  harness_.options().uid_count = 3;  // the probe's uid and two for workloads
  auto small = harness_.NewLocalBackend();
  ASSERT_TRUE(small.has_value());
  backend_ = std::move(*small);
  for (int i = 0; i < 6; ++i) {
    const std::string id = "short-" + std::to_string(i);
    auto started =
        backend_->Start(Spec(id, "echo out-" + std::to_string(i) + " > kept-file\necho log-" +
                                     std::to_string(i) + "\nexit 3\n"));
    ASSERT_TRUE(started.has_value()) << id << ": " << started.error().message;
    ASSERT_EQ(Ended(id).exit_code, 3);
    auto released = backend_->Release(id);
    ASSERT_TRUE(released.has_value()) << released.error().message;
    EXPECT_FALSE(PathExists(backend_->WorkDirOf(id))) << "its directory is gone";
    EXPECT_TRUE(backend_->Release(id).has_value()) << "releasing twice is not an error";
    // What stays: its end and its log, root's.
    auto status = backend_->Inspect(id);
    ASSERT_TRUE(status.has_value());
    EXPECT_EQ(status->phase, WorkloadPhase::kExited);
    EXPECT_EQ(status->exit_code, 3);
    EXPECT_EQ(Log(id), "log-" + std::to_string(i) + "\n");
  }
  // A restarted control plane does not count released workloads' uids.
  auto restarted = harness_.NewLocalBackend();
  ASSERT_TRUE(restarted.has_value());
  backend_ = std::move(*restarted);
  ASSERT_TRUE(backend_->Start(Spec("after-restart-1", "exec sleep 100000\n")).has_value());
  ASSERT_TRUE(backend_->Start(Spec("after-restart-2", "exec sleep 100000\n")).has_value());
  auto full = backend_->Start(Spec("one-too-many", "exit 0\n"));
  ASSERT_FALSE(full.has_value()) << "two uids, two live workloads";
  EXPECT_EQ(full.error().code, ErrorCode::kResourceExhausted);
  auto running = backend_->Release("after-restart-1");
  ASSERT_FALSE(running.has_value());
  EXPECT_EQ(running.error().code, ErrorCode::kFailedPrecondition) << "never while it runs";
}

// A reused uid must own nothing of the workload that had it: a process of
// that uid outside the sandbox (say, one that escaped its cgroups) would
// otherwise be the next tenant's to signal and ptrace.
TEST_F(LocalBackendTest, ReleaseKillsEveryProcessLeftWithTheWorkloadsUid) {
  ASSERT_TRUE(backend_->Start(Spec("leaver", "echo done\n")).has_value());
  Ended("leaver");
  struct stat st {};
  ASSERT_EQ(::stat(backend_->WorkDirOf("leaver").c_str(), &st), 0);
  const uid_t uid = st.st_uid;
  const pid_t left = ::fork();
  ASSERT_GE(left, 0);
  if (left == 0) {
    if (::setgid(uid) != 0 || ::setuid(uid) != 0) ::_exit(1);
    ::execl("/bin/sleep", "sleep", "100000", static_cast<char*>(nullptr));
    ::_exit(1);
  }
  ASSERT_TRUE(WaitUntil(
      [&] { return ReadHostFile("/proc/" + std::to_string(left) + "/comm") == "sleep\n"; }));
  ASSERT_TRUE(backend_->Release("leaver").has_value());
  int status = 0;
  ASSERT_EQ(::waitpid(left, &status, 0), left);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
}

TEST_F(LocalBackendTest, ReleasedLogsAreDeletedAfterTheRetention) {
  harness_.options().log_retention_s = 1;
  auto backend = harness_.NewLocalBackend();
  ASSERT_TRUE(backend.has_value());
  backend_ = std::move(*backend);
  ASSERT_TRUE(backend_->Start(Spec("old", "echo old\n")).has_value());
  ASSERT_TRUE(backend_->Start(Spec("live", "echo ready\nexec sleep 100000\n")).has_value());
  Ended("old");
  ASSERT_TRUE(backend_->Release("old").has_value());
  EXPECT_EQ(Log("old"), "old\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  ASSERT_TRUE(backend_->Start(Spec("new", "echo new\n")).has_value());
  Ended("new");
  ASSERT_TRUE(backend_->Release("new").has_value());
  EXPECT_EQ(backend_->Inspect("old").error().code, ErrorCode::kNotFound) << "its retention passed";
  EXPECT_EQ(Log("new"), "new\n") << "released just now";
  auto live = backend_->Inspect("live");
  ASSERT_TRUE(live.has_value()) << "a running workload is never pruned";
  EXPECT_EQ(live->phase, WorkloadPhase::kRunning);
}

// /tmp and bubblewrap's /dev were tmpfs of no bound (half the host's RAM,
// each); /dev stayed writable after the root turned read-only.
TEST_F(LocalBackendTest, TmpAndDevShmAreBoundedAndDevIsReadOnly) {
  harness_.options().tmpfs_mib = 8;
  auto backend = harness_.NewLocalBackend();
  ASSERT_TRUE(backend.has_value());
  backend_ = std::move(*backend);
  ASSERT_TRUE(backend_
                  ->Start(Spec("filler",
                               "for d in /tmp /dev/shm; do\n"
                               "  if dd if=/dev/zero of=$d/big bs=1M count=20 2>/dev/null; then\n"
                               "    echo FILLED $d; exit 40\n"
                               "  fi\n"
                               "  echo bounded $d $(($(wc -c < $d/big) / 1048576))\n"
                               "done\n"
                               "if ( echo x > /dev/planted ) 2>/dev/null; then echo WROTE-DEV; "
                               "exit 41; fi\n"
                               "echo x > /dev/null || exit 42\n"
                               "echo refused-all\n"))
                  .has_value());
  const auto status = Ended("filler");
  const auto log = Log("filler");
  EXPECT_EQ(status.exit_code, 0) << log;
  EXPECT_TRUE(Contains(log, "bounded /tmp 8\n")) << log;
  EXPECT_TRUE(Contains(log, "bounded /dev/shm 8\n")) << log;
  EXPECT_TRUE(Contains(log, "refused-all")) << log;
}

// memory_mib 0 meant no memory limit at all.
TEST_F(LocalBackendTest, AWorkloadWhoseSpecGivesNoMemoryGetsTheDefaultLimit) {
  harness_.options().default_memory_mib = 96;
  auto backend = harness_.NewLocalBackend();
  ASSERT_TRUE(backend.has_value());
  backend_ = std::move(*backend);
  auto spec = Spec("nomem", "echo ready\nexec sleep 100000\n");
  spec.memory_mib = 0;
  auto started = backend_->Start(spec);
  ASSERT_TRUE(started.has_value()) << started.error().message;
  WaitLogged("nomem", "ready");
  if (DetectCgroupVersion(harness_.options().cgroup_root) == CgroupVersion::kV1) {
    EXPECT_EQ(ReadHostFile(CgroupFile("memory", "nomem", "memory.limit_in_bytes")),
              std::to_string(96 << 20) + "\n");
  } else {
    EXPECT_EQ(ReadHostFile(harness_.options().cgroup_root + "/" + harness_.options().cgroup_parent +
                           "/nomem/memory.max"),
              std::to_string(96 << 20) + "\n");
  }
}

// Without any cgroup the pids limit was not enforced at all: a fork bomb
// took the host's process table. RLIMIT_NPROC of the workload's own uid
// holds it.
TEST_F(LocalBackendTest, WithoutCgroupsTheWorkloadsUidCapsItsProcesses) {
  const std::string no_cgroups = harness_.root() + "/no-cgroups";
  std::filesystem::create_directories(no_cgroups);
  harness_.options().cgroup_root = no_cgroups;
  auto backend = harness_.NewLocalBackend();
  ASSERT_TRUE(backend.has_value());
  backend_ = std::move(*backend);
  auto spec = Spec("forkbomb",
                   "(i=0; while [ $i -lt 40 ]; do sleep 100000 & i=$((i+1)); done) 2>/dev/null\n"
                   "c=0\nfor p in /proc/[0-9]*; do c=$((c+1)); done\necho procs=$c\nexit 0\n");
  spec.pids_max = 12;
  auto started = backend_->Start(spec);
  ASSERT_TRUE(started.has_value()) << started.error().message;
  EXPECT_TRUE(Contains(started->detail, "pids limit")) << "no pids cgroup: " << started->detail;
  Ended("forkbomb");
  const auto log = Log("forkbomb");
  const auto at = log.find("procs=");
  ASSERT_NE(at, std::string::npos) << log;
  EXPECT_LE(std::stoi(log.substr(at + 6)), 12) << log;
}

// A cgroup v2 host got no limits at all: only v1 was understood. A folder
// laid out as the unified hierarchy stands in for one.
TEST(LocalCgroupsV2, AWorkloadGetsOneCgroupWithItsLimitsUnderTheDelegatedParent) {
  const std::string root = "/tmp/atrium-cgroup-v2-" + std::to_string(::getpid());
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root);
  std::ofstream(root + "/cgroup.controllers") << "cpuset cpu io memory hugetlb pids rdma\n";
  std::ofstream(root + "/cgroup.subtree_control") << "";
  ASSERT_EQ(DetectCgroupVersion(root), CgroupVersion::kV2);
  CgroupLimits limits;
  limits.memory_bytes = 64 << 20;
  limits.cpu_milli = 1500;
  limits.pids_max = 32;
  limits.device_rules = {"c 195:0 rw"};
  CgroupSetup setup = CreateWorkloadCgroups(root, "atrium", "job-1.1", limits);
  const std::string dir = root + "/atrium/job-1.1";
  EXPECT_EQ(setup.dirs, std::vector<std::string>{dir});
  EXPECT_TRUE(setup.can_kill_all);
  EXPECT_TRUE(setup.memory_limited);
  EXPECT_TRUE(setup.not_enforced.empty()) << setup.not_enforced.front();
  EXPECT_EQ(ReadHostFile(dir + "/memory.max"), std::to_string(64 << 20));
  EXPECT_EQ(ReadHostFile(dir + "/pids.max"), "32");
  EXPECT_EQ(ReadHostFile(dir + "/cpu.max"), "150000 100000");
  // The parent hands the controllers down (the last write is what a plain
  // file keeps; the kernel's file accumulates them).
  EXPECT_TRUE(PathExists(root + "/atrium/cgroup.subtree_control"));
  EXPECT_FALSE(PathExists(dir + "/devices.allow")) << "v2 has no devices controller";

  // No limit asked: "max", still one cgroup to list and kill every process.
  CgroupSetup open = CreateWorkloadCgroups(root, "atrium", "job-2.1", {.pids_max = 8});
  EXPECT_EQ(ReadHostFile(root + "/atrium/job-2.1/memory.max"), "max");
  EXPECT_EQ(ReadHostFile(root + "/atrium/job-2.1/cpu.max"), "max 100000");
  EXPECT_FALSE(open.memory_limited);

  // A controller the root does not offer is reported, not hidden.
  std::ofstream(root + "/cgroup.controllers", std::ios::trunc) << "cpu pids\n";
  CgroupSetup partial = CreateWorkloadCgroups(root, "atrium", "job-3.1", limits);
  ASSERT_EQ(partial.not_enforced.size(), 1u);
  EXPECT_TRUE(Contains(partial.not_enforced[0], "memory limit")) << partial.not_enforced[0];
  EXPECT_FALSE(partial.memory_limited);
  EXPECT_TRUE(partial.can_kill_all);
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace atrium::exec_local
