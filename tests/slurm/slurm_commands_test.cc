// The command lines the Slurm backend runs, and what a hostile tenant can
// (not) put into them.
#include "slurm/slurm_commands.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace atrium::slurm {
namespace {

exec::GpuGrant Gpu(int index) {
  exec::GpuGrant grant;
  grant.index = index;
  return grant;
}

exec::LaunchSpec BasicSpec() {
  exec::LaunchSpec spec;
  spec.workload_id = "jb_01abc.1";
  spec.job_id = "jb_01abc";
  spec.tenant_id = "tn_01xyz";
  spec.node = "node-3";
  spec.argv = {"/usr/bin/python3", "train.py"};
  spec.priority = "batch";
  return spec;
}

SubmitContext Context() {
  SubmitContext context;
  context.paths = PathsFor("/srv/atrium/slurm", "jb_01abc.1");
  context.account = "tn_01xyz";
  context.qos = "batch";
  context.user = "atr_tn_01xyz";
  context.group = "atr_tn_01xyz";
  return context;
}

bool Has(const Argv& argv, const std::string& arg) {
  return std::find(argv.begin(), argv.end(), arg) != argv.end();
}

// The launch file's entries (NUL-terminated).
Argv Entries(const std::string& file) {
  Argv entries;
  std::string current;
  for (char c : file) {
    if (c == '\0') {
      entries.push_back(current);
      current.clear();
    } else {
      current.push_back(c);
    }
  }
  EXPECT_TRUE(current.empty()) << "last entry not NUL-terminated";
  return entries;
}

TEST(SbatchArgv, PinsNodeGpusAccountQosUserAndTime) {
  auto spec = BasicSpec();
  spec.gpus = {Gpu(3), Gpu(1)};
  spec.cpu_milli = 1500;
  spec.memory_mib = 2048;
  spec.time_limit_s = 3601;
  auto argv = BuildSbatchArgv(spec, Context());
  ASSERT_TRUE(argv.has_value()) << argv.error().message;
  EXPECT_EQ((*argv)[0], "sbatch");
  EXPECT_TRUE(Has(*argv, "--parsable"));
  EXPECT_TRUE(Has(*argv, "--job-name=jb_01abc.1"));
  EXPECT_TRUE(Has(*argv, "--nodelist=node-3"));
  EXPECT_TRUE(Has(*argv, "--gres=gpu:idx1:1,gpu:idx3:1"));
  EXPECT_TRUE(Has(*argv, "--account=tn_01xyz"));
  EXPECT_TRUE(Has(*argv, "--qos=batch"));
  EXPECT_TRUE(Has(*argv, "--uid=atr_tn_01xyz"));
  // Without --gid the job keeps root's group (seen on 22.05).
  EXPECT_TRUE(Has(*argv, "--gid=atr_tn_01xyz"));
  EXPECT_TRUE(Has(*argv, "--export=NONE"));
  EXPECT_TRUE(Has(*argv, "--no-requeue"));
  EXPECT_TRUE(Has(*argv, "--cpus-per-task=2"));
  EXPECT_TRUE(Has(*argv, "--mem=2048M"));
  EXPECT_TRUE(Has(*argv, "--time=60:1"));
  EXPECT_TRUE(Has(*argv, "--chdir=/srv/atrium/slurm/jb_01abc.1/work"));
  EXPECT_TRUE(Has(*argv, "--output=/srv/atrium/slurm/jb_01abc.1/log"));
  EXPECT_TRUE(Has(*argv, "--error=/srv/atrium/slurm/jb_01abc.1/log"));
  EXPECT_EQ(argv->back(), "/srv/atrium/slurm/jb_01abc.1/job.sbatch");
}

TEST(SbatchArgv, AskesForACountWhenGpuTypesAreModels) {
  auto spec = BasicSpec();
  spec.gpus = {Gpu(0), Gpu(2)};
  auto context = Context();
  context.gpu_types_are_indices = false;
  auto argv = BuildSbatchArgv(spec, context);
  ASSERT_TRUE(argv.has_value());
  EXPECT_TRUE(Has(*argv, "--gres=gpu:2"));
}

TEST(SbatchArgv, CpuOnlyWorkAsksForNoGres) {
  auto argv = BuildSbatchArgv(BasicSpec(), Context());
  ASSERT_TRUE(argv.has_value());
  EXPECT_FALSE(std::any_of(argv->begin(), argv->end(),
                           [](const std::string& a) { return a.rfind("--gres", 0) == 0; }));
  EXPECT_FALSE(std::any_of(argv->begin(), argv->end(),
                           [](const std::string& a) { return a.rfind("--time", 0) == 0; }));
}

TEST(SbatchArgv, TenantCommandAndEnvironmentNeverReachSbatch) {
  auto spec = BasicSpec();
  spec.argv = {"/bin/echo", "$(rm -rf /)", "--uid=0"};
  spec.env = {{"EVIL", "x --export=ALL; `id`"}};
  auto argv = BuildSbatchArgv(spec, Context());
  ASSERT_TRUE(argv.has_value());
  for (const auto& arg : *argv) {
    EXPECT_EQ(arg.find("rm -rf"), std::string::npos) << arg;
    EXPECT_EQ(arg.find("EVIL"), std::string::npos) << arg;
    EXPECT_NE(arg, "--uid=0");
  }
}

TEST(SbatchArgv, RefusesIdsAndNodesThatCouldBreakAnOption) {
  for (std::string bad :
       std::vector<std::string>{"", "a b", "a,b", "../x", ".hidden", "-x", "a;b", "a$(id)", "a%j",
                                "a\nb", "a/b", std::string(129, 'a')}) {
    auto spec = BasicSpec();
    spec.workload_id = bad;
    EXPECT_FALSE(BuildSbatchArgv(spec, Context()).has_value()) << bad;
  }
  for (std::string bad : {"", "n1,n2", "n[1-3]", "-n", "n 1", "n;1"}) {
    auto spec = BasicSpec();
    spec.node = bad;
    EXPECT_FALSE(BuildSbatchArgv(spec, Context()).has_value()) << bad;
  }
}

TEST(SbatchArgv, AShareIsShardsOfItsGpuOneForEachMilliGpu) {
  auto spec = BasicSpec();
  spec.gpus = {Gpu(2)};
  spec.gpus[0].share_milli = 250;
  auto argv = BuildSbatchArgv(spec, Context());
  ASSERT_TRUE(argv.has_value()) << argv.error().message;
  EXPECT_TRUE(Has(*argv, "--gres=shard:idx2:250"));
  EXPECT_EQ(std::count_if(argv->begin(), argv->end(),
                          [](const std::string& a) { return a.rfind("--gres=", 0) == 0; }),
            1)
      << "shards only, no whole GPU beside them";
  auto context = Context();
  context.gpu_types_are_indices = false;
  argv = BuildSbatchArgv(spec, context);
  ASSERT_TRUE(argv.has_value());
  EXPECT_TRUE(Has(*argv, "--gres=shard:250"));
}

TEST(LaunchFile, AShareIsToldItsShareAndItsMpsLimitsAfterTheTenantsVariables) {
  auto spec = BasicSpec();
  spec.gpus = {Gpu(1)};
  spec.gpus[0].share_milli = 333;
  spec.gpus[0].memory_cap_mib = 4096;
  spec.env = {{"A", "1"}};
  auto file = BuildLaunchFile(spec, Context().paths);
  ASSERT_TRUE(file.has_value()) << file.error().message;
  auto entries = Entries(*file);
  EXPECT_EQ(Argv(entries.begin() + 4, entries.begin() + 8),
            (Argv{"A=1", "ATRIUM_GPU_SHARE_MILLI=333", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=34",
                  "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096MB"}));
  auto whole = BasicSpec();
  whole.gpus = {Gpu(1)};
  file = BuildLaunchFile(whole, Context().paths);
  ASSERT_TRUE(file.has_value());
  for (const auto& entry : Entries(*file)) EXPECT_EQ(entry.find("CUDA_MPS"), std::string::npos);
}

TEST(SbatchArgv, RefusesWhatItCannotConfine) {
  auto mig = BasicSpec();
  mig.gpus = {Gpu(0)};
  mig.gpus[0].mig_profile = "1g.10gb";
  auto refused = BuildSbatchArgv(mig, Context());
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(refused.error().message.find("MIG"), std::string::npos) << refused.error().message;
  for (int32_t milli : {-1, 1000, 5000}) {
    auto share = BasicSpec();
    share.gpus = {Gpu(0)};
    share.gpus[0].share_milli = milli;
    EXPECT_FALSE(BuildSbatchArgv(share, Context()).has_value()) << milli;
  }
  auto share_and_whole = BasicSpec();
  share_and_whole.gpus = {Gpu(0), Gpu(1)};
  share_and_whole.gpus[0].share_milli = 500;
  EXPECT_FALSE(BuildSbatchArgv(share_and_whole, Context()).has_value());
  auto twice = BasicSpec();
  twice.gpus = {Gpu(1), Gpu(1)};
  EXPECT_FALSE(BuildSbatchArgv(twice, Context()).has_value());
  auto negative = BasicSpec();
  negative.gpus = {Gpu(-1)};
  EXPECT_FALSE(BuildSbatchArgv(negative, Context()).has_value());
  auto huge = BasicSpec();
  huge.gpus = {Gpu(1 << 30)};
  EXPECT_FALSE(BuildSbatchArgv(huge, Context()).has_value());
  auto time = BasicSpec();
  time.time_limit_s = -5;
  EXPECT_FALSE(BuildSbatchArgv(time, Context()).has_value());
}

TEST(LaunchFile, CarriesArgvAndEnvironmentAsDataVerbatim) {
  auto spec = BasicSpec();
  const std::string nasty = "$(id) `id` ; \"q\" 'q' \\ a,b=c\nline2 %j";
  spec.argv = {"/usr/bin/printf", nasty, "", " spaced "};
  spec.env = {{"HOSTILE", nasty}, {"EMPTY", ""}};
  auto file = BuildLaunchFile(spec, Context().paths);
  ASSERT_TRUE(file.has_value()) << file.error().message;
  EXPECT_EQ(Entries(*file), (Argv{"/usr/bin/env", "--", "PATH=/usr/local/bin:/usr/bin:/bin",
                                  "HOME=/srv/atrium/slurm/jb_01abc.1/work", "HOSTILE=" + nasty,
                                  "EMPTY=", "/usr/bin/printf", nasty, "", " spaced "}));
}

TEST(LaunchFile, AScriptRunsWithShAndTheArguments) {
  auto spec = BasicSpec();
  spec.script = "echo hi\n";
  spec.argv = {"one", "two"};
  auto file = BuildLaunchFile(spec, Context().paths);
  ASSERT_TRUE(file.has_value());
  auto entries = Entries(*file);
  EXPECT_EQ(Argv(entries.end() - 4, entries.end()),
            (Argv{"/bin/sh", ".atrium-job.sh", "one", "two"}));
}

TEST(LaunchFile, AWrapperGoesInFront) {
  auto file = BuildLaunchFile(BasicSpec(), Context().paths, {"/usr/bin/bwrap", "--unshare-all"});
  ASSERT_TRUE(file.has_value());
  auto entries = Entries(*file);
  EXPECT_EQ(entries[0], "/usr/bin/bwrap");
  EXPECT_EQ(entries[2], "/usr/bin/env");
}

TEST(LaunchFile, RefusesWhatEnvOrTheFileCouldMisread) {
  auto empty = BasicSpec();
  empty.argv = {};
  EXPECT_FALSE(BuildLaunchFile(empty, Context().paths).has_value());
  auto assignment = BasicSpec();
  assignment.argv = {"A=B", "x"};  // env would take it for a variable
  EXPECT_FALSE(BuildLaunchFile(assignment, Context().paths).has_value());
  auto nul = BasicSpec();
  nul.argv = {"/bin/echo", std::string("a\0b", 3)};
  EXPECT_FALSE(BuildLaunchFile(nul, Context().paths).has_value());
  for (std::string name : {"", "1A", "A-B", "A B", "A=B", "A;B", "$(id)", "A\nB"}) {
    auto bad = BasicSpec();
    bad.env = {{name, "v"}};
    EXPECT_FALSE(BuildLaunchFile(bad, Context().paths).has_value()) << name;
  }
  auto nul_value = BasicSpec();
  nul_value.env = {{"A", std::string("x\0y", 3)}};
  EXPECT_FALSE(BuildLaunchFile(nul_value, Context().paths).has_value());
}

TEST(BatchScript, HoldsNoTenantDataAndExecsTheLaunchFile) {
  std::string script(BatchScript());
  EXPECT_EQ(script.rfind("#!/bin/bash\n", 0), 0u);
  EXPECT_NE(script.find("mapfile -d '' -t atrium_argv < launch.argv"), std::string::npos);
  EXPECT_NE(script.find("exec \"${atrium_argv[@]}\""), std::string::npos);
}

TEST(Names, AccountsUsersAndQos) {
  EXPECT_EQ(*AccountForTenant("tn_01jq3k8x9f7d2m4n6p8r0t2v4w"), "tn_01jq3k8x9f7d2m4n6p8r0t2v4w");
  for (std::string bad : std::vector<std::string>{"", "TN_UPPER", "tn a", "tn,a", "-tn", "tn;a",
                                                  std::string(65, 'a')}) {
    EXPECT_FALSE(AccountForTenant(bad).has_value()) << bad;
  }
  EXPECT_EQ(*UnixUserForTenant("atr_", "tn_01x"), "atr_tn_01x");
  EXPECT_FALSE(UnixUserForTenant("", "1tn").has_value());  // a user name starts with a letter
  EXPECT_FALSE(UnixUserForTenant("atr_", std::string(30, 'a')).has_value());  // > 32
  EXPECT_EQ(*QosForPriority(""), "batch");
  EXPECT_EQ(*QosForPriority("interactive"), "interactive");
  EXPECT_EQ(*QosForPriority("preemptible"), "preemptible");
  EXPECT_FALSE(QosForPriority("normal").has_value());
  EXPECT_FALSE(QosForPriority("batch,interactive").has_value());
}

TEST(TimeLimit, MinutesAndSeconds) {
  EXPECT_EQ(SlurmTimeLimit(59), "0:59");
  EXPECT_EQ(SlurmTimeLimit(3600), "60:0");
}

TEST(TenantSync, ANewActiveTenantGetsUserAccountAssociationAndLimits) {
  exec::TenantAccount account{"tn_a", "active", {{"", 4}}};
  auto plan = PlanTenantSync(account, "atr_", true, TenantFacts{});
  ASSERT_TRUE(plan.has_value()) << plan.error().message;
  ASSERT_EQ(plan->size(), 4u);
  EXPECT_EQ((*plan)[0][0], "useradd");
  EXPECT_EQ((*plan)[0].back(), "atr_tn_a");
  EXPECT_EQ((*plan)[1], (Argv{"sacctmgr", "-i", "add", "account", "tn_a",
                              "Description=atrium tenant", "Organization=tn_a"}));
  EXPECT_EQ((*plan)[2], (Argv{"sacctmgr", "-i", "add", "user", "atr_tn_a", "Account=tn_a",
                              "QOS=interactive,batch,preemptible", "DefaultQOS=batch"}));
  EXPECT_EQ((*plan)[3], (Argv{"sacctmgr", "-i", "modify", "account", "where", "name=tn_a", "set",
                              "GrpTRES=gres/gpu=4", "GrpSubmitJobs=-1"}));
}

TEST(TenantSync, AnExistingTenantOnlyGetsItsLimitsAgain) {
  TenantFacts facts{true, true, true};
  auto plan = PlanTenantSync({"tn_a", "active", {{"a100", 2}, {"h100", 3}}}, "", true, facts);
  ASSERT_TRUE(plan.has_value());
  ASSERT_EQ(plan->size(), 1u);
  EXPECT_TRUE(Has((*plan)[0], "GrpTRES=gres/gpu=5"));
}

TEST(TenantSync, SuspendedAndEvictingRefuseSubmissionsAndCancel) {
  TenantFacts facts{true, true, true};
  for (std::string state : {"suspended", "evicting"}) {
    auto plan = PlanTenantSync({"tn_a", state, {}}, "", false, facts);
    ASSERT_TRUE(plan.has_value());
    ASSERT_EQ(plan->size(), 2u);
    EXPECT_TRUE(Has((*plan)[0], "GrpSubmitJobs=0"));
    EXPECT_EQ((*plan)[1], (Argv{"scancel", "--account=tn_a"}));
  }
}

TEST(TenantSync, DeletedCancelsThenRemovesAndIsIdempotent) {
  auto plan = PlanTenantSync({"tn_a", "deleted", {}}, "atr_", true, TenantFacts{true, true, true});
  ASSERT_TRUE(plan.has_value());
  ASSERT_EQ(plan->size(), 3u);
  EXPECT_EQ((*plan)[0][0], "scancel");
  EXPECT_EQ((*plan)[1],
            (Argv{"sacctmgr", "-i", "delete", "user", "where", "name=atr_tn_a", "account=tn_a"}));
  EXPECT_EQ((*plan)[2], (Argv{"sacctmgr", "-i", "delete", "account", "where", "name=tn_a"}));
  auto again = PlanTenantSync({"tn_a", "deleted", {}}, "atr_", true, TenantFacts{});
  ASSERT_TRUE(again.has_value());
  EXPECT_TRUE(again->empty());
}

TEST(TenantSync, RefusesIdsAndStatesItCannotMap) {
  EXPECT_FALSE(PlanTenantSync({"tn a", "active", {}}, "", false, {}).has_value());
  EXPECT_FALSE(PlanTenantSync({"tn_a,root", "active", {}}, "", false, {}).has_value());
  EXPECT_FALSE(PlanTenantSync({"tn_a", "frozen", {}}, "", false, {}).has_value());
}

TEST(GrpTres, MirrorsTheLimits) {
  EXPECT_EQ(GrpTresForLimits({}), "gres/gpu=-1");
  EXPECT_EQ(GrpTresForLimits({{"", 8}, {"a100", 2}}), "gres/gpu=8");
  EXPECT_EQ(GrpTresForLimits({{"a100", 2}, {"h100", 1}}), "gres/gpu=3");
  EXPECT_EQ(GrpTresForLimits({{"", -4}}), "gres/gpu=0");
  EXPECT_EQ(GrpTresForLimits({{"a", INT64_MAX}, {"b", INT64_MAX}}), "gres/gpu=2000000");
}

TEST(QosSetup, CreatesPreemptibleFirstAndKeepsItsGraceCurrent) {
  auto plan = PlanQosSetup({"normal"}, 45);
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[0], (Argv{"sacctmgr", "-i", "add", "qos", "preemptible", "Priority=0",
                           "PreemptMode=requeue", "GraceTime=45"}));
  EXPECT_TRUE(Has(plan[1], "Preempt=preemptible"));
  EXPECT_TRUE(Has(plan[2], "Preempt=preemptible"));
  auto again = PlanQosSetup({"normal", "preemptible", "batch", "interactive"}, 10);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_TRUE(Has(again[0], "GraceTime=10"));
}

}  // namespace
}  // namespace atrium::slurm
