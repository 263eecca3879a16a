// The job service end to end on a real Slurm: the `atrium` binary started
// as `atrium dev --slurm DIR` on the one-host cluster scripts/slurm-dev.sh
// started (scripts/test.sh starts one per run, its node named after the
// simulated fleet's: SLURM_DEV_NODE=h100-80gb-0), driven by tenants through
// the CLI. A job runs and is logged, a log is followed, a cancel stops one
// with SIGTERM, a preempted job is requeued and runs again, a `kill -9` of
// the control plane loses no job and starts none twice, and the GPU time
// Atrium billed is cross-checked against Slurm's own accounting (sacct).
//
// Without a cluster the test skips, or fails when ATRIUM_TEST_REQUIRE_SLURM=1:
// a skipped backend is a failure in CI.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/json_reader.h"
#include "http/client.h"
#include "managed_deployment.h"
#include "slurm/command_runner.h"
#include "slurm/slurm_backend.h"
#include "slurm/slurm_commands.h"
#include "slurm/slurm_text.h"
#include "subprocess.h"
#include "support/wait.h"

namespace atrium {
namespace {

using namespace std::chrono_literals;
using testing::BackgroundProcess;
using testing::ProcessResult;

constexpr auto kCliTimeout = 60s;
constexpr auto kServerTimeout = 60s;
constexpr char kPassword[] = "correct-horse-battery";
// The simulated fleet `atrium dev` runs on, and so the node Slurm must have.
constexpr char kFleet[] = "1xH100-80GBx4";
constexpr char kNode[] = "h100-80gb-0";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string Describe(const ProcessResult& r) {
  return "exit " + std::to_string(r.exit_code) + (r.timed_out ? " (timed out)" : "") +
         "\n--- stdout\n" + r.out + "--- stderr\n" + r.err;
}

Json ParsedJson(const ProcessResult& r) {
  auto json = ParseJson(r.out);
  EXPECT_TRUE(json.has_value()) << "not JSON: " << Describe(r);
  return json.has_value() ? *json : Json();
}

// A string field, "" when absent or null (json's value() throws on null).
std::string StringAt(const Json& object, const std::string& field) {
  auto it = object.find(field);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

// An integer field, `absent` when absent or null.
int64_t IntAt(const Json& object, const std::string& field, int64_t absent) {
  auto it = object.find(field);
  return it != object.end() && it->is_number_integer() ? it->get<int64_t>() : absent;
}

int64_t MillisOf(const Json& object, const std::string& field) {
  auto t = ParseTimestamp(StringAt(object, field), field);
  EXPECT_TRUE(t.has_value()) << field << " in " << object.dump();
  return t.has_value() ? *t : 0;
}

class SlurmEndToEndTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ::signal(SIGPIPE, SIG_IGN); }

  void SetUp() override {
    const char* dir = std::getenv("ATRIUM_TEST_SLURM_DIR");
    const char* require = std::getenv("ATRIUM_TEST_REQUIRE_SLURM");
    const bool required = require != nullptr && std::string(require) == "1";
    if (dir == nullptr || *dir == '\0') {
      if (required) FAIL() << "ATRIUM_TEST_REQUIRE_SLURM=1 but ATRIUM_TEST_SLURM_DIR is not set";
      GTEST_SKIP() << "Slurm not configured (ATRIUM_TEST_SLURM_DIR; scripts/slurm-dev.sh)";
    }
    const char* node = std::getenv("ATRIUM_SLURM_NODE");
    // The scheduler pins every job to one of its fleet's nodes by name.
    ASSERT_TRUE(node != nullptr && std::string(node) == kNode)
        << "the cluster's node is '" << (node ? node : "") << "', atrium dev --fleet " << kFleet
        << " places on '" << kNode << "': start it with SLURM_DEV_NODE=" << kNode
        << " scripts/slurm-dev.sh start DIR";
    slurm_dir_ = dir;
    runner_ = std::make_unique<slurm::ProcessCommandRunner>(
        std::vector<std::pair<std::string, std::string>>{
            {"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
            {"SLURM_CONF", slurm_dir_ + "/slurm.conf"},
            {"SLURM_TIME_FORMAT", "%s"}},
        30'000);
    // The same workload root `atrium dev --slurm DIR` uses: only to read
    // what Slurm's accounting says of its workloads (SacctGpuSeconds).
    slurm::SlurmBackendOptions options;
    options.workload_root = slurm_dir_ + "/jobs/atrium";
    probe_ = std::make_unique<slurm::SlurmBackend>(options, *runner_, clock_);

    std::string pattern =
        (std::filesystem::temp_directory_path() / "atrium-slurm-e2e-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
    data_dir_ = root_ + "/data";
    admin_home_ = NewHome("admin");
    ASSERT_NO_FATAL_FAILURE(StartServer());
  }

  void TearDown() override {
    server_.reset();  // kills the server if the test left it running
    std::error_code ec;
    if (!root_.empty()) std::filesystem::remove_all(root_, ec);
  }

  std::string NewHome(const std::string& name) {
    std::string home = root_ + "/home-" + name;
    std::filesystem::create_directories(home);
    return home;
  }

  void StartServer() {
    server_ = std::make_unique<BackgroundProcess>();
    std::string error;
    std::vector<std::string> argv = {ATRIUM_BINARY,
                                     "dev",
                                     "--data",
                                     data_dir_,
                                     "--api-listen",
                                     "127.0.0.1:0",
                                     "--gateway-listen",
                                     "127.0.0.1:0",
                                     "--slurm",
                                     slurm_dir_,
                                     "--fleet",
                                     kFleet,
                                     "--metering-interval-ms",
                                     "200"};
    ASSERT_TRUE(server_->Start(argv, {"HOME=" + root_, "PATH=/usr/bin:/bin"}, &error)) << error;
    url_ = server_->WaitForLine("API: ", kServerTimeout);
    ASSERT_FALSE(url_.empty()) << "no API line from the server:\n" << server_->Output();
    gateway_url_ = server_->WaitForLine("Gateway: ", kServerTimeout);
    std::istringstream token_file(ReadFile(data_dir_ + "/admin.token"));
    ASSERT_TRUE(std::getline(token_file, admin_token_));
  }

  ProcessResult Run(const std::string& home, const std::string& token,
                    std::vector<std::string> args, const std::string& input = "") {
    std::vector<std::string> argv = {ATRIUM_BINARY};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> env = {"HOME=" + home, "PATH=/usr/bin:/bin"};
    // Platform staff name the server; tenants' users have it from `login`.
    if (!token.empty()) env.insert(env.end(), {"ATRIUM_TOKEN=" + token, "ATRIUM_SERVER=" + url_});
    ProcessResult r = testing::RunProcess(argv, env, input, kCliTimeout);
    EXPECT_FALSE(r.timed_out) << Describe(r);
    return r;
  }
  void Admin(std::vector<std::string> args) {
    ProcessResult r = Run(admin_home_, admin_token_, args);
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
  }
  Json AdminJson(std::vector<std::string> args) {
    args.insert(args.end(), {"-o", "json"});
    ProcessResult r = Run(admin_home_, admin_token_, args);
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    return ParsedJson(r);
  }
  // One chat completion of `model` as the demo tenant through the
  // gateway: its status, 0 when no answer came.
  int DemoChat(http::Client& gateway, const std::string& model) {
    std::istringstream in(ReadFile(data_dir_ + "/demo.key"));
    std::string key;
    std::getline(in, key);
    return testing::ChatStatus(gateway, key, model);
  }

  std::string NewTenant(const std::string& name) {
    ProcessResult r = Run(admin_home_, admin_token_, {"tenant", "create", name, "-o", "json"});
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    return ParsedJson(r).value("id", "");
  }
  // A tenant admin logged in with a fresh HOME; returns that HOME.
  std::string LoginAsNewTenantAdmin(const std::string& tenant, const std::string& username) {
    ProcessResult created = Run(admin_home_, admin_token_,
                                {"user", "create", username, "--tenant", tenant, "--role",
                                 "tenant-admin", "--password-stdin"},
                                std::string(kPassword) + "\n");
    EXPECT_EQ(created.exit_code, 0) << Describe(created);
    std::string home = NewHome(username);
    Login(home, tenant, username);
    return home;
  }
  void Login(const std::string& home, const std::string& tenant, const std::string& username) {
    ProcessResult login = Run(
        home, "",
        {"login", "--server", url_, "--tenant", tenant, "--username", username, "--password-stdin"},
        std::string(kPassword) + "\n");
    EXPECT_EQ(login.exit_code, 0) << Describe(login);
  }

  // The Slurm jobs ever submitted under a workload's name (sacct).
  std::vector<slurm::SlurmJobRecord> SlurmJobsNamed(const std::string& workload_id) {
    std::vector<slurm::SlurmJobRecord> jobs;
    auto out = runner_->Run(slurm::SacctByNameArgv(workload_id));
    EXPECT_TRUE(out.has_value() && out->exit_code == 0);
    if (!out || out->exit_code != 0) return jobs;
    auto records = slurm::ParseSacct(out->out);
    EXPECT_TRUE(records.has_value());
    if (!records) return jobs;
    for (auto& r : *records) {
      if (r.job_id.find('.') == std::string::npos) jobs.push_back(std::move(r));
    }
    return jobs;
  }

  // What Slurm's accounting says the workload held, once it has recorded
  // its end (slurmdbd hears of it shortly after the controller).
  int64_t SacctGpuSeconds(const std::string& workload_id) {
    Result<int64_t> seconds = Error::Unavailable("not asked");
    EXPECT_TRUE(testing_support::WaitUntil(
        [&] {
          seconds = probe_->SacctGpuSeconds(workload_id);
          return seconds.has_value() || seconds.error().code != ErrorCode::kUnavailable;
        },
        kServerTimeout));
    EXPECT_TRUE(seconds.has_value()) << workload_id << ": " << seconds.error().message;
    return seconds.has_value() ? *seconds : -1;
  }

  std::string slurm_dir_;
  std::string root_;
  std::string data_dir_;
  std::string admin_home_;
  std::string url_;
  std::string gateway_url_;
  std::string admin_token_;
  SystemClock clock_;
  std::unique_ptr<slurm::ProcessCommandRunner> runner_;
  std::unique_ptr<slurm::SlurmBackend> probe_;
  std::unique_ptr<BackgroundProcess> server_;
};

// One attempt of a job as Slurm ran it, with what Atrium billed for it.
struct Attempt {
  std::string job_id;
  std::string workload_id;
  std::string allocation_id;
  int64_t gpus = 0;
  std::string home;  // whose `usage gpu` has its records
};

TEST_F(SlurmEndToEndTest, JobsRunOnSlurmEndToEnd) {
  const std::string acme_id = NewTenant("acme");
  const std::string globex_id = NewTenant("globex");
  // acme may borrow up to the whole node for preemptible work; globex's
  // guarantee takes half of it back when it asks.
  ASSERT_NO_FATAL_FAILURE(
      Admin({"quota", "set", "acme", "--model", "H100-80GB", "--guarantee", "2", "--limit", "4"}));
  ASSERT_NO_FATAL_FAILURE(
      Admin({"quota", "set", "globex", "--model", "H100-80GB", "--guarantee", "2"}));
  const std::string alice_home = LoginAsNewTenantAdmin("acme", "alice");
  const std::string bob_home = LoginAsNewTenantAdmin("globex", "bob");
  auto as_json = [&](const std::string& home, std::vector<std::string> args) {
    // Before a job's own command (after `--`), not after it.
    args.insert(args.begin() + 2, {"-o", "json"});
    ProcessResult r = Run(home, "", args);
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    return ParsedJson(r);
  };
  auto alice = [&](std::vector<std::string> args) { return as_json(alice_home, std::move(args)); };
  auto job_of = [&](const std::string& home, const std::string& id) {
    return as_json(home, {"job", "get", id});
  };
  // Waits until the job (of `home`'s tenant) satisfies `done`; returns it.
  auto wait_for = [&](const std::string& home, const std::string& id, const std::string& what,
                      auto done) {
    Json job;
    EXPECT_TRUE(testing_support::WaitUntil(
        [&] {
          job = job_of(home, id);
          return done(job);
        },
        kServerTimeout))
        << id << " never " << what << ": " << job.dump() << "\n"
        << server_->Output();
    return job;
  };
  auto wait_for_state = [&](const std::string& home, const std::string& id,
                            const std::string& state) {
    return wait_for(home, id, state, [&](const Json& j) { return j.value("state", "") == state; });
  };
  std::vector<Attempt> attempts;
  auto attempt_of = [&](const Json& job, const std::string& home, int64_t gpus) {
    attempts.push_back({job.value("id", ""), job.value("workload_id", ""),
                        job.value("allocation_id", ""), gpus, home});
  };

  // 1. A job runs as acme's Unix user on the GPU the scheduler chose.
  Json hello =
      alice({"job", "submit", "--name", "hello", "--model", "H100-80GB", "--gpus", "1", "--",
             "/bin/sh", "-c", "echo CUDA=$CUDA_VISIBLE_DEVICES; echo user=$(id -un)"});
  const std::string hello_id = hello.value("id", "");
  ASSERT_FALSE(hello_id.empty()) << hello.dump();
  Json hello_done = wait_for_state(alice_home, hello_id, "succeeded");
  EXPECT_EQ(IntAt(hello_done, "exit_code", -1), 0) << hello_done.dump();
  attempt_of(hello_done, alice_home, 1);
  ProcessResult log = Run(alice_home, "", {"job", "logs", hello_id});
  ASSERT_EQ(log.exit_code, 0) << Describe(log);
  EXPECT_NE(log.out.find("CUDA=0\n"), std::string::npos) << log.out;
  EXPECT_NE(log.out.find("user=" + acme_id + "\n"), std::string::npos) << log.out;
  // Another tenant neither reads its log nor cancels it.
  EXPECT_EQ(Run(bob_home, "", {"job", "logs", hello_id}).exit_code, 1);
  EXPECT_EQ(Run(bob_home, "", {"job", "cancel", hello_id}).exit_code, 1);

  // 2. `logs -f` follows a job from submission to its end.
  Json counter = alice({"job", "submit", "--name", "counter", "--model", "H100-80GB", "--gpus", "1",
                        "--", "/bin/sh", "-c", "for i in 1 2 3; do echo tick$i; sleep 1; done"});
  const std::string counter_id = counter.value("id", "");
  ProcessResult followed = Run(alice_home, "", {"job", "logs", "-f", counter_id});
  EXPECT_EQ(followed.exit_code, 0) << Describe(followed);
  EXPECT_EQ(followed.out, "tick1\ntick2\ntick3\n") << Describe(followed);
  attempt_of(wait_for_state(alice_home, counter_id, "succeeded"), alice_home, 1);

  // 3. kill -9 of the control plane while a Slurm job runs: the job is
  // adopted on restart, not submitted again; then a cancel stops it with
  // SIGTERM.
  Json sleeper = alice({"job", "submit", "--name", "sleeper", "--model", "H100-80GB", "--gpus", "1",
                        "--", "/bin/sleep", "600"});
  const std::string sleeper_id = sleeper.value("id", "");
  Json running = wait_for_state(alice_home, sleeper_id, "running");
  const std::string sleeper_workload = running.value("workload_id", "");
  EXPECT_EQ(server_->Stop(SIGKILL, kServerTimeout), 128 + SIGKILL);
  ASSERT_NO_FATAL_FAILURE(StartServer());
  Login(alice_home, "acme", "alice");
  Login(bob_home, "globex", "bob");
  Json adopted = job_of(alice_home, sleeper_id);
  EXPECT_EQ(adopted.value("state", ""), "running") << adopted.dump();
  EXPECT_EQ(IntAt(adopted, "attempt", 0), 1) << adopted.dump();
  EXPECT_EQ(StringAt(adopted, "started_at"), StringAt(running, "started_at"));
  // A few of the job service's ticks after the restart: still one job.
  std::this_thread::sleep_for(3s);
  EXPECT_EQ(SlurmJobsNamed(sleeper_workload).size(), 1u);
  EXPECT_EQ(job_of(alice_home, sleeper_id).value("state", ""), "running");
  alice({"job", "cancel", sleeper_id});
  Json cancelled = wait_for_state(alice_home, sleeper_id, "cancelled");
  EXPECT_EQ(IntAt(cancelled, "signal", 0), SIGTERM) << cancelled.dump();
  attempt_of(cancelled, alice_home, 1);

  // 4. A preemptible job borrowing the whole node is preempted when
  // globex claims its guarantee, requeued, and runs again once globex's
  // job is done.
  Json batch = alice({"job", "submit", "--name", "batch", "--model", "H100-80GB", "--gpus", "4",
                      "--priority", "preemptible", "--restart", "requeue-on-preemption",
                      "--max-restarts", "2", "--", "/bin/sleep", "600"});
  const std::string batch_id = batch.value("id", "");
  Json batch_first = wait_for_state(alice_home, batch_id, "running");
  attempt_of(batch_first, alice_home, 4);
  Json claim = as_json(bob_home, {"job", "submit", "--name", "claim", "--model", "H100-80GB",
                                  "--gpus", "2", "--", "/bin/sleep", "2"});
  const std::string claim_id = claim.value("id", "");
  Json requeued = wait_for(alice_home, batch_id, "was requeued",
                           [](const Json& j) { return IntAt(j, "attempt", 0) == 2; });
  EXPECT_EQ(IntAt(requeued, "restarts", 0), 1) << requeued.dump();
  Json events = alice({"job", "events", batch_id});
  std::string transitions;
  for (const auto& e : events["items"]) {
    transitions += StringAt(e, "from") + ">" + StringAt(e, "to") + " ";
  }
  EXPECT_NE(transitions.find("running>preempted preempted>pending"), std::string::npos)
      << transitions;
  Json claim_done = wait_for_state(bob_home, claim_id, "succeeded");
  attempt_of(claim_done, bob_home, 2);
  Json batch_second = wait_for_state(alice_home, batch_id, "running");
  EXPECT_EQ(IntAt(batch_second, "attempt", 0), 2);
  EXPECT_NE(batch_second.value("workload_id", ""), batch_first.value("workload_id", ""));
  attempt_of(batch_second, alice_home, 4);
  // Slurm ran the first attempt once, and it ended preempted by Atrium.
  auto first_run = SlurmJobsNamed(batch_first.value("workload_id", ""));
  ASSERT_EQ(first_run.size(), 1u);
  alice({"job", "cancel", batch_id});
  Json batch_done = wait_for_state(alice_home, batch_id, "cancelled");

  // 5. The GPU time billed: one closing record per allocation, read by the
  // tenant with `atrium usage`.
  std::map<std::string, int64_t> billed;  // allocation id -> gpu_milli_ms
  for (const std::string& home : {alice_home, bob_home}) {
    size_t want = 0;
    for (const Attempt& a : attempts) want += a.home == home ? 1 : 0;
    Json records;
    EXPECT_TRUE(testing_support::WaitUntil(
        [&] {
          records = as_json(home, {"usage", "gpu", "--all"});
          size_t closing = 0;
          // Allocations' closing records (the jobs' own runs are listed too).
          for (const auto& r : records) {
            closing +=
                r.value("subject_kind", "") == "allocation" && r.value("closes_subject", false) ? 1
                                                                                                : 0;
          }
          return closing >= want;
        },
        kServerTimeout))
        << records.dump();
    for (const auto& r : records) {
      billed[r.value("subject_id", "")] += r["gpu_milli_ms"].get<int64_t>();
    }
  }
  Json summary = alice({"usage", "gpu-summary", "--group-by", "model"});
  ASSERT_EQ(summary["items"].size(), 1u) << summary.dump();
  int64_t alice_billed = 0;
  for (const Attempt& a : attempts)
    alice_billed += a.home == alice_home ? billed[a.allocation_id] : 0;
  EXPECT_EQ(summary["items"][0].value("gpu_milli_ms", int64_t{0}), alice_billed) << summary.dump();
  ProcessResult table = Run(alice_home, "", {"usage", "summary"});
  EXPECT_EQ(table.exit_code, 0) << Describe(table);
  EXPECT_NE(table.out.find("GPU time held"), std::string::npos) << table.out;

  // 6. The cross-check with Slurm's accounting. Per attempt, sacct's
  // AllocTRES gres/gpu × ElapsedRaw (whole seconds) against
  //  - the job's own start and end, which Atrium takes from Slurm
  //    (StartTime/EndTime): equal, but for a second of rounding;
  //  - the allocation Atrium billed, from placement to release: more, by
  //    the submit-to-start latency (a job-service tick, sbatch, Slurm's
  //    scheduling pass) and the end-to-release latency (a tick), each a
  //    few seconds at most, times the GPUs.
  // The differences measured are printed (docs/billing.md quotes them).
  constexpr int64_t kJobToleranceS = 1;     // per GPU
  constexpr int64_t kAllocToleranceS = 10;  // per GPU
  for (const Attempt& a : attempts) {
    // One run each, once slurmdbd has heard of it (shortly after the end).
    std::vector<slurm::SlurmJobRecord> named;
    testing_support::WaitUntil(
        [&] {
          named = SlurmJobsNamed(a.workload_id);
          return !named.empty();
        },
        kServerTimeout);
    EXPECT_EQ(named.size(), 1u) << a.workload_id;
    const int64_t sacct_s = SacctGpuSeconds(a.workload_id);
    const double alloc_s = static_cast<double>(billed[a.allocation_id]) / 1e6;
    std::string line = a.workload_id + ": sacct " + std::to_string(sacct_s) + " GPU-s, billed " +
                       std::to_string(alloc_s) + " GPU-s (allocation " + a.allocation_id + ")";
    EXPECT_GE(alloc_s, static_cast<double>(sacct_s - kJobToleranceS * a.gpus)) << line;
    EXPECT_LE(alloc_s, static_cast<double>(sacct_s + kAllocToleranceS * a.gpus)) << line;
    Json job = job_of(a.home, a.job_id);
    if (job.value("workload_id", "") == a.workload_id && !job["ended_at"].is_null()) {
      const int64_t held_ms = (MillisOf(job, "ended_at") - MillisOf(job, "started_at")) * a.gpus;
      line += ", job start-to-end " + std::to_string(held_ms / 1000.0) + " GPU-s";
      EXPECT_LE(std::abs(held_ms - sacct_s * 1000), kJobToleranceS * 1000 * a.gpus) << line;
    }
    std::cout << "[cross-check] " << line << "\n";
  }
  EXPECT_EQ(IntAt(batch_done, "signal", 0), SIGTERM) << batch_done.dump();
}

// A managed deployment on Slurm: its replicas are Slurm jobs of the serving
// tenant (the engine simulator, unsandboxed as a job without a root
// filesystem is there), routed once they answer; one killed by hand leaves
// the gateway's list with no client request failing and is replaced;
// deleting the deployment cancels the jobs.
TEST_F(SlurmEndToEndTest, AManagedDeploymentRunsOnSlurmAndRoutesAroundACrash) {
  NewTenant("platform-serving");
  ASSERT_NO_FATAL_FAILURE(
      Admin({"quota", "set", "platform-serving", "--model", "H100-80GB", "--guarantee", "2"}));
  Json created =
      AdminJson({"deployment", "create", "--model", "sim-slurm", "--region", "local", "--template",
                 "engine-sim", "--replicas", "2", "--gpu-model", "H100-80GB", "--gpus", "1"});
  const std::string dep = StringAt(created, "id");
  ASSERT_FALSE(dep.empty()) << created.dump();
  auto ready_urls = [&] {
    return testing::ReadyReplicaUrls(AdminJson({"deployment", "replicas", dep}));
  };
  auto endpoint_urls = [&] { return testing::EndpointUrls(AdminJson({"deployment", "get", dep})); };
  std::set<std::string> ready;
  ASSERT_TRUE(testing_support::WaitUntil(
      [&] {
        ready = ready_urls();
        return ready.size() == 2 && endpoint_urls() == ready;
      },
      kServerTimeout))
      << "ready: " << ready.size() << "\n"
      << server_->Output();
  // Each replica is a Slurm job of the serving tenant.
  for (const Json& r : AdminJson({"deployment", "replicas", dep})["items"]) {
    Json job = AdminJson({"job", "get", StringAt(r, "job_id")});
    EXPECT_EQ(SlurmJobsNamed(StringAt(job, "workload_id")).size(), 1U) << job.dump();
  }

  ASSERT_NO_FATAL_FAILURE(Admin({"entitlement", "grant", "demo", "sim-slurm"}));
  auto gateway = http::Client::Create(gateway_url_, 30'000);
  ASSERT_TRUE(gateway.has_value());
  ASSERT_TRUE(testing_support::WaitUntil([&] { return DemoChat(**gateway, "sim-slurm") == 200; },
                                         kServerTimeout));

  const std::string victim = *ready.begin();
  const std::string port = victim.substr(victim.rfind(':') + 1);
  ASSERT_EQ(
      testing::RunProcess({"/usr/bin/pkill", "-9", "-f", "engine-sim --listen 127.0.0.1:" + port},
                          {"PATH=/usr/bin:/bin"}, "", kCliTimeout)
          .exit_code,
      0);
  int failed = 0;
  for (int i = 0; i < 30; ++i) failed += DemoChat(**gateway, "sim-slurm") == 200 ? 0 : 1;
  EXPECT_EQ(failed, 0) << "requests failed around the crash";
  ASSERT_TRUE(testing_support::WaitUntil(
      [&] {
        ready = ready_urls();
        return ready.size() == 2 && ready.count(victim) == 0 && endpoint_urls() == ready;
      },
      kServerTimeout))
      << "the crashed replica was not replaced\n"
      << server_->Output();

  ASSERT_NO_FATAL_FAILURE(Admin({"deployment", "delete", dep}));
  EXPECT_TRUE(testing_support::WaitUntil(
      [&] {
        return AdminJson(
                   {"job", "list", "--tenant", "platform-serving", "--state", "running"})["items"]
            .empty();
      },
      kServerTimeout));
}

}  // namespace
}  // namespace atrium
