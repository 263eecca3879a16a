// atrium-workload-supervisor RECORD_DIR READY_FD
//
// Runs one workload's sandbox and answers for it while the control plane
// comes and goes (workload_files.h says what it reads and writes). Started
// by LocalBackend::Start detached (its own session, not the control plane's
// child), so `kill -9` of Atrium does not end workloads.
//
//  1. reads launch.json; spawns bubblewrap as the workload's uid, in its
//     cgroups and its own process group, with the resource limits the
//     record names (RLIMIT_NPROC always; RLIMIT_AS, RLIMIT_FSIZE when set)
//     set before the uid is dropped, SIGTERM ignored (the in-sandbox
//     init puts the command's signals back to default), stdout/stderr into
//     a pipe, the init's report pipe as fd 3;
//  2. writes supervisor.json (its pid and that pid's start time, the
//     start time of the workload) and one byte on READY_FD;
//  3. copies the output into the bounded log; on SIGTERM (Stop) reads the
//     grace from stop.json, sends SIGTERM to every process of the workload
//     (its cgroup, else its process group) and SIGKILL once the grace has
//     passed (killing bubblewrap ends the whole sandbox: --die-with-parent);
//     The time limit works the same way, with a grace of 10 s;
//  4. when bubblewrap has exited, writes exit.json (the init's report:
//     exit code or signal; without one, bubblewrap's own status) and
//     removes the cgroups.
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "common/atomic_file.h"
#include "exec/end_markers.h"
#include "exec/sandbox.h"
#include "exec_local/cgroups.h"
#include "exec_local/workload_files.h"

namespace {

using namespace atrium::exec_local;

constexpr int64_t kDefaultGraceMs = 10'000;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t MonotonicMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void JoinCgroups(const std::vector<std::string>& dirs) {
  const std::string pid = std::to_string(::getpid());
  for (const auto& dir : dirs) {
    const int fd = ::open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0 || ::write(fd, pid.data(), pid.size()) != static_cast<ssize_t>(pid.size())) {
      std::fprintf(stderr, "atrium: cannot join cgroup %s: %s\n", dir.c_str(),
                   std::strerror(errno));
      ::_exit(126);  // never run with less confinement than Start recorded
    }
    ::close(fd);
  }
}

// In the forked child: becomes the sandbox. Never returns.
[[noreturn]] void ExecSandbox(const LaunchRecord& launch,
                              const std::vector<std::string>& sandbox_argv,
                              const std::vector<std::pair<std::string, std::string>>& sandbox_env,
                              int log_fd, int report_fd) {
  ::setpgid(0, 0);
  JoinCgroups(launch.cgroup_dirs);
  const int null = ::open("/dev/null", O_RDONLY);
  ::dup2(null, 0);
  ::dup2(log_fd, 1);
  ::dup2(log_fd, 2);
  ::dup2(report_fd, atrium::exec::SandboxHost{}.report_fd);
  ::close_range(atrium::exec::SandboxHost{}.report_fd + 1, ~0U, 0);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::signal(SIGTERM, SIG_IGN);
  // Set while still root (a lower hard limit cannot be raised by the
  // workload); RLIMIT_NPROC is checked at each fork of the uid.
  for (const auto& [resource, value] :
       {std::pair{RLIMIT_NPROC, launch.rlimit_nproc}, std::pair{RLIMIT_AS, launch.rlimit_as},
        std::pair{RLIMIT_FSIZE, launch.rlimit_fsize}}) {
    if (value <= 0) continue;
    const rlimit bound = {static_cast<rlim_t>(value), static_cast<rlim_t>(value)};
    if (::setrlimit(resource, &bound) != 0) {
      std::fprintf(stderr, "atrium: cannot set a resource limit: %s\n", std::strerror(errno));
      ::_exit(126);  // never run with less confinement than Start recorded
    }
  }
  if (::setgroups(0, nullptr) != 0 || ::setgid(launch.gid) != 0 || ::setuid(launch.uid) != 0 ||
      ::getuid() != launch.uid) {
    std::fprintf(stderr, "atrium: cannot become uid %u: %s\n", launch.uid, std::strerror(errno));
    ::_exit(126);
  }
  std::vector<char*> argv;
  argv.reserve(sandbox_argv.size() + 1);
  for (const auto& a : sandbox_argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  env_strings.reserve(sandbox_env.size());
  for (const auto& [name, value] : sandbox_env) {
    std::string entry = name;
    entry += '=';
    entry += value;
    env_strings.push_back(std::move(entry));
  }
  std::vector<char*> envp;
  envp.reserve(env_strings.size() + 1);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  ::execve(argv[0], argv.data(), envp.data());
  std::fprintf(stderr, "atrium: cannot run %s: %s\n", argv[0], std::strerror(errno));
  ::_exit(127);
}

// The end as the init reported it ("exit N" / "signal N"), else as
// bubblewrap's own status says.
ExitRecord EndOf(const std::string& report, int bwrap_status) {
  ExitRecord end;
  int value = 0;
  if (std::sscanf(report.c_str(), "exit %d", &value) == 1) {
    end.exit_code = value;
    return end;
  }
  if (std::sscanf(report.c_str(), "signal %d", &value) == 1) {
    end.signal = value;
    return end;
  }
  if (WIFSIGNALED(bwrap_status)) {
    end.signal = WTERMSIG(bwrap_status);
    return end;
  }
  const int code = WEXITSTATUS(bwrap_status);
  if (code > 128 && code < 128 + NSIG) {
    // The init itself was killed (Stop's SIGKILL reaches every process).
    end.signal = code - 128;
  } else {
    end.exit_code = code;
    end.detail = "the sandbox ended without its init's report (see the log)";
  }
  return end;
}

int Run(const std::string& dir, int ready_fd) {
  auto text = ReadSmallFile(dir + "/" + kLaunchFile);
  if (!text.has_value()) {
    std::fprintf(stderr, "atrium: %s\n", text.error().message.c_str());
    return 1;
  }
  auto launch = DecodeLaunch(*text);
  if (!launch.has_value()) {
    std::fprintf(stderr, "atrium: %s\n", launch.error().message.c_str());
    return 1;
  }
  // Whatever the control plane ignored (SIGCHLD ignored would reap the
  // sandbox before waitpid sees it) is back to its default here.
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::signal(sig, SIG_DFL);
  }
  sigset_t handled;
  sigemptyset(&handled);
  for (int sig : {SIGTERM, SIGCHLD, SIGINT, SIGHUP}) sigaddset(&handled, sig);
  ::sigprocmask(SIG_BLOCK, &handled, nullptr);
  const int signal_fd = ::signalfd(-1, &handled, SFD_CLOEXEC);
  int log_pipe[2];
  int report_pipe[2];
  if (signal_fd < 0 || ::pipe2(log_pipe, O_CLOEXEC) != 0 || ::pipe2(report_pipe, O_CLOEXEC) != 0) {
    std::perror("atrium: cannot set up the supervisor");
    return 1;
  }
  LogWriter log(dir, launch->log_max_bytes);
  const auto append_to_log = [&](std::string_view data) {
    if (auto appended = log.Append(data); !appended.has_value()) {
      std::fprintf(stderr, "atrium: %s\n", appended.error().message.c_str());
    }
  };
  const auto finish = [&](const ExitRecord& end) {
    if (auto written = atrium::ReplaceFileAtomically(dir + "/" + kExitFile, EncodeExit(end), 0600);
        !written.has_value()) {
      std::fprintf(stderr, "atrium: %s\n", written.error().message.c_str());
    }
    RemoveWorkloadCgroups(launch->cgroup_dirs);
    // The control plane hears of the end at once (a hint; it reads the
    // exit record itself): state_dir/ended beside state_dir/workloads/<id>.
    const std::filesystem::path record(dir);
    if (auto marked =
            atrium::exec::MarkEnded((record.parent_path().parent_path() / kEndedDirName).string(),
                                    record.filename().string());
        !marked.has_value()) {
      std::fprintf(stderr, "atrium: %s\n", marked.error().message.c_str());
    }
    return 0;
  };

  SupervisorRecord record;
  record.pid = ::getpid();
  auto ticks = ProcessStartTicks(record.pid);
  record.pid_start_ticks = ticks.has_value() ? *ticks : 0;
  record.started_ms = NowMs();
  if (auto written = atrium::ReplaceFileAtomically(dir + "/" + kSupervisorFile,
                                                   EncodeSupervisor(record), 0600);
      !written.has_value()) {
    std::fprintf(stderr, "atrium: %s\n", written.error().message.c_str());
    return 1;
  }
  (void)!::write(ready_fd, "1", 1);
  ::close(ready_fd);

  if (!launch->unpack_argv.empty()) {
    // The archive is unpacked first, in a sandbox of its own, its output
    // into the log. A Stop meanwhile waits for it (tar of an archive of
    // bounded size) and then ends the workload before it starts.
    int unpack_log[2];
    int unpack_report[2];
    if (::pipe2(unpack_log, O_CLOEXEC) != 0 || ::pipe2(unpack_report, O_CLOEXEC) != 0) {
      std::perror("atrium: cannot set up the unpacking");
      return 1;
    }
    const pid_t unpacker = ::fork();
    if (unpacker == 0) {
      ExecSandbox(*launch, launch->unpack_argv, launch->unpack_env, unpack_log[1],
                  unpack_report[1]);
    }
    ::close(unpack_log[1]);
    ::close(unpack_report[1]);
    char chunk[65536];
    for (ssize_t n; (n = ::read(unpack_log[0], chunk, sizeof chunk)) != 0;) {
      if (n > 0) append_to_log(std::string_view(chunk, static_cast<size_t>(n)));
      if (n < 0 && errno != EINTR) break;
    }
    std::string unpack_said;
    for (ssize_t n; (n = ::read(unpack_report[0], chunk, sizeof chunk)) != 0;) {
      if (n > 0 && unpack_said.size() < 256) unpack_said.append(chunk, static_cast<size_t>(n));
      if (n < 0 && errno != EINTR) break;
    }
    ::close(unpack_log[0]);
    ::close(unpack_report[0]);
    int status = 0;
    while (unpacker > 0 && ::waitpid(unpacker, &status, 0) < 0 && errno == EINTR) {
    }
    ExitRecord unpacked = EndOf(unpack_said, status);
    if (unpacker < 0 || unpacked.exit_code != 0) {
      unpacked.ended_ms = NowMs();
      unpacked.detail = "unpacking its archive failed (see the log)";
      return finish(unpacked);
    }
    pollfd pending = {signal_fd, POLLIN, 0};
    signalfd_siginfo info{};
    while (::poll(&pending, 1, 0) == 1 && ::read(signal_fd, &info, sizeof info) == sizeof info) {
      if (info.ssi_signo != SIGCHLD) {
        ExitRecord stopped;
        stopped.signal = SIGTERM;
        stopped.ended_ms = NowMs();
        stopped.detail = "stopped while its archive was being unpacked";
        return finish(stopped);
      }
    }
  }

  const pid_t sandbox = ::fork();
  if (sandbox < 0) {
    std::perror("atrium: fork");
    return 1;
  }
  if (sandbox == 0) ExecSandbox(*launch, launch->argv, launch->env, log_pipe[1], report_pipe[1]);
  ::close(log_pipe[1]);
  ::close(report_pipe[1]);

  const bool kill_by_cgroup = !launch->cgroup_dirs.empty();
  // Signals every process of the workload: all of its cgroup when it has
  // one, else its process group; for SIGKILL bubblewrap itself too.
  const auto signal_workload = [&](int sig) {
    if (kill_by_cgroup) SignalCgroupProcesses(launch->cgroup_dirs, sig);
    ::kill(-sandbox, sig);
    if (sig == SIGKILL) ::kill(sandbox, SIGKILL);
  };

  std::string report;
  bool log_open = true;
  bool report_open = true;
  bool exited = false;
  int bwrap_status = 0;
  int64_t kill_at = -1;  // monotonic ms; -1 = no stop asked
  // The time limit is the supervisor's too: it holds when no control plane
  // is there to enforce it.
  const int64_t time_limit_at =
      launch->time_limit_ms > 0 ? MonotonicMs() + launch->time_limit_ms : -1;
  bool timed_out = false;
  int64_t exited_at = -1;
  int64_t ended_ms = 0;  // wall clock, when bubblewrap was seen to exit
  char buffer[65536];
  while (true) {
    // Once bubblewrap is gone its sandbox is too; drain what is left of
    // the pipes for a short while and stop.
    if (exited && ((!log_open && !report_open) || MonotonicMs() - exited_at > 2000)) break;
    int timeout = -1;
    if (kill_at >= 0 && !exited)
      timeout = static_cast<int>(std::max<int64_t>(0, kill_at - MonotonicMs()));
    if (time_limit_at >= 0 && kill_at < 0 && !exited)
      timeout = static_cast<int>(std::max<int64_t>(0, time_limit_at - MonotonicMs()));
    if (exited) timeout = 100;
    pollfd fds[3] = {{signal_fd, POLLIN, 0},
                     {log_open ? log_pipe[0] : -1, POLLIN, 0},
                     {report_open ? report_pipe[0] : -1, POLLIN, 0}};
    const int ready = ::poll(fds, 3, timeout);
    if (ready < 0 && errno != EINTR) break;
    if (fds[1].revents != 0) {
      const ssize_t n = ::read(log_pipe[0], buffer, sizeof buffer);
      if (n > 0) {
        append_to_log(std::string_view(buffer, static_cast<size_t>(n)));
      } else if (n == 0 || errno != EINTR) {
        log_open = false;
      }
    }
    if (fds[2].revents != 0) {
      const ssize_t n = ::read(report_pipe[0], buffer, sizeof buffer);
      if (n > 0 && report.size() < 256) {
        report.append(buffer, static_cast<size_t>(n));
      } else if (n <= 0 && (n == 0 || errno != EINTR)) {
        report_open = false;
      }
    }
    if (fds[0].revents != 0) {
      signalfd_siginfo info{};
      if (::read(signal_fd, &info, sizeof info) == sizeof info &&
          (info.ssi_signo == SIGTERM || info.ssi_signo == SIGINT || info.ssi_signo == SIGHUP) &&
          !exited) {
        int64_t grace = kDefaultGraceMs;
        if (auto stop = ReadSmallFile(dir + "/" + kStopFile); stop.has_value()) {
          if (auto decoded = DecodeStop(*stop); decoded.has_value())
            grace = std::max<int64_t>(*decoded, 0);
        }
        const int64_t deadline = MonotonicMs() + grace;
        if (kill_at < 0) signal_workload(SIGTERM);
        kill_at = kill_at < 0 ? deadline : std::min(kill_at, deadline);
      }
    }
    if (!exited) {
      int status = 0;
      if (::waitpid(sandbox, &status, WNOHANG) == sandbox) {
        exited = true;
        exited_at = MonotonicMs();
        ended_ms = NowMs();
        bwrap_status = status;
      } else if (time_limit_at >= 0 && kill_at < 0 && MonotonicMs() >= time_limit_at) {
        timed_out = true;
        signal_workload(SIGTERM);
        kill_at = MonotonicMs() + kDefaultGraceMs;
      } else if (kill_at >= 0 && MonotonicMs() >= kill_at) {
        signal_workload(SIGKILL);
        kill_at = MonotonicMs() + 1000;  // again, should anything have been missed
      }
    }
  }

  ExitRecord end = EndOf(report, bwrap_status);
  end.ended_ms = ended_ms;
  if (timed_out) {
    end.detail = "its time limit of " + std::to_string(launch->time_limit_ms / 1000) +
                 " s was reached" + (end.detail.empty() ? "" : "; " + end.detail);
  }
  return finish(end);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: atrium-workload-supervisor RECORD_DIR READY_FD\n");
    return 2;
  }
  return Run(argv[1], std::atoi(argv[2]));
}
