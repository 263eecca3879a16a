// The conformance suite every execution backend passes (src/exec/backend.h):
// the same workloads, the same expectations, on `local` and on `slurm`.
//
// A backend's test folder provides a BackendHarness (a fresh, isolated
// world per test: a state dir, fake GPUs, a node name) and instantiates the
// suite once, in one .cc built with atrium_backend_conformance_test()
// (tests/exec/CMakeLists.txt):
//
//   #include "exec/backend_conformance.h"
//   INSTANTIATE_TEST_SUITE_P(Local, BackendConformanceTest,
//       ::testing::Values(conformance::BackendUnderTest{"local", [] { return MakeHarness(); }}),
//       conformance::BackendName);
//
// Workloads are /bin/sh scripts. Time is never a fixed sleep: a test waits
// for a condition (a phase, a line in the log) with a deadline that only a
// broken backend reaches, polling at the harness's interval (a Slurm
// backend's Inspect is a round trip, so it polls less often than local's).
//
// The isolation tests are attacks from inside a workload of tenant A on a
// workload of tenant B or on the host: each checks from inside that the
// attempt FAILED (the script exits 0 only when every attempt was refused
// and says what it saw in its log) and from outside that the target is
// unchanged.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "exec/backend.h"
#include "exec/backend_harness.h"

namespace atrium::exec::conformance {

class BackendConformanceTest : public ::testing::TestWithParam<BackendUnderTest> {
 protected:
  static constexpr char kTenantA[] = "conformance-a";
  static constexpr char kTenantB[] = "conformance-b";

  void SetUp() override {
    harness_ = GetParam().make_harness();
    // A harness whose backend's services are not configured here skips
    // (GTEST_SKIP in make_harness) or, where they are required, fails.
    if (IsSkipped()) return;
    ASSERT_NE(harness_, nullptr);
    backend_ = harness_->NewBackend();
    ASSERT_NE(backend_, nullptr);
    for (const char* tenant : {kTenantA, kTenantB}) {
      auto synced = backend_->SyncTenant(TenantAccount{tenant, "active", {}});
      ASSERT_TRUE(synced.has_value()) << synced.error().message;
    }
  }

  // Stops and forgets every workload the test started, through a fresh
  // instance (a test may have replaced backend_).
  void TearDown() override {
    if (harness_ == nullptr) return;
    auto backend = harness_->NewBackend();
    for (const auto& id : started_) (void)backend->Stop(id, 0);
    for (const auto& id : started_) {
      WaitFor(*backend, [&] {
        auto status = backend->Inspect(id);
        return !status.has_value() || status->phase == WorkloadPhase::kExited ||
               status->phase == WorkloadPhase::kLost;
      });
      (void)backend->Forget(id);
    }
  }

  // A workload id unique across tests and runs (a Slurm cluster outlives a
  // test process): the test's name, this process, a counter.
  std::string NewId(const std::string& what) {
    std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::string clean;
    for (char c : test) {
      if (std::isalnum(static_cast<unsigned char>(c))) clean += c;
    }
    clean = clean.substr(0, 40);
    return "ct-" + clean + "-" + std::to_string(::getpid()) + "-" + std::to_string(++counter_) +
           "-" + what;
  }

  LaunchSpec ScriptSpec(const std::string& id, const std::string& tenant,
                        const std::string& script) {
    LaunchSpec spec;
    spec.workload_id = id;
    spec.job_id = id;
    spec.tenant_id = tenant;
    spec.project = "default";
    spec.node = harness_->Node();
    spec.script = script;
    spec.priority = "batch";
    return spec;
  }

  WorkloadStatus Start(const LaunchSpec& spec) { return Start(*backend_, spec); }
  WorkloadStatus Start(ExecutionBackend& backend, const LaunchSpec& spec) {
    if (std::find(started_.begin(), started_.end(), spec.workload_id) == started_.end()) {
      started_.push_back(spec.workload_id);
    }
    auto status = backend.Start(spec);
    EXPECT_TRUE(status.has_value())
        << spec.workload_id << ": " << (status ? "" : status.error().message);
    return status.has_value() ? *status : WorkloadStatus{};
  }

  template <class Done>
  bool WaitFor(ExecutionBackend& backend, Done done) {
    (void)backend;
    const auto deadline = std::chrono::steady_clock::now() + harness_->WaitTimeout();
    while (!done()) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(harness_->PollInterval());
    }
    return true;
  }

  // The workload's status once it has ended (fails the test at the deadline).
  WorkloadStatus WaitUntilEnded(const std::string& id) { return WaitUntilEnded(*backend_, id); }
  WorkloadStatus WaitUntilEnded(ExecutionBackend& backend, const std::string& id) {
    WorkloadStatus last;
    const bool ended = WaitFor(backend, [&] {
      auto status = backend.Inspect(id);
      if (!status.has_value()) return false;
      last = *status;
      return last.phase == WorkloadPhase::kExited || last.phase == WorkloadPhase::kLost;
    });
    EXPECT_TRUE(ended) << id << " still " << PhaseName(last.phase) << " at the deadline; log:\n"
                       << WholeLog(id);
    EXPECT_EQ(last.phase, WorkloadPhase::kExited) << id << ": " << last.detail;
    return last;
  }

  // The whole log as kept (from the oldest byte still there).
  std::string WholeLog(const std::string& id) { return WholeLog(*backend_, id); }
  std::string WholeLog(ExecutionBackend& backend, const std::string& id) {
    std::string out;
    int64_t offset = 0;
    for (int i = 0; i < 10000; ++i) {
      auto chunk = backend.ReadLog(id, offset, 64 * 1024);
      if (!chunk.has_value() || chunk->data.empty()) break;
      out += chunk->data;
      offset = chunk->next_offset;
    }
    return out;
  }

  // Waits until the workload runs and its log holds `line` (a script says
  // "ready" once it has set up what the test then looks at).
  void WaitUntilLogged(const std::string& id, const std::string& line) {
    std::string log;
    const bool seen = WaitFor(*backend_, [&] {
      log = WholeLog(id);
      return Contains(log, line);
    });
    auto status = backend_->Inspect(id);
    ASSERT_TRUE(seen) << id << " never logged '" << line << "'; log:\n"
                      << log << "\nphase: "
                      << (status ? std::string(PhaseName(status->phase)) + " " + status->detail
                                 : "?");
  }

  // A workload that runs until stopped, after saying "ready".
  static constexpr char kSleeper[] = "echo ready\nexec sleep 100000\n";

  std::unique_ptr<BackendHarness> harness_;
  std::unique_ptr<ExecutionBackend> backend_;
  std::vector<std::string> started_;
  int counter_ = 0;
};

// --- Lifecycle ---------------------------------------------------------

TEST_P(BackendConformanceTest, RecordsTheExitCodeAndTheOutput) {
  const auto id = NewId("exit7");
  const int64_t before = WallMs();
  Start(ScriptSpec(id, kTenantA, "echo hello-from-the-workload\nexit 7\n"));
  const auto status = WaitUntilEnded(id);
  EXPECT_EQ(status.exit_code, 7);
  EXPECT_EQ(status.signal, 0);
  EXPECT_GE(status.started_ms, before - 1000);
  EXPECT_GE(status.ended_ms, status.started_ms);
  EXPECT_LE(status.ended_ms, WallMs() + 1000);
  EXPECT_EQ(status.workload_id, id);
  EXPECT_FALSE(status.backend_ref.empty());
  EXPECT_TRUE(Contains(WholeLog(id), "hello-from-the-workload\n"));
}

// The job service hands a GPU to the next job as soon as the backend hears
// the last one end (WatchEnds), instead of at its next look.
TEST_P(BackendConformanceTest, AnEndIsHeardWithoutAsking) {
  std::mutex mu;
  std::condition_variable cv;
  std::set<std::string> heard;
  auto watching = backend_->WatchEnds([&](const std::string& workload_id) {
    {
      std::lock_guard<std::mutex> lock(mu);
      heard.insert(workload_id);
    }
    cv.notify_all();
  });
  ASSERT_TRUE(watching.has_value()) << watching.error().message;
  const auto id = NewId("heard");
  Start(ScriptSpec(id, kTenantA, "exit 0\n"));
  {
    std::unique_lock<std::mutex> lock(mu);
    EXPECT_TRUE(cv.wait_for(lock, harness_->WaitTimeout(), [&] { return heard.contains(id); }))
        << "no end heard for " << id;
  }
  backend_->StopWatchingEnds();
  EXPECT_EQ(WaitUntilEnded(id).exit_code, 0);  // the hint came; the truth is Inspect's
}

TEST_P(BackendConformanceTest, RunsAnArgvCommandLookedUpInPath) {
  const auto id = NewId("argv");
  auto spec = ScriptSpec(id, kTenantA, "");
  spec.argv = {"sh", "-c", "echo argv-ok \"$0\" \"$1\" \"$GREETING\"", "first arg", "second"};
  spec.env = {{"GREETING", "hello world"}};
  Start(spec);
  const auto status = WaitUntilEnded(id);
  EXPECT_EQ(status.exit_code, 0);
  EXPECT_TRUE(Contains(WholeLog(id), "argv-ok first arg second hello world\n")) << WholeLog(id);
}

TEST_P(BackendConformanceTest, IsRunningUntilStopped) {
  const auto id = NewId("sleeper");
  Start(ScriptSpec(id, kTenantA, kSleeper));
  WaitUntilLogged(id, "ready");
  auto running = backend_->Inspect(id);
  ASSERT_TRUE(running.has_value());
  EXPECT_EQ(running->phase, WorkloadPhase::kRunning);
  EXPECT_EQ(running->ended_ms, -1);
  EXPECT_GT(running->started_ms, 0);
  EXPECT_EQ(running->exit_code, -1);

  ASSERT_TRUE(backend_->Stop(id, 60'000).has_value());
  const auto status = WaitUntilEnded(id);
  EXPECT_EQ(status.signal, SIGTERM) << "sleep does not catch SIGTERM";
  EXPECT_EQ(status.exit_code, -1);
  EXPECT_TRUE(backend_->Stop(id, 0).has_value()) << "stopping an ended workload is not an error";
}

TEST_P(BackendConformanceTest, RecordsTheSignalThatKilledIt) {
  const auto id = NewId("usr1");
  Start(ScriptSpec(id, kTenantA, "echo about-to-die\nkill -USR1 $$\necho still-alive\n"));
  const auto status = WaitUntilEnded(id);
  EXPECT_EQ(status.signal, SIGUSR1);
  EXPECT_EQ(status.exit_code, -1);
  EXPECT_FALSE(Contains(WholeLog(id), "still-alive"));
}

TEST_P(BackendConformanceTest, StopSendsSigtermFirstAndAHandlerMayFinishCleanly) {
  const auto id = NewId("graceful");
  Start(ScriptSpec(id, kTenantA,
                   "trap 'echo got-sigterm; exit 3' TERM\n"
                   "echo ready\n"
                   "sleep 100000 &\n"
                   "wait $!\n"
                   "echo wait-returned-without-signal\n"));
  WaitUntilLogged(id, "ready");
  const int64_t stop_ms = WallMs();
  ASSERT_TRUE(backend_->Stop(id, 120'000).has_value());
  const auto status = WaitUntilEnded(id);
  EXPECT_EQ(status.exit_code, 3) << "the handler's exit, not a SIGKILL";
  EXPECT_EQ(status.signal, 0);
  EXPECT_LT(status.ended_ms - stop_ms, 60'000) << "ended by its handler, long before the grace";
  const auto log = WholeLog(id);
  EXPECT_TRUE(Contains(log, "got-sigterm")) << log;
  EXPECT_FALSE(Contains(log, "wait-returned-without-signal")) << log;
}

TEST_P(BackendConformanceTest, StopKillsAWorkloadThatIgnoresSigtermAfterTheGrace) {
  const auto id = NewId("stubborn");
  // An ignored signal stays ignored across exec: sleep ignores SIGTERM too.
  Start(ScriptSpec(id, kTenantA, "trap '' TERM\necho ready\nexec sleep 100000\n"));
  WaitUntilLogged(id, "ready");
  constexpr int64_t kGraceMs = 700;
  const int64_t stop_ms = WallMs();
  ASSERT_TRUE(backend_->Stop(id, kGraceMs).has_value());
  const auto status = WaitUntilEnded(id);
  EXPECT_EQ(status.signal, SIGKILL);
  EXPECT_EQ(status.exit_code, -1);
  EXPECT_GE(status.ended_ms - stop_ms, kGraceMs) << "SIGKILL only once the grace has passed";
}

TEST_P(BackendConformanceTest, StartingTheSameWorkloadTwiceStartsItOnce) {
  const auto id = NewId("once");
  const auto spec = ScriptSpec(id, kTenantA, "echo started-once\nexec sleep 100000\n");
  const auto first = Start(spec);
  const auto second = Start(spec);
  EXPECT_EQ(second.backend_ref, first.backend_ref);
  WaitUntilLogged(id, "started-once");
  {
    // A restarted control plane that submits again starts nothing either.
    auto restarted = harness_->NewBackend();
    const auto third = Start(*restarted, spec);
    EXPECT_EQ(third.backend_ref, first.backend_ref);
    EXPECT_EQ(third.phase, WorkloadPhase::kRunning);
  }
  auto all = backend_->List();
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(std::count_if(all->begin(), all->end(),
                          [&](const WorkloadStatus& s) { return s.workload_id == id; }),
            1);
  ASSERT_TRUE(backend_->Stop(id, 0).has_value());
  WaitUntilEnded(id);
  EXPECT_EQ(CountOf(WholeLog(id), "started-once"), 1u);
}

TEST_P(BackendConformanceTest, LogIsBoundedAndKeepsTheNewestBytes) {
  const int64_t max_bytes = harness_->LogMaxBytes();
  ASSERT_GT(max_bytes, 0);
  // 12-byte lines, four times what the log keeps.
  const int64_t lines = max_bytes * 4 / 12 + 100;
  std::string expected;
  for (int64_t i = 0; i < lines; ++i) {
    char line[32];
    std::snprintf(line, sizeof line, "line-%06lld\n", static_cast<long long>(i));
    expected += line;
  }
  const auto id = NewId("chatty");
  Start(ScriptSpec(id, kTenantA,
                   "i=0\nwhile [ $i -lt " + std::to_string(lines) +
                       " ]; do printf 'line-%06d\\n' $i; i=$((i+1)); done\n"));
  const auto status = WaitUntilEnded(id);
  ASSERT_EQ(status.exit_code, 0);

  auto all = backend_->ReadLog(id, 0, 1 << 30);
  ASSERT_TRUE(all.has_value()) << all.error().message;
  const int64_t total = static_cast<int64_t>(expected.size());
  EXPECT_GT(all->offset, 0) << "the oldest bytes were rotated away";
  EXPECT_EQ(all->dropped, all->offset) << "everything before the first kept byte counts as dropped";
  EXPECT_LE(static_cast<int64_t>(all->data.size()), max_bytes);
  EXPECT_GE(static_cast<int64_t>(all->data.size()), max_bytes / 2)
      << "rotation keeps at least half the bound";
  EXPECT_EQ(all->offset + static_cast<int64_t>(all->data.size()), total);
  EXPECT_EQ(all->next_offset, total);
  EXPECT_EQ(all->data, expected.substr(static_cast<size_t>(all->offset)))
      << "the newest bytes, in order";
  EXPECT_TRUE(all->complete);

  // Reading on from a kept offset in small pieces loses nothing more.
  auto piece = backend_->ReadLog(id, all->offset + 5, 100);
  ASSERT_TRUE(piece.has_value());
  EXPECT_EQ(piece->offset, all->offset + 5);
  EXPECT_EQ(piece->dropped, 0);
  EXPECT_EQ(piece->data, expected.substr(static_cast<size_t>(all->offset + 5), 100));
  EXPECT_EQ(piece->next_offset, all->offset + 105);
  EXPECT_FALSE(piece->complete);

  auto at_end = backend_->ReadLog(id, total, 100);
  ASSERT_TRUE(at_end.has_value());
  EXPECT_TRUE(at_end->data.empty());
  EXPECT_TRUE(at_end->complete);

  for (auto [offset, max] : {std::pair<int64_t, int64_t>{-1, 10}, {0, -5}}) {
    auto bad = backend_->ReadLog(id, offset, max);
    ASSERT_FALSE(bad.has_value()) << offset << " " << max;
    EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
  }
}

TEST_P(BackendConformanceTest, ANewInstanceFindsRunningAndEndedWorkloadsWithTheirRealEnd) {
  const auto ends_later = NewId("later");
  const auto ended = NewId("ended");
  const auto runs = NewId("runs");
  Start(ScriptSpec(ends_later, kTenantA,
                   "echo ready\nwhile [ ! -e ./go ]; do sleep 0.05; done\necho saw-go\nexit 4\n"));
  Start(ScriptSpec(ended, kTenantA, "exit 5\n"));
  Start(ScriptSpec(runs, kTenantB, kSleeper));
  const auto ended_before = WaitUntilEnded(ended);
  WaitUntilLogged(ends_later, "ready");
  WaitUntilLogged(runs, "ready");
  const auto runs_before = backend_->Inspect(runs);
  ASSERT_TRUE(runs_before.has_value());

  // The control plane goes away; a workload ends while nobody watches.
  backend_.reset();
  const int64_t go_ms = WallMs();
  {
    const auto go = harness_->WorkDirOnHost(ends_later) + "/go";
    std::ofstream(go) << "go\n";
    ASSERT_TRUE(PathExists(go));
    ::chmod(go.c_str(), 0644);
  }
  backend_ = harness_->NewBackend();
  const auto later = WaitUntilEnded(ends_later);
  EXPECT_EQ(later.exit_code, 4);
  EXPECT_GE(later.ended_ms, go_ms - 1000) << "its real end, not when it was found";

  auto all = backend_->List();
  ASSERT_TRUE(all.has_value()) << all.error().message;
  auto find = [&](const std::string& id) -> const WorkloadStatus* {
    for (const auto& s : *all) {
      if (s.workload_id == id) return &s;
    }
    return nullptr;
  };
  ASSERT_NE(find(ends_later), nullptr);
  ASSERT_NE(find(ended), nullptr);
  ASSERT_NE(find(runs), nullptr);
  EXPECT_EQ(find(ended)->phase, WorkloadPhase::kExited);
  EXPECT_EQ(find(ended)->exit_code, 5);
  EXPECT_EQ(find(ended)->ended_ms, ended_before.ended_ms);
  EXPECT_EQ(find(ends_later)->exit_code, 4);
  EXPECT_EQ(find(runs)->phase, WorkloadPhase::kRunning);
  EXPECT_EQ(find(runs)->backend_ref, runs_before->backend_ref);
  EXPECT_EQ(find(runs)->started_ms, runs_before->started_ms);

  // The new instance can stop what the old one started.
  ASSERT_TRUE(backend_->Stop(runs, 0).has_value());
  const int signal = WaitUntilEnded(runs).signal;
  EXPECT_TRUE(signal == SIGTERM || signal == SIGKILL) << signal;
}

TEST_P(BackendConformanceTest, ForgetIsRefusedWhileRunningAndWorksAfter) {
  const auto id = NewId("forget");
  Start(ScriptSpec(id, kTenantA, kSleeper));
  WaitUntilLogged(id, "ready");
  auto refused = backend_->Forget(id);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kFailedPrecondition);
  auto still = backend_->Inspect(id);
  ASSERT_TRUE(still.has_value());
  EXPECT_EQ(still->phase, WorkloadPhase::kRunning);

  ASSERT_TRUE(backend_->Stop(id, 0).has_value());
  WaitUntilEnded(id);
  ASSERT_TRUE(backend_->Forget(id).has_value());
  auto gone = backend_->Inspect(id);
  ASSERT_FALSE(gone.has_value());
  EXPECT_EQ(gone.error().code, ErrorCode::kNotFound);
  auto log = backend_->ReadLog(id, 0, 100);
  ASSERT_FALSE(log.has_value());
  EXPECT_EQ(log.error().code, ErrorCode::kNotFound);
  auto all = backend_->List();
  ASSERT_TRUE(all.has_value());
  for (const auto& s : *all) EXPECT_NE(s.workload_id, id);
}

TEST_P(BackendConformanceTest, AnUnknownWorkloadIsNotFound) {
  const auto id = NewId("never");
  auto inspect = backend_->Inspect(id);
  ASSERT_FALSE(inspect.has_value());
  EXPECT_EQ(inspect.error().code, ErrorCode::kNotFound);
  auto log = backend_->ReadLog(id, 0, 10);
  ASSERT_FALSE(log.has_value());
  EXPECT_EQ(log.error().code, ErrorCode::kNotFound);
  auto stop = backend_->Stop(id, 0);
  ASSERT_FALSE(stop.has_value());
  EXPECT_EQ(stop.error().code, ErrorCode::kNotFound);
}

TEST_P(BackendConformanceTest, RefusesASpecItCannotRunSafelyAndStartsNothing) {
  auto escape = ScriptSpec("../escape", kTenantA, "exit 0\n");
  auto bad_env = ScriptSpec(NewId("badenv"), kTenantA, "exit 0\n");
  bad_env.env = {{"A=B", "c"}};
  auto nul_arg = ScriptSpec(NewId("nularg"), kTenantA, "");
  nul_arg.argv = {"echo", std::string("a\0b", 3)};
  for (const auto& spec : {escape, bad_env, nul_arg}) {
    auto started = backend_->Start(spec);
    ASSERT_FALSE(started.has_value()) << spec.workload_id;
    EXPECT_EQ(started.error().code, ErrorCode::kInvalidArgument) << started.error().message;
    auto inspect = backend_->Inspect(spec.workload_id);
    EXPECT_FALSE(inspect.has_value());
  }
  auto all = backend_->List();
  ASSERT_TRUE(all.has_value());
  for (const auto& s : *all) {
    for (const auto& spec : {escape, bad_env, nul_arg}) EXPECT_NE(s.workload_id, spec.workload_id);
  }
}

// --- Isolation: tenant A against tenant B and the host -----------------

TEST_P(BackendConformanceTest, IsolationAWorkloadCannotOpenAGpuItWasNotGiven) {
  const auto gpus = harness_->GpuIndices();
  ASSERT_GE(gpus.size(), 2u);
  const auto granted = harness_->DevicePathInWorkload(gpus[0]);
  const auto forbidden = harness_->DevicePathInWorkload(gpus[1]);
  const auto id = NewId("gpu");
  auto spec =
      ScriptSpec(id, kTenantA,
                 // "No such device or address" (ENXIO) means the open went through
                 // every fence and reached the (absent) driver of a fake GPU.
                 "reached_driver() { grep -q 'No such device or address' /tmp/err; }\n"
                 "if [ ! -c '" +
                     granted +
                     "' ]; then echo GRANTED-MISSING; exit 20; fi\n"
                     "if ( : < '" +
                     granted +
                     "' ) 2>/tmp/err || reached_driver; then echo granted-reachable; "
                     "else echo GRANTED-REFUSED; cat /tmp/err; exit 24; fi\n"
                     "if ( : < '" +
                     forbidden +
                     "' ) 2>/tmp/err; then echo OPENED-FORBIDDEN; exit 21; fi\n"
                     "if reached_driver; then echo FORBIDDEN-REACHED-DRIVER; exit 23; fi\n"
                     "echo \"forbidden-refused: $(cat /tmp/err)\"\n"
                     // A device node of its own making for the same GPU.
                     "if mknod /tmp/gpu c 195 " +
                     std::to_string(gpus[1]) +
                     " 2>/tmp/err; then\n"
                     "  if ( : < /tmp/gpu ) 2>/tmp/err; then echo OPENED-MKNOD; exit 22; fi\n"
                     "  if reached_driver; then echo MKNOD-REACHED-DRIVER; exit 25; fi\n"
                     "fi\n"
                     "echo \"mknod-refused: $(cat /tmp/err)\"\n"
                     "echo \"CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES\"\n"
                     "exit 0\n");
  GpuGrant grant;
  grant.index = gpus[0];
  spec.gpus = {grant};
  const auto started = Start(spec);
  EXPECT_EQ(started.gpus, std::vector<int>{gpus[0]});
  const auto status = WaitUntilEnded(id);
  const auto log = WholeLog(id);
  EXPECT_EQ(status.exit_code, 0) << log;
  EXPECT_TRUE(Contains(log, "granted-reachable")) << log;
  EXPECT_TRUE(Contains(log, "forbidden-refused")) << log;
  EXPECT_TRUE(Contains(log, "CUDA_VISIBLE_DEVICES=0\n")) << log;
}

TEST_P(BackendConformanceTest, IsolationAWorkloadCannotReadAnotherJobsDirectory) {
  const auto victim = NewId("victim");
  Start(ScriptSpec(victim, kTenantB,
                   "echo secret-of-b-4711 > secret.txt\necho ready\nexec sleep 100000\n"));
  WaitUntilLogged(victim, "ready");
  const auto victim_dir = harness_->WorkDirOnHost(victim);
  ASSERT_EQ(ReadHostFile(victim_dir + "/secret.txt"), "secret-of-b-4711\n");
  std::string pids;
  for (int pid : harness_->HostPids(victim)) pids += std::to_string(pid) + " ";
  ASSERT_FALSE(pids.empty());

  const auto attacker = NewId("reader");
  auto spec =
      ScriptSpec(attacker, kTenantA,
                 "for p in \"$TARGET/secret.txt\" $(for pid in $PIDS; do "
                 "echo /proc/$pid/root$TARGET/secret.txt /proc/$pid/cwd/secret.txt; done); do\n"
                 "  if cat \"$p\" 2>/dev/null; then echo \"READ-FORBIDDEN $p\"; exit 30; fi\n"
                 "done\n"
                 "if ls \"$TARGET\" 2>/dev/null; then echo LISTED-FORBIDDEN; exit 31; fi\n"
                 "echo refused-all\n");
  spec.env = {{"TARGET", victim_dir}, {"PIDS", pids}};
  Start(spec);
  const auto status = WaitUntilEnded(attacker);
  const auto log = WholeLog(attacker);
  EXPECT_EQ(status.exit_code, 0) << log;
  EXPECT_TRUE(Contains(log, "refused-all")) << log;
  EXPECT_FALSE(Contains(log, "secret-of-b")) << log;
  EXPECT_EQ(ReadHostFile(victim_dir + "/secret.txt"), "secret-of-b-4711\n");
  auto victim_status = backend_->Inspect(victim);
  ASSERT_TRUE(victim_status.has_value());
  EXPECT_EQ(victim_status->phase, WorkloadPhase::kRunning);
}

TEST_P(BackendConformanceTest, IsolationAWorkloadCannotSignalAnotherJobsProcess) {
  const auto victim = NewId("victim");
  Start(ScriptSpec(victim, kTenantB, kSleeper));
  WaitUntilLogged(victim, "ready");
  const auto victim_pids = harness_->HostPids(victim);
  ASSERT_FALSE(victim_pids.empty());
  std::string pids;
  for (int pid : victim_pids) pids += std::to_string(pid) + " ";

  const auto attacker = NewId("killer");
  auto spec =
      ScriptSpec(attacker, kTenantA,
                 "for pid in $PIDS; do\n"
                 "  if kill -KILL $pid 2>/dev/null; then echo \"SIGNALLED $pid\"; exit 40; fi\n"
                 "  if kill -0 $pid 2>/dev/null; then echo \"CAN-SIGNAL $pid\"; exit 41; fi\n"
                 "done\n"
                 "echo refused-all\n");
  spec.env = {{"PIDS", pids}};
  Start(spec);
  const auto status = WaitUntilEnded(attacker);
  const auto log = WholeLog(attacker);
  EXPECT_EQ(status.exit_code, 0) << log;
  EXPECT_TRUE(Contains(log, "refused-all")) << log;
  for (int pid : victim_pids)
    EXPECT_EQ(::kill(pid, 0), 0) << "victim process " << pid << " is gone";
  auto victim_status = backend_->Inspect(victim);
  ASSERT_TRUE(victim_status.has_value());
  EXPECT_EQ(victim_status->phase, WorkloadPhase::kRunning);
}

TEST_P(BackendConformanceTest, IsolationAWorkloadCannotWriteOutsideItsSandbox) {
  const auto victim = NewId("victim");
  Start(ScriptSpec(victim, kTenantB, kSleeper));
  WaitUntilLogged(victim, "ready");
  const auto victim_dir = harness_->WorkDirOnHost(victim);
  const auto control_plane = harness_->ControlPlaneDir();
  const std::string planted = "planted-by-" + NewId("w");
  const std::vector<std::string> targets = {control_plane + "/" + planted, "/etc/" + planted,
                                            "/usr/" + planted, victim_dir + "/" + planted,
                                            "/" + planted};

  const auto attacker = NewId("writer");
  std::string script = "for f in";
  for (const auto& t : targets) script += " '" + t + "'";
  script +=
      "; do\n"
      "  if ( echo x > \"$f\" ) 2>/dev/null; then echo \"WROTE $f\"; exit 50; fi\n"
      "done\n"
      "if mkdir \"$CP/dir-$NAME\" 2>/dev/null; then echo MADE-DIR; exit 51; fi\n"
      "echo own > own-file || exit 52\n"
      "echo own > /tmp/own-tmp || exit 53\n"
      "echo refused-all\n";
  auto spec = ScriptSpec(attacker, kTenantA, script);
  spec.env = {{"CP", control_plane}, {"NAME", planted}};
  Start(spec);
  const auto status = WaitUntilEnded(attacker);
  const auto log = WholeLog(attacker);
  EXPECT_EQ(status.exit_code, 0) << log;
  EXPECT_TRUE(Contains(log, "refused-all")) << log;
  for (const auto& t : targets) EXPECT_FALSE(PathExists(t)) << t;
  EXPECT_FALSE(PathExists(control_plane + "/dir-" + planted));
  EXPECT_EQ(ReadHostFile(harness_->WorkDirOnHost(attacker) + "/own-file"), "own\n")
      << "its own directory is writable";
}

// A forged end marker would make the job service look at another tenant's
// workload early (only a look: it believes the backend, not the marker);
// still, no workload may make one.
TEST_P(BackendConformanceTest, IsolationAWorkloadCannotMarkAnotherWorkloadEnded) {
  const auto victim = NewId("victim");
  Start(ScriptSpec(victim, kTenantB, kSleeper));
  WaitUntilLogged(victim, "ready");
  const auto attacker = NewId("forger");
  auto spec =
      ScriptSpec(attacker, kTenantA,
                 "if ( : > \"$ENDED/$VICTIM\" ) 2>/dev/null; then echo FORGED; exit 50; fi\n"
                 "if ( : > \"$ENDED/../ended-by-$VICTIM\" ) 2>/dev/null; then exit 51; fi\n"
                 "echo refused\n");
  spec.env = {{"ENDED", harness_->EndedDir()}, {"VICTIM", victim}};
  Start(spec);
  const auto status = WaitUntilEnded(attacker);
  const auto log = WholeLog(attacker);
  EXPECT_EQ(status.exit_code, 0) << log;
  EXPECT_TRUE(Contains(log, "refused")) << log;
  EXPECT_FALSE(PathExists(harness_->EndedDir() + "/" + victim));
  auto still = backend_->Inspect(victim);
  ASSERT_TRUE(still.has_value());
  EXPECT_EQ(still->phase, WorkloadPhase::kRunning);
}

TEST_P(BackendConformanceTest, IsolationTmpIsPrivate) {
  const std::string host_marker = "/tmp/atrium-conformance-host-" + std::to_string(::getpid());
  std::ofstream(host_marker) << "host\n";
  ::chmod(host_marker.c_str(), 0644);
  const auto id = NewId("tmp");
  const std::string own = "atrium-conformance-" + id;
  Start(ScriptSpec(id, kTenantA,
                   "if [ -e '" + host_marker +
                       "' ]; then echo SEES-HOST-TMP; exit 60; fi\n"
                       "echo mine > '/tmp/" +
                       own +
                       "' || exit 61\n"
                       "cat '/tmp/" +
                       own + "'\n"));
  const auto status = WaitUntilEnded(id);
  ::unlink(host_marker.c_str());
  EXPECT_EQ(status.exit_code, 0) << WholeLog(id);
  EXPECT_TRUE(Contains(WholeLog(id), "mine\n"));
  EXPECT_FALSE(PathExists("/tmp/" + own)) << "a workload's /tmp is its own, not the host's";
}

TEST_P(BackendConformanceTest, IsolationRunsAsAnUnprivilegedUser) {
  const auto id = NewId("uid");
  Start(ScriptSpec(id, kTenantA, "u=$(id -u); echo uid=$u; [ \"$u\" != 0 ] || exit 70\n"));
  const auto status = WaitUntilEnded(id);
  EXPECT_EQ(status.exit_code, 0) << WholeLog(id);
  EXPECT_TRUE(Contains(WholeLog(id), "uid=")) << WholeLog(id);
}

// --- Environment templates -------------------------------------------

// A template's root filesystem under the control plane's folder (which
// workloads may traverse, not list): a static busybox as /bin/sh and the
// few commands the scripts use, a marker file, and the mount points the
// sandbox needs (the root is read-only, so none can be made there).
inline std::string MakeTemplateRoot(const std::string& dir) {
  const std::string busybox = "/bin/busybox";
  EXPECT_TRUE(PathExists(busybox)) << "the template tests need busybox-static "
                                      "(scripts/install-deps.sh)";
  for (const char* sub : {"/bin", "/etc", "/proc", "/dev", "/tmp", "/work"}) {
    std::filesystem::create_directories(dir + sub);
    ::chmod((dir + sub).c_str(), 0755);
  }
  ::chmod(dir.c_str(), 0755);
  std::filesystem::copy_file(busybox, dir + "/bin/busybox",
                             std::filesystem::copy_options::overwrite_existing);
  ::chmod((dir + "/bin/busybox").c_str(), 0755);
  for (const char* applet : {"sh", "cat", "ls", "id", "mknod", "sleep"}) {
    std::filesystem::create_symlink("busybox", dir + "/bin/" + applet);
  }
  std::ofstream(dir + "/etc/atrium-template-marker") << "template-marker-4242\n";
  ::chmod((dir + "/etc/atrium-template-marker").c_str(), 0644);
  return dir;
}

TEST_P(BackendConformanceTest, ATemplatesRootFilesystemIsTheWorkloadsRootWithOnlyItsGpu) {
  const auto gpus = harness_->GpuIndices();
  ASSERT_GE(gpus.size(), 2u);
  const auto id = NewId("template");
  const std::string root = MakeTemplateRoot(harness_->ControlPlaneDir() + "/template-" + id);
  const std::string granted = "/dev/nvidia" + std::to_string(gpus[0]);
  const std::string forbidden = "/dev/nvidia" + std::to_string(gpus[1]);
  auto spec = ScriptSpec(
      id, kTenantA,
      "cat /etc/atrium-template-marker || exit 80\n"
      // Nothing of the host's: its system folders, the control plane's.
      "for p in /usr /lib /etc/passwd '" +
          harness_->ControlPlaneDir() + "' '" + harness_->DevicePathInWorkload(gpus[1]) +
          "'; do\n"
          "  if [ -e \"$p\" ]; then echo \"SEES-HOST $p\"; exit 81; fi\n"
          "done\n"
          "echo \"dev: $(ls /dev)\"\n"
          "if [ ! -c " +
          granted +
          " ]; then echo GRANTED-MISSING; exit 82; fi\n"
          "if ( : < " +
          granted +
          " ) 2>/tmp/err; then :; else\n"
          "  case \"$(cat /tmp/err)\" in *'No such device or address'*) ;;\n"
          "    *) echo \"GRANTED-REFUSED $(cat /tmp/err)\"; exit 83;; esac\n"
          "fi\n"
          "if [ -e " +
          forbidden +
          " ]; then echo SEES-FORBIDDEN; exit 84; fi\n"
          "if mknod /tmp/gpu c 195 " +
          std::to_string(gpus[1]) +
          " 2>/dev/null && ( : < /tmp/gpu ) 2>/tmp/err; then echo OPENED-MKNOD; exit 85; fi\n"
          "for f in /etc/planted /planted /bin/planted; do\n"
          "  if ( echo x > \"$f\" ) 2>/dev/null; then echo \"WROTE $f\"; exit 86; fi\n"
          "done\n"
          "echo own > own-file || exit 87\n"
          "echo \"uid=$(id -u) CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES\"\n"
          "echo template-ok\n");
  spec.root_fs = root;
  GpuGrant grant;
  grant.index = gpus[0];
  spec.gpus = {grant};
  Start(spec);
  const auto status = WaitUntilEnded(id);
  const auto log = WholeLog(id);
  EXPECT_EQ(status.exit_code, 0) << log;
  EXPECT_TRUE(Contains(log, "template-marker-4242\n")) << log;
  EXPECT_TRUE(Contains(log, "template-ok")) << log;
  EXPECT_TRUE(Contains(log, "CUDA_VISIBLE_DEVICES=0\n")) << log;
  EXPECT_FALSE(Contains(log, "uid=0 ")) << log;
  for (const char* planted : {"/etc/planted", "/planted", "/bin/planted"}) {
    EXPECT_FALSE(PathExists(root + planted)) << planted;
  }
  EXPECT_EQ(ReadHostFile(harness_->WorkDirOnHost(id) + "/own-file"), "own\n");
}

TEST_P(BackendConformanceTest, ATemplatesWorkloadStoppedWithSigtermEndsBySigterm) {
  const auto id = NewId("tplstop");
  const std::string root = MakeTemplateRoot(harness_->ControlPlaneDir() + "/template-" + id);
  auto spec = ScriptSpec(id, kTenantA, kSleeper);
  spec.root_fs = root;
  Start(spec);
  WaitUntilLogged(id, "ready");
  ASSERT_TRUE(backend_->Stop(id, 30000).has_value());
  const auto status = WaitUntilEnded(id);
  EXPECT_EQ(status.signal, SIGTERM) << status.detail << "\n" << WholeLog(id);
  EXPECT_EQ(status.exit_code, -1);
}

// --- MIG instances and GPU shares ---------------------------------------

// A script that says what the workload sees of the GPUs: the device files
// it holds (GPUs and MIG capabilities, sorted) and the variables that name
// them, then checks that what it holds is reachable (an open that reaches
// the fake's absent driver: ENXIO) and that `forbidden` is refused.
inline std::string DeviceReport(const std::string& forbidden) {
  return "reached_driver() { grep -q 'No such device or address' /tmp/err; }\n"
         "caps=$(ls /dev/nvidia-caps 2>/dev/null | sort | tr '\\n' ' ')\n"
         "echo \"caps=[$caps]\"\n"
         "for c in /dev/nvidia-caps/*; do [ -e \"$c\" ] || continue\n"
         "  if ( : < \"$c\" ) 2>/tmp/err || reached_driver; then echo \"reachable $c\"; "
         "else echo \"CAP-REFUSED $c\"; cat /tmp/err; exit 80; fi\n"
         "done\n"
         "if ( : < '" +
         forbidden +
         "' ) 2>/tmp/err; then echo OPENED-FORBIDDEN; exit 81; fi\n"
         "if reached_driver; then echo FORBIDDEN-REACHED-DRIVER; exit 82; fi\n"
         "echo \"CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES\"\n"
         "echo \"NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES\"\n"
         "echo \"ATRIUM_MIG_DEVICE=${ATRIUM_MIG_DEVICE-unset}\"\n"
         "echo \"ATRIUM_GPU_SHARE_MILLI=${ATRIUM_GPU_SHARE_MILLI-unset}\"\n"
         "echo \"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=${CUDA_MPS_ACTIVE_THREAD_PERCENTAGE-unset}\"\n"
         "echo \"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=${CUDA_MPS_PINNED_DEVICE_MEM_LIMIT-unset}\"\n";
}

// The file names of `paths`, sorted as `ls | sort` lists them, each
// followed by a space.
inline std::string SortedNames(const std::vector<std::string>& paths) {
  std::vector<std::string> names;
  for (const auto& path : paths) names.push_back(path.substr(path.rfind('/') + 1));
  std::sort(names.begin(), names.end());
  std::string out;
  for (const auto& name : names) out += name + " ";
  return out;
}

inline GpuGrant MigGrant(int index, int start) {
  GpuGrant grant;
  grant.index = index;
  grant.mig_profile = "1g.10gb";
  grant.mig_start = start;
  return grant;
}

TEST_P(BackendConformanceTest, AMigWorkloadSeesItsParentGpuAndOnlyItsOwnCapabilities) {
  const auto gpus = harness_->GpuIndices();
  ASSERT_GE(gpus.size(), 2u);
  const auto id = NewId("mig");
  auto spec = ScriptSpec(id, kTenantA,
                         "if [ ! -c '" + harness_->DevicePathInWorkload(gpus[1]) +
                             "' ]; then echo PARENT-MISSING; exit 83; fi\n" +
                             DeviceReport(harness_->DevicePathInWorkload(gpus[0])));
  spec.gpus = {MigGrant(gpus[1], 2)};
  if (!harness_->RunsMig()) {
    auto refused = backend_->Start(spec);
    ASSERT_FALSE(refused.has_value()) << GetParam().name << " must refuse what it cannot confine";
    EXPECT_TRUE(refused.error().code == ErrorCode::kInvalidArgument ||
                refused.error().code == ErrorCode::kFailedPrecondition)
        << refused.error().message;
    EXPECT_NE(refused.error().message.find("MIG"), std::string::npos) << refused.error().message;
    EXPECT_FALSE(backend_->Inspect(id).has_value()) << "nothing was started";
    return;
  }
  const auto started = Start(spec);
  EXPECT_EQ(started.gpus, std::vector<int>{gpus[1]});
  const auto status = WaitUntilEnded(id);
  const auto log = WholeLog(id);
  EXPECT_EQ(status.exit_code, 0) << log;
  const auto caps = harness_->MigCapsInWorkload(gpus[1], 2);
  ASSERT_EQ(caps.size(), 2u);
  const std::string listed = SortedNames(caps);
  EXPECT_TRUE(Contains(log, "caps=[" + listed + "]")) << "exactly its two capabilities\n" << log;
  for (const auto& cap : caps) EXPECT_TRUE(Contains(log, "reachable " + cap)) << log;
  EXPECT_TRUE(Contains(log, "CUDA_VISIBLE_DEVICES=0\n")) << "no UUID known: the only MIG device\n"
                                                         << log;
  EXPECT_TRUE(Contains(log, "NVIDIA_VISIBLE_DEVICES=" + std::to_string(gpus[1]) + "\n")) << log;
  EXPECT_TRUE(Contains(log, "ATRIUM_MIG_DEVICE=" + std::to_string(gpus[1]) + "/")) << log;
  EXPECT_TRUE(Contains(log, "ATRIUM_GPU_SHARE_MILLI=unset")) << log;
}

TEST_P(BackendConformanceTest, IsolationTwoMigWorkloadsOnOneGpuCannotReachEachOther) {
  const int gpu = harness_->GpuIndices().front();
  const auto victim = NewId("migvictim");
  auto victim_spec = ScriptSpec(victim, kTenantB, kSleeper);
  victim_spec.gpus = {MigGrant(gpu, 0)};
  if (!harness_->RunsMig()) {
    // A backend that runs no MIG instance has none to reach: it refuses it.
    EXPECT_FALSE(backend_->Start(victim_spec).has_value());
    EXPECT_FALSE(backend_->Inspect(victim).has_value());
    return;
  }
  Start(victim_spec);
  WaitUntilLogged(victim, "ready");
  const auto theirs = harness_->MigCapsInWorkload(gpu, 0);
  const auto mine = harness_->MigCapsInWorkload(gpu, 1);
  ASSERT_EQ(theirs.size(), 2u);
  for (const auto& cap : theirs) ASSERT_FALSE(std::count(mine.begin(), mine.end(), cap)) << cap;

  const auto attacker = NewId("migattacker");
  // The capabilities' major, read off its own (the driver's is dynamic).
  std::string script =
      "reached_driver() { grep -q 'No such device or address' /tmp/err; }\n"
      "own=$(ls /dev/nvidia-caps | head -1)\n"
      "CAP_MAJOR=$((0x$(stat -c %t /dev/nvidia-caps/$own)))\n";
  for (const auto& cap : theirs) {
    const std::string minor = cap.substr(cap.rfind("nvidia-cap") + 10);
    script += "if [ -e '" + cap + "' ]; then echo 'SEES " + cap + "'; exit 90; fi\n";
    // A node of its own making for the other instance's capability.
    script += "if mknod /tmp/cap" + minor + " c $CAP_MAJOR " + minor +
              " 2>/tmp/err; then\n"
              "  if ( : < /tmp/cap" +
              minor + " ) 2>/tmp/err; then echo 'OPENED-MKNOD " + minor +
              "'; exit 91; fi\n"
              "  if reached_driver; then echo 'MKNOD-REACHED-DRIVER " +
              minor +
              "'; exit 92; fi\n"
              "fi\n";
  }
  script += "echo \"mine=[$(ls /dev/nvidia-caps | sort | tr '\\n' ' ')]\"\necho refused-all\n";
  auto spec = ScriptSpec(attacker, kTenantA, script);
  spec.gpus = {MigGrant(gpu, 1)};
  Start(spec);
  const auto status = WaitUntilEnded(attacker);
  const auto log = WholeLog(attacker);
  EXPECT_EQ(status.exit_code, 0) << log;
  EXPECT_TRUE(Contains(log, "refused-all")) << log;
  EXPECT_TRUE(Contains(log, "mine=[" + SortedNames(mine) + "]")) << log;
  auto victim_status = backend_->Inspect(victim);
  ASSERT_TRUE(victim_status.has_value());
  EXPECT_EQ(victim_status->phase, WorkloadPhase::kRunning);
}

TEST_P(BackendConformanceTest, AShareWorkloadSeesItsGpuAndItsShareLimits) {
  const auto gpus = harness_->GpuIndices();
  ASSERT_GE(gpus.size(), 2u);
  const auto id = NewId("share");
  auto spec = ScriptSpec(id, kTenantA,
                         "if [ ! -c '" + harness_->DevicePathInWorkload(gpus[1]) +
                             "' ]; then echo GPU-MISSING; exit 84; fi\n"
                             "if ( : < '" +
                             harness_->DevicePathInWorkload(gpus[1]) +
                             "' ) 2>/tmp/err || grep -q 'No such device or address' /tmp/err; "
                             "then echo gpu-reachable; else echo GPU-REFUSED; exit 85; fi\n" +
                             DeviceReport(harness_->DevicePathInWorkload(gpus[0])));
  GpuGrant share;
  share.index = gpus[1];
  share.share_milli = 250;
  share.memory_cap_mib = 1024;
  spec.gpus = {share};
  const auto started = Start(spec);
  EXPECT_EQ(started.gpus, std::vector<int>{gpus[1]});
  const auto status = WaitUntilEnded(id);
  const auto log = WholeLog(id);
  EXPECT_EQ(status.exit_code, 0) << log;
  EXPECT_TRUE(Contains(log, "gpu-reachable")) << log;
  EXPECT_TRUE(Contains(log, "caps=[]")) << "a share holds no MIG capability\n" << log;
  EXPECT_TRUE(Contains(log, "CUDA_VISIBLE_DEVICES=0\n")) << log;
  EXPECT_TRUE(Contains(log, "ATRIUM_GPU_SHARE_MILLI=250\n")) << log;
  EXPECT_TRUE(Contains(log, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25\n")) << log;
  EXPECT_TRUE(Contains(log, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1024MB\n")) << log;
  EXPECT_TRUE(Contains(log, "ATRIUM_MIG_DEVICE=unset")) << log;
}

}  // namespace atrium::exec::conformance
