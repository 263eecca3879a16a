// PolicyLoader: keeps the gateway's policy snapshot (keys, tenants,
// deployments, entitlements, limits) fresh. A thread asks the store for the
// policy marker every poll_ms and rebuilds the snapshot when it moved, so a
// control-plane change reaches the gateway within about poll_ms plus one
// load. When the store cannot be read the last good snapshot stays in force:
// the gateway keeps serving (DESIGN.md principle 3). With a cache path each
// snapshot's rows are also saved there (policy_cache.h), and a gateway that
// starts while the store cannot be read serves on them until it can.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "common/result.h"
#include "gateway/policy.h"
#include "model/gateway_records.h"
#include "threads/periodic_thread.h"

namespace atrium::gateway_server {

struct PolicySource {
  std::function<Result<int64_t>()> marker;          // Store::GatewayPolicyMarkerForGateway
  std::function<Result<GatewayPolicyRows>()> load;  // Store::LoadGatewayPolicyForGateway
};

class PolicyLoader {
 public:
  PolicyLoader(PolicySource source, int poll_ms, std::string cache_path = "");
  ~PolicyLoader();  // Stop()s

  // Loads the first snapshot, or when the store cannot be read the saved one
  // (an error if there is none: nothing to serve on), then starts polling.
  Status Start();
  void Stop();

  // The current snapshot; never null after Start().
  std::shared_ptr<const gateway::PolicySnapshot> Current() const {
    return std::atomic_load(&current_);
  }
  // Reloads now if the marker moved (tests; the thread does this by itself).
  Status Refresh();
  int64_t failures() const { return failures_.load(); }

 private:
  void Poll();

  const PolicySource source_;
  const std::string cache_path_;                            // "" = none
  std::shared_ptr<const gateway::PolicySnapshot> current_;  // atomic_load/atomic_store only
  int64_t marker_ = -1;                                     // loader thread (and Start)
  std::atomic<int64_t> failures_{0};
  std::mutex refresh_mu_;     // one Refresh at a time
  bool was_failing_ = false;  // poll thread only

  PeriodicThread poll_;  // last: stopped before the rest goes
};

}  // namespace atrium::gateway_server
