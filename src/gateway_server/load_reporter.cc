#include "gateway_server/load_reporter.h"

#include <spdlog/spdlog.h>

#include <unordered_map>
#include <utility>

namespace atrium::gateway_server {

LoadReporter::LoadReporter(Dispatcher& dispatcher, PolicyLoader& policy, const Clock& clock,
                           LoadReporterOptions options, Sink sink)
    : dispatcher_(dispatcher),
      policy_(policy),
      clock_(clock),
      options_(std::move(options)),
      sink_(std::move(sink)),
      timer_("gw-load", options_.interval_ms, [this] {
        Status s = ReportNow();
        if (!s.has_value() && !was_failing_) {
          spdlog::warn("gateway: cannot report deployment load: {}", s.error().message);
        }
        was_failing_ = !s.has_value();
      }) {}

LoadReporter::~LoadReporter() { Stop(); }

void LoadReporter::Start() { timer_.Start(); }

void LoadReporter::Stop() { timer_.Stop(); }

std::vector<DeploymentLoadReport> LoadReporter::Collect() const {
  const int64_t now = clock_.NowMillis();
  std::unordered_map<std::string, DeploymentLoadReport> seen;
  for (auto& r : dispatcher_.Loads(now)) seen.emplace(r.deployment_id, std::move(r));
  std::vector<DeploymentLoadReport> out;
  const auto snapshot = policy_.Current();
  for (const DeploymentRecord& d : snapshot->deployments()) {
    if (!d.managed()) continue;  // only the platform's own replicas scale
    DeploymentLoadReport r;
    if (auto it = seen.find(d.id); it != seen.end()) r = std::move(it->second);
    r.deployment_id = d.id;
    r.gateway_id = options_.gateway_id;
    r.reported_at = now;
    out.push_back(std::move(r));
  }
  return out;
}

Status LoadReporter::ReportNow() {
  std::vector<DeploymentLoadReport> reports = Collect();
  if (reports.empty()) return OkStatus();
  return sink_(reports);
}

}  // namespace atrium::gateway_server
