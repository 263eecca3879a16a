// The fairness scenario of bench/gateway_fairness.py in virtual time: the
// gateway's own Dispatcher (fair queue, slot shares, pacing, limits) in front
// of the engine simulator's own core (continuous batching, a built-in
// profile), with no sockets, no clients and no clock. It measures what the
// gateway's logic and the engine's physics give, free of a shared machine's
// noise: a light tenant B's time to first token alone and while tenant A
// floods. Used by bench/fairness_model.cc and the dispatcher's tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "gateway_server/dispatcher.h"

namespace atrium::gateway_server {

struct FairnessModelConfig {
  std::string profile = "h100-llama3-8b";
  int max_batch = 64;      // the engine's
  int slots = 32;          // the deployment's one endpoint: capacity
  int max_prefill = 0;     // and max_prefill (0: no limit)
  int burst = 0;           // and burst slots
  int max_tokens = 32;     // every request's answer length
  int prompt_tokens = 37;  // bench/gateway_fairness.py's chat prompt, as the simulator counts it
  double seconds = 120;    // measured, after 5 s to settle
  // B, instead of sending at a rate, keeps this many requests waiting from
  // the start, as A does (the backlogged scenario); 0: B sends at b_rate.
  int b_backlog = 0;
  QueueDiscipline discipline = QueueDiscipline::kFair;
};

struct FairnessModelOutcome {
  std::vector<double> b_ttft_ms;  // B's requests that arrived in the measured time
  std::vector<double> b_wait_ms;  // their wait in the gateway's queue
  double completed_per_s = 0;     // every tenant's requests
  int64_t a_tokens = 0;           // tokens (prompt and answer) of each tenant's
  int64_t b_tokens = 0;           // requests completed in the measured time
};

// B sends `b_rate` streamed requests/s (Poisson, `seed`); A, when
// `a_backlog` > 0, keeps that many waiting in the queue from the start of
// the measured time (after B ran alone for 5 s; from the start when B sends
// nothing).
// Errors: an unknown profile, or requests the engine refuses (too long).
Result<FairnessModelOutcome> RunFairnessModel(const FairnessModelConfig& config, double b_rate,
                                              int a_backlog, uint32_t seed);

// The p-th percentile (nearest rank) of `values`; 0 when empty.
double PercentileOf(std::vector<double> values, double p);

}  // namespace atrium::gateway_server
