#include "exec_local/cgroups.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

namespace atrium::exec_local {
namespace {

bool WriteValue(const std::string& path, const std::string& value, std::string* error) {
  // O_CREAT changes nothing on a cgroup file system (its files exist or
  // cannot be made) and lets tests check the values in a plain folder.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    *error = path + ": " + std::strerror(errno);
    return false;
  }
  const ssize_t n = ::write(fd, value.data(), value.size());
  const int saved = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(value.size())) {
    *error = path + " <- " + value + ": " + std::strerror(saved);
    return false;
  }
  return true;
}

bool MakeDirs(const std::string& path, std::string* error) {
  size_t pos = 1;
  while (pos <= path.size()) {
    size_t next = path.find('/', pos);
    if (next == std::string::npos) next = path.size();
    const std::string prefix = path.substr(0, next);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      *error = "mkdir " + prefix + ": " + std::strerror(errno);
      return false;
    }
    pos = next + 1;
  }
  return true;
}

bool IsDir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool IsFile(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The words of a space-separated cgroup v2 list (cgroup.controllers).
std::vector<std::string> ReadWords(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> words;
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

CgroupSetup CreateV1(const std::string& root, const std::string& parent,
                     const std::string& workload_id, const CgroupLimits& limits);
CgroupSetup CreateV2(const std::string& root, const std::string& parent,
                     const std::string& workload_id, const CgroupLimits& limits);

}  // namespace

CgroupVersion DetectCgroupVersion(const std::string& root) {
  if (IsFile(root + "/cgroup.controllers")) return CgroupVersion::kV2;
  for (const char* controller : {"freezer", "pids", "memory", "cpu", "devices"}) {
    if (IsDir(root + "/" + controller)) return CgroupVersion::kV1;
  }
  return CgroupVersion::kNone;
}

CgroupSetup CreateWorkloadCgroups(const std::string& root, const std::string& parent,
                                  const std::string& workload_id, const CgroupLimits& limits) {
  if (DetectCgroupVersion(root) == CgroupVersion::kV2) {
    return CreateV2(root, parent, workload_id, limits);
  }
  return CreateV1(root, parent, workload_id, limits);
}

namespace {

CgroupSetup CreateV2(const std::string& root, const std::string& parent,
                     const std::string& workload_id, const CgroupLimits& limits) {
  CgroupSetup setup;
  const std::string parent_dir = root + "/" + parent;
  const std::string dir = parent_dir + "/" + workload_id;
  std::string error;
  if (!MakeDirs(dir, &error)) {
    for (const char* mechanism :
         {"kill of every process", "pids limit", "memory limit", "cpu limit"}) {
      setup.not_enforced.push_back(std::string(mechanism) + " (" + error + ")");
    }
    return setup;
  }
  // Any v2 cgroup lists all of its processes, whatever its controllers.
  setup.dirs.push_back(dir);
  setup.can_kill_all = true;
  const std::vector<std::string> available = ReadWords(root + "/cgroup.controllers");
  // One controller: handed down to the parent's children, then its limits.
  const auto limit = [&](const std::string& controller, const std::string& mechanism,
                         const std::vector<std::pair<std::string, std::string>>& values) {
    if (std::find(available.begin(), available.end(), controller) == available.end()) {
      setup.not_enforced.push_back(mechanism + " (cgroup v2 controller " + controller +
                                   " is not available in " + root + ")");
      return false;
    }
    std::string refused;
    const auto refuse = [&] {
      std::string phrase = mechanism;
      phrase += " (";
      phrase += refused;
      phrase += ')';
      setup.not_enforced.push_back(std::move(phrase));
      return false;
    };
    for (const std::string& level : {root, parent_dir}) {
      if (!WriteValue(level + "/cgroup.subtree_control", "+" + controller, &refused)) {
        return refuse();
      }
    }
    for (const auto& [file, value] : values) {
      std::string path = dir;
      path += '/';
      path += file;
      if (!WriteValue(path, value, &refused)) return refuse();
    }
    return true;
  };
  limit("pids", "pids limit", {{"pids.max", std::to_string(limits.pids_max)}});
  setup.memory_limited =
      limit("memory", "memory limit",
            {{"memory.max", limits.memory_bytes > 0 ? std::to_string(limits.memory_bytes)
                                                    : std::string("max")}}) &&
      limits.memory_bytes > 0;
  constexpr int64_t kPeriodUs = 100'000;
  limit("cpu", "cpu limit",
        {{"cpu.max", (limits.cpu_milli > 0 ? std::to_string(std::max<int64_t>(
                                                 limits.cpu_milli * kPeriodUs / 1000, 1000))
                                           : std::string("max")) +
                         " " + std::to_string(kPeriodUs)}});
  return setup;
}

CgroupSetup CreateV1(const std::string& root, const std::string& parent,
                     const std::string& workload_id, const CgroupLimits& limits) {
  CgroupSetup setup;
  // Creates the controller's directory for this workload; "" when refused.
  const auto create = [&](const char* controller, const std::string& mechanism) -> std::string {
    const std::string mount = root + "/" + controller;
    struct stat st {};
    if (::stat(mount.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      setup.not_enforced.push_back(mechanism + " (cgroup " + controller + " is not mounted at " +
                                   mount + ")");
      return "";
    }
    std::string dir = mount + "/" + parent + "/" + workload_id;
    std::string error;
    if (!MakeDirs(dir, &error)) {
      setup.not_enforced.push_back(mechanism + " (" + error + ")");
      return "";
    }
    return dir;
  };
  const auto limit = [&](const std::string& dir,
                         const std::vector<std::pair<std::string, std::string>>& values,
                         const std::string& mechanism) {
    for (const auto& [file, value] : values) {
      std::string error;
      std::string path = dir;
      path += '/';
      path += file;
      if (!WriteValue(path, value, &error)) {
        std::string refused = mechanism;
        refused += " (";
        refused += error;
        refused += ')';
        setup.not_enforced.push_back(std::move(refused));
        ::rmdir(dir.c_str());
        return;
      }
    }
    setup.dirs.push_back(dir);
  };

  // The freezer holds every process of the workload and nothing else: the
  // list Stop signals. (Any controller would; the freezer has no limit
  // that could refuse a write.)
  if (auto dir = create("freezer", "kill of every process"); !dir.empty()) {
    limit(dir, {}, "kill of every process");
    setup.can_kill_all = true;
  }
  if (auto dir = create("pids", "pids limit"); !dir.empty()) {
    limit(dir, {{"pids.max", std::to_string(limits.pids_max)}}, "pids limit");
  }
  if (auto dir = create("memory", "memory limit"); !dir.empty()) {
    std::vector<std::pair<std::string, std::string>> values;
    if (limits.memory_bytes > 0)
      values.emplace_back("memory.limit_in_bytes", std::to_string(limits.memory_bytes));
    const size_t refused = setup.not_enforced.size();
    limit(dir, values, "memory limit");
    setup.memory_limited = limits.memory_bytes > 0 && setup.not_enforced.size() == refused;
  }
  if (auto dir = create("cpu", "cpu limit"); !dir.empty()) {
    std::vector<std::pair<std::string, std::string>> values;
    if (limits.cpu_milli > 0) {
      constexpr int64_t kPeriodUs = 100'000;
      values = {{"cpu.cfs_period_us", std::to_string(kPeriodUs)},
                {"cpu.cfs_quota_us",
                 std::to_string(std::max<int64_t>(limits.cpu_milli * kPeriodUs / 1000, 1000))}};
    }
    limit(dir, values, "cpu limit");
  }
  if (auto dir = create("devices", "device allow-list"); !dir.empty()) {
    std::vector<std::pair<std::string, std::string>> values = {{"devices.deny", "a"}};
    for (const auto& rule : limits.device_rules) values.emplace_back("devices.allow", rule);
    limit(dir, values, "device allow-list");
  }
  return setup;
}

}  // namespace

std::vector<int> CgroupProcesses(const std::vector<std::string>& dirs) {
  std::vector<int> pids;
  for (const auto& dir : dirs) {
    std::ifstream in(dir + "/cgroup.procs");
    int pid = 0;
    while (in >> pid) pids.push_back(pid);
  }
  std::sort(pids.begin(), pids.end());
  pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
  return pids;
}

int SignalCgroupProcesses(const std::vector<std::string>& dirs, int signal) {
  int signalled = 0;
  for (int pid : CgroupProcesses(dirs)) {
    if (pid > 1 && ::kill(pid, signal) == 0) ++signalled;
  }
  return signalled;
}

void RemoveWorkloadCgroups(const std::vector<std::string>& dirs) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    if (SignalCgroupProcesses(dirs, SIGKILL) == 0) {
      bool all_removed = true;
      for (const auto& dir : dirs) {
        if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) all_removed = false;
      }
      if (all_removed) return;
    }
    ::usleep(5000);  // the kernel is still tearing down killed processes
  }
}

}  // namespace atrium::exec_local
