// An in-memory ExecutionBackend that keeps the interface's contract
// (src/exec/backend.h): Start is idempotent by workload id, Stop sends
// "SIGTERM" and kills after the grace, Forget is refused while a workload
// lives, ReadLog pages the log. Controls let a test make a workload run,
// exit, crash, ignore SIGTERM or get lost, and make the backend
// unavailable. Time is the test's ManualClock. Its state outlives any
// JobService, as a real backend's does across a control-plane crash.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "exec/backend.h"

namespace atrium::jobs::testing {

class FakeBackend final : public exec::ExecutionBackend {
 public:
  explicit FakeBackend(const Clock& clock) : clock_(clock) {}

  struct Workload {
    exec::LaunchSpec spec;
    exec::WorkloadStatus status;
    std::string log;
    bool ignores_term = false;
    int64_t kill_at_ms = -1;           // SIGKILL due (a stop with grace); -1 none
    std::vector<int64_t> stop_graces;  // every Stop's grace, in order
    int starts = 0;                    // Start calls that created it (must stay 1)
  };

  // --- controls ---
  // Start leaves new workloads starting (false) or running (true, default).
  void set_start_running(bool running) { start_running_ = running; }
  void set_unavailable(bool down) { unavailable_ = down; }
  // InspectMany fails (Unavailable) while Inspect still answers.
  void set_inspect_many_fails(bool fails) { inspect_many_fails_ = fails; }
  int inspect_calls() const { return inspect_calls_; }
  int inspect_many_calls() const { return inspect_many_calls_; }
  // Start fails with `error` (Ok: starts as usual).
  void set_start_error(Status error) { start_error_ = std::move(error); }
  void Run(const std::string& id) {
    Workload& w = at(id);
    w.status.phase = exec::WorkloadPhase::kRunning;
    w.status.started_ms = clock_.NowMillis();
  }
  void Exit(const std::string& id, int code) { End(at(id), code, 0); }
  void Crash(const std::string& id, int signal) { End(at(id), -1, signal); }
  void IgnoreTerm(const std::string& id) { at(id).ignores_term = true; }
  void Lose(const std::string& id) {
    Workload& w = at(id);
    w.status.phase = exec::WorkloadPhase::kLost;
    w.status.detail = "node gone";
  }
  void AppendLog(const std::string& id, const std::string& text) { at(id).log += text; }
  bool Knows(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    return workloads_.contains(id);
  }
  Workload Get(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    Tick();
    return workloads_.at(id);
  }
  int start_calls() const { return start_calls_; }
  // Makes the next Start wait, before it does anything, until
  // ReleaseStart: a slow backend (the Slurm CLIs take seconds).
  void HoldNextStart() {
    std::lock_guard<std::mutex> lock(gate_mu_);
    hold_next_start_ = true;
  }
  // True once a held Start waits; false when none does within `timeout`.
  bool WaitForHeldStart(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(gate_mu_);
    return gate_cv_.wait_for(lock, timeout, [this] { return start_held_; });
  }
  void ReleaseStart() {
    {
      std::lock_guard<std::mutex> lock(gate_mu_);
      start_released_ = true;
    }
    gate_cv_.notify_all();
  }

  // --- ExecutionBackend ---
  std::string_view name() const override { return "fake"; }

  Result<exec::WorkloadStatus> Start(const exec::LaunchSpec& spec) override {
    WaitIfHeld();
    std::lock_guard<std::mutex> lock(mu_);
    if (unavailable_) return Error::Unavailable("fake backend down");
    ++start_calls_;
    if (!start_error_.has_value()) return start_error_.error();
    if (spec.argv.empty() && spec.script.empty()) return Error::InvalidArgument("nothing to run");
    if (spec.argv.size() == 1 && spec.argv[0] == "refuse-me") {
      return Error::InvalidArgument("the host refuses this launch");
    }
    auto it = workloads_.find(spec.workload_id);
    if (it != workloads_.end()) return it->second.status;
    Workload w;
    w.spec = spec;
    w.starts = 1;
    w.status.workload_id = spec.workload_id;
    w.status.backend_ref = "fake-" + std::to_string(workloads_.size() + 1);
    for (const auto& g : spec.gpus) w.status.gpus.push_back(g.index);
    if (start_running_) {
      w.status.phase = exec::WorkloadPhase::kRunning;
      w.status.started_ms = clock_.NowMillis();
    }
    workloads_[spec.workload_id] = w;
    return w.status;
  }

  Result<exec::WorkloadStatus> Inspect(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++inspect_calls_;
    if (unavailable_) return Error::Unavailable("fake backend down");
    Tick();
    auto it = workloads_.find(id);
    if (it == workloads_.end()) return Error::NotFound("no workload " + id);
    return it->second.status;
  }

  Result<std::map<std::string, exec::WorkloadStatus>> InspectMany(
      const std::vector<std::string>& ids) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++inspect_many_calls_;
    if (unavailable_ || inspect_many_fails_) return Error::Unavailable("fake backend down");
    Tick();
    std::map<std::string, exec::WorkloadStatus> out;
    for (const auto& id : ids) {
      if (auto it = workloads_.find(id); it != workloads_.end()) out.emplace(id, it->second.status);
    }
    return out;
  }

  Result<std::vector<exec::WorkloadStatus>> List() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (unavailable_) return Error::Unavailable("fake backend down");
    Tick();
    std::vector<exec::WorkloadStatus> out;
    for (const auto& [id, w] : workloads_) out.push_back(w.status);
    return out;
  }

  Status Stop(const std::string& id, int64_t grace_ms) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (unavailable_) return Error::Unavailable("fake backend down");
    auto it = workloads_.find(id);
    if (it == workloads_.end()) return Error::NotFound("no workload " + id);
    Workload& w = it->second;
    w.stop_graces.push_back(grace_ms);
    if (!Alive(w)) return OkStatus();
    if (!w.ignores_term || grace_ms <= 0) {
      End(w, -1, w.ignores_term ? 9 : 15);
    } else if (w.kill_at_ms < 0 || clock_.NowMillis() + grace_ms < w.kill_at_ms) {
      w.kill_at_ms = clock_.NowMillis() + grace_ms;
    }
    return OkStatus();
  }

  Result<exec::LogChunk> ReadLog(const std::string& id, int64_t offset,
                                 int64_t max_bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = workloads_.find(id);
    if (it == workloads_.end()) return Error::NotFound("no workload " + id);
    const Workload& w = it->second;
    exec::LogChunk c;
    const int64_t size = static_cast<int64_t>(w.log.size());
    c.offset = std::min(offset, size);
    c.data = w.log.substr(static_cast<size_t>(c.offset), static_cast<size_t>(max_bytes));
    c.next_offset = c.offset + static_cast<int64_t>(c.data.size());
    c.complete = !Alive(w) && c.next_offset == size;
    return c;
  }

  Status Forget(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = workloads_.find(id);
    if (it == workloads_.end()) return OkStatus();
    if (Alive(it->second)) return Error::FailedPrecondition("workload " + id + " runs");
    workloads_.erase(it);
    forgotten_.push_back(id);
    return OkStatus();
  }

  Status Release(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = workloads_.find(id);
    if (it == workloads_.end()) return Error::NotFound("no workload " + id);
    if (Alive(it->second)) return Error::FailedPrecondition("workload " + id + " runs");
    if (std::find(released_.begin(), released_.end(), id) == released_.end())
      released_.push_back(id);
    return OkStatus();
  }

  Status SyncTenant(const exec::TenantAccount& account) override {
    std::lock_guard<std::mutex> lock(mu_);
    synced_.push_back(account.tenant_id + ":" + account.state);
    return OkStatus();
  }

  Status WatchEnds(const exec::EndHint& hint) override {
    std::lock_guard<std::mutex> lock(mu_);
    hint_ = hint;
    return OkStatus();
  }
  void StopWatchingEnds() override {
    std::lock_guard<std::mutex> lock(mu_);
    hint_ = nullptr;
  }
  // Tells the job service's watcher (if one is set) that `id` may have
  // ended, as a backend that hears an end does; ends it first with `code`
  // unless `code` is nullopt (a hint that comes early: the workload still
  // runs, as a Slurm job does while it completes).
  void HintEnd(const std::string& id, std::optional<int> code) {
    exec::EndHint hint;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (code.has_value()) End(workloads_.at(id), *code, 0);
      hint = hint_;
    }
    if (hint) hint(id);
  }
  // Ends `id` under the lock, without a hint (a thread of the service may
  // be looking at it).
  void ExitLocked(const std::string& id, int code) {
    std::lock_guard<std::mutex> lock(mu_);
    End(workloads_.at(id), code, 0);
  }
  bool watched() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<bool>(hint_);
  }

  std::vector<std::string> released() {
    std::lock_guard<std::mutex> lock(mu_);
    return released_;
  }

  std::vector<std::string> forgotten() {
    std::lock_guard<std::mutex> lock(mu_);
    return forgotten_;
  }

 private:
  static bool Alive(const Workload& w) {
    return w.status.phase == exec::WorkloadPhase::kStarting ||
           w.status.phase == exec::WorkloadPhase::kRunning;
  }
  void End(Workload& w, int code, int signal) {
    w.status.phase = exec::WorkloadPhase::kExited;
    w.status.exit_code = code;
    w.status.signal = signal;
    w.status.ended_ms = clock_.NowMillis();
    w.kill_at_ms = -1;
  }
  // SIGKILLs whose grace has passed.
  void Tick() {
    for (auto& [id, w] : workloads_) {
      if (Alive(w) && w.kill_at_ms >= 0 && clock_.NowMillis() >= w.kill_at_ms) End(w, -1, 9);
    }
  }
  void WaitIfHeld() {
    std::unique_lock<std::mutex> lock(gate_mu_);
    if (!hold_next_start_) return;
    hold_next_start_ = false;
    start_held_ = true;
    gate_cv_.notify_all();
    gate_cv_.wait(lock, [this] { return start_released_; });
    start_held_ = false;
    start_released_ = false;
  }
  Workload& at(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    return workloads_.at(id);
  }

  const Clock& clock_;
  std::mutex mu_;
  exec::EndHint hint_;
  std::map<std::string, Workload> workloads_;
  std::vector<std::string> forgotten_;
  std::vector<std::string> released_;
  std::vector<std::string> synced_;
  Status start_error_ = OkStatus();
  bool start_running_ = true;
  bool unavailable_ = false;
  bool inspect_many_fails_ = false;
  int inspect_calls_ = 0;       // GUARDED_BY(mu_)
  int inspect_many_calls_ = 0;  // GUARDED_BY(mu_)
  int start_calls_ = 0;
  std::mutex gate_mu_;  // HoldNextStart's gate
  std::condition_variable gate_cv_;
  bool hold_next_start_ = false;
  bool start_held_ = false;
  bool start_released_ = false;
};

}  // namespace atrium::jobs::testing
