#include "subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace atrium::testing {
namespace {

using Clock = std::chrono::steady_clock;

struct CStrings {
  explicit CStrings(const std::vector<std::string>& strings) {
    for (const auto& s : strings) pointers.push_back(const_cast<char*>(s.c_str()));
    pointers.push_back(nullptr);
  }
  std::vector<char*> pointers;
};

int ExitCodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

int WaitPid(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return ExitCodeOf(status);
}

// Spawns with stdin from `in_fd` (or /dev/null when -1) and stdout/stderr
// to the given fds. Returns the pid or -1.
pid_t Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env, int in_fd,
            int out_fd, int err_fd) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (in_fd >= 0) {
    posix_spawn_file_actions_adddup2(&actions, in_fd, STDIN_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  }
  posix_spawn_file_actions_adddup2(&actions, out_fd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_fd, STDERR_FILENO);
  CStrings args(argv);
  CStrings envp(env);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.pointers.data(),
                         envp.pointers.data());
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

}  // namespace

ProcessResult RunProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                         const std::string& input, std::chrono::milliseconds timeout) {
  ProcessResult result;
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    result.err = std::string("pipe: ") + std::strerror(errno);
    return result;
  }
  pid_t pid = Spawn(argv, env, in[0], out[1], err[1]);
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  if (pid < 0) {
    ::close(in[1]);
    ::close(out[0]);
    ::close(err[0]);
    result.err = "cannot spawn " + argv[0];
    return result;
  }
  // Small inputs (passwords) fit in the pipe buffer; a child that exits
  // without reading gives EPIPE, which the caller ignores (SIGPIPE is off).
  if (!input.empty()) {
    ssize_t ignored = ::write(in[1], input.data(), input.size());
    (void)ignored;
  }
  ::close(in[1]);

  const auto deadline = Clock::now() + timeout;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_fds = 2;
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      result.timed_out = true;
      ::kill(pid, SIGKILL);
      break;
    }
    int n = ::poll(fds, 2, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buffer[4096];
      ssize_t got = ::read(fds[i].fd, buffer, sizeof buffer);
      if (got > 0) {
        sinks[i]->append(buffer, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& fd : fds) {
    if (fd.fd >= 0) ::close(fd.fd);
  }
  result.exit_code = WaitPid(pid);
  return result;
}

BackgroundProcess::~BackgroundProcess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    Reap();
  }
  if (reader_.joinable()) reader_.join();
}

bool BackgroundProcess::Start(const std::vector<std::string>& argv,
                              const std::vector<std::string>& env, std::string* error) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    *error = std::string("pipe: ") + std::strerror(errno);
    return false;
  }
  pid_ = Spawn(argv, env, -1, out[1], out[1]);
  ::close(out[1]);
  if (pid_ < 0) {
    ::close(out[0]);
    *error = "cannot spawn " + argv[0];
    return false;
  }
  {
    std::lock_guard lock(mu_);
    output_.clear();
    eof_ = false;
  }
  if (reader_.joinable()) reader_.join();
  reader_ = std::thread([this, fd = out[0]] { ReadUntilEof(fd); });
  return true;
}

void BackgroundProcess::ReadUntilEof(int fd) {
  char buffer[4096];
  while (true) {
    ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    std::lock_guard lock(mu_);
    if (got <= 0) {
      eof_ = true;
      changed_.notify_all();
      break;
    }
    output_.append(buffer, static_cast<size_t>(got));
    changed_.notify_all();
  }
  ::close(fd);
}

std::string BackgroundProcess::WaitForLine(const std::string& prefix,
                                           std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  std::string line;
  auto found = [&] {
    size_t start = 0;
    while (start < output_.size()) {
      size_t end = output_.find('\n', start);
      if (end == std::string::npos) return false;  // a line still being written
      if (output_.compare(start, prefix.size(), prefix) == 0) {
        line = output_.substr(start + prefix.size(), end - start - prefix.size());
        return true;
      }
      start = end + 1;
    }
    return false;
  };
  changed_.wait_for(lock, timeout, [&] { return found() || eof_; });
  return line;
}

int BackgroundProcess::Stop(int signal, std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return -1;
  ::kill(pid_, signal);
  bool exited;
  {
    // The output pipe closes when the child exits.
    std::unique_lock lock(mu_);
    exited = changed_.wait_for(lock, timeout, [&] { return eof_; });
  }
  if (!exited) {
    ::kill(pid_, SIGKILL);
    Reap();
    return -1;
  }
  return Reap();
}

int BackgroundProcess::Reap() {
  int code = WaitPid(pid_);
  pid_ = -1;
  if (reader_.joinable()) reader_.join();
  return code;
}

std::string BackgroundProcess::Output() {
  std::lock_guard lock(mu_);
  return output_;
}

}  // namespace atrium::testing
