#include "exec/sandbox.h"

#include <algorithm>
#include <set>
#include <string_view>

#include "common/strings.h"

namespace atrium::exec {
namespace {

constexpr std::string_view kDefaultPath =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

bool IsIdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-';
}

bool HasNul(std::string_view s) { return s.find('\0') != std::string_view::npos; }

// True when `p` is `dir` or inside it (both clean absolute paths).
bool IsAtOrUnder(std::string_view p, std::string_view dir) {
  while (p.size() > 1 && p.back() == '/') p.remove_suffix(1);
  if (p == dir) return true;
  return p.size() > dir.size() && p.substr(0, dir.size()) == dir && p[dir.size()] == '/';
}

bool IsValidEnvName(std::string_view name) {
  if (name.empty() || name.size() > kMaxEnvNameBytes) return false;
  const auto letter = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  };
  if (!letter(name.front())) return false;
  return std::all_of(name.begin(), name.end(),
                     [&](char c) { return letter(c) || (c >= '0' && c <= '9'); });
}

// Names Atrium sets itself: a tenant's value would point the workload at
// GPUs it does not hold or fake the ids it is told.
// CUDA_MPS_* too: a share's limits are Atrium's to set, and a pipe
// directory of the tenant's choosing could point at another's MPS server.
bool IsReservedEnvName(std::string_view name) {
  return name == "CUDA_VISIBLE_DEVICES" || name == "NVIDIA_VISIBLE_DEVICES" ||
         name == "CUDA_DEVICE_ORDER" || name.substr(0, 7) == "ATRIUM_" ||
         name.substr(0, 9) == "CUDA_MPS_";
}

// The highest GPU instance and compute instance ids the driver numbers
// (mig-minors lists gi0..gi14, ci0..ci7 per GPU), and memory slots.
constexpr int kMaxMigGi = 14;
constexpr int kMaxMigCi = 7;
constexpr int kMigSlots = 8;
constexpr int kMaxMinor = (1 << 20) - 1;

// "MIG-..." or "GPU-...": letters, digits, '-', '/', at most 96 bytes.
bool IsValidUuid(std::string_view uuid, std::string_view prefix) {
  if (uuid.size() <= prefix.size() || uuid.size() > 96 || uuid.substr(0, prefix.size()) != prefix) {
    return false;
  }
  return std::all_of(uuid.begin(), uuid.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '/';
  });
}

bool IsValidMigProfile(std::string_view profile) {
  return !profile.empty() && profile.size() <= 32 &&
         std::all_of(profile.begin(), profile.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '+';
         });
}

Status ValidateMigGrant(const GpuGrant& gpu) {
  const std::string which = "MIG grant on GPU " + std::to_string(gpu.index);
  if (!IsValidMigProfile(gpu.mig_profile)) {
    return Error::InvalidArgument(which + ": profile must be 1..32 of [a-z0-9.+]");
  }
  if (gpu.mig_start < 0 || gpu.mig_start >= kMigSlots) {
    return Error::InvalidArgument(which + ": start must be a memory slot 0.." +
                                  std::to_string(kMigSlots - 1));
  }
  if (gpu.mig_gi < -1 || gpu.mig_gi > kMaxMigGi || gpu.mig_ci < -1 || gpu.mig_ci > kMaxMigCi) {
    return Error::InvalidArgument(which + ": GPU instance must be 0.." + std::to_string(kMaxMigGi) +
                                  " and compute instance 0.." + std::to_string(kMaxMigCi));
  }
  if (!gpu.mig_uuid.empty() && !IsValidUuid(gpu.mig_uuid, "MIG-")) {
    return Error::InvalidArgument(which + ": MIG UUID must be MIG- then [A-Za-z0-9/-]");
  }
  if (gpu.share_milli != 0) {
    return Error::InvalidArgument(which + ": a MIG instance is not also a share");
  }
  return OkStatus();
}

// Whole GPUs, exactly one MIG instance, or exactly one share: what the
// scheduler allocates, and what one set of visible-device variables can say.
Status ValidateGpuGrants(const std::vector<GpuGrant>& gpus) {
  std::set<int> seen;
  size_t mig = 0;
  size_t share = 0;
  for (const auto& gpu : gpus) {
    if (gpu.index < 0 || gpu.index > kMaxGpuIndex) {
      return Error::InvalidArgument("GPU index " + std::to_string(gpu.index) + " is out of range");
    }
    if (!seen.insert(gpu.index).second) {
      return Error::InvalidArgument("GPU " + std::to_string(gpu.index) + " is granted twice");
    }
    if (!gpu.gpu_uuid.empty() && !IsValidUuid(gpu.gpu_uuid, "GPU-")) {
      return Error::InvalidArgument("GPU " + std::to_string(gpu.index) +
                                    ": UUID must be GPU- then [A-Za-z0-9/-]");
    }
    if (gpu.memory_cap_mib < 0 || gpu.memory_cap_mib > kMaxMemoryMib) {
      return Error::InvalidArgument("GPU " + std::to_string(gpu.index) +
                                    ": memory cap is out of range");
    }
    if (!gpu.mig_profile.empty()) {
      ATRIUM_RETURN_IF_ERROR(ValidateMigGrant(gpu));
      ++mig;
      continue;
    }
    if (gpu.mig_gi != -1 || gpu.mig_ci != -1 || !gpu.mig_uuid.empty()) {
      return Error::InvalidArgument("GPU " + std::to_string(gpu.index) +
                                    ": MIG instance ids on a grant without a MIG profile");
    }
    if (gpu.share_milli < 0 || gpu.share_milli >= 1000) {
      return Error::InvalidArgument("GPU " + std::to_string(gpu.index) +
                                    ": a share is 1..999 milli-GPU");
    }
    if (gpu.share_milli > 0) ++share;
  }
  if ((mig > 0 || share > 0) && gpus.size() > 1) {
    return Error::InvalidArgument(
        "a workload holds whole GPUs, one MIG instance or one share, not several kinds or "
        "several instances or shares");
  }
  return OkStatus();
}

bool IsValidDeviceName(std::string_view name) {
  return !name.empty() && name.size() <= 64 && name != "." && name != ".." &&
         name.find('/') == std::string_view::npos && !HasNul(name);
}

std::string JoinInts(const std::vector<int>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(values[i]);
  }
  return out;
}

Status ValidateHost(const SandboxHost& host) {
  for (const auto& [what, path] :
       {std::pair<const char*, const std::string&>{"bwrap path", host.bwrap_path},
        {"device dir", host.device_dir},
        {"work dir", host.work_dir},
        {"init path", host.init_path},
        {"caps dir", host.caps_dir}}) {
    if (!IsCleanAbsolutePath(path)) {
      return Error::InvalidArgument(std::string("sandbox ") + what +
                                    " must be an absolute path without '..': '" + path + "'");
    }
  }
  if (host.uid == 0 || host.gid == 0) {
    return Error::InvalidArgument("a workload never runs as root (uid and gid must not be 0)");
  }
  if (host.tmpfs_bytes <= 0) {
    return Error::InvalidArgument("the sandbox's /tmp and /dev/shm need a positive size");
  }
  if (host.report_fd < 3 || host.report_fd > 1023) {
    return Error::InvalidArgument("the init's report fd must be 3..1023");
  }
  for (const auto& device : host.control_devices) {
    if (!IsValidDeviceName(device)) {
      return Error::InvalidArgument("control device must be a file name in the device dir: '" +
                                    device + "'");
    }
  }
  for (const auto& system : host.system_paths) {
    if (!IsCleanAbsolutePath(system.path) || system.path == "/") {
      return Error::InvalidArgument("system path must be absolute, not '/', without '..': '" +
                                    system.path + "'");
    }
    for (std::string_view own : {"/proc", "/dev", "/tmp", kSandboxWorkDir}) {
      if (IsAtOrUnder(system.path, own)) {
        return Error::InvalidArgument("system path " + system.path + " is the sandbox's own (" +
                                      std::string(own) + ")");
      }
    }
    if (HasNul(system.symlink_target)) {
      return Error::InvalidArgument("symlink target of " + system.path + " has a NUL byte");
    }
  }
  return OkStatus();
}

// The device files of the grants, as names under the device dir
// ("nvidia2") and under the caps dir ("nvidia-cap21"), in bind order.
struct GrantDevices {
  std::vector<std::string> gpus;
  std::vector<std::string> caps;
};

Result<GrantDevices> DevicesOfGrants(const std::vector<GpuGrant>& gpus, const SandboxHost& host) {
  GrantDevices out;
  std::vector<int> indices;
  indices.reserve(gpus.size());
  for (const auto& gpu : gpus) indices.push_back(gpu.index);
  std::sort(indices.begin(), indices.end());
  for (int index : indices) out.gpus.push_back("nvidia" + std::to_string(index));
  if (!indices.empty()) {
    out.gpus.insert(out.gpus.end(), host.control_devices.begin(), host.control_devices.end());
  }
  for (const auto& gpu : gpus) {
    if (gpu.mig_profile.empty()) continue;
    if (gpu.mig_gi < 0 || gpu.mig_ci < 0) {
      return Error::InvalidArgument(
          "MIG grant " + gpu.mig_profile + "@" + std::to_string(gpu.mig_start) + " on GPU " +
          std::to_string(gpu.index) + ": its GPU and compute instance ids are not known");
    }
    for (const auto& cap : {MigGpuInstanceCap(gpu.index, gpu.mig_gi),
                            MigComputeInstanceCap(gpu.index, gpu.mig_gi, gpu.mig_ci)}) {
      auto minor = host.mig_minors.find(cap);
      if (minor == host.mig_minors.end()) {
        return Error::InvalidArgument("the driver lists no MIG capability device for " + cap);
      }
      out.caps.push_back("nvidia-cap" + std::to_string(minor->second));
    }
  }
  return out;
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

// CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES and what else tells the
// workload about its GPUs (see PlanSandbox in the header).
void AddDeviceEnvironment(const std::vector<GpuGrant>& gpus,
                          std::vector<std::pair<std::string, std::string>>& env) {
  env.emplace_back("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
  if (gpus.size() == 1 && !gpus.front().mig_profile.empty()) {
    const GpuGrant& mig = gpus.front();
    const std::string ids = std::to_string(mig.mig_gi) + "/" + std::to_string(mig.mig_ci);
    std::string name;
    if (!mig.mig_uuid.empty()) {
      name = mig.mig_uuid;
    } else if (!mig.gpu_uuid.empty()) {
      name = "MIG-" + mig.gpu_uuid + "/" + ids;
    }
    env.emplace_back("CUDA_VISIBLE_DEVICES", name.empty() ? "0" : name);
    env.emplace_back("NVIDIA_VISIBLE_DEVICES", name.empty() ? std::to_string(mig.index) : name);
    env.emplace_back("ATRIUM_MIG_DEVICE", std::to_string(mig.index) + "/" + ids);
    return;
  }
  // Only the granted device files exist in the sandbox, so CUDA enumerates
  // just those, from 0 in PCI order; NVIDIA_VISIBLE_DEVICES keeps the node's
  // own indices (what `atrium gpu list` and nvidia-smi on the host call them).
  std::vector<int> indices;
  indices.reserve(gpus.size());
  for (const auto& gpu : gpus) indices.push_back(gpu.index);
  std::sort(indices.begin(), indices.end());
  std::vector<int> cuda_ordinals;
  for (size_t i = 0; i < indices.size(); ++i) cuda_ordinals.push_back(static_cast<int>(i));
  env.emplace_back("CUDA_VISIBLE_DEVICES", JoinInts(cuda_ordinals));
  env.emplace_back("NVIDIA_VISIBLE_DEVICES", indices.empty() ? "void" : JoinInts(indices));
  if (gpus.size() == 1) {
    for (auto& entry : ShareEnvironment(gpus.front())) env.push_back(std::move(entry));
  }
}

}  // namespace

std::string MigGpuInstanceCap(int gpu, int gi) {
  return "gpu" + std::to_string(gpu) + "/gi" + std::to_string(gi) + "/access";
}

std::string MigComputeInstanceCap(int gpu, int gi, int ci) {
  return "gpu" + std::to_string(gpu) + "/gi" + std::to_string(gi) + "/ci" + std::to_string(ci) +
         "/access";
}

Result<std::map<std::string, int>> ParseMigMinors(std::string_view text) {
  std::map<std::string, int> out;
  size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    const std::string_view name = line.substr(0, space);
    const std::string_view number =
        space == std::string_view::npos ? std::string_view() : line.substr(space + 1);
    const bool name_ok =
        !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
          return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '/' || c == '-' ||
                 c == '_';
        });
    int minor = 0;
    bool number_ok = !number.empty() && number.size() <= 7;
    for (char c : number) {
      if (c < '0' || c > '9') {
        number_ok = false;
        break;
      }
      minor = minor * 10 + (c - '0');
    }
    if (!name_ok || !number_ok || minor > kMaxMinor) {
      return Error::InvalidArgument("mig-minors line " + std::to_string(line_no) +
                                    " is not '<name> <minor>'");
    }
    out[std::string(name)] = minor;
  }
  return out;
}

std::string MigMinorsTable(int gpus) {
  std::string out = "config 1\nmonitor 2\n";
  int minor = 3;
  for (int gpu = 0; gpu < gpus; ++gpu) {
    for (int gi = 0; gi <= kMaxMigGi; ++gi) {
      out += MigGpuInstanceCap(gpu, gi) + " " + std::to_string(minor++) + "\n";
      for (int ci = 0; ci <= kMaxMigCi; ++ci) {
        out += MigComputeInstanceCap(gpu, gi, ci) + " " + std::to_string(minor++) + "\n";
      }
    }
  }
  return out;
}

bool IsValidWorkloadId(std::string_view id) {
  if (id.empty() || id.size() > kMaxWorkloadIdBytes || id.front() == '.') return false;
  return std::all_of(id.begin(), id.end(), IsIdChar);
}

Status ValidateLaunchSpec(const LaunchSpec& spec) {
  if (!IsValidWorkloadId(spec.workload_id)) {
    return Error::InvalidArgument("workload id must be 1.." + std::to_string(kMaxWorkloadIdBytes) +
                                  " of [A-Za-z0-9_.-], not starting with '.'");
  }
  if (spec.script.empty() && (spec.argv.empty() || spec.argv.front().empty())) {
    return Error::InvalidArgument("a workload needs a command (argv) or a script");
  }
  if (spec.script.size() > kMaxScriptBytes) {
    return Error::InvalidArgument("script is larger than " + std::to_string(kMaxScriptBytes) +
                                  " bytes");
  }
  if (spec.argv.size() > kMaxArgs) {
    return Error::InvalidArgument("more than " + std::to_string(kMaxArgs) + " arguments");
  }
  size_t total = 0;
  for (size_t i = 0; i < spec.argv.size(); ++i) {
    const auto& arg = spec.argv[i];
    if (HasNul(arg))
      return Error::InvalidArgument("argument " + std::to_string(i) + " has a NUL byte");
    if (arg.size() > kMaxArgBytes) {
      return Error::InvalidArgument("argument " + std::to_string(i) + " is longer than " +
                                    std::to_string(kMaxArgBytes) + " bytes");
    }
    total += arg.size() + 1;
  }
  if (spec.env.size() > kMaxEnvVars) {
    return Error::InvalidArgument("more than " + std::to_string(kMaxEnvVars) +
                                  " environment variables");
  }
  std::set<std::string_view> names;
  for (const auto& [name, value] : spec.env) {
    if (!IsValidEnvName(name)) {
      return Error::InvalidArgument("environment name must be [A-Za-z_][A-Za-z0-9_]*, at most " +
                                    std::to_string(kMaxEnvNameBytes) + " bytes");
    }
    if (IsReservedEnvName(name)) {
      return Error::InvalidArgument("environment variable " + name + " is set by Atrium");
    }
    if (!names.insert(name).second) {
      return Error::InvalidArgument("environment variable " + name + " is given twice");
    }
    if (HasNul(value))
      return Error::InvalidArgument("environment value of " + name + " has a NUL byte");
    if (value.size() > kMaxEnvValueBytes) {
      return Error::InvalidArgument("environment value of " + name + " is longer than " +
                                    std::to_string(kMaxEnvValueBytes) + " bytes");
    }
    total += name.size() + value.size() + 2;
  }
  if (total > kMaxCommandBytes) {
    return Error::InvalidArgument("arguments and environment together exceed " +
                                  std::to_string(kMaxCommandBytes) + " bytes");
  }
  ATRIUM_RETURN_IF_ERROR(ValidateGpuGrants(spec.gpus));
  if (!spec.archive_path.empty() && !IsCleanAbsolutePath(spec.archive_path)) {
    return Error::InvalidArgument("archive_path must be an absolute path without '..'");
  }
  if (spec.read_only_binds.size() > 16) {
    return Error::InvalidArgument("at most 16 read_only_binds");
  }
  for (const auto& [inside, host_path] : spec.read_only_binds) {
    bool own = inside == "/";
    for (std::string_view dir : {"/proc", "/dev", "/tmp", kSandboxWorkDir, kSandboxInitPath}) {
      own = own || IsAtOrUnder(inside, dir) || IsAtOrUnder(dir, inside);
    }
    if (!IsCleanAbsolutePath(inside) || !IsCleanAbsolutePath(host_path) || own) {
      return Error::InvalidArgument(
          "read_only_binds: absolute paths without '..', never at or around /, /proc, /dev, "
          "/tmp or the working directory inside");
    }
  }
  if (!spec.root_fs.empty() && (!IsCleanAbsolutePath(spec.root_fs) || spec.root_fs == "/")) {
    return Error::InvalidArgument(
        "root_fs must be an absolute directory other than '/', without '..'");
  }
  if (spec.cpu_milli < 0 || spec.memory_mib < 0 || spec.pids_max < 0 || spec.time_limit_s < 0) {
    return Error::InvalidArgument("resource limits must not be negative");
  }
  // Bounds far beyond any machine, so that the shells' unit conversions
  // (MiB to bytes, s to ms, milli-CPUs to a CFS quota) cannot overflow.
  if (spec.memory_mib > kMaxMemoryMib || spec.cpu_milli > kMaxCpuMilli ||
      spec.pids_max > kMaxPids || spec.time_limit_s > kMaxTimeLimitS) {
    return Error::InvalidArgument("a resource limit is beyond what any node has");
  }
  return OkStatus();
}

Result<SandboxPlan> PlanSandbox(const LaunchSpec& spec, const SandboxHost& host) {
  ATRIUM_RETURN_IF_ERROR(ValidateLaunchSpec(spec));
  ATRIUM_RETURN_IF_ERROR(ValidateHost(host));

  SandboxPlan plan;
  auto& a = plan.argv;
  a = {host.bwrap_path, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts"};
  if (host.unshare_network && !spec.host_network) a.push_back("--unshare-net");
  a.insert(a.end(), {"--hostname", "workload"});

  if (!spec.root_fs.empty()) {
    a.insert(a.end(), {"--ro-bind", spec.root_fs, "/"});
  } else {
    for (const auto& system : host.system_paths) {
      if (system.symlink_target.empty()) {
        a.insert(a.end(), {"--ro-bind", system.path, system.path});
      } else {
        a.insert(a.end(), {"--symlink", system.symlink_target, system.path});
      }
    }
  }
  for (const auto& [inside, host_path] : spec.read_only_binds) {
    a.insert(a.end(), {"--ro-bind", host_path, inside});
  }
  // Both tmpfs are bounded (bubblewrap >= 0.5 knows --size): /dev/shm of
  // bubblewrap's /dev would otherwise be a writable tmpfs without a bound.
  const std::string tmpfs_size = std::to_string(host.tmpfs_bytes);
  a.insert(a.end(), {"--proc", "/proc", "--dev", "/dev", "--size", tmpfs_size, "--tmpfs",
                     "/dev/shm", "--size", tmpfs_size, "--tmpfs", "/tmp"});

  ATRIUM_ASSIGN_OR_RETURN(const GrantDevices devices, DevicesOfGrants(spec.gpus, host));
  for (size_t i = 0; i < devices.gpus.size(); ++i) {
    const auto& device = devices.gpus[i];
    const std::string source = JoinPath(host.device_dir, device);
    // The GPUs come first, then the control devices.
    const bool control = i >= spec.gpus.size();
    const char* bind =
        control && host.control_devices_may_be_absent ? "--dev-bind-try" : "--dev-bind";
    a.insert(a.end(), {bind, source, "/dev/" + device});
    plan.device_paths.push_back(source);
  }
  for (const auto& cap : devices.caps) {
    const std::string source = JoinPath(host.caps_dir, cap);
    a.insert(a.end(), {"--dev-bind", source, "/dev/nvidia-caps/" + cap});
    plan.device_paths.push_back(source);
  }

  a.insert(a.end(), {"--ro-bind", host.init_path, kSandboxInitPath});
  a.insert(a.end(), {"--bind", host.work_dir, kSandboxWorkDir, "--chdir", kSandboxWorkDir});
  // bubblewrap builds the root and /dev on tmpfs of no bound (the mount
  // points above live there): once everything is mounted both become
  // read-only, so that /, /etc or /dev/x are no scratch space outside the
  // workload's own (device nodes still open for writing on a read-only
  // mount). Not recursive: /work, /tmp and /dev/shm stay writable.
  a.insert(a.end(), {"--remount-ro", "/dev", "--remount-ro", "/"});
  a.insert(a.end(), {"--", kSandboxInitPath, "--report-fd", std::to_string(host.report_fd), "--"});
  if (!spec.script.empty()) {
    a.insert(a.end(), {"/bin/sh", std::string(kSandboxWorkDir) + "/" + kSandboxScriptName});
  }
  a.insert(a.end(), spec.argv.begin(), spec.argv.end());

  // The environment: the tenant's, defaults for what a shell expects, and
  // what Atrium says about the allocation (which the tenant cannot set).
  auto& env = plan.env;
  env = spec.env;
  const auto set_default = [&](const char* name, std::string value) {
    for (const auto& [n, v] : env) {
      if (n == name) return;
    }
    env.emplace_back(name, std::move(value));
  };
  set_default("PATH", std::string(kDefaultPath));
  set_default("HOME", kSandboxWorkDir);
  set_default("TMPDIR", "/tmp");
  env.emplace_back("ATRIUM_WORKLOAD_ID", spec.workload_id);
  env.emplace_back("ATRIUM_JOB_ID", spec.job_id);
  AddDeviceEnvironment(spec.gpus, env);
  return plan;
}

Result<SandboxPlan> PlanArchiveUnpacking(const LaunchSpec& spec, const SandboxHost& host,
                                         const std::string& archive_on_host) {
  ATRIUM_RETURN_IF_ERROR(ValidateLaunchSpec(spec));
  if (!IsCleanAbsolutePath(archive_on_host)) {
    return Error::InvalidArgument("the archive's copy must be an absolute path without '..'");
  }
  LaunchSpec unpack;
  unpack.workload_id = spec.workload_id;
  unpack.job_id = spec.job_id;
  unpack.argv = {"tar",
                 "--extract",
                 "--file",
                 kSandboxArchivePath,
                 "--directory",
                 kSandboxWorkDir,
                 "--no-same-owner",
                 "--no-same-permissions",
                 "--no-overwrite-dir"};
  ATRIUM_ASSIGN_OR_RETURN(SandboxPlan plan, PlanSandbox(unpack, host));
  auto remount = std::find(plan.argv.begin(), plan.argv.end(), "--remount-ro");
  plan.argv.insert(remount, {"--ro-bind", archive_on_host, kSandboxArchivePath});
  return plan;
}

}  // namespace atrium::exec
