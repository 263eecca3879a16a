#include "scheduling/scrub_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "capacity/gpu_catalog.h"
#include "threads/thread_name.h"

extern char** environ;

namespace atrium::scheduling {
namespace {

constexpr std::array<std::string_view, 7> kPlaceholders = {
    "node", "index", "model", "kind", "mig_profile", "mig_start", "milli"};
// The most of a command's output kept for the failure's detail.
constexpr size_t kOutputTail = 512;
constexpr size_t kDetailLine = 200;

std::string ValueOf(std::string_view name, const ScrubJob& job) {
  if (name == "node") return job.node;
  if (name == "index") return std::to_string(job.gpu);
  if (name == "model") return job.model;
  if (name == "kind") return job.kind;
  if (name == "mig_profile") return job.mig_profile;
  if (name == "mig_start") return std::to_string(job.mig_start);
  return std::to_string(job.kind == "share" ? job.milli : 1000);
}

// Replaces the placeholders of one argument; `job` null only checks them.
Result<std::string> Substitute(const std::string& arg, const ScrubJob* job) {
  std::string out;
  size_t i = 0;
  while (i < arg.size()) {
    if (arg[i] != '{') {
      out += arg[i++];
      continue;
    }
    const size_t close = arg.find('}', i);
    if (close == std::string::npos) {
      return Error::InvalidArgument("scrub command argument '" + arg + "' has an unclosed '{'");
    }
    const std::string_view name(arg.data() + i + 1, close - i - 1);
    bool known = false;
    for (std::string_view p : kPlaceholders) known = known || p == name;
    if (!known) {
      return Error::InvalidArgument("scrub command argument '" + arg + "' names an unknown " +
                                    "placeholder {" + std::string(name) +
                                    "} (known: {node} {index} {model} {kind} {mig_profile} "
                                    "{mig_start} {milli})");
    }
    if (job != nullptr) out += ValueOf(name, *job);
    i = close + 1;
  }
  return out;
}

Status ValidateArgv(const std::vector<std::string>& argv, const std::string& what) {
  if (argv.empty()) return Error::InvalidArgument(what + " is empty");
  if (argv[0].empty()) return Error::InvalidArgument(what + " has an empty program name");
  for (const std::string& a : argv) ATRIUM_RETURN_IF_ERROR(Substitute(a, nullptr));
  return OkStatus();
}

// The last non-empty line of `out`, bounded.
std::string LastLine(const std::string& out) {
  size_t end = out.find_last_not_of(" \t\r\n");
  if (end == std::string::npos) return "";
  size_t start = out.rfind('\n', end);
  start = start == std::string::npos ? 0 : start + 1;
  std::string line = out.substr(start, end - start + 1);
  if (line.size() > kDetailLine) line = line.substr(0, kDetailLine) + "...";
  return line;
}

}  // namespace

Status ValidateScrubOptions(const ScrubOptions& o) {
  if (o.timeout_ms <= 0 || o.workload_timeout_ms <= 0 || o.workload_poll_ms <= 0) {
    return Error::InvalidArgument("scrub timeouts must be positive");
  }
  if (o.workers < 1) return Error::InvalidArgument("scrub workers must be at least 1");
  if (!o.default_command.empty()) {
    ATRIUM_RETURN_IF_ERROR(ValidateArgv(o.default_command, "the default scrub command"));
  }
  for (const auto& [model, argv] : o.commands) {
    const capacity::GpuModel* m = capacity::FindGpuModel(model);
    if (m == nullptr || m->name != model) {
      return Error::InvalidArgument("scrub command for unknown GPU model '" + model +
                                    "' (known: " + capacity::KnownGpuModelNames() + ")");
    }
    ATRIUM_RETURN_IF_ERROR(ValidateArgv(argv, "the scrub command of " + model));
  }
  return OkStatus();
}

Result<std::vector<std::string>> ScrubArgv(const ScrubOptions& options, const ScrubJob& job) {
  auto it = options.commands.find(job.model);
  const std::vector<std::string>& templ =
      it != options.commands.end() ? it->second : options.default_command;
  std::vector<std::string> argv;
  for (const std::string& a : templ) {
    ATRIUM_ASSIGN_OR_RETURN(std::string arg, Substitute(a, &job));
    argv.push_back(std::move(arg));
  }
  return argv;
}

ScrubOutcome RunScrubCommand(const std::vector<std::string>& argv, int64_t timeout_ms,
                             const std::atomic<bool>* stop) {
  if (argv.empty()) return {true, ""};
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return {false, std::string("cannot make a pipe: ") + std::strerror(errno)};
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  posix_spawnattr_init(&attr);
  // Its own process group, so a timeout kills whatever it started too.
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = -1;
  const int spawned = posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(fds[1]);
  if (spawned != 0) {
    close(fds[0]);
    return {false, "cannot run " + argv[0] + ": " + std::strerror(spawned)};
  }
  std::string output;
  bool open = true;
  int status = 0;
  bool exited = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::string killed_for;
  while (true) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      exited = true;
      break;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      killed_for = "timed out after " + std::to_string(timeout_ms) + " ms";
      break;
    }
    if (stop != nullptr && stop->load()) {
      killed_for = "stopped";
      break;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
    pollfd p{fds[0], POLLIN, 0};
    // Waits for output or 50 ms, whichever comes first, then looks again.
    const int ready = poll(open ? &p : nullptr, open ? 1 : 0, int(std::min<int64_t>(left, 50)));
    if (ready > 0 && open) {
      char buf[4096];
      const ssize_t n = read(fds[0], buf, sizeof buf);
      if (n <= 0) {
        open = false;
      } else {
        output.append(buf, size_t(n));
        if (output.size() > kOutputTail) output.erase(0, output.size() - kOutputTail);
      }
    }
  }
  if (!exited) {
    kill(-pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  // What is left in the pipe (the command is gone; its children may not
  // be, so the read end is only drained, never waited on).
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  for (char buf[4096];;) {
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    output.append(buf, size_t(n));
    if (output.size() > kOutputTail) output.erase(0, output.size() - kOutputTail);
  }
  close(fds[0]);
  std::string detail;
  if (!killed_for.empty()) {
    detail = killed_for;
  } else if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    return {true, ""};
  } else if (WIFEXITED(status)) {
    detail = "exit status " + std::to_string(WEXITSTATUS(status));
  } else if (WIFSIGNALED(status)) {
    detail = "killed by signal " + std::to_string(WTERMSIG(status));
  } else {
    detail = "ended abnormally";
  }
  const std::string line = LastLine(output);
  if (!line.empty()) detail += ": " + line;
  return {false, detail};
}

// ------------------------------------------------------------------ runner

ScrubRunner::ScrubRunner(ScrubOptions options, Done done)
    : options_(std::move(options)), done_(std::move(done)) {}

ScrubRunner::~ScrubRunner() { Stop(); }

void ScrubRunner::SetWorkloadProbe(WorkloadProbe probe) {
  std::lock_guard<std::mutex> lock(mu_);
  probe_ = std::move(probe);
}

void ScrubRunner::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (running_) return;
  running_ = true;
  stopping_ = false;
  for (int i = 0; i < options_.workers; ++i) {
    workers_.emplace_back([this] {
      NameThisThread("scrub");
      WorkerLoop();
    });
  }
}

void ScrubRunner::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!running_) return;
    running_ = false;
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  std::lock_guard<std::mutex> lock(mu_);
  queue_.clear();
  known_.clear();
}

void ScrubRunner::Enqueue(ScrubJob job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!known_.insert({job.node, job.gpu, job.allocation}).second) return;
    queue_.push_back(std::move(job));
  }
  cv_.notify_one();
}

bool ScrubRunner::WaitForWorkloads(const std::string& allocation, std::string& detail) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.workload_timeout_ms);
  while (true) {
    WorkloadProbe probe;
    {
      std::lock_guard<std::mutex> lock(mu_);
      probe = probe_;
    }
    if (!probe || probe(allocation)) return true;
    if (std::chrono::steady_clock::now() >= deadline) {
      detail = "workloads of " + allocation + " still run after " +
               std::to_string(options_.workload_timeout_ms) + " ms";
      return false;
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(options_.workload_poll_ms),
                 [this] { return stopping_.load(); });
    if (stopping_) {
      detail = "stopped";
      return false;
    }
  }
}

void ScrubRunner::WorkerLoop() {
  while (true) {
    ScrubJob job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    ScrubOutcome outcome;
    if (!WaitForWorkloads(job.allocation, outcome.detail)) {
      if (stopping_) return;  // left for the next start
    } else if (auto argv = ScrubArgv(options_, job); !argv.has_value()) {
      outcome.detail = argv.error().message;
    } else {
      outcome = RunScrubCommand(*argv, options_.timeout_ms, &stopping_);
      if (stopping_ && !outcome.ok) return;  // killed by Stop: left for the next start
    }
    done_(job, outcome);
    std::lock_guard<std::mutex> lock(mu_);
    known_.erase({job.node, job.gpu, job.allocation});
  }
}

}  // namespace atrium::scheduling
