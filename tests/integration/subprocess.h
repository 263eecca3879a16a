// Child processes for integration tests: run a command to completion with a
// deadline, or keep a long-running server whose output is collected on a
// thread. Every wait is bounded; a child that overstays is killed.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace atrium::testing {

struct ProcessResult {
  int exit_code = -1;  // 128 + signal when killed by one
  std::string out;
  std::string err;
  bool timed_out = false;
};

// Runs argv[0] (a path) with exactly `env` as its environment, feeding it
// `input` on stdin, and collects stdout and stderr. Kills it after `timeout`.
ProcessResult RunProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                         const std::string& input, std::chrono::milliseconds timeout);

// A child whose stdout and stderr (merged) a thread reads until it exits.
class BackgroundProcess {
 public:
  BackgroundProcess() = default;
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;
  // Kills the child (SIGKILL) if it still runs.
  ~BackgroundProcess();

  // Starts argv[0] with `env`. Returns false (and sets *error) on failure.
  bool Start(const std::vector<std::string>& argv, const std::vector<std::string>& env,
             std::string* error);
  // Waits until the output has a line starting with `prefix`; returns the
  // rest of that line, or "" when the child exits or `timeout` passes first.
  std::string WaitForLine(const std::string& prefix, std::chrono::milliseconds timeout);
  // Sends `signal` and waits for the exit; returns the exit code (128 +
  // signal when killed by one), or -1 after killing a child that did not
  // stop within `timeout`.
  int Stop(int signal, std::chrono::milliseconds timeout);
  bool running() const { return pid_ > 0; }
  // Everything the child wrote so far.
  std::string Output();

 private:
  void ReadUntilEof(int fd);
  int Reap();

  pid_t pid_ = -1;
  std::thread reader_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::string output_;  // GUARDED_BY(mu_)
  bool eof_ = false;    // GUARDED_BY(mu_)
};

}  // namespace atrium::testing
