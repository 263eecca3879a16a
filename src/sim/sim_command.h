// `atrium sim`: replays a trace through every requested policy and prints the
// GPU allocation ratio table (or JSON). The command's shell: options in,
// text out; the work is in experiment.h.
#pragma once

#include <ostream>
#include <string>

namespace atrium::sim {

struct SimCommandOptions {
  std::string nodes;     // empty: the bundled openb GPU node list
  std::string pods;      // empty: the bundled default pod list
  std::string policies;  // comma-separated; empty: every policy
  int seeds = 10;
  uint64_t first_seed = 42;
  double tune_ratio = 1.3;
  int jobs = 0;
  bool json = false;
};

// Returns the process exit status: 0, 1 on a failed run, 2 on bad options.
int RunSimCommand(const SimCommandOptions& options, std::ostream& out, std::ostream& err);

// The bundled trace files (data/alibaba-gpu-v2023 of the source tree, or of
// the working directory when run from a checkout).
std::string BundledTracePath(const std::string& file);

}  // namespace atrium::sim
