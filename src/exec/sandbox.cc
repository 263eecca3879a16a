#include "exec/sandbox.h"

#include <algorithm>
#include <set>
#include <string_view>

namespace atrium::exec {
namespace {

constexpr std::string_view kDefaultPath =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

bool IsIdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-';
}

bool HasNul(std::string_view s) { return s.find('\0') != std::string_view::npos; }

// Absolute, at most PATH_MAX, no NUL and no ".." component: a path that
// means what it says, whatever the current directory.
bool IsCleanAbsolutePath(std::string_view p) {
  if (p.empty() || p.front() != '/' || p.size() > 4096 || HasNul(p)) return false;
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find('/', start);
    if (end == std::string_view::npos) end = p.size();
    if (p.substr(start, end - start) == "..") return false;
    start = end + 1;
  }
  return true;
}

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
bool IsReservedEnvName(std::string_view name) {
  return name == "CUDA_VISIBLE_DEVICES" || name == "NVIDIA_VISIBLE_DEVICES" ||
         name == "CUDA_DEVICE_ORDER" || name.substr(0, 7) == "ATRIUM_";
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
        {"init path", host.init_path}}) {
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

}  // namespace

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
  std::set<int> seen;
  for (const auto& gpu : spec.gpus) {
    if (gpu.index < 0 || gpu.index > kMaxGpuIndex) {
      return Error::InvalidArgument("GPU index " + std::to_string(gpu.index) + " is out of range");
    }
    if (!gpu.mig_profile.empty()) {
      return Error::InvalidArgument("the local backend cannot confine a MIG instance (" +
                                    gpu.mig_profile + "): it would expose the whole GPU " +
                                    std::to_string(gpu.index));
    }
    if (!seen.insert(gpu.index).second) {
      return Error::InvalidArgument("GPU " + std::to_string(gpu.index) + " is granted twice");
    }
  }
  if (!spec.archive_path.empty() && !IsCleanAbsolutePath(spec.archive_path)) {
    return Error::InvalidArgument("archive_path must be an absolute path without '..'");
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
  if (host.unshare_network) a.push_back("--unshare-net");
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
  // Both tmpfs are bounded (bubblewrap >= 0.5 knows --size): /dev/shm of
  // bubblewrap's /dev would otherwise be a writable tmpfs without a bound.
  const std::string tmpfs_size = std::to_string(host.tmpfs_bytes);
  a.insert(a.end(), {"--proc", "/proc", "--dev", "/dev", "--size", tmpfs_size, "--tmpfs",
                     "/dev/shm", "--size", tmpfs_size, "--tmpfs", "/tmp"});

  std::vector<int> indices;
  for (const auto& gpu : spec.gpus) indices.push_back(gpu.index);
  std::sort(indices.begin(), indices.end());
  std::vector<std::string> device_names;
  device_names.reserve(indices.size() + host.control_devices.size());
  for (int index : indices) device_names.push_back("nvidia" + std::to_string(index));
  if (!indices.empty()) {
    device_names.insert(device_names.end(), host.control_devices.begin(),
                        host.control_devices.end());
  }
  for (const auto& device : device_names) {
    std::string source = host.device_dir;
    if (source.back() != '/') source += '/';
    source += device;
    a.insert(a.end(), {"--dev-bind", source, "/dev/" + device});
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
  // Only the granted device files exist in the sandbox, so CUDA enumerates
  // just those, from 0 in PCI order; NVIDIA_VISIBLE_DEVICES keeps the node's
  // own indices (what `atrium gpu list` and nvidia-smi on the host call them).
  std::vector<int> cuda_ordinals;
  for (size_t i = 0; i < indices.size(); ++i) cuda_ordinals.push_back(static_cast<int>(i));
  env.emplace_back("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
  env.emplace_back("CUDA_VISIBLE_DEVICES", JoinInts(cuda_ordinals));
  env.emplace_back("NVIDIA_VISIBLE_DEVICES", indices.empty() ? "void" : JoinInts(indices));
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
