#include "gateway_server/policy_loader.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "gateway_server/policy_cache.h"

namespace atrium::gateway_server {
namespace {

int64_t WallNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

PolicyLoader::PolicyLoader(PolicySource source, int poll_ms, std::string cache_path)
    : source_(std::move(source)),
      cache_path_(std::move(cache_path)),
      poll_("gw-policy", poll_ms, [this] { Poll(); }) {}

PolicyLoader::~PolicyLoader() { Stop(); }

Status PolicyLoader::Start() {
  if (Status loaded = Refresh(); !loaded.has_value()) {
    if (cache_path_.empty()) return loaded;
    auto cached = LoadPolicyRows(cache_path_);
    if (!cached.has_value()) {
      return Error::Unavailable(loaded.error().message + "; and no saved policy to serve on (" +
                                cached.error().message + ")");
    }
    const int64_t version = cached->rows.marker;
    std::atomic_store(&current_, gateway::PolicySnapshot::Build(std::move(cached->rows), version));
    marker_ = -1;  // whatever the store says once it answers is newer
    const int64_t now_ms = WallNowMs();
    spdlog::warn(
        "gateway: control plane unreachable at start ({}); serving on the policy saved {} s ago",
        loaded.error().message, std::max<int64_t>(0, (now_ms - cached->saved_at) / 1000));
  }
  poll_.Start();
  return OkStatus();
}

void PolicyLoader::Stop() { poll_.Stop(); }

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
  if (!cache_path_.empty()) {
    const int64_t now_ms = WallNowMs();
    if (Status saved = SavePolicyRows(cache_path_, *rows, now_ms); !saved.has_value()) {
      spdlog::warn("gateway: cannot save the policy: {}", saved.error().message);
    }
  }
  std::atomic_store(&current_, gateway::PolicySnapshot::Build(std::move(*rows), loaded_at));
  marker_ = loaded_at;
  return OkStatus();
}

void PolicyLoader::Poll() {
  Status s = Refresh();
  if (!s.has_value() && !was_failing_) {
    spdlog::warn("gateway: control plane unreachable, serving on the last good policy: {}",
                 s.error().message);
  } else if (s.has_value() && was_failing_) {
    spdlog::info("gateway: control plane reachable again, policy reloaded");
  }
  was_failing_ = !s.has_value();
}

}  // namespace atrium::gateway_server
