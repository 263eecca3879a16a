// The scrub runner: runs the scrub command of every GPU an ended allocation
// held (sched::ScrubHold), on worker threads of its own, never under the
// scheduler's lock, and reports each outcome to whoever started it (the
// SchedulingService, which frees the room or marks the GPU unhealthy).
//
// A command is an argv template per GPU model, run without a shell: each
// argument has its placeholders replaced and is passed as one argument, so
// nothing in a node name or profile can become shell syntax. Placeholders:
// {node} {index} {model} {kind} (gpu | mig | share) {mig_profile}
// {mig_start} {milli} (a share's milli-GPU; 1000 for whole GPUs and MIG);
// MIG and share fields are "" / -1 / 0 when they do not apply.
//
// Before a GPU is scrubbed, the runner waits until the allocation's
// workloads are gone (the probe), at most workload_timeout_ms; then the
// command runs in a process group of its own and is killed (the whole
// group) after timeout_ms. A scrub fails on a non-zero exit, a signal, a
// timeout, a command that cannot be started, or workloads that outlive the
// wait; the outcome's detail says which, with the last line the command
// wrote. With no command for the model, a scrub succeeds at once.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/result.h"

namespace atrium::scheduling {

struct ScrubOptions {
  // GPU model (catalog name) → argv template. Default: none.
  std::map<std::string, std::vector<std::string>> commands;
  // The argv template of models without their own. Default empty: no
  // command, every scrub succeeds at once (the GPU still passes through
  // "scrubbing", so the state is the same whatever is configured). On GPU
  // hosts operators set e.g. ["nvidia-smi", "--gpu-reset", "-i", "{index}"].
  std::vector<std::string> default_command;
  // How long one command may run before its process group is killed and
  // the scrub fails. Default 2 minutes.
  int64_t timeout_ms = 120'000;
  // How long the runner waits for an allocation's workloads to be gone
  // before the scrub fails. Default 10 minutes.
  int64_t workload_timeout_ms = 600'000;
  // How often it asks the probe meanwhile. Default 500 ms.
  int64_t workload_poll_ms = 500;
  // Scrubs run at once. Default 4.
  int workers = 4;
};

// InvalidArgument for an empty or blank argv element list entry, an unknown
// placeholder, an unknown GPU model, or a non-positive timeout or worker
// count.
Status ValidateScrubOptions(const ScrubOptions& options);

// One GPU to scrub.
struct ScrubJob {
  std::string allocation;
  std::string node;
  int gpu = 0;
  std::string model;
  std::string kind;  // gpu | mig | share
  std::string mig_profile;
  int mig_start = -1;
  int32_t milli = 0;

  bool operator==(const ScrubJob&) const = default;
};

struct ScrubOutcome {
  bool ok = false;
  std::string detail;  // why it failed: "exit status 3: <last line>", "timed out after 60000 ms"
};

// The argv for `job` (empty when no command is configured for its model).
// InvalidArgument for an unknown placeholder.
Result<std::vector<std::string>> ScrubArgv(const ScrubOptions& options, const ScrubJob& job);

// Runs `argv` (PATH lookup, no shell) with stdin from /dev/null and stdout
// and stderr captured (the last line kept for the detail), in its own
// process group, killed after timeout_ms. `stop` (optional): when it turns
// true the command is killed and the outcome says "stopped".
ScrubOutcome RunScrubCommand(const std::vector<std::string>& argv, int64_t timeout_ms,
                             const std::atomic<bool>* stop = nullptr);

class ScrubRunner {
 public:
  // true once no process of the allocation remains.
  using WorkloadProbe = std::function<bool(const std::string& allocation_id)>;
  // Called on a worker thread, with none of the runner's locks held.
  using Done = std::function<void(const ScrubJob& job, const ScrubOutcome& outcome)>;

  // `options` must pass ValidateScrubOptions.
  ScrubRunner(ScrubOptions options, Done done);
  ~ScrubRunner();
  ScrubRunner(const ScrubRunner&) = delete;
  ScrubRunner& operator=(const ScrubRunner&) = delete;

  // None set: workloads are taken as gone.
  void SetWorkloadProbe(WorkloadProbe probe);
  void Start();
  // Stops the workers; a command running is killed and its scrub is left
  // unfinished (not reported): the store still holds it, and the next start
  // runs it again. Idempotent.
  void Stop();
  // Queues a scrub; one already queued or running for the same (node, gpu,
  // allocation) is not queued twice.
  void Enqueue(ScrubJob job);

 private:
  using Key = std::tuple<std::string, int, std::string>;
  void WorkerLoop();
  // Waits for the allocation's workloads to be gone; false (with `detail`)
  // when they outlive the wait, or the runner stops.
  bool WaitForWorkloads(const std::string& allocation, std::string& detail);

  const ScrubOptions options_;
  const Done done_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ScrubJob> queue_;  // GUARDED_BY(mu_)
  std::set<Key> known_;         // GUARDED_BY(mu_): queued or running
  WorkloadProbe probe_;         // GUARDED_BY(mu_)
  bool running_ = false;        // GUARDED_BY(mu_)
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> workers_;
};

}  // namespace atrium::scheduling
