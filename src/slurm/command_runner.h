// The seam between the Slurm backend and the programs it runs. Commands are
// argv vectors executed directly (never through a shell), so no argument,
// whatever it holds, is parsed as shell code. Tests replace the runner with
// one that replays captured outputs (tests/slurm/fake_runner.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"

namespace atrium::slurm {

struct CommandOutput {
  int exit_code = 0;  // 0..255; 128+N when killed by signal N
  std::string out;
  std::string err;
};

class CommandRunner {
 public:
  virtual ~CommandRunner() = default;
  // Runs argv[0] (looked up in the commands' PATH) with argv. A non-zero exit is an
  // output, not an error; Unavailable when the program could not be started
  // or ran past the runner's time limit (it is killed then).
  virtual Result<CommandOutput> Run(const std::vector<std::string>& argv) = 0;
};

// The executable file `name` in the ':'-separated `search_path` (the first
// that may be run), `name` itself when it holds a '/', "" when none.
std::string FindProgram(const std::string& name, std::string_view search_path);

// Runs programs with fork + execve and a fixed environment (no variable of
// the control plane leaks into Slurm's commands), capturing stdout and
// stderr (each up to 16 MiB; the rest is dropped). argv[0] is looked up in
// that environment's PATH (none: nothing but paths with a '/' runs).
class ProcessCommandRunner : public CommandRunner {
 public:
  // `env`: the whole environment of every command (e.g. PATH, SLURM_CONF,
  // SLURM_TIME_FORMAT=%s). `timeout_ms`: a command running longer is killed.
  ProcessCommandRunner(const std::vector<std::pair<std::string, std::string>>& env,
                       int64_t timeout_ms);
  Result<CommandOutput> Run(const std::vector<std::string>& argv) override;

 private:
  std::vector<std::string> env_;
  std::string search_path_;  // env_'s PATH
  int64_t timeout_ms_;
};

}  // namespace atrium::slurm
