#include "slurm/command_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string_view>

namespace atrium::slurm {
namespace {

constexpr size_t kMaxCapture = size_t{16} * 1024 * 1024;

void CloseIfOpen(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

std::string FindProgram(const std::string& name, std::string_view search_path) {
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return name;
  size_t begin = 0;
  while (begin <= search_path.size()) {
    size_t end = search_path.find(':', begin);
    if (end == std::string_view::npos) end = search_path.size();
    // An empty entry is the current directory: never for a control plane.
    if (end > begin) {
      std::string candidate(search_path.substr(begin, end - begin));
      candidate += '/';
      candidate += name;
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    begin = end + 1;
  }
  return "";
}

ProcessCommandRunner::ProcessCommandRunner(
    const std::vector<std::pair<std::string, std::string>>& env, int64_t timeout_ms)
    : timeout_ms_(timeout_ms) {
  for (const auto& [name, value] : env) {
    std::string entry = name;
    entry += '=';
    entry += value;
    env_.push_back(std::move(entry));
    if (name == "PATH") search_path_ = value;
  }
}

Result<CommandOutput> ProcessCommandRunner::Run(const std::vector<std::string>& argv) {
  if (argv.empty()) return Error::InvalidArgument("empty command");
  // Looked up in the commands' PATH, not the control plane's (execvpe
  // would search the caller's): a server started with PATH=/usr/bin:/bin
  // still finds /usr/sbin/useradd.
  const std::string program = FindProgram(argv[0], search_path_);
  if (program.empty()) {
    return Error::Unavailable("could not run " + argv[0] + ": not found in PATH=" + search_path_);
  }
  int out_pipe[2];
  int err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0)
    return Error::Unavailable("pipe: " + std::string(strerror(errno)));
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return Error::Unavailable("pipe: " + std::string(strerror(errno)));
  }
  // Everything the child needs is built before fork: after it, only
  // async-signal-safe calls.
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;
  envp.reserve(env_.size() + 1);
  for (const auto& e : env_) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    ::close(err_pipe[0]);
    ::close(err_pipe[1]);
    return Error::Unavailable("fork: " + std::string(strerror(errno)));
  }
  if (pid == 0) {
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    ::execve(program.c_str(), args.data(), envp.data());
    _exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  int fds[2] = {out_pipe[0], err_pipe[0]};
  CommandOutput result;
  std::string* sinks[2] = {&result.out, &result.err};
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms_);
  bool timed_out = false;
  while (fds[0] >= 0 || fds[1] >= 0) {
    pollfd polls[2];
    int n = 0;
    int which[2];
    for (int i = 0; i < 2; ++i) {
      if (fds[i] >= 0) {
        polls[n] = {fds[i], POLLIN, 0};
        which[n++] = i;
      }
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    int ready = ::poll(polls, n, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) break;
    for (int k = 0; k < n; ++k) {
      if (polls[k].revents == 0) continue;
      char buf[65536];
      ssize_t got = ::read(polls[k].fd, buf, sizeof buf);
      if (got > 0) {
        std::string& sink = *sinks[which[k]];
        size_t room = kMaxCapture - std::min(kMaxCapture, sink.size());
        sink.append(buf, std::min(static_cast<size_t>(got), room));
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        CloseIfOpen(fds[which[k]]);
      }
    }
  }
  CloseIfOpen(fds[0]);
  CloseIfOpen(fds[1]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return Error::Unavailable(argv[0] + " ran past " + std::to_string(timeout_ms_) + " ms");
  }
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
    if (result.exit_code == 127 && result.out.empty() && result.err.empty()) {
      return Error::Unavailable("could not run " + argv[0]);
    }
  } else if (WIFSIGNALED(status)) {
    result.exit_code = 128 + WTERMSIG(status);
  }
  return result;
}

}  // namespace atrium::slurm
