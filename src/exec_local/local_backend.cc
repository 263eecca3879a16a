#include "exec_local/local_backend.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iterator>
#include <optional>

#include "common/atomic_file.h"
#include "common/remove_tree.h"
#include "exec_local/cgroups.h"
#include "exec_local/workload_files.h"

namespace atrium::exec_local {
namespace {

using exec::LaunchSpec;
using exec::WorkloadPhase;
using exec::WorkloadStatus;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string OsError(const std::string& step, const std::string& path) {
  return "cannot " + step + " " + path + ": " + std::strerror(errno);
}

bool Exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

// Removes a tree without following symbolic links (a workload's directory
// may hold links to anywhere); callers check what is left.
void RemoveTree(const std::string& path) { (void)RemoveTreeNoFollow(path); }

Status MakeDir(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST)
    return Error::Unavailable(OsError("create", path));
  if (::chmod(path.c_str(), mode) != 0) return Error::Unavailable(OsError("chmod", path));
  return OkStatus();
}

// bubblewrap binds the workload's directory, the init and the device files
// as the workload's uid: every folder on the way to `path` (and `path`
// itself when `self` is set) must let others search it.
Status CheckSearchableByOthers(const std::string& path, bool self, const char* what) {
  size_t end = self ? path.size() : path.rfind('/');
  for (size_t at = 1; at <= end && end != std::string::npos;) {
    size_t next = path.find('/', at);
    if (next == std::string::npos || next > end) next = end;
    const std::string prefix = path.substr(0, next);
    struct stat st {};
    if (::stat(prefix.c_str(), &st) != 0) break;  // created later, 0711
    if ((st.st_mode & S_IXOTH) == 0) {
      std::string message = what;
      message += " " + path + " is out of the workloads' reach: ";
      message += prefix;
      message += " does not let others search it (chmod o+x)";
      return Error::InvalidArgument(std::move(message));
    }
    at = next + 1;
  }
  return OkStatus();
}

// Runs argv as `uid`/`gid` with stdio on /dev/null; its exit status, or -1.
int RunAs(const std::vector<std::string>& argv, uint32_t uid, uint32_t gid) {
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    const int null = ::open("/dev/null", O_RDWR);
    ::dup2(null, 0);
    ::dup2(null, 1);
    ::dup2(null, 2);
    if (::setgroups(0, nullptr) != 0 || ::setgid(gid) != 0 || ::setuid(uid) != 0) ::_exit(126);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Starts the supervisor detached (its own session, reparented away from
// the control plane) and waits until it has written its record: it writes
// one byte on the ready pipe then, or closes it unwritten when it fails.
Status SpawnSupervisor(const std::string& supervisor_path, const std::string& record_dir) {
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0)
    return Error::Unavailable(OsError("create a pipe for", record_dir));
  const std::string err_path = record_dir + "/supervisor.err";
  const char* argv[] = {supervisor_path.c_str(), record_dir.c_str(), "3", nullptr};
  const char* env[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", nullptr};
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(ready[0]);
    ::close(ready[1]);
    return Error::Unavailable(OsError("fork for", record_dir));
  }
  if (pid == 0) {
    // Only async-signal-safe calls from here: the control plane has threads.
    ::setsid();
    if (::fork() != 0) ::_exit(0);
    const int null = ::open("/dev/null", O_RDWR);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, 0600);
    ::dup2(null, 0);
    ::dup2(null, 1);
    ::dup2(err >= 0 ? err : null, 2);
    ::dup2(ready[1], 3);
    ::close_range(4, ~0U, 0);
    // Nothing of the control plane's environment (its database URL, say).
    ::execve(argv[0], const_cast<char* const*>(argv), const_cast<char* const*>(env));
    ::_exit(127);
  }
  ::close(ready[1]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  char byte = 0;
  ssize_t n = 0;
  do {
    n = ::read(ready[0], &byte, 1);
  } while (n < 0 && errno == EINTR);
  ::close(ready[0]);
  if (n != 1) {
    auto err = ReadSmallFile(err_path);
    return Error::Unavailable("the workload supervisor did not start" +
                              (err.has_value() && !err->empty() ? ": " + *err : std::string()));
  }
  return OkStatus();
}

// The pids of live processes (not zombies) any of whose uids is `uid`.
std::vector<int> LiveProcessesOf(uint32_t uid) {
  std::vector<int> pids;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return pids;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    auto status = ReadSmallFile(std::string("/proc/") + e->d_name + "/status");
    if (!status.has_value()) continue;  // it ended meanwhile
    const size_t state = status->find("\nState:\t");
    if (state != std::string::npos) {
      const char code = status->c_str()[state + 8];
      if (code == 'Z' || code == 'X') continue;
    }
    const size_t line = status->find("\nUid:\t");
    if (line == std::string::npos) continue;
    unsigned long ids[4] = {0, 0, 0, 0};
    if (std::sscanf(status->c_str() + line + 6, "%lu %lu %lu %lu", &ids[0], &ids[1], &ids[2],
                    &ids[3]) != 4) {
      continue;
    }
    if (std::find(std::begin(ids), std::end(ids), uid) != std::end(ids))
      pids.push_back(std::atoi(e->d_name));
  }
  ::closedir(d);
  return pids;
}

// SIGKILLs every process whose real or saved uid is `uid` with kill(-1)
// from a child that became that uid: the kernel walks every process (in
// any pid namespace) under one lock, so none escapes by forking. 0: there
// was none; 1: some were signalled; 2: the kill could not be tried.
int KillEveryProcessOf(uint32_t uid) {
  const pid_t pid = ::fork();
  if (pid < 0) return 2;
  if (pid == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(uid) != 0 || ::setuid(uid) != 0) ::_exit(2);
    if (::kill(-1, SIGKILL) == 0) ::_exit(1);
    ::_exit(errno == ESRCH ? 0 : 2);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return 2;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 2;
}

// Ok once no live process of `uid` is left; zombies (whose parent has not
// reaped them yet) hold nothing and do not count.
Status EndEveryProcessOf(uint32_t uid) {
  for (int round = 0; round < 100; ++round) {
    const int killed = KillEveryProcessOf(uid);
    if (killed == 0) return OkStatus();
    if (killed == 2)
      return Error::Unavailable("cannot signal the processes of uid " + std::to_string(uid));
    ::usleep(10'000);
    if (round >= 5 && LiveProcessesOf(uid).empty()) return OkStatus();
  }
  std::string left;
  for (int pid : LiveProcessesOf(uid)) left += " " + std::to_string(pid);
  return Error::Unavailable("processes of workload uid " + std::to_string(uid) +
                            " are still alive (" + (left.empty() ? " ?" : left) +
                            " ): it stays held");
}

}  // namespace

Result<std::unique_ptr<LocalBackend>> LocalBackend::Create(LocalBackendOptions options) {
  for (const auto* path : {&options.state_dir, &options.supervisor_path, &options.sandbox_init_path,
                           &options.bwrap_path, &options.device_dir, &options.cgroup_root}) {
    if (path->empty() || path->front() != '/') {
      return Error::InvalidArgument("local backend paths must be absolute: '" + *path + "'");
    }
  }
  if (options.uid_base == 0 || options.uid_count == 0 ||
      static_cast<uint64_t>(options.uid_base) + options.uid_count > 0xFFFFFFFEull) {
    return Error::InvalidArgument("the workload uid range must be non-empty and exclude root");
  }
  if (options.log_max_bytes < 2 || options.default_pids_max <= 0 ||
      options.default_pids_max > exec::kMaxPids) {
    return Error::InvalidArgument("log_max_bytes and default_pids_max must be positive");
  }
  constexpr int64_t kMaxMib = int64_t{1} << 30;  // MiB to bytes cannot overflow
  if (options.default_memory_mib <= 0 || options.default_memory_mib > kMaxMib ||
      options.tmpfs_mib <= 0 || options.tmpfs_mib > kMaxMib || options.max_file_mib < 0 ||
      options.max_file_mib > kMaxMib) {
    return Error::InvalidArgument(
        "default_memory_mib and tmpfs_mib must be positive, max_file_mib not negative");
  }
  if (options.log_retention_s < 0 || options.log_retention_s > exec::kMaxTimeLimitS) {
    return Error::InvalidArgument("log_retention_s must be 0 (keep) or a number of seconds");
  }
  if (options.cgroup_parent.empty() || !exec::IsValidWorkloadId(options.cgroup_parent)) {
    return Error::InvalidArgument("cgroup_parent must be one plain folder name");
  }
  ATRIUM_RETURN_IF_ERROR(CheckSearchableByOthers(options.state_dir, false, "state dir"));
  ATRIUM_RETURN_IF_ERROR(CheckSearchableByOthers(options.sandbox_init_path, true, "sandbox init"));
  ATRIUM_RETURN_IF_ERROR(CheckSearchableByOthers(options.device_dir, true, "device dir"));
  // 0711: a workload's uid must traverse to its own directory (bubblewrap
  // binds it as that user) but may list nothing on the way.
  ATRIUM_RETURN_IF_ERROR(MakeDir(options.state_dir, 0711));
  ATRIUM_RETURN_IF_ERROR(MakeDir(options.state_dir + "/workloads", 0711));
  ATRIUM_RETURN_IF_ERROR(MakeDir(options.state_dir + "/" + kEndedDirName, 0700));
  return std::unique_ptr<LocalBackend>(new LocalBackend(std::move(options)));
}

Status LocalBackend::WatchEnds(const exec::EndHint& hint) { return ends_.Start(hint); }

void LocalBackend::StopWatchingEnds() { ends_.Stop(); }

LocalBackend::LocalBackend(LocalBackendOptions options)
    : options_(std::move(options)),
      workloads_dir_(options_.state_dir + "/workloads"),
      // inotify sees every marker at once; the scan is only a safety net.
      ends_(options_.state_dir + "/" + kEndedDirName, /*scan_ms=*/1000) {}

std::string LocalBackend::RecordDirOf(const std::string& workload_id) const {
  return workloads_dir_ + "/" + workload_id;
}

std::string LocalBackend::WorkDirOf(const std::string& workload_id) const {
  return RecordDirOf(workload_id) + "/" + kWorkDirName;
}

std::vector<exec::HostPath> LocalBackend::SystemPaths() const {
  std::vector<exec::HostPath> out;
  for (const char* path :
       {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/ld.so.cache",
        "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime",
        "/etc/nsswitch.conf", "/etc/hosts", "/etc/ssl/certs"}) {
    struct stat st {};
    if (::lstat(path, &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      char target[4096];
      const ssize_t n = ::readlink(path, target, sizeof target - 1);
      if (n <= 0) continue;
      out.push_back({path, std::string(target, static_cast<size_t>(n))});
    } else {
      out.push_back({path, ""});
    }
  }
  return out;
}

// Bubblewrap with every namespace the plan asks for, as an unprivileged
// uid: a host that refuses it gets no workload at all (never one with less).
Status LocalBackend::ProbeSandboxLocked() {
  if (sandbox_probe_.has_value()) return *sandbox_probe_;
  std::vector<std::string> argv = {options_.bwrap_path, "--die-with-parent", "--unshare-pid",
                                   "--unshare-ipc",     "--unshare-uts",     "--unshare-net"};
  for (const auto& system : SystemPaths()) {
    if (system.symlink_target.empty()) {
      argv.insert(argv.end(), {"--ro-bind", system.path, system.path});
    } else {
      argv.insert(argv.end(), {"--symlink", system.symlink_target, system.path});
    }
  }
  // As the plans mount them: a bubblewrap without --size fails here.
  const std::string tmpfs_size = std::to_string(options_.tmpfs_mib * 1024 * 1024);
  argv.insert(argv.end(),
              {"--proc", "/proc", "--dev", "/dev", "--size", tmpfs_size, "--tmpfs", "/dev/shm",
               "--size", tmpfs_size, "--tmpfs", "/tmp", "--remount-ro", "/dev", "--", "/bin/true"});
  const int rc = RunAs(argv, options_.uid_base, options_.uid_base);
  if (rc == 0) {
    sandbox_probe_ = OkStatus();
  } else {
    sandbox_probe_ = Status(Error::FailedPrecondition(
        "this host refuses the workload sandbox (" + options_.bwrap_path +
        " with pid/ipc/uts/net namespaces and sized tmpfs as an unprivileged user exited " +
        std::to_string(rc) + "): no workload is started without it"));
  }
  return *sandbox_probe_;
}

Result<uint32_t> LocalBackend::AllocateUidLocked() {
  if (!uids_in_use_.has_value()) {
    uids_in_use_.emplace();
    if (DIR* d = ::opendir(workloads_dir_.c_str())) {
      while (dirent* e = ::readdir(d)) {
        if (e->d_name[0] == '.') continue;
        // A released workload's uid owns nothing any more.
        if (Exists(workloads_dir_ + "/" + e->d_name + "/" + kReleasedFile)) continue;
        auto text = ReadSmallFile(workloads_dir_ + "/" + e->d_name + "/" + kLaunchFile);
        if (!text.has_value()) continue;
        if (auto launch = DecodeLaunch(*text); launch.has_value())
          uids_in_use_->insert(launch->uid);
      }
      ::closedir(d);
    }
  }
  for (uint32_t i = 0; i < options_.uid_count; ++i) {
    const uint32_t uid = options_.uid_base + i;
    // The probe's uid is the first one; it never holds files.
    if (i == 0) continue;
    if (!uids_in_use_->count(uid)) {
      uids_in_use_->insert(uid);
      return uid;
    }
  }
  return Error::ResourceExhausted("every workload uid in the local backend's range is in use", 60);
}

Status MakeSimulatedMigDevices(const std::string& caps_dir, const std::string& minors_path,
                               int gpus) {
  const std::string table = exec::MigMinorsTable(gpus);
  ATRIUM_ASSIGN_OR_RETURN(const auto minors, exec::ParseMigMinors(table));
  std::error_code ec;
  std::filesystem::create_directories(caps_dir, ec);
  if (ec) return Error::Unavailable("cannot create " + caps_dir + ": " + ec.message());
  ::chmod(caps_dir.c_str(), 0755);
  for (const auto& [name, number] : minors) {
    // config and monitor create and watch instances: no workload gets them.
    if (name == "config" || name == "monitor") continue;
    const std::string path = caps_dir + "/nvidia-cap" + std::to_string(number);
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) {
      if (S_ISCHR(st.st_mode) && major(st.st_rdev) == kSimulatedMigCapMajor &&
          static_cast<int>(minor(st.st_rdev)) == number) {
        continue;
      }
      return Error::FailedPrecondition(path + " exists and is not a simulated MIG capability");
    }
    // 0444, as the driver makes them (r--r--r--: access is by opening).
    if (::mknod(path.c_str(), S_IFCHR | 0444,
                makedev(kSimulatedMigCapMajor, static_cast<unsigned>(number))) != 0) {
      return Error::FailedPrecondition("cannot make the simulated MIG capability " + path +
                                       " (mknod needs root): " + std::strerror(errno));
    }
    ::chmod(path.c_str(), 0444);
  }
  return ReplaceFileAtomically(minors_path, table, 0644);
}

Result<exec::GpuGrant> SimulatedMigInstance(const exec::GpuGrant& grant) {
  if (grant.mig_profile.empty() || grant.mig_start < 0) {
    return Error::InvalidArgument("not a MIG grant: no profile or start slot");
  }
  exec::GpuGrant out = grant;
  out.mig_gi = grant.mig_start;
  out.mig_ci = 0;
  return out;
}

Result<LaunchSpec> LocalBackend::ResolveMig(const LaunchSpec& spec, exec::SandboxHost& host) const {
  LaunchSpec resolved = spec;
  bool any = false;
  for (auto& gpu : resolved.gpus) {
    if (gpu.mig_profile.empty()) continue;
    any = true;
    if (gpu.mig_gi >= 0 && gpu.mig_ci >= 0) continue;
    if (!options_.resolve_mig) {
      return Error::FailedPrecondition(
          "this node cannot tell which GPU instance holds MIG " + gpu.mig_profile + "@" +
          std::to_string(gpu.mig_start) + " on GPU " + std::to_string(gpu.index) +
          " (no MIG layout is known here); the workload is not started");
    }
    ATRIUM_ASSIGN_OR_RETURN(exec::GpuGrant found, options_.resolve_mig(gpu));
    if (found.index != gpu.index || found.mig_profile != gpu.mig_profile ||
        found.mig_start != gpu.mig_start || found.mig_gi < 0 || found.mig_ci < 0) {
      return Error::Internal("the MIG layout answered for another instance than " +
                             gpu.mig_profile + "@" + std::to_string(gpu.mig_start));
    }
    gpu = std::move(found);
  }
  if (!any) return resolved;
  ATRIUM_RETURN_IF_ERROR(
      CheckSearchableByOthers(options_.mig_caps_dir, true, "MIG capability dir"));
  auto table = ReadSmallFile(options_.mig_minors_path);
  if (!table.has_value()) {
    return Error::FailedPrecondition("MIG is not usable on this node: " + table.error().message);
  }
  ATRIUM_ASSIGN_OR_RETURN(host.mig_minors, exec::ParseMigMinors(*table));
  host.caps_dir = options_.mig_caps_dir;
  return resolved;
}

Result<WorkloadStatus> LocalBackend::Start(const LaunchSpec& requested) {
  ATRIUM_RETURN_IF_ERROR(exec::ValidateLaunchSpec(requested));
  std::lock_guard lock(mu_);
  const std::string record_dir = RecordDirOf(requested.workload_id);
  if (Exists(record_dir)) return InspectLocked(requested.workload_id);
  ATRIUM_RETURN_IF_ERROR(ProbeSandboxLocked());
  exec::SandboxHost host;
  ATRIUM_ASSIGN_OR_RETURN(const LaunchSpec spec, ResolveMig(requested, host));
  ATRIUM_RETURN_IF_ERROR(exec::ValidateLaunchSpec(spec));

  ATRIUM_ASSIGN_OR_RETURN(const uint32_t uid, AllocateUidLocked());
  bool keep_uid = false;
  const std::string staging = workloads_dir_ + "/.staging-" + spec.workload_id;
  std::vector<std::string> cgroup_dirs;
  // Undoes what a failed start left behind.
  struct Cleanup {
    std::function<void()> run;
    ~Cleanup() { run(); }
  } cleanup{[&] {
    if (keep_uid) return;
    RemoveTree(staging);
    RemoveWorkloadCgroups(cgroup_dirs);
    uids_in_use_->erase(uid);
  }};

  RemoveTree(staging);  // a start that crashed half-way
  ATRIUM_RETURN_IF_ERROR(MakeDir(staging, 0711));
  const std::string staging_work = staging + "/" + kWorkDirName;
  ATRIUM_RETURN_IF_ERROR(MakeDir(staging_work, 0700));
  if (::chown(staging_work.c_str(), uid, uid) != 0)
    return Error::Unavailable(OsError("chown", staging_work));
  if (!spec.script.empty()) {
    const std::string script = staging_work + "/" + exec::kSandboxScriptName;
    ATRIUM_RETURN_IF_ERROR(ReplaceFileAtomically(script, spec.script, 0600));
    if (::chown(script.c_str(), uid, uid) != 0) return Error::Unavailable(OsError("chown", script));
  }

  host.bwrap_path = options_.bwrap_path;
  host.device_dir = options_.device_dir;
  for (const auto& device : options_.control_devices) {
    if (Exists(options_.device_dir + "/" + device)) host.control_devices.push_back(device);
  }
  host.work_dir = WorkDirOf(spec.workload_id);
  host.init_path = options_.sandbox_init_path;
  host.system_paths = SystemPaths();
  host.uid = uid;
  host.gid = uid;
  host.tmpfs_bytes = options_.tmpfs_mib * 1024 * 1024;
  ATRIUM_ASSIGN_OR_RETURN(exec::SandboxPlan plan, exec::PlanSandbox(spec, host));
  std::optional<exec::SandboxPlan> unpack;
  if (!spec.archive_path.empty()) {
    // A copy the workload's uid may read, unpacked by tar in its sandbox.
    struct stat st {};
    if (::lstat(spec.archive_path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return Error::FailedPrecondition("the job's archive " + spec.archive_path +
                                       " is not a regular file");
    }
    const std::string copy = staging + "/archive";
    std::error_code error;
    std::filesystem::copy_file(spec.archive_path, copy, error);
    if (error || ::chown(copy.c_str(), uid, uid) != 0 || ::chmod(copy.c_str(), 0400) != 0) {
      return Error::Unavailable("cannot copy the job's archive " + spec.archive_path +
                                " for the workload");
    }
    ATRIUM_ASSIGN_OR_RETURN(unpack,
                            exec::PlanArchiveUnpacking(spec, host, record_dir + "/archive"));
  }

  // The devices cgroup allows the standard nodes bubblewrap binds, the
  // pseudo-terminals, and exactly the granted device files.
  CgroupLimits limits;
  // Every workload has a memory limit: the job's, else the default.
  const int64_t memory_mib = spec.memory_mib > 0 ? spec.memory_mib : options_.default_memory_mib;
  limits.memory_bytes = memory_mib * 1024 * 1024;
  limits.cpu_milli = spec.cpu_milli;
  limits.pids_max = spec.pids_max > 0 ? spec.pids_max : options_.default_pids_max;
  limits.device_rules = {"c 1:3 rwm", "c 1:5 rwm", "c 1:7 rwm", "c 1:8 rwm",
                         "c 1:9 rwm", "c 5:0 rwm", "c 5:2 rwm", "c 136:* rwm"};
  for (const auto& path : plan.device_paths) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) {
      return Error::FailedPrecondition("GPU device " + path +
                                       " is not a character device on this node");
    }
    limits.device_rules.push_back("c " + std::to_string(major(st.st_rdev)) + ":" +
                                  std::to_string(minor(st.st_rdev)) + " rw");
  }
  CgroupSetup cgroups =
      CreateWorkloadCgroups(options_.cgroup_root, options_.cgroup_parent, spec.workload_id, limits);
  cgroup_dirs = cgroups.dirs;
  for (const auto& gpu : spec.gpus) {
    if (gpu.share_milli > 0 || gpu.memory_cap_mib > 0) {
      // A time-sliced share: the MPS limits in its environment bind only
      // where an MPS server serves the sandbox, and none does here.
      cgroups.not_enforced.push_back(
          "GPU share limits (a time-sliced share's compute and memory are not capped: no MPS "
          "server serves the sandbox)");
      break;
    }
  }
  std::string not_enforced;
  for (const auto& what : cgroups.not_enforced)
    not_enforced += (not_enforced.empty() ? "" : "; ") + what;
  if (!not_enforced.empty() &&
      (options_.require_full_confinement || spec.require_full_confinement)) {
    return Error::FailedPrecondition(
        "full confinement is required but this host does not enforce: " + not_enforced);
  }

  LaunchRecord launch;
  launch.argv = plan.argv;
  launch.env = plan.env;
  launch.uid = uid;
  launch.gid = uid;
  launch.cgroup_dirs = cgroups.dirs;
  launch.log_max_bytes = options_.log_max_bytes;
  for (const auto& gpu : spec.gpus) launch.gpus.push_back(gpu.index);
  std::sort(launch.gpus.begin(), launch.gpus.end());
  launch.tenant_id = spec.tenant_id;
  launch.not_enforced = not_enforced;
  launch.created_ms = NowMs();
  launch.time_limit_ms = spec.time_limit_s * 1000;
  // The workload's uid is its own: RLIMIT_NPROC caps its processes even
  // where no pids cgroup does. Address space only where no memory cgroup
  // bounds it and no GPU is given (CUDA reserves far more than it uses).
  launch.rlimit_nproc = limits.pids_max;
  launch.rlimit_as = !cgroups.memory_limited && spec.gpus.empty() ? limits.memory_bytes : 0;
  launch.rlimit_fsize = options_.max_file_mib * 1024 * 1024;
  if (unpack.has_value()) {
    launch.unpack_argv = unpack->argv;
    launch.unpack_env = unpack->env;
  }
  ATRIUM_RETURN_IF_ERROR(
      ReplaceFileAtomically(staging + "/" + kLaunchFile, EncodeLaunch(launch), 0600));
  if (::rename(staging.c_str(), record_dir.c_str()) != 0) {
    return Error::Unavailable(OsError("rename into place", record_dir));
  }
  keep_uid = true;  // from here the record dir owns the uid and the cgroups

  if (auto spawned = SpawnSupervisor(options_.supervisor_path, record_dir); !spawned.has_value()) {
    ExitRecord failed;
    failed.ended_ms = NowMs();
    failed.detail = spawned.error().message;
    (void)ReplaceFileAtomically(record_dir + "/" + kExitFile, EncodeExit(failed), 0600);
    RemoveWorkloadCgroups(cgroups.dirs);
    return spawned.error();
  }
  return InspectLocked(spec.workload_id);
}

Result<WorkloadStatus> LocalBackend::Inspect(const std::string& workload_id) {
  std::lock_guard lock(mu_);
  return InspectLocked(workload_id);
}

Result<WorkloadStatus> LocalBackend::InspectLocked(const std::string& workload_id) {
  if (!exec::IsValidWorkloadId(workload_id)) return Error::NotFound("no workload " + workload_id);
  const std::string dir = RecordDirOf(workload_id);
  if (!Exists(dir)) return Error::NotFound("no workload " + workload_id);
  WorkloadStatus status;
  status.workload_id = workload_id;
  auto launch_text = ReadSmallFile(dir + "/" + kLaunchFile);
  if (!launch_text.has_value()) {
    status.phase = WorkloadPhase::kLost;
    status.detail = "its launch record is missing";
    return status;
  }
  ATRIUM_ASSIGN_OR_RETURN(LaunchRecord launch, DecodeLaunch(*launch_text));
  status.gpus = launch.gpus;
  if (!launch.not_enforced.empty()) status.detail = "not enforced: " + launch.not_enforced;
  const auto add_detail = [&](const std::string& more) {
    if (!more.empty()) status.detail = status.detail.empty() ? more : more + "; " + status.detail;
  };

  std::optional<SupervisorRecord> supervisor;
  if (auto text = ReadSmallFile(dir + "/" + kSupervisorFile); text.has_value()) {
    ATRIUM_ASSIGN_OR_RETURN(supervisor, DecodeSupervisor(*text));
    status.backend_ref = std::to_string(supervisor->pid);
    status.started_ms = supervisor->started_ms;
  }
  const auto read_exit = [&]() -> bool {
    auto text = ReadSmallFile(dir + "/" + kExitFile);
    if (!text.has_value()) return false;
    auto exit = DecodeExit(*text);
    if (!exit.has_value()) return false;
    status.phase = WorkloadPhase::kExited;
    status.exit_code = exit->exit_code;
    status.signal = exit->signal;
    status.ended_ms = exit->ended_ms;
    add_detail(exit->detail);
    return true;
  };
  if (read_exit()) return status;
  if (!supervisor.has_value()) {
    status.phase = WorkloadPhase::kLost;
    add_detail("its supervisor never started");
    return status;
  }
  if (SupervisorAlive(*supervisor)) {
    status.phase = WorkloadPhase::kRunning;
    return status;
  }
  if (read_exit()) return status;  // it ended between the two reads
  status.phase = WorkloadPhase::kLost;
  add_detail("its supervisor (pid " + std::to_string(supervisor->pid) +
             ") is gone and left no exit record");
  return status;
}

Result<std::vector<WorkloadStatus>> LocalBackend::List() {
  std::lock_guard lock(mu_);
  std::vector<std::string> ids;
  DIR* d = ::opendir(workloads_dir_.c_str());
  if (d == nullptr) return Error::Unavailable(OsError("list", workloads_dir_));
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ids.emplace_back(e->d_name);
  }
  ::closedir(d);
  std::sort(ids.begin(), ids.end());
  std::vector<WorkloadStatus> out;
  for (const auto& id : ids) {
    auto status = InspectLocked(id);
    if (status.has_value()) out.push_back(std::move(*status));
  }
  return out;
}

Status LocalBackend::Stop(const std::string& workload_id, int64_t grace_ms) {
  if (grace_ms < 0) return Error::InvalidArgument("grace must not be negative");
  std::lock_guard lock(mu_);
  ATRIUM_ASSIGN_OR_RETURN(WorkloadStatus status, InspectLocked(workload_id));
  if (status.phase != WorkloadPhase::kRunning) return OkStatus();
  const std::string dir = RecordDirOf(workload_id);
  ATRIUM_RETURN_IF_ERROR(ReplaceFileAtomically(dir + "/" + kStopFile, EncodeStop(grace_ms), 0600));
  auto text = ReadSmallFile(dir + "/" + kSupervisorFile);
  if (!text.has_value()) return OkStatus();
  ATRIUM_ASSIGN_OR_RETURN(SupervisorRecord supervisor, DecodeSupervisor(*text));
  // Checked just before the signal: a reused pid is never signalled.
  if (SupervisorAlive(supervisor)) ::kill(supervisor.pid, SIGTERM);
  return OkStatus();
}

Result<exec::LogChunk> LocalBackend::ReadLog(const std::string& workload_id, int64_t offset,
                                             int64_t max_bytes) {
  std::lock_guard lock(mu_);
  ATRIUM_ASSIGN_OR_RETURN(WorkloadStatus status, InspectLocked(workload_id));
  auto launch_text = ReadSmallFile(RecordDirOf(workload_id) + "/" + kLaunchFile);
  int64_t log_max = options_.log_max_bytes;
  if (launch_text.has_value()) {
    if (auto launch = DecodeLaunch(*launch_text); launch.has_value())
      log_max = launch->log_max_bytes;
  }
  const bool ended = status.phase == WorkloadPhase::kExited || status.phase == WorkloadPhase::kLost;
  return ReadLogSegments(RecordDirOf(workload_id), log_max, offset, max_bytes, ended);
}

Status LocalBackend::Forget(const std::string& workload_id) {
  std::lock_guard lock(mu_);
  ATRIUM_ASSIGN_OR_RETURN(WorkloadStatus status, InspectLocked(workload_id));
  if (status.phase == WorkloadPhase::kRunning || status.phase == WorkloadPhase::kStarting) {
    return Error::FailedPrecondition("workload " + workload_id +
                                     " is still running: stop it first");
  }
  ATRIUM_RETURN_IF_ERROR(ReleaseLocked(workload_id));
  RemoveRecordLocked(workload_id);
  return OkStatus();
}

Status LocalBackend::Release(const std::string& workload_id) {
  std::lock_guard lock(mu_);
  ATRIUM_ASSIGN_OR_RETURN(WorkloadStatus status, InspectLocked(workload_id));
  if (status.phase == WorkloadPhase::kRunning || status.phase == WorkloadPhase::kStarting) {
    return Error::FailedPrecondition("workload " + workload_id + " is still running");
  }
  ATRIUM_RETURN_IF_ERROR(ReleaseLocked(workload_id));
  PruneExpiredLocked();
  return OkStatus();
}

Status LocalBackend::ReleaseLocked(const std::string& workload_id) {
  const std::string dir = RecordDirOf(workload_id);
  if (Exists(dir + "/" + kReleasedFile)) return OkStatus();
  std::optional<LaunchRecord> launch;
  if (auto text = ReadSmallFile(dir + "/" + kLaunchFile); text.has_value()) {
    if (auto decoded = DecodeLaunch(*text); decoded.has_value()) launch = std::move(*decoded);
  }
  if (launch.has_value()) {
    // The supervisor removed the cgroups when the sandbox ended, unless it
    // died first; whatever of the uid is left (a process that escaped the
    // cgroups, say) ends here.
    RemoveWorkloadCgroups(launch->cgroup_dirs);
    ATRIUM_RETURN_IF_ERROR(EndEveryProcessOf(launch->uid));
  }
  // The only host paths a workload can write are its directory (and the
  // archive copy made for it): /tmp and /dev/shm were tmpfs of its mount
  // namespace and SysV/POSIX IPC lived in its ipc namespace, all gone with
  // its last process. With nothing of the uid left, it may be reused.
  const std::string work = WorkDirOf(workload_id);
  RemoveTree(work);
  RemoveTree(dir + "/archive");
  if (Exists(work)) return Error::Unavailable("cannot remove " + work + ": its uid stays held");
  if (launch.has_value()) {
    if (DIR* d = ::opendir(dir.c_str())) {
      std::vector<std::string> owned;
      while (dirent* e = ::readdir(d)) {
        struct stat st {};
        const std::string path = dir + "/" + e->d_name;
        if (e->d_name[0] == '.' && (e->d_name[1] == '\0' || std::strcmp(e->d_name, "..") == 0))
          continue;
        if (::lstat(path.c_str(), &st) == 0 && st.st_uid == launch->uid) owned.push_back(path);
      }
      ::closedir(d);
      for (const auto& path : owned) RemoveTree(path);
      for (const auto& path : owned) {
        if (Exists(path))
          return Error::Unavailable("cannot remove " + path + ": its uid stays held");
      }
    }
  }
  ATRIUM_RETURN_IF_ERROR(
      ReplaceFileAtomically(dir + "/" + kReleasedFile, EncodeReleased(NowMs()), 0600));
  if (launch.has_value() && uids_in_use_.has_value()) uids_in_use_->erase(launch->uid);
  return OkStatus();
}

void LocalBackend::RemoveRecordLocked(const std::string& workload_id) {
  // Out of List's sight first, so a crash mid-delete leaves no half workload.
  const std::string dir = RecordDirOf(workload_id);
  const std::string doomed = workloads_dir_ + "/.forgotten-" + workload_id;
  RemoveTree(doomed);
  if (::rename(dir.c_str(), doomed.c_str()) == 0) RemoveTree(doomed);
}

void LocalBackend::PruneExpiredLocked() {
  if (options_.log_retention_s <= 0) return;
  const int64_t now = NowMs();
  const int64_t retention_ms = options_.log_retention_s * 1000;
  if (now - last_prune_ms_ < std::min<int64_t>(retention_ms, 3'600'000)) return;
  last_prune_ms_ = now;
  std::vector<std::string> expired;
  if (DIR* d = ::opendir(workloads_dir_.c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      auto text = ReadSmallFile(workloads_dir_ + "/" + e->d_name + "/" + kReleasedFile);
      if (!text.has_value()) continue;
      auto released = DecodeReleased(*text);
      if (released.has_value() && now - *released >= retention_ms) expired.emplace_back(e->d_name);
    }
    ::closedir(d);
  }
  for (const auto& id : expired) RemoveRecordLocked(id);
}

Status LocalBackend::SyncTenant(const exec::TenantAccount& account) {
  // Tenancy is Atrium's own here: quotas are the scheduler's, and each
  // workload gets its own uid, so there is no account to keep in step.
  if (account.tenant_id.empty()) return Error::InvalidArgument("tenant id is empty");
  return OkStatus();
}

Result<std::vector<int>> LocalBackend::HostPids(const std::string& workload_id) {
  std::lock_guard lock(mu_);
  ATRIUM_ASSIGN_OR_RETURN(WorkloadStatus status, InspectLocked(workload_id));
  std::vector<int> pids;
  if (status.phase != WorkloadPhase::kRunning) return pids;
  const std::string dir = RecordDirOf(workload_id);
  if (auto text = ReadSmallFile(dir + "/" + kSupervisorFile); text.has_value()) {
    if (auto supervisor = DecodeSupervisor(*text); supervisor.has_value())
      pids.push_back(supervisor->pid);
  }
  if (auto text = ReadSmallFile(dir + "/" + kLaunchFile); text.has_value()) {
    if (auto launch = DecodeLaunch(*text); launch.has_value()) {
      for (int pid : CgroupProcesses(launch->cgroup_dirs)) pids.push_back(pid);
    }
  }
  return pids;
}

}  // namespace atrium::exec_local
