#include "engine_sim/engine.h"

#include <algorithm>
#include <cmath>

namespace atrium::engine_sim {
namespace {

// Where the numbers come from. These are assumptions chosen to be realistic
// in shape (decode bound by memory bandwidth and growing with the batch,
// prefill bound by compute), not measurements of any engine:
//  - Llama-3-8B in BF16 is ~16 GB of weights. A decode step reads all of them
//    once: >= 4.8 ms at the H100 SXM's 3.35 TB/s. Engines such as vLLM and
//    TensorRT-LLM report ~80-100 tokens/s for one stream of an 8B model on an
//    H100, i.e. ~10-12 ms per step with scheduling overhead; the step grows
//    with the batch as KV-cache reads and attention grow, to ~30 ms at 64
//    sequences of moderate context. Hence 11.71 + 0.29 * batch: 12.0 ms at
//    batch 1, 30.3 ms at 64.
//  - Prefill costs ~2 FLOP per parameter per token (16 GFLOP/token); at
//    ~200 TFLOP/s effective (about 20 % of the H100's 989 TFLOP/s dense BF16,
//    for attention and small batches) that is ~12,000 tokens/s.
//  - A100 40GB: 1.56 TB/s and 312 TFLOP/s, ~22 GB left for KV cache after the
//    weights, so fewer sequences fit: 20 ms at batch 1 rising to ~40 ms at 32,
//    ~4,000 prefill tokens/s.
//  - max_context 8192: a common vLLM --max-model-len for an 8B model on one
//    GPU (Llama 3.1 accepts 128k, but few deployments give it that much KV).
const std::vector<Profile>& Profiles() {
  static const std::vector<Profile>* profiles = new std::vector<Profile>{
      {.name = "h100-llama3-8b",
       .max_batch = 64,
       .prefill_tokens_per_s = 12'000,
       .decode_base_ms = 11.71,
       .decode_per_seq_ms = 0.29,
       .max_context = 8192},
      {.name = "a100-llama3-8b",
       .max_batch = 32,
       .prefill_tokens_per_s = 4'000,
       .decode_base_ms = 19.4,
       .decode_per_seq_ms = 0.64,
       .max_context = 8192},
      // No delays at all: the "fast upstream" for proxy-overhead benchmarks.
      {.name = "instant",
       .max_batch = 1 << 30,
       .prefill_tokens_per_s = 0,
       .decode_base_ms = 0,
       .decode_per_seq_ms = 0,
       .max_context = 131'072},
      // One token per second per stream, however many: for tests that hold
      // many idle streams open.
      {.name = "slow",
       .max_batch = 1 << 20,
       .prefill_tokens_per_s = 0,
       .decode_base_ms = 1000,
       .decode_per_seq_ms = 0,
       .max_context = 131'072},
      // A token a minute: streams that stay open and silent, for measuring
      // what idle connections cost a proxy in front of it.
      {.name = "idle",
       .max_batch = 1 << 20,
       .prefill_tokens_per_s = 0,
       .decode_base_ms = 60'000,
       .decode_per_seq_ms = 0,
       .max_context = 131'072},
  };
  return *profiles;
}

// splitmix64's finalizer: a bijective mix with good avalanche.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// 64 plain lower-case words: no character needs escaping in JSON. Each holds
// its leading space; token 0 drops it.
constexpr std::string_view kWords[] = {
    " the",     " model",   " serves", " tokens",   " from",  " a",       " simulated", " engine",
    " with",    " batches", " of",     " requests", " and",   " every",   " step",      " yields",
    " one",     " word",    " per",    " stream",   " while", " prefill", " costs",     " time",
    " before",  " decode",  " begins", " on",       " an",    " idle",    " cluster",   " node",
    " that",    " keeps",   " its",    " promise",  " to",    " answer",  " each",      " prompt",
    " quickly", " under",   " load",   " without",  " any",   " real",    " gpu",       " at",
    " all",     " so",      " tests",  " can",      " count", " what",    " was",       " sent",
    " back",    " through", " the",    " gateway",  " in",    " order",   " again",     " today",
};
static_assert(std::size(kWords) == 64);

}  // namespace

Micros Profile::DecodeStepMicros(int batch_size) const {
  const double ms = decode_base_ms + decode_per_seq_ms * std::max(0, batch_size);
  return ms <= 0 ? 0 : std::llround(ms * 1000.0);
}

Micros Profile::PrefillMicros(int64_t prompt_tokens) const {
  if (prefill_tokens_per_s <= 0 || prompt_tokens <= 0) return 0;
  return std::llround(static_cast<double>(prompt_tokens) * 1e6 / prefill_tokens_per_s);
}

bool Profile::IsInstant() const {
  return prefill_tokens_per_s <= 0 && decode_base_ms <= 0 && decode_per_seq_ms <= 0;
}

const std::vector<Profile>& BuiltinProfiles() { return Profiles(); }

std::string BuiltinProfileNames() {
  std::string names;
  for (const Profile& p : Profiles()) {
    if (!names.empty()) names += ", ";
    names += p.name;
  }
  return names;
}

Result<Profile> FindProfile(std::string_view name) {
  for (const Profile& p : Profiles()) {
    if (p.name == name) return p;
  }
  return Error::NotFound("unknown engine profile '" + std::string(name) +
                         "' (known: " + BuiltinProfileNames() + ")");
}

int64_t CountTextTokens(std::string_view text) {
  return static_cast<int64_t>((text.size() + 3) / 4);
}

TextHasher::TextHasher(uint64_t seed) : state_(Mix(seed ^ 0x6a09e667f3bcc908ULL)) {}

void TextHasher::Add(std::string_view part) {
  // FNV-1a over the bytes, then the length, folded into the running state.
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : part) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  state_ = Mix(state_ ^ h) ^ Mix(part.size() + 0x243f6a8885a308d3ULL);
}

std::string_view TokenText(uint64_t text_hash, int index) {
  const uint64_t pick = Mix(text_hash + 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(index + 1));
  std::string_view word = kWords[pick % std::size(kWords)];
  return index == 0 ? word.substr(1) : word;
}

std::string CompletionText(uint64_t text_hash, int tokens) {
  std::string text;
  text.reserve(static_cast<size_t>(std::max(0, tokens)) * 8);
  for (int i = 0; i < tokens; ++i) text += TokenText(text_hash, i);
  return text;
}

int NaturalLength(uint64_t text_hash, int max_length) {
  if (max_length <= 0) return 0;
  return 1 + static_cast<int>(Mix(text_hash ^ 0x5851f42d4c957f2dULL) %
                              static_cast<uint64_t>(max_length));
}

std::string_view FinishReasonName(FinishReason reason) {
  return reason == FinishReason::kStop ? "stop" : "length";
}

Engine::Engine(Profile profile) : profile_(std::move(profile)) {
  profile_.max_batch = std::max(1, profile_.max_batch);
}

Result<RequestId> Engine::Submit(const EngineRequest& request, Micros now) {
  if (request.max_tokens < 1) return Error::InvalidArgument("max_tokens must be at least 1");
  if (request.prompt_tokens < 0) return Error::InvalidArgument("prompt_tokens must be >= 0");
  if (request.prompt_tokens + request.max_tokens > profile_.max_context) {
    return Error::InvalidArgument(
        "This model's maximum context length is " + std::to_string(profile_.max_context) +
        " tokens. However, you requested " +
        std::to_string(request.prompt_tokens + request.max_tokens) + " tokens (" +
        std::to_string(request.prompt_tokens) + " in the messages, " +
        std::to_string(request.max_tokens) + " in the completion).");
  }
  Sequence seq;
  seq.prompt_tokens = request.prompt_tokens;
  seq.limit = request.max_tokens;
  if (request.stop_after > 0 && request.stop_after <= request.max_tokens) {
    seq.limit = request.stop_after;
    seq.reason = FinishReason::kStop;
  }
  seq.submitted = now;
  const RequestId id = next_id_++;
  sequences_.emplace(id, seq);
  waiting_.push_back(id);
  ++waiting_live_;
  ++stats_.submitted;
  return id;
}

void Engine::DropCancelledFront() {
  while (!waiting_.empty() && !sequences_.contains(waiting_.front())) waiting_.pop_front();
}

bool Engine::Cancel(RequestId id) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return false;
  if (it->second.running) {
    // Swap-remove: O(1) however large the batch.
    const size_t slot = it->second.slot;
    const RequestId moved = running_.back();
    running_[slot] = moved;
    sequences_[moved].slot = slot;
    running_.pop_back();
  } else {
    --waiting_live_;
  }
  sequences_.erase(it);
  DropCancelledFront();
  ++stats_.cancelled;
  return true;
}

bool Engine::StartStep(Micros now) {
  DropCancelledFront();
  if (running_.empty() && waiting_.empty()) return false;
  Micros start = clock_;
  if (running_.empty()) start = std::max(clock_, sequences_.at(waiting_.front()).submitted);
  if (start > now) return false;
  int64_t prefill_tokens = 0;
  while (running_.size() < static_cast<size_t>(profile_.max_batch) && !waiting_.empty()) {
    Sequence& seq = sequences_.at(waiting_.front());
    if (seq.submitted > start) break;  // submitted after this step began: next boundary
    seq.running = true;
    seq.slot = running_.size();
    running_.push_back(waiting_.front());
    prefill_tokens += seq.prompt_tokens;
    waiting_.pop_front();
    --waiting_live_;
    DropCancelledFront();
  }
  if (running_.empty()) return false;
  stats_.prompt_tokens_prefilled += prefill_tokens;
  stats_.max_batch_seen = std::max(stats_.max_batch_seen, static_cast<int>(running_.size()));
  step_end_ = start + profile_.PrefillMicros(prefill_tokens) +
              profile_.DecodeStepMicros(static_cast<int>(running_.size()));
  in_step_ = true;
  return true;
}

void Engine::CompleteStep(std::vector<EngineEvent>& events) {
  in_step_ = false;
  clock_ = step_end_;
  ++stats_.steps;
  size_t kept = 0;
  for (size_t i = 0; i < running_.size(); ++i) {
    const RequestId id = running_[i];
    Sequence& seq = sequences_.at(id);
    events.push_back({.kind = EngineEvent::Kind::kToken,
                      .id = id,
                      .time = step_end_,
                      .token_index = seq.produced});
    ++seq.produced;
    ++stats_.tokens_generated;
    if (seq.produced >= seq.limit) {
      events.push_back({.kind = EngineEvent::Kind::kFinished,
                        .id = id,
                        .time = step_end_,
                        .completion_tokens = seq.produced,
                        .reason = seq.reason});
      ++stats_.finished;
      sequences_.erase(id);
      continue;
    }
    seq.slot = kept;
    running_[kept++] = id;
  }
  running_.resize(kept);
}

std::vector<EngineEvent> Engine::Advance(Micros now) {
  std::vector<EngineEvent> events;
  for (;;) {
    if (!in_step_ && !StartStep(now)) break;
    if (step_end_ > now) break;
    CompleteStep(events);
  }
  return events;
}

std::optional<Micros> Engine::NextEventTime() const {
  if (in_step_) return step_end_;
  if (!running_.empty()) return clock_;  // only before the first Advance after a step
  if (!waiting_.empty()) return std::max(clock_, sequences_.at(waiting_.front()).submitted);
  return std::nullopt;
}

}  // namespace atrium::engine_sim
