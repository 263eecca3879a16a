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

namespace atrium::exec_local {
namespace {

bool WriteValue(const std::string& path, const std::string& value, std::string* error) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
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

}  // namespace

CgroupSetup CreateWorkloadCgroups(const std::string& root, const std::string& parent,
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
    const std::string dir = mount + "/" + parent + "/" + workload_id;
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
      if (!WriteValue(dir + "/" + file, value, &error)) {
        setup.not_enforced.push_back(mechanism + " (" + error + ")");
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
    limit(dir, values, "memory limit");
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
