#include "threads/periodic_thread.h"

#include <chrono>
#include <utility>

#include "threads/thread_name.h"

namespace atrium {

PeriodicThread::PeriodicThread(std::string name, int64_t interval_ms, std::function<void()> round)
    : name_(std::move(name)), interval_ms_(interval_ms), round_(std::move(round)) {}

PeriodicThread::~PeriodicThread() { Stop(); }

void PeriodicThread::Start(First first) {
  std::lock_guard<std::mutex> lock(mu_);
  if (interval_ms_ <= 0 || thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this, first] { Loop(first); });
}

void PeriodicThread::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  // A round that stops its own thread leaves the join to the owner.
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void PeriodicThread::Loop(First first) {
  NameThisThread(name_);
  std::unique_lock<std::mutex> lock(mu_);
  bool wait = first == First::kAfterInterval;
  while (!stopping_) {
    if (wait) {
      cv_.wait_for(lock, std::chrono::milliseconds(interval_ms_), [this] { return stopping_; });
      if (stopping_) break;
    }
    wait = true;
    lock.unlock();
    round_();
    lock.lock();
  }
}

}  // namespace atrium
