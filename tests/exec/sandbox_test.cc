// The sandbox plan as data: what bubblewrap is told to show the workload,
// and what it refuses to plan.
#include "exec/sandbox.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace atrium::exec {
namespace {

GpuGrant Gpu(int index) {
  GpuGrant gpu;
  gpu.index = index;
  return gpu;
}

GpuGrant Mig(int index, const char* profile, int start, int gi, int ci) {
  GpuGrant gpu = Gpu(index);
  gpu.mig_profile = profile;
  gpu.mig_start = start;
  gpu.mig_gi = gi;
  gpu.mig_ci = ci;
  return gpu;
}

GpuGrant Share(int index, int32_t milli, int64_t memory_cap_mib) {
  GpuGrant gpu = Gpu(index);
  gpu.share_milli = milli;
  gpu.memory_cap_mib = memory_cap_mib;
  return gpu;
}

LaunchSpec Spec() {
  LaunchSpec spec;
  spec.workload_id = "job-1.0";
  spec.job_id = "job-1";
  spec.tenant_id = "tenant-a";
  spec.node = "node-0";
  spec.argv = {"python3", "train.py", "--epochs", "3"};
  spec.gpus = {Gpu(2), Gpu(0)};
  spec.env = {{"LEARNING_RATE", "0.1"}};
  return spec;
}

SandboxHost Host() {
  SandboxHost host;
  host.bwrap_path = "/usr/bin/bwrap";
  host.device_dir = "/tmp/fake-dev";
  host.control_devices = {"nvidiactl", "nvidia-uvm"};
  host.work_dir = "/var/lib/atrium/workloads/job-1.0/work";
  host.init_path = "/usr/lib/atrium/atrium-sandbox-init";
  host.system_paths = {
      {"/usr", ""}, {"/bin", "usr/bin"}, {"/lib", "usr/lib"}, {"/etc/ld.so.cache", ""}};
  host.uid = 70001;
  host.gid = 70001;
  return host;
}

// True when `argv` holds `seq` as consecutive elements.
bool HasSequence(const std::vector<std::string>& argv, const std::vector<std::string>& seq) {
  return std::search(argv.begin(), argv.end(), seq.begin(), seq.end()) != argv.end();
}

bool HasArg(const std::vector<std::string>& argv, const std::string& arg) {
  return std::find(argv.begin(), argv.end(), arg) != argv.end();
}

std::string EnvOf(const SandboxPlan& plan, const std::string& name) {
  for (const auto& [n, v] : plan.env) {
    if (n == name) return v;
  }
  return "<unset>";
}

TEST(SandboxPlan, BindsOnlyTheGrantedGpusAndTheControlDevices) {
  auto plan = PlanSandbox(Spec(), Host());
  ASSERT_TRUE(plan.has_value()) << plan.error().message;
  EXPECT_TRUE(HasSequence(plan->argv, {"--dev-bind", "/tmp/fake-dev/nvidia0", "/dev/nvidia0"}));
  EXPECT_TRUE(HasSequence(plan->argv, {"--dev-bind", "/tmp/fake-dev/nvidia2", "/dev/nvidia2"}));
  EXPECT_TRUE(HasSequence(plan->argv, {"--dev-bind", "/tmp/fake-dev/nvidiactl", "/dev/nvidiactl"}));
  EXPECT_TRUE(
      HasSequence(plan->argv, {"--dev-bind", "/tmp/fake-dev/nvidia-uvm", "/dev/nvidia-uvm"}));
  EXPECT_FALSE(HasArg(plan->argv, "/dev/nvidia1"));
  EXPECT_FALSE(HasArg(plan->argv, "/tmp/fake-dev/nvidia1"));
  // The host's /dev is never shown whole; the sandbox gets its own.
  EXPECT_TRUE(HasSequence(plan->argv, {"--dev", "/dev"}));
  EXPECT_FALSE(HasSequence(plan->argv, {"--dev-bind", "/dev", "/dev"}));
  EXPECT_FALSE(HasSequence(plan->argv, {"--bind", "/dev", "/dev"}));
  EXPECT_EQ(plan->device_paths,
            (std::vector<std::string>{"/tmp/fake-dev/nvidia0", "/tmp/fake-dev/nvidia2",
                                      "/tmp/fake-dev/nvidiactl", "/tmp/fake-dev/nvidia-uvm"}));
}

TEST(SandboxPlan, ControlDevicesThatMayBeAbsentAreTriedButGpusNeverAre) {
  auto host = Host();
  host.control_devices_may_be_absent = true;
  auto plan = PlanSandbox(Spec(), host);
  ASSERT_TRUE(plan.has_value()) << plan.error().message;
  // A granted GPU missing on the node fails the start; a control device
  // the node lacks is left out.
  EXPECT_TRUE(HasSequence(plan->argv, {"--dev-bind", "/tmp/fake-dev/nvidia0", "/dev/nvidia0"}));
  EXPECT_TRUE(HasSequence(plan->argv, {"--dev-bind", "/tmp/fake-dev/nvidia2", "/dev/nvidia2"}));
  EXPECT_TRUE(
      HasSequence(plan->argv, {"--dev-bind-try", "/tmp/fake-dev/nvidiactl", "/dev/nvidiactl"}));
  EXPECT_TRUE(
      HasSequence(plan->argv, {"--dev-bind-try", "/tmp/fake-dev/nvidia-uvm", "/dev/nvidia-uvm"}));
  EXPECT_FALSE(HasSequence(plan->argv, {"--dev-bind-try", "/tmp/fake-dev/nvidia0"}));
}

TEST(SandboxPlan, VisibleDevicesNameTheGrantedGpus) {
  auto plan = PlanSandbox(Spec(), Host());
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(EnvOf(*plan, "NVIDIA_VISIBLE_DEVICES"), "0,2");
  EXPECT_EQ(EnvOf(*plan, "CUDA_VISIBLE_DEVICES"), "0,1");
  EXPECT_EQ(EnvOf(*plan, "CUDA_DEVICE_ORDER"), "PCI_BUS_ID");
}

TEST(SandboxPlan, ACpuOnlyWorkloadGetsNoGpuDevicesAtAll) {
  auto spec = Spec();
  spec.gpus.clear();
  auto plan = PlanSandbox(spec, Host());
  ASSERT_TRUE(plan.has_value());
  EXPECT_FALSE(HasArg(plan->argv, "--dev-bind"));
  EXPECT_TRUE(plan->device_paths.empty());
  EXPECT_EQ(EnvOf(*plan, "CUDA_VISIBLE_DEVICES"), "");
  EXPECT_EQ(EnvOf(*plan, "NVIDIA_VISIBLE_DEVICES"), "void");
}

// --- MIG instances and shares ------------------------------------------

SandboxHost MigHost() {
  auto host = Host();
  host.caps_dir = "/tmp/fake-caps";
  auto minors = ParseMigMinors(MigMinorsTable(4));
  EXPECT_TRUE(minors.has_value());
  host.mig_minors = *minors;
  return host;
}

TEST(SandboxPlan, MigMinorsAreNumberedAsTheDriverNumbersThem) {
  auto minors = ParseMigMinors(MigMinorsTable(2));
  ASSERT_TRUE(minors.has_value()) << minors.error().message;
  // The driver's table: config 1, monitor 2, then 9 minors per GPU instance
  // (its access file and 8 compute instances), 15 instances per GPU.
  EXPECT_EQ(minors->at("config"), 1);
  EXPECT_EQ(minors->at("monitor"), 2);
  EXPECT_EQ(minors->at("gpu0/gi0/access"), 3);
  EXPECT_EQ(minors->at("gpu0/gi0/ci0/access"), 4);
  EXPECT_EQ(minors->at("gpu0/gi0/ci7/access"), 11);
  EXPECT_EQ(minors->at("gpu0/gi2/access"), 21);
  EXPECT_EQ(minors->at("gpu0/gi2/ci0/access"), 22);
  EXPECT_EQ(minors->at("gpu1/gi0/access"), 3 + 15 * 9);
  EXPECT_EQ(minors->size(), 2u + 2 * 15 * 9);
  EXPECT_EQ(MigGpuInstanceCap(3, 14), "gpu3/gi14/access");
  EXPECT_EQ(MigComputeInstanceCap(3, 14, 7), "gpu3/gi14/ci7/access");
}

TEST(SandboxPlan, MigMinorsParserRefusesWhatIsNotTheDriversTable) {
  EXPECT_TRUE(ParseMigMinors("").has_value());
  EXPECT_TRUE(ParseMigMinors("config 1\r\n\ngpu0/gi1/access 12 \n").has_value());
  for (const char* bad : {"config", "config x", "config -1", "config 1 2", "gpu0 gi1 12",
                          "config 99999999", "Config 1", "../x 3"}) {
    auto parsed = ParseMigMinors(std::string(bad) + "\n");
    ASSERT_FALSE(parsed.has_value()) << bad;
    EXPECT_EQ(parsed.error().code, ErrorCode::kInvalidArgument);
  }
}

TEST(SandboxPlan, AMigInstanceSeesItsParentGpuAndOnlyItsOwnCapabilities) {
  auto spec = Spec();
  spec.gpus = {Mig(2, "3g.40gb", 4, 2, 0)};
  auto plan = PlanSandbox(spec, MigHost());
  ASSERT_TRUE(plan.has_value()) << plan.error().message;
  const int gi_minor = 3 + 2 * 135 + 2 * 9;  // gpu2/gi2/access
  const std::string gi_cap = "nvidia-cap" + std::to_string(gi_minor);
  const std::string ci_cap = "nvidia-cap" + std::to_string(gi_minor + 1);  // gpu2/gi2/ci0
  EXPECT_TRUE(HasSequence(plan->argv, {"--dev-bind", "/tmp/fake-dev/nvidia2", "/dev/nvidia2"}));
  EXPECT_TRUE(HasSequence(plan->argv, {"--dev-bind", "/tmp/fake-dev/nvidiactl", "/dev/nvidiactl"}));
  EXPECT_TRUE(HasSequence(
      plan->argv, {"--dev-bind", "/tmp/fake-caps/" + gi_cap, "/dev/nvidia-caps/" + gi_cap}));
  EXPECT_TRUE(HasSequence(
      plan->argv, {"--dev-bind", "/tmp/fake-caps/" + ci_cap, "/dev/nvidia-caps/" + ci_cap}));
  // Nothing else of the GPU's or the driver's: no other instance, not the
  // config or monitor capabilities (which create and watch instances).
  EXPECT_EQ(std::count(plan->argv.begin(), plan->argv.end(), "--dev-bind"), 5);
  EXPECT_FALSE(HasArg(plan->argv, "/tmp/fake-caps/nvidia-cap1"));
  EXPECT_FALSE(HasArg(plan->argv, "/tmp/fake-caps/nvidia-cap2"));
  EXPECT_EQ(plan->device_paths,
            (std::vector<std::string>{"/tmp/fake-dev/nvidia2", "/tmp/fake-dev/nvidiactl",
                                      "/tmp/fake-dev/nvidia-uvm", "/tmp/fake-caps/" + gi_cap,
                                      "/tmp/fake-caps/" + ci_cap}))
      << "the cgroup's allow-list holds the capabilities too";
}

TEST(SandboxPlan, TwoMigInstancesOnOneGpuGetDisjointCapabilities) {
  auto first = Spec();
  first.gpus = {Mig(0, "1g.10gb", 0, 7, 0)};
  auto second = Spec();
  second.gpus = {Mig(0, "1g.10gb", 1, 8, 0)};
  auto a = PlanSandbox(first, MigHost());
  auto b = PlanSandbox(second, MigHost());
  ASSERT_TRUE(a.has_value() && b.has_value());
  for (const auto& path : a->device_paths) {
    if (path.find("nvidia-cap") == std::string::npos) continue;
    EXPECT_FALSE(HasArg(b->device_paths, path)) << path << " is in both";
  }
  EXPECT_EQ(a->device_paths.front(), b->device_paths.front()) << "the parent GPU is shared";
}

TEST(SandboxPlan, MigVisibleDevicesPreferTheUuid) {
  auto spec = Spec();
  spec.gpus = {Mig(1, "1g.10gb", 3, 9, 0)};
  spec.gpus[0].mig_uuid = "MIG-4bb2b2ad-2a4d-5ee5-9bd4-6f4b2e1a1c0f";
  spec.gpus[0].gpu_uuid = "GPU-5a0d3e0e-1d3c-4c3b-9a3e-0b0c1d2e3f40";
  auto plan = PlanSandbox(spec, MigHost());
  ASSERT_TRUE(plan.has_value()) << plan.error().message;
  EXPECT_EQ(EnvOf(*plan, "CUDA_VISIBLE_DEVICES"), spec.gpus[0].mig_uuid);
  EXPECT_EQ(EnvOf(*plan, "NVIDIA_VISIBLE_DEVICES"), spec.gpus[0].mig_uuid);
  EXPECT_EQ(EnvOf(*plan, "ATRIUM_MIG_DEVICE"), "1/9/0");

  spec.gpus[0].mig_uuid.clear();
  plan = PlanSandbox(spec, MigHost());
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(EnvOf(*plan, "CUDA_VISIBLE_DEVICES"),
            "MIG-GPU-5a0d3e0e-1d3c-4c3b-9a3e-0b0c1d2e3f40/9/0");

  spec.gpus[0].gpu_uuid.clear();
  plan = PlanSandbox(spec, MigHost());
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(EnvOf(*plan, "CUDA_VISIBLE_DEVICES"), "0") << "the only MIG device it can open";
  EXPECT_EQ(EnvOf(*plan, "NVIDIA_VISIBLE_DEVICES"), "1");
  EXPECT_EQ(EnvOf(*plan, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "<unset>");
}

TEST(SandboxPlan, AMigGrantIsRefusedWithoutItsInstanceOrItsCapabilityFiles) {
  auto spec = Spec();
  spec.gpus = {Mig(0, "1g.10gb", 0, -1, -1)};
  EXPECT_TRUE(ValidateLaunchSpec(spec).has_value()) << "the backend may still find the ids";
  auto plan = PlanSandbox(spec, MigHost());
  ASSERT_FALSE(plan.has_value());
  EXPECT_EQ(plan.error().code, ErrorCode::kInvalidArgument);

  spec.gpus = {Mig(0, "1g.10gb", 0, 1, 0)};
  plan = PlanSandbox(spec, Host());  // a host whose driver lists no MIG capabilities
  ASSERT_FALSE(plan.has_value());
  EXPECT_NE(plan.error().message.find("gpu0/gi1/access"), std::string::npos)
      << plan.error().message;

  auto host = MigHost();
  host.caps_dir = "/dev/../tmp";
  plan = PlanSandbox(spec, host);
  ASSERT_FALSE(plan.has_value());
  EXPECT_EQ(plan.error().code, ErrorCode::kInvalidArgument);
}

TEST(SandboxPlan, AShareSeesItsWholeDeviceFileAndGetsMpsLimits) {
  auto spec = Spec();
  spec.gpus = {Share(3, 250, 20480)};
  auto plan = PlanSandbox(spec, Host());
  ASSERT_TRUE(plan.has_value()) << plan.error().message;
  EXPECT_TRUE(HasSequence(plan->argv, {"--dev-bind", "/tmp/fake-dev/nvidia3", "/dev/nvidia3"}));
  EXPECT_FALSE(HasArg(plan->argv, "/dev/nvidia0"));
  EXPECT_EQ(EnvOf(*plan, "CUDA_VISIBLE_DEVICES"), "0");
  EXPECT_EQ(EnvOf(*plan, "NVIDIA_VISIBLE_DEVICES"), "3");
  EXPECT_EQ(EnvOf(*plan, "ATRIUM_GPU_SHARE_MILLI"), "250");
  EXPECT_EQ(EnvOf(*plan, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "25");
  EXPECT_EQ(EnvOf(*plan, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=20480MB");

  spec.gpus = {Share(3, 1, 0)};
  plan = PlanSandbox(spec, Host());
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(EnvOf(*plan, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "1") << "rounded up, never 0";
  EXPECT_EQ(EnvOf(*plan, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "<unset>");
  spec.gpus = {Share(3, 999, 0)};
  plan = PlanSandbox(spec, Host());
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(EnvOf(*plan, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "100");

  plan = PlanSandbox(Spec(), Host());
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(EnvOf(*plan, "ATRIUM_GPU_SHARE_MILLI"), "<unset>") << "whole GPUs have no share";
}

TEST(SandboxPlan, NamespacesPrivateTmpAndDieWithParent) {
  auto plan = PlanSandbox(Spec(), Host());
  ASSERT_TRUE(plan.has_value());
  const auto& argv = plan->argv;
  EXPECT_EQ(argv.front(), "/usr/bin/bwrap");
  for (const char* flag :
       {"--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net", "--die-with-parent"}) {
    EXPECT_TRUE(HasArg(argv, flag)) << flag;
  }
  EXPECT_TRUE(HasSequence(argv, {"--tmpfs", "/tmp"}));
  EXPECT_TRUE(HasSequence(argv, {"--proc", "/proc"}));
  EXPECT_FALSE(HasArg(argv, "--unshare-user"))
      << "the uid is the shell's to drop, not a user namespace's to fake";
  EXPECT_FALSE(HasArg(argv, "--share-net"));
}

TEST(SandboxPlan, NetworkStaysSharedOnlyWhenTheHostRefusesANamespace) {
  auto host = Host();
  host.unshare_network = false;
  auto plan = PlanSandbox(Spec(), host);
  ASSERT_TRUE(plan.has_value());
  EXPECT_FALSE(HasArg(plan->argv, "--unshare-net"));
  EXPECT_TRUE(HasArg(plan->argv, "--unshare-pid"));
}

TEST(SandboxPlan, SystemPathsAreReadOnlyAndOnlyTheWorkDirIsWritable) {
  auto plan = PlanSandbox(Spec(), Host());
  ASSERT_TRUE(plan.has_value());
  const auto& argv = plan->argv;
  EXPECT_TRUE(HasSequence(argv, {"--ro-bind", "/usr", "/usr"}));
  EXPECT_TRUE(HasSequence(argv, {"--symlink", "usr/bin", "/bin"}));
  EXPECT_TRUE(HasSequence(argv, {"--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"}));
  EXPECT_TRUE(HasSequence(argv, {"--bind", "/var/lib/atrium/workloads/job-1.0/work", "/work"}));
  EXPECT_TRUE(HasSequence(argv, {"--chdir", "/work"}));
  // Exactly one writable bind: the workload's own directory.
  EXPECT_EQ(std::count(argv.begin(), argv.end(), "--bind"), 1);
  EXPECT_FALSE(HasArg(argv, "--bind-try"));
  EXPECT_FALSE(HasSequence(argv, {"--ro-bind", "/", "/"}));
  EXPECT_FALSE(HasArg(argv, "/etc")) << "only the listed files of /etc, not all of it";
  // The root (bubblewrap's tmpfs holding the mount points) ends read-only,
  // after every mount.
  const std::vector<std::string> remount_root = {"--remount-ro", "/"};
  const auto remount =
      std::search(argv.begin(), argv.end(), remount_root.begin(), remount_root.end());
  ASSERT_NE(remount, argv.end());
  EXPECT_GT(remount - argv.begin(), std::find(argv.begin(), argv.end(), "--bind") - argv.begin());
}

// A workload filled /tmp, /dev/shm or bubblewrap's own /dev (tmpfs of no
// bound: half the host's RAM each) where no memory cgroup charged it.
TEST(SandboxPlan, TmpAndDevShmAreBoundedAndDevEndsReadOnly) {
  auto host = Host();
  host.tmpfs_bytes = 8 << 20;
  auto plan = PlanSandbox(Spec(), host);
  ASSERT_TRUE(plan.has_value());
  const auto& argv = plan->argv;
  EXPECT_TRUE(HasSequence(argv, {"--size", "8388608", "--tmpfs", "/tmp"}));
  EXPECT_TRUE(HasSequence(argv, {"--size", "8388608", "--tmpfs", "/dev/shm"}));
  EXPECT_EQ(std::count(argv.begin(), argv.end(), "--tmpfs"), 2) << "no tmpfs without a size";
  // /dev turns read-only after the last device is bound into it.
  const std::vector<std::string> remount_dev = {"--remount-ro", "/dev"};
  const auto remount =
      std::search(argv.begin(), argv.end(), remount_dev.begin(), remount_dev.end());
  ASSERT_NE(remount, argv.end());
  for (auto it = remount; it != argv.end(); ++it) {
    EXPECT_NE(*it, "--dev-bind");
    EXPECT_NE(*it, "--tmpfs");
  }
  EXPECT_GT(remount - argv.begin(),
            std::find(argv.begin(), argv.end(), kSandboxInitPath) - argv.begin());
}

TEST(SandboxPlan, ATemplateRootFilesystemBecomesTheReadOnlyRoot) {
  auto spec = Spec();
  spec.root_fs = "/var/lib/atrium/templates/pytorch@sha256-abc/rootfs";
  auto plan = PlanSandbox(spec, Host());
  ASSERT_TRUE(plan.has_value());
  EXPECT_TRUE(HasSequence(plan->argv, {"--ro-bind", spec.root_fs, "/"}));
  EXPECT_FALSE(HasSequence(plan->argv, {"--ro-bind", "/usr", "/usr"}))
      << "the host's /usr is not mixed in";
  EXPECT_TRUE(
      HasSequence(plan->argv, {"--bind", "/var/lib/atrium/workloads/job-1.0/work", "/work"}));
}

TEST(SandboxPlan, TheCommandRunsUnderTheReportingInit) {
  auto plan = PlanSandbox(Spec(), Host());
  ASSERT_TRUE(plan.has_value());
  EXPECT_TRUE(HasSequence(plan->argv,
                          {"--ro-bind", "/usr/lib/atrium/atrium-sandbox-init", kSandboxInitPath}));
  EXPECT_TRUE(HasSequence(plan->argv, {"--", kSandboxInitPath, "--report-fd", "3", "--", "python3",
                                       "train.py", "--epochs", "3"}));
  EXPECT_EQ(plan->argv.back(), "3");
}

TEST(SandboxPlan, AScriptRunsWithTheShellAndTheArgumentsFollow) {
  auto spec = Spec();
  spec.script = "echo hello\n";
  spec.argv = {"first"};
  auto plan = PlanSandbox(spec, Host());
  ASSERT_TRUE(plan.has_value());
  EXPECT_TRUE(HasSequence(plan->argv,
                          {"--", "/bin/sh", std::string("/work/") + kSandboxScriptName, "first"}));
  spec.argv.clear();
  EXPECT_TRUE(PlanSandbox(spec, Host()).has_value()) << "a script needs no argv";
}

TEST(SandboxPlan, EnvironmentStaysOutOfArgvAndGetsDefaults) {
  auto plan = PlanSandbox(Spec(), Host());
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(EnvOf(*plan, "LEARNING_RATE"), "0.1");
  EXPECT_FALSE(HasArg(plan->argv, "LEARNING_RATE"));
  EXPECT_FALSE(HasArg(plan->argv, "--setenv"));
  EXPECT_EQ(EnvOf(*plan, "HOME"), "/work");
  EXPECT_EQ(EnvOf(*plan, "ATRIUM_WORKLOAD_ID"), "job-1.0");
  EXPECT_NE(EnvOf(*plan, "PATH"), "<unset>");

  auto spec = Spec();
  spec.env.emplace_back("PATH", "/opt/bin");
  plan = PlanSandbox(spec, Host());
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(EnvOf(*plan, "PATH"), "/opt/bin") << "the tenant's PATH wins over the default";
  EXPECT_EQ(std::count_if(plan->env.begin(), plan->env.end(),
                          [](const auto& e) { return e.first == "PATH"; }),
            1);
}

// Each bad input is refused with InvalidArgument and no plan.
struct BadSpecCase {
  const char* name;
  void (*mutate)(LaunchSpec&);
};

void PrintTo(const BadSpecCase& c, std::ostream* os) { *os << c.name; }

class SandboxPlanRefuses : public ::testing::TestWithParam<BadSpecCase> {};

TEST_P(SandboxPlanRefuses, WithInvalidArgument) {
  auto spec = Spec();
  GetParam().mutate(spec);
  auto plan = PlanSandbox(spec, Host());
  ASSERT_FALSE(plan.has_value());
  EXPECT_EQ(plan.error().code, ErrorCode::kInvalidArgument);
  EXPECT_FALSE(plan.error().message.empty());
  EXPECT_FALSE(ValidateLaunchSpec(spec).has_value());
}

const BadSpecCase kBadSpecs[] = {
    {"WorkloadIdEscapingItsDirectory", [](LaunchSpec& s) { s.workload_id = "../other"; }},
    {"WorkloadIdDotDot", [](LaunchSpec& s) { s.workload_id = ".."; }},
    {"WorkloadIdWithSlash", [](LaunchSpec& s) { s.workload_id = "a/b"; }},
    {"WorkloadIdEmpty", [](LaunchSpec& s) { s.workload_id = ""; }},
    {"WorkloadIdTooLong",
     [](LaunchSpec& s) { s.workload_id = std::string(kMaxWorkloadIdBytes + 1, 'a'); }},
    {"NoCommand", [](LaunchSpec& s) { s.argv.clear(); }},
    {"EmptyProgram", [](LaunchSpec& s) { s.argv = {""}; }},
    {"NulInArgument", [](LaunchSpec& s) { s.argv[1] = std::string("a\0b", 3); }},
    {"HugeArgument", [](LaunchSpec& s) { s.argv[1] = std::string(kMaxArgBytes + 1, 'x'); }},
    {"TooManyArguments", [](LaunchSpec& s) { s.argv.resize(kMaxArgs + 1, "x"); }},
    {"EqualsInEnvName",
     [](LaunchSpec& s) {
       s.env = {{"A=B", "c"}};
     }},
    {"EmptyEnvName",
     [](LaunchSpec& s) {
       s.env = {{"", "c"}};
     }},
    {"EnvNameStartingWithDigit",
     [](LaunchSpec& s) {
       s.env = {{"1A", "c"}};
     }},
    {"NulInEnvName",
     [](LaunchSpec& s) {
       s.env = {{std::string("A\0B", 3), "c"}};
     }},
    {"NulInEnvValue",
     [](LaunchSpec& s) {
       s.env = {{"A", std::string("x\0y", 3)}};
     }},
    {"HugeEnvValue",
     [](LaunchSpec& s) {
       s.env = {{"A", std::string(kMaxEnvValueBytes + 1, 'v')}};
     }},
    {"TooManyEnvVars",
     [](LaunchSpec& s) {
       s.env.clear();
       for (size_t i = 0; i <= kMaxEnvVars; ++i) s.env.emplace_back("V" + std::to_string(i), "1");
     }},
    {"EnvGivenTwice",
     [](LaunchSpec& s) {
       s.env = {{"A", "1"}, {"A", "2"}};
     }},
    {"TenantSetsCudaVisibleDevices",
     [](LaunchSpec& s) {
       s.env = {{"CUDA_VISIBLE_DEVICES", "0,1,2,3"}};
     }},
    {"TenantSetsNvidiaVisibleDevices",
     [](LaunchSpec& s) {
       s.env = {{"NVIDIA_VISIBLE_DEVICES", "all"}};
     }},
    {"TenantFakesItsWorkloadId",
     [](LaunchSpec& s) {
       s.env = {{"ATRIUM_WORKLOAD_ID", "other"}};
     }},
    {"CommandLargerThanTheBound",
     [](LaunchSpec& s) {
       s.env.clear();
       for (int i = 0; i < 40; ++i)
         s.env.emplace_back("V" + std::to_string(i), std::string(kMaxEnvValueBytes, 'v'));
     }},
    {"NegativeGpuIndex", [](LaunchSpec& s) { s.gpus = {Gpu(-1)}; }},
    {"GpuIndexOutOfRange", [](LaunchSpec& s) { s.gpus = {Gpu(kMaxGpuIndex + 1)}; }},
    {"GpuGrantedTwice",
     [](LaunchSpec& s) {
       s.gpus = {Gpu(1), Gpu(1)};
     }},
    {"MigStartOutsideTheSlots", [](LaunchSpec& s) { s.gpus = {Mig(0, "1g.10gb", 8, 1, 0)}; }},
    {"MigInstanceIdOutOfRange", [](LaunchSpec& s) { s.gpus = {Mig(0, "1g.10gb", 0, 15, 0)}; }},
    {"MigComputeInstanceOutOfRange", [](LaunchSpec& s) { s.gpus = {Mig(0, "1g.10gb", 0, 1, 8)}; }},
    {"MigProfileWithAPath", [](LaunchSpec& s) { s.gpus = {Mig(0, "../../x", 0, 1, 0)}; }},
    {"MigUuidThatIsNotOne",
     [](LaunchSpec& s) {
       s.gpus = {Mig(0, "1g.10gb", 0, 1, 0)};
       s.gpus[0].mig_uuid = "GPU-1234";
     }},
    {"MigAndWholeGpuTogether",
     [](LaunchSpec& s) {
       s.gpus = {Mig(0, "1g.10gb", 0, 1, 0), Gpu(1)};
     }},
    {"TwoMigInstances",
     [](LaunchSpec& s) {
       s.gpus = {Mig(0, "1g.10gb", 0, 1, 0), Mig(1, "1g.10gb", 0, 1, 0)};
     }},
    {"MigThatIsAlsoAShare",
     [](LaunchSpec& s) {
       s.gpus = {Mig(0, "1g.10gb", 0, 1, 0)};
       s.gpus[0].share_milli = 500;
     }},
    {"MigIdsWithoutAProfile",
     [](LaunchSpec& s) {
       s.gpus = {Gpu(0)};
       s.gpus[0].mig_gi = 1;
     }},
    {"ShareOfAWholeGpu", [](LaunchSpec& s) { s.gpus = {Share(0, 1000, 0)}; }},
    {"NegativeShare", [](LaunchSpec& s) { s.gpus = {Share(0, -5, 0)}; }},
    {"ShareAndWholeGpuTogether",
     [](LaunchSpec& s) {
       s.gpus = {Share(0, 500, 0), Gpu(1)};
     }},
    {"NegativeGpuMemoryCap", [](LaunchSpec& s) { s.gpus = {Share(0, 500, -1)}; }},
    {"GpuUuidThatIsNotOne",
     [](LaunchSpec& s) {
       s.gpus = {Gpu(0)};
       s.gpus[0].gpu_uuid = "GPU-$(reboot)";
     }},
    {"TenantRaisesItsMpsShare",
     [](LaunchSpec& s) {
       s.env = {{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "100"}};
     }},
    {"TenantPointsAtAnotherMpsServer",
     [](LaunchSpec& s) {
       s.env = {{"CUDA_MPS_PIPE_DIRECTORY", "/tmp/other-tenant"}};
     }},
    {"RelativeRootFs", [](LaunchSpec& s) { s.root_fs = "templates/x"; }},
    {"RootFsEscaping", [](LaunchSpec& s) { s.root_fs = "/var/lib/atrium/templates/../../../etc"; }},
    {"HostRootAsRootFs", [](LaunchSpec& s) { s.root_fs = "/"; }},
    {"RelativeArchive", [](LaunchSpec& s) { s.archive_path = "uploads/a.tar"; }},
    {"ArchiveEscaping",
     [](LaunchSpec& s) { s.archive_path = "/var/lib/atrium/../../../root/.ssh/id_rsa"; }},
    {"HugeScript", [](LaunchSpec& s) { s.script = std::string(kMaxScriptBytes + 1, '#'); }},
    {"NegativeMemory", [](LaunchSpec& s) { s.memory_mib = -1; }},
    {"MemoryThatOverflowsInBytes", [](LaunchSpec& s) { s.memory_mib = int64_t{1} << 50; }},
    {"TimeLimitThatOverflowsInMs", [](LaunchSpec& s) { s.time_limit_s = int64_t{1} << 62; }},
    {"CpuBeyondAnyNode", [](LaunchSpec& s) { s.cpu_milli = int64_t{1} << 40; }},
    {"PidsBeyondTheKernel", [](LaunchSpec& s) { s.pids_max = int64_t{1} << 23; }},
};

INSTANTIATE_TEST_SUITE_P(BadSpecs, SandboxPlanRefuses, ::testing::ValuesIn(kBadSpecs),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(SandboxPlan, RefusesAHostItCannotConfineOn) {
  const std::vector<std::pair<const char*, void (*)(SandboxHost&)>> cases = {
      {"root uid", [](SandboxHost& h) { h.uid = 0; }},
      {"root gid", [](SandboxHost& h) { h.gid = 0; }},
      {"relative work dir", [](SandboxHost& h) { h.work_dir = "work"; }},
      {"work dir escaping", [](SandboxHost& h) { h.work_dir = "/var/lib/atrium/../../etc"; }},
      {"device name with slash", [](SandboxHost& h) { h.control_devices = {"../sda"}; }},
      {"system path /",
       [](SandboxHost& h) {
         h.system_paths = {{"/", ""}};
       }},
      {"system path over /dev",
       [](SandboxHost& h) {
         h.system_paths = {{"/dev", ""}};
       }},
      {"system path under /proc",
       [](SandboxHost& h) {
         h.system_paths = {{"/proc/1", ""}};
       }},
      {"system path over /tmp",
       [](SandboxHost& h) {
         h.system_paths = {{"/tmp/", ""}};
       }},
      {"relative device dir", [](SandboxHost& h) { h.device_dir = "dev"; }},
      {"report fd over stdio", [](SandboxHost& h) { h.report_fd = 1; }},
      {"tmpfs of no size", [](SandboxHost& h) { h.tmpfs_bytes = 0; }},
      {"tmpfs of negative size", [](SandboxHost& h) { h.tmpfs_bytes = -1; }},
  };
  for (const auto& [what, mutate] : cases) {
    auto host = Host();
    mutate(host);
    auto plan = PlanSandbox(Spec(), host);
    ASSERT_FALSE(plan.has_value()) << what;
    EXPECT_EQ(plan.error().code, ErrorCode::kInvalidArgument) << what;
  }
}

TEST(SandboxPlan, AnArchiveIsUnpackedByTheHostsTarInTheSameSandboxWithoutGpus) {
  auto spec = Spec();
  spec.archive_path = "/var/lib/atrium/uploads/a.tar.gz";
  spec.root_fs = "/var/lib/atrium/templates/t/rootfs";
  auto plan = PlanArchiveUnpacking(spec, Host(), "/var/lib/atrium/workloads/job-1.0/archive");
  ASSERT_TRUE(plan.has_value()) << plan.error().message;
  const auto& argv = plan->argv;
  EXPECT_TRUE(HasSequence(
      argv, {"--ro-bind", "/var/lib/atrium/workloads/job-1.0/archive", kSandboxArchivePath}));
  EXPECT_TRUE(HasSequence(argv, {"--bind", "/var/lib/atrium/workloads/job-1.0/work", "/work"}));
  EXPECT_TRUE(HasSequence(argv, {"--ro-bind", "/usr", "/usr"}))
      << "the host's tar, whatever the template";
  EXPECT_FALSE(HasArg(argv, spec.root_fs));
  EXPECT_FALSE(HasArg(argv, "--dev-bind")) << "no GPU while unpacking";
  EXPECT_TRUE(HasArg(argv, "--unshare-net"));
  EXPECT_TRUE(HasSequence(argv, {"--extract", "--file", kSandboxArchivePath, "--directory", "/work",
                                 "--no-same-owner", "--no-same-permissions"}));
  EXPECT_FALSE(HasArg(argv, "python3")) << "the workload's own command does not run here";
  // The archive is mounted before the root turns read-only.
  const auto archive = std::find(argv.begin(), argv.end(), kSandboxArchivePath);
  const auto remount = std::find(argv.begin(), argv.end(), "--remount-ro");
  EXPECT_LT(archive - argv.begin(), remount - argv.begin());

  EXPECT_FALSE(PlanArchiveUnpacking(spec, Host(), "relative/archive").has_value());
  spec.archive_path = "uploads/../../etc/shadow";
  EXPECT_FALSE(PlanArchiveUnpacking(spec, Host(), "/x/archive").has_value());
}

TEST(SandboxPlan, WorkloadIdsThatAreOnePathComponent) {
  EXPECT_TRUE(IsValidWorkloadId("job-123.4"));
  EXPECT_TRUE(IsValidWorkloadId("A_b-9"));
  EXPECT_FALSE(IsValidWorkloadId(".hidden"));
  EXPECT_FALSE(IsValidWorkloadId("a b"));
  EXPECT_FALSE(IsValidWorkloadId("a\nb"));
}

}  // namespace
}  // namespace atrium::exec
