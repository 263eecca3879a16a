#include "gateway_server/policy_loader.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "common/thread_name.h"

namespace atrium::gateway_server {

PolicyLoader::PolicyLoader(PolicySource source, int poll_ms)
    : source_(std::move(source)), poll_ms_(poll_ms) {}

PolicyLoader::~PolicyLoader() { Stop(); }

Status PolicyLoader::Start() {
  ATRIUM_RETURN_IF_ERROR(Refresh());
  thread_ = std::thread([this] {
    NameThisThread("gw-policy");
    Loop();
  });
  return OkStatus();
}

void PolicyLoader::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Status PolicyLoader::Refresh() {
  std::lock_guard refresh_lock(refresh_mu_);
  auto marker = source_.marker();
  if (!marker.has_value()) {
    failures_.fetch_add(1);
    return marker.error();
  }
  if (*marker == marker_ && current_) return OkStatus();
  auto rows = source_.load();
  if (!rows.has_value()) {
    failures_.fetch_add(1);
    return rows.error();
  }
  // The rows carry the marker they were read at: a change between the two
  // reads is then seen (and loaded) on the next poll.
  const int64_t loaded_at = rows->marker;
  std::atomic_store(&current_, gateway::PolicySnapshot::Build(std::move(*rows), loaded_at));
  marker_ = loaded_at;
  return OkStatus();
}

void PolicyLoader::Loop() {
  std::unique_lock lock(mu_);
  bool was_failing = false;
  while (!stopping_) {
    wake_.wait_for(lock, std::chrono::milliseconds(poll_ms_));
    if (stopping_) break;
    lock.unlock();
    Status s = Refresh();
    if (!s.has_value() && !was_failing) {
      spdlog::warn("gateway: control plane unreachable, serving on the last good policy: {}",
                   s.error().message);
    } else if (s.has_value() && was_failing) {
      spdlog::info("gateway: control plane reachable again, policy reloaded");
    }
    was_failing = !s.has_value();
    lock.lock();
  }
}

}  // namespace atrium::gateway_server
