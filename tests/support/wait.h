// Waiting in tests for what another thread does, without sleeping a guessed
// time. A ChangeSignal is told (Notify) by the code that changes some state
// (a store stand-in as it inserts, the Dispatcher's on_change); a test waits
// on it until a condition on that state holds, re-checking after each
// change, for at most a timeout that only a broken run reaches.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace atrium::testing_support {

// Generous: a passing test never waits it out; a failing one ends.
inline constexpr std::chrono::milliseconds kWaitTimeout{10'000};

class ChangeSignal {
 public:
  // Something `done` may read has changed. Call after the change is visible.
  void Notify() {
    {
      std::lock_guard lock(mu_);
      ++changes_;
    }
    cv_.notify_all();
  }

  // Returns as soon as `done()` holds (true), or false after `timeout`.
  // `done` runs without this signal's lock held, so it may take the locks of
  // the state it reads (which Notify's callers may hold).
  template <class Done>
  bool WaitUntil(Done done, std::chrono::milliseconds timeout = kWaitTimeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      uint64_t seen = 0;
      {
        std::lock_guard lock(mu_);
        seen = changes_;
      }
      if (done()) return true;
      std::unique_lock lock(mu_);
      if (!cv_.wait_until(lock, deadline, [&] { return changes_ != seen; })) return done();
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t changes_ = 0;  // GUARDED_BY(mu_)
};

// For state whose owner tells nobody when it changes (another process's
// counters, a file another thread rewrites): re-checks every millisecond, for
// at most `timeout`. Prefer a ChangeSignal where the owner can notify.
template <class Done>
bool WaitUntil(Done done, std::chrono::milliseconds timeout = kWaitTimeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace atrium::testing_support
