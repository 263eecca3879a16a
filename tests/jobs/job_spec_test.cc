// The job spec's reader: what a hostile tenant may send and what it gets back.
#include "jobs/job_spec.h"

#include <gtest/gtest.h>

#include "jobs/launch.h"

namespace atrium::jobs {
namespace {

Json Minimal() {
  return Json::parse(R"({"name":"train","command":"python3","args":["train.py","--epochs","3"],
      "resources":{"kind":"gpu","model":"H100-80GB","gpus":2}})");
}

TEST(JobSpecTest, ReadsAMinimalJobWithDefaults) {
  auto spec = ReadJobSpec(Minimal());
  ASSERT_TRUE(spec.has_value()) << spec.error().message;
  EXPECT_EQ(spec->name, "train");
  EXPECT_EQ(spec->Argv(), (std::vector<std::string>{"python3", "train.py", "--epochs", "3"}));
  EXPECT_EQ(spec->resources.gpus, 2);
  EXPECT_EQ(spec->resources.priority, sched::Priority::kBatch);
  EXPECT_EQ(spec->time_limit_s, JobLimits{}.default_time_limit_s);
  EXPECT_EQ(spec->restart.kind, RestartPolicyKind::kNever);
}

TEST(JobSpecTest, CanonicalJsonRoundTrips) {
  Json body = Json::parse(R"({"name":"x","project":"vision","script":"echo hi\n",
      "env":{"B":"2","A":"1"},"archive":"up_123.tar.gz","archive_bytes":1000,
      "resources":{"kind":"mig","model":"H100-80GB","mig_profile":"3g.40gb","cpu_milli":2000},
      "priority":"preemptible","time_limit_s":60,"restart_policy":"on-failure","max_restarts":2,
      "environment":"pytorch@2.3"})");
  auto spec = ReadJobSpec(body);
  ASSERT_TRUE(spec.has_value()) << spec.error().message;
  EXPECT_EQ(spec->resources.project, "vision");
  EXPECT_EQ(spec->env.front().first, "A");
  auto again = ReadJobSpec(JobSpecJson(*spec));
  ASSERT_TRUE(again.has_value()) << again.error().message;
  EXPECT_EQ(*again, *spec);
  EXPECT_EQ(JobSpecJson(*again).dump(), JobSpecJson(*spec).dump());
}

// One bad field at a time on top of the minimal job: each is refused, and
// the message names what is wrong.
TEST(JobSpecTest, RefusesWhatAHostileTenantSends) {
  struct Case {
    const char* what;
    std::function<void(Json&)> edit;
    const char* message;
  } cases[] = {
      {"unknown field", [](Json& j) { j["privileged"] = true; }, "privileged"},
      {"wrong type", [](Json& j) { j["time_limit_s"] = "60"; }, "time_limit_s"},
      {"no name", [](Json& j) { j.erase("name"); }, "name"},
      {"path in name", [](Json& j) { j["name"] = "../etc"; }, "name"},
      {"neither command nor script", [](Json& j) { j.erase("command"); }, "exactly one"},
      {"both command and script", [](Json& j) { j["script"] = "true"; }, "exactly one"},
      {"NUL in an arg", [](Json& j) { j["args"] = {std::string("a\0b", 3)}; }, "NUL"},
      {"too many args", [](Json& j) { j["args"] = std::vector<std::string>(300, "a"); }, "args"},
      {"huge arg", [](Json& j) { j["args"] = {std::string(5000, 'a')}; }, "args"},
      {"argv too large together",
       [](Json& j) { j["args"] = std::vector<std::string>(200, std::string(400, 'a')); },
       "together"},
      {"reserved env",
       [](Json& j) {
         j["env"] = {{"CUDA_VISIBLE_DEVICES", "0,1,2,3"}};
       },
       "reserved"},
      {"loader hook",
       [](Json& j) {
         j["env"] = {{"LD_PRELOAD", "/tmp/x.so"}};
       },
       "reserved"},
      {"platform namespace",
       [](Json& j) {
         j["env"] = {{"ATRIUM_JOB_ID", "x"}};
       },
       "reserved"},
      {"a share's MPS limit",
       [](Json& j) {
         j["env"] = {{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "100"}};
       },
       "reserved"},
      {"another tenant's MPS server",
       [](Json& j) {
         j["env"] = {{"CUDA_MPS_PIPE_DIRECTORY", "/tmp/mps-of-b"}};
       },
       "reserved"},
      {"bad env name",
       [](Json& j) {
         j["env"] = {{"A=B", "x"}};
       },
       "env name"},
      {"NUL in env",
       [](Json& j) {
         j["env"] = {{"A", std::string("x\0y", 3)}};
       },
       "NUL"},
      {"too many env vars",
       [](Json& j) {
         Json env = Json::object();
         for (int i = 0; i < 200; ++i) env["V" + std::to_string(i)] = "x";
         j["env"] = env;
       },
       "env"},
      {"huge script",
       [](Json& j) {
         j.erase("command");
         j["script"] = std::string(70 * 1024, 'x');
       },
       "script"},
      {"archive without size", [](Json& j) { j["archive"] = "a.tar"; }, "archive_bytes"},
      {"archive path",
       [](Json& j) {
         j["archive"] = "../../etc/passwd";
         j["archive_bytes"] = 10;
       },
       "archive"},
      {"archive too large",
       [](Json& j) {
         j["archive"] = "a.tar";
         j["archive_bytes"] = int64_t{1} << 40;
       },
       "archive_bytes"},
      {"no resources", [](Json& j) { j.erase("resources"); }, "resources"},
      {"resources not an object", [](Json& j) { j["resources"] = "gpu"; }, "resources"},
      {"unknown model", [](Json& j) { j["resources"]["model"] = "Z9000"; }, "unknown GPU model"},
      {"project inside resources", [](Json& j) { j["resources"]["project"] = "p"; }, "project"},
      {"gang",
       [](Json& j) {
         j["resources"]["kind"] = "gang";
         j["resources"]["nodes"] = 2;
       },
       "one node"},
      {"time limit zero", [](Json& j) { j["time_limit_s"] = 0; }, "time_limit_s"},
      {"time limit too long", [](Json& j) { j["time_limit_s"] = 365 * 86400; }, "time_limit_s"},
      {"bad restart policy", [](Json& j) { j["restart_policy"] = "always"; }, "restart_policy"},
      {"restarts without policy", [](Json& j) { j["max_restarts"] = 3; }, "max_restarts"},
      {"too many restarts",
       [](Json& j) {
         j["restart_policy"] = "on-failure";
         j["max_restarts"] = 1000000;
       },
       "max_restarts"},
      {"bad environment", [](Json& j) { j["environment"] = "a@b@c"; }, "environment"},
      {"environment path", [](Json& j) { j["environment"] = "../root"; }, "environment"},
      {"bad priority", [](Json& j) { j["priority"] = "urgent"; }, "priority"},
  };
  for (const Case& c : cases) {
    Json body = Minimal();
    c.edit(body);
    auto spec = ReadJobSpec(body);
    ASSERT_FALSE(spec.has_value()) << c.what;
    EXPECT_EQ(spec.error().code, ErrorCode::kInvalidArgument) << c.what;
    EXPECT_NE(spec.error().message.find(c.message), std::string::npos)
        << c.what << ": " << spec.error().message;
  }
  EXPECT_FALSE(ReadJobSpec(Json::array()).has_value());
}

TEST(JobSpecTest, EnvironmentReferences) {
  EXPECT_EQ(ParseEnvironmentRef("pytorch").value().version, "");
  EXPECT_EQ(ParseEnvironmentRef("pytorch@2.3.1").value().version, "2.3.1");
  EXPECT_FALSE(ParseEnvironmentRef("pytorch@").has_value());
  EXPECT_FALSE(ParseEnvironmentRef("@1").has_value());
  EXPECT_FALSE(ParseEnvironmentRef("a/b").has_value());
}

TEST(LaunchSpecTest, GrantsThePlacedGpusAndMergesTheTemplate) {
  Json body = Minimal();
  body["env"] = {{"A", "job"}};
  JobSpec spec = ReadJobSpec(body).value();
  JobRecord job;
  job.id = "job_1";
  job.tenant_id = "tn_1";
  job.attempt = 2;
  AllocationRecord a;
  a.id = "alloc_1";
  a.kind = "gpu";
  a.placement = {{"node-1", {2, 3}}};
  a.cpu_milli = 4000;
  ResolvedEnvironment env{"pytorch@2.3",
                          "/srv/rootfs",
                          {{"A", "tmpl"}, {"B", "tmpl"}, {"CUDA_VISIBLE_DEVICES", "0-7"}}};
  auto launch = BuildLaunchSpec(job, spec, a, env, "/data/a.tar");
  ASSERT_TRUE(launch.has_value()) << launch.error().message;
  EXPECT_EQ(launch->workload_id, "job_1.2");
  EXPECT_EQ(launch->node, "node-1");
  ASSERT_EQ(launch->gpus.size(), 2u);
  EXPECT_EQ(launch->gpus[1].index, 3);
  EXPECT_EQ(launch->env,
            (std::vector<std::pair<std::string, std::string>>{{"A", "job"}, {"B", "tmpl"}}));
  EXPECT_EQ(launch->root_fs, "/srv/rootfs");
  EXPECT_EQ(launch->argv.front(), "python3");

  a.kind = "share";
  a.milli = 250;
  a.gpu_memory_mib = 1024;
  a.placement = {{"node-1", {5}}};
  launch = BuildLaunchSpec(job, spec, a, env, "");
  ASSERT_TRUE(launch.has_value());
  EXPECT_EQ(launch->gpus[0].share_milli, 250);
  EXPECT_EQ(launch->gpus[0].memory_cap_mib, 1024);

  a.kind = "mig";
  a.milli = 0;
  a.mig_profile = "3g.40gb";
  a.mig_start = 4;
  launch = BuildLaunchSpec(job, spec, a, env, "");
  ASSERT_TRUE(launch.has_value());
  ASSERT_EQ(launch->gpus.size(), 1u);
  EXPECT_EQ(launch->gpus[0].index, 5);
  EXPECT_EQ(launch->gpus[0].mig_profile, "3g.40gb");
  EXPECT_EQ(launch->gpus[0].mig_start, 4);
  EXPECT_EQ(launch->gpus[0].share_milli, 0);
  EXPECT_EQ(launch->gpus[0].mig_gi, -1) << "the node's backend finds which instance that is";

  a.placement.clear();
  EXPECT_FALSE(BuildLaunchSpec(job, spec, a, env, "").has_value());
}

}  // namespace
}  // namespace atrium::jobs
