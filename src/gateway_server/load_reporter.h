// LoadReporter: every interval, what this gateway sees of each managed
// deployment — requests waiting for a slot, how long the oldest has
// waited, requests running (Dispatcher::Loads; zeros for one it has no
// state for) — handed to a sink under this gateway's id. The sink is the
// store, where the serving controller's autoscaler sums the reports of
// every gateway that reported lately (src/serving/autoscale.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "gateway_server/dispatcher.h"
#include "gateway_server/policy_loader.h"
#include "model/gateway_records.h"
#include "threads/periodic_thread.h"

namespace atrium::gateway_server {

struct LoadReporterOptions {
  std::string gateway_id;      // unique per gateway process
  int64_t interval_ms = 1000;  // 0: no thread (tests call ReportNow)
};

class LoadReporter {
 public:
  using Sink = std::function<Status(const std::vector<DeploymentLoadReport>& reports)>;
  LoadReporter(Dispatcher& dispatcher, PolicyLoader& policy, const Clock& clock,
               LoadReporterOptions options, Sink sink);
  ~LoadReporter();  // Stop
  LoadReporter(const LoadReporter&) = delete;
  LoadReporter& operator=(const LoadReporter&) = delete;

  void Start();
  void Stop();
  // The reports a round sends now (the managed deployments of the current
  // snapshot, in its order).
  std::vector<DeploymentLoadReport> Collect() const;
  // One round: Collect, then the sink.
  Status ReportNow();

 private:
  Dispatcher& dispatcher_;
  PolicyLoader& policy_;
  const Clock& clock_;
  const LoadReporterOptions options_;
  const Sink sink_;
  bool was_failing_ = false;  // the timer thread only
  PeriodicThread timer_;      // last: stopped before the rest goes
};

}  // namespace atrium::gateway_server
