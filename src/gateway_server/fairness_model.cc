#include "gateway_server/fairness_model.h"

#include <algorithm>
#include <map>
#include <random>
#include <utility>

#include "engine_sim/engine.h"

namespace atrium::gateway_server {
namespace {

using engine_sim::Micros;

constexpr const char* kUrl = "http://engine-sim.model";
constexpr Micros kTick = 100;              // the loop's resolution
constexpr Micros kSettle = 5'000'000;      // before anything is measured
constexpr Micros kOrigin = 1'000'000'000;  // any origin: the dispatcher wants ms > 0

}  // namespace

Result<FairnessModelOutcome> RunFairnessModel(const FairnessModelConfig& config, double b_rate,
                                              int a_backlog, uint32_t seed) {
  ATRIUM_ASSIGN_OR_RETURN(engine_sim::Profile profile, engine_sim::FindProfile(config.profile));
  profile.max_batch = config.max_batch;
  engine_sim::Engine engine(profile);
  DeploymentRecord deployment;
  deployment.id = "dep_model";
  deployment.model = "model";
  deployment.endpoints = {{kUrl, config.slots, config.max_prefill, config.burst}};
  DispatcherOptions options;
  options.discipline = config.discipline;
  Dispatcher dispatcher(options);

  struct Live {
    SlotRequest request;
    Micros arrived = 0;
    bool first_token = false;
  };
  std::map<uint64_t, Live> waiting;               // gateway id → request in the queue
  std::map<engine_sim::RequestId, Live> running;  // engine id → request upstream
  uint64_t next_id = 1;
  int a_waiting = 0;
  int b_waiting = 0;
  int64_t completed = 0;
  FairnessModelOutcome out;
  Micros now = kOrigin;
  const Micros measured_from = now + kSettle;
  const Micros end = measured_from + static_cast<Micros>(config.seconds * 1e6);
  std::mt19937 rng(seed);
  std::exponential_distribution<double> gap(b_rate > 0 ? b_rate / 1e6 : 1);
  double next_b = b_rate > 0 && config.b_backlog == 0 ? static_cast<double>(now) + gap(rng) : 1e300;
  auto measured = [&](const Live& live) {
    return live.request.tenant_id == "b" && live.arrived >= measured_from;
  };

  Status status;  // ok until the engine or the dispatcher refuses a request
  auto start = [&](Live live) {
    if (measured(live)) out.b_wait_ms.push_back(static_cast<double>(now - live.arrived) / 1000.0);
    engine_sim::EngineRequest r{.prompt_tokens = config.prompt_tokens,
                                .max_tokens = config.max_tokens};
    auto id = engine.Submit(r, now);
    if (!id.has_value()) {
      status = std::move(id).error();
      return;
    }
    running.emplace(*id, std::move(live));
  };
  auto collect_grants = [&] {
    for (auto it = waiting.begin(); it != waiting.end();) {
      if (dispatcher.TakeGrant(it->first)) {
        if (it->second.request.tenant_id == "a") --a_waiting;
        if (it->second.request.tenant_id == "b") --b_waiting;
        start(std::move(it->second));
        it = waiting.erase(it);
      } else {
        ++it;
      }
    }
  };
  auto admit = [&](const std::string& tenant) {
    SlotRequest r;
    r.id = next_id++;
    r.tenant_id = tenant;
    r.key_id = tenant + "_key";
    r.deployment = &deployment;
    r.input_tokens = config.prompt_tokens;
    r.reserved_tokens = config.prompt_tokens + config.max_tokens;
    r.stream = true;
    Admission admission = dispatcher.Admit(r, now / 1000, [] {});
    Live live{r, now, false};
    switch (admission.kind) {
      case Admission::Kind::kStarted:
        start(std::move(live));
        break;
      case Admission::Kind::kQueued:
        if (tenant == "a") ++a_waiting;
        if (tenant == "b") ++b_waiting;
        waiting.emplace(r.id, std::move(live));
        collect_grants();
        break;
      case Admission::Kind::kRefused:
        status = Error::Internal("the model's request was refused: " + admission.reason);
        break;
    }
  };

  for (; now < end && status.has_value(); now += kTick) {
    for (const engine_sim::EngineEvent& e : engine.Advance(now)) {
      auto it = running.find(e.id);
      if (it == running.end()) continue;
      Live& live = it->second;
      if (e.kind == engine_sim::EngineEvent::Kind::kToken && !live.first_token) {
        live.first_token = true;
        if (measured(live)) {
          out.b_ttft_ms.push_back(static_cast<double>(e.time - live.arrived) / 1000.0);
        }
        dispatcher.FirstToken(live.request, now / 1000);
        collect_grants();
      }
      if (e.kind == engine_sim::EngineEvent::Kind::kFinished) {
        if (now >= measured_from) {
          ++completed;
          const int64_t tokens = config.prompt_tokens + e.completion_tokens;
          (it->second.request.tenant_id == "a" ? out.a_tokens : out.b_tokens) += tokens;
        }
        dispatcher.Finish(it->second.request, kUrl, Dispatcher::Outcome::kSucceeded,
                          {config.prompt_tokens, e.completion_tokens, 0}, now / 1000);
        running.erase(it);
        collect_grants();
      }
    }
    // A floods from the start of the measured time, after B ran alone (as in
    // the live benchmark, whose flood phase follows B's alone phase on the
    // same gateway); A alone starts at once.
    const bool a_floods = b_rate <= 0 || config.b_backlog > 0 || now >= measured_from;
    while (a_floods && a_waiting < a_backlog && status.has_value()) admit("a");
    while (b_waiting < config.b_backlog && status.has_value()) admit("b");
    while (next_b <= static_cast<double>(now) && status.has_value()) {
      admit("b");
      next_b += gap(rng);
    }
  }
  if (!status.has_value()) return std::move(status).error();
  out.completed_per_s = static_cast<double>(completed) / config.seconds;
  return out;
}

double PercentileOf(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto rank = static_cast<size_t>(p / 100 * static_cast<double>(values.size()));
  return values[std::min(values.size() - 1, rank)];
}

}  // namespace atrium::gateway_server
