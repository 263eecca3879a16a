// The fairness scenario in virtual time (src/gateway_server/fairness_model.h):
// B's time to first token alone and while A floods, for the fair queue and
// FIFO, with the deployment's capacity and max_prefill as given.
//
// usage: fairness_model [--max-batch N] [--slots N] [--max-prefill N]
//                       [--burst N] [--max-tokens N] [--seconds S] [--seeds N]
#include "gateway_server/fairness_model.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

using atrium::gateway_server::FairnessModelConfig;
using atrium::gateway_server::PercentileOf;
using atrium::gateway_server::QueueDiscipline;
using atrium::gateway_server::RunFairnessModel;

int IntFlag(int argc, char** argv, const char* name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  FairnessModelConfig config;
  config.max_batch = IntFlag(argc, argv, "--max-batch", config.max_batch);
  config.slots = IntFlag(argc, argv, "--slots", config.slots);
  config.max_prefill = IntFlag(argc, argv, "--max-prefill", config.max_prefill);
  config.burst = IntFlag(argc, argv, "--burst", config.burst);
  config.max_tokens = IntFlag(argc, argv, "--max-tokens", config.max_tokens);
  config.seconds = IntFlag(argc, argv, "--seconds", 120);
  const int seeds = IntFlag(argc, argv, "--seeds", 3);

  std::printf(
      "engine %s, max batch %d; deployment capacity %d, max_prefill %d, burst %d; prompt %d "
      "tokens, "
      "max_tokens %d; %.0f s per phase\n",
      config.profile.c_str(), config.max_batch, config.slots, config.max_prefill, config.burst,
      config.prompt_tokens, config.max_tokens, config.seconds);
  std::printf("%-5s %5s %10s %24s %24s %7s %13s %12s %15s\n", "queue", "seed", "cap req/s",
              "B alone TTFT p50/p99", "B + A flood p50/p99", "p99 x", "B wait p99", "flood req/s",
              "backlogged A/B");
  for (QueueDiscipline discipline : {QueueDiscipline::kFair, QueueDiscipline::kFifo}) {
    config.discipline = discipline;
    for (int seed = 1; seed <= seeds; ++seed) {
      // A alone, saturating: the engine's capacity; B sends half of a fair
      // share of two.
      auto capacity = RunFairnessModel(config, 0, 4 * config.slots, seed);
      if (!capacity.has_value()) {
        std::fprintf(stderr, "%s\n", capacity.error().message.c_str());
        return 1;
      }
      const double b_rate = capacity->completed_per_s / 4;
      auto alone = RunFairnessModel(config, b_rate, 0, seed);
      auto flood = RunFairnessModel(config, b_rate, 4 * config.slots, seed);
      // Both backlogged: the tokens each is served.
      FairnessModelConfig both_backlogged = config;
      both_backlogged.b_backlog = 4 * config.slots;
      auto backlogged = RunFairnessModel(both_backlogged, 0, 4 * config.slots, seed);
      if (!alone.has_value() || !flood.has_value() || !backlogged.has_value()) return 1;
      const double split =
          static_cast<double>(std::abs(backlogged->a_tokens - backlogged->b_tokens)) /
          static_cast<double>(std::max<int64_t>({backlogged->a_tokens, backlogged->b_tokens, 1}));
      const double a99 = PercentileOf(alone->b_ttft_ms, 99);
      const double f99 = PercentileOf(flood->b_ttft_ms, 99);
      std::printf(
          "%-5s %5d %10.1f %12.1f / %6.1f ms %12.1f / %6.1f ms %7.2f %10.1f ms %12.1f %14.1f%%\n",
          discipline == QueueDiscipline::kFair ? "fair" : "fifo", seed, capacity->completed_per_s,
          PercentileOf(alone->b_ttft_ms, 50), a99, PercentileOf(flood->b_ttft_ms, 50), f99,
          f99 / a99, PercentileOf(flood->b_wait_ms, 99), flood->completed_per_s, 100 * split);
    }
  }
  return 0;
}
