// A thread that calls one function every `interval`, until stopped: the
// reconcile loops of the scheduler, the jobs, the serving controller, the
// GPU health watcher, the GPU meter and the gateway's policy poll. Stop wakes it at once (no wait
// for the interval) and joins; a round already running finishes first.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace atrium {

class PeriodicThread {
 public:
  // `name` as NameThisThread takes it; `round` runs on the thread, the
  // first one `interval_ms` after Start (at once with kAtOnce).
  PeriodicThread(std::string name, int64_t interval_ms, std::function<void()> round);
  ~PeriodicThread();  // Stop
  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;

  enum class First { kAfterInterval, kAtOnce };
  // Starts the thread; nothing when interval_ms <= 0 or already started.
  void Start(First first = First::kAfterInterval);
  // Idempotent; a later Start starts it again.
  void Stop();
  bool running() const { return thread_.joinable(); }

 private:
  void Loop(First first);

  const std::string name_;
  const int64_t interval_ms_;
  const std::function<void()> round_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;  // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace atrium
