// The engine simulator's pure core: a model of a GPU inference engine doing
// continuous batching, with time injected (microseconds on the caller's
// clock). No threads, no I/O, no clock: the shell (server.h) calls Advance()
// when NextEventTime() comes and relays the events.
//
// The model, one step at a time:
//  - A step starts as soon as there is work: at the end of the previous step,
//    or, when the engine was idle, at the submit time of the first waiting
//    request.
//  - At a step's start, waiting requests join the running batch in FIFO order
//    while it has fewer than max_batch requests (requests submitted during a
//    step wait for its end: continuous batching joins at step boundaries).
//  - The step lasts prefill(prompt tokens of the requests that just joined)
//    + decode_step(batch size). Prefill stalls the whole batch, as in an
//    engine without chunked prefill.
//  - At the step's end every request in the batch produces one token; a
//    request that reached its limit (max_tokens, or its stop length) finishes
//    and leaves the batch, freeing its slot for the next step.
//  - Cancel() removes a request at once: a running one frees its slot for the
//    next step, a waiting one never runs.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/result.h"

namespace atrium::engine_sim {

// Time in the model: microseconds on the caller's clock (any origin).
using Micros = int64_t;

// How fast one simulated GPU serves one model.
struct Profile {
  std::string name;
  int max_batch = 1;                // requests decoded together (>= 1)
  double prefill_tokens_per_s = 0;  // prompt tokens per second; 0: prefill is free
  double decode_base_ms = 0;        // decode step = base + per_seq * batch size
  double decode_per_seq_ms = 0;
  int max_context = 8192;  // prompt + completion tokens of one request

  Micros DecodeStepMicros(int batch_size) const;
  Micros PrefillMicros(int64_t prompt_tokens) const;
  // No delay of any kind: the shell answers such requests inline.
  bool IsInstant() const;
};

// The built-in profiles, in a fixed order: h100-llama3-8b, a100-llama3-8b,
// instant, slow, idle (see engine.cc for their numbers and where they come from).
const std::vector<Profile>& BuiltinProfiles();
// A built-in profile by name; kNotFound naming the known ones otherwise.
Result<Profile> FindProfile(std::string_view name);
// "h100-llama3-8b, a100-llama3-8b, instant, slow, idle"
std::string BuiltinProfileNames();

// --- Deterministic token accounting and text --------------------------------

// Prompt tokens of a piece of text: ceil(bytes / 4), about what BPE
// tokenizers give for English. A chat prompt counts each message as
// kTokensPerChatMessage + ceil(bytes of its text content / 4) (the +4 stands
// for the role and the message delimiters of chat templates).
int64_t CountTextTokens(std::string_view text);
inline constexpr int kTokensPerChatMessage = 4;

// Hashes the text that determines a completion. Feed it the prompt's parts in
// order; the same parts and seed always give the same value.
class TextHasher {
 public:
  explicit TextHasher(uint64_t seed = 0);
  void Add(std::string_view part);  // parts are length-delimited: "ab"+"c" != "a"+"bc"
  uint64_t value() const { return state_; }

 private:
  uint64_t state_;
};

// Token `index` (0-based) of the completion of a prompt with hash
// `text_hash`: a word of a fixed list, with a leading space except for token 0.
// The view points to static storage.
std::string_view TokenText(uint64_t text_hash, int index);
// Tokens [0, tokens) concatenated.
std::string CompletionText(uint64_t text_hash, int tokens);
// A deterministic "natural" completion length in [1, max_length] for the
// prompt, or 0 when max_length <= 0 (no natural stop: requests run to max_tokens).
int NaturalLength(uint64_t text_hash, int max_length);

// --- The engine --------------------------------------------------------------

using RequestId = uint64_t;  // never 0

struct EngineRequest {
  int64_t prompt_tokens = 0;  // >= 0
  int max_tokens = 16;        // >= 1
  int stop_after = 0;         // > 0: finish with kStop after this many tokens if <= max_tokens
};

enum class FinishReason { kLength, kStop };
// "length" or "stop", as in OpenAI's finish_reason.
std::string_view FinishReasonName(FinishReason reason);

struct EngineEvent {
  enum class Kind { kToken, kFinished };
  Kind kind = Kind::kToken;
  RequestId id = 0;
  Micros time = 0;                              // end of the step that produced it
  int token_index = 0;                          // kToken: 0-based
  int completion_tokens = 0;                    // kFinished: tokens produced in all
  FinishReason reason = FinishReason::kLength;  // kFinished
};

struct EngineStats {
  int64_t submitted = 0;
  int64_t finished = 0;
  int64_t cancelled = 0;
  int64_t steps = 0;
  int64_t tokens_generated = 0;
  int64_t prompt_tokens_prefilled = 0;
  int max_batch_seen = 0;  // largest batch a step ran with
};

class Engine {
 public:
  // profile.max_batch < 1 is treated as 1.
  explicit Engine(Profile profile);

  const Profile& profile() const { return profile_; }

  // Queues a request submitted at `now` (callers pass non-decreasing times).
  // kInvalidArgument when max_tokens < 1, prompt_tokens < 0, or prompt +
  // max_tokens exceed the profile's max_context.
  Result<RequestId> Submit(const EngineRequest& request, Micros now);

  // Removes a waiting or running request at once; it produces no further
  // events. False when the id is unknown or already finished.
  bool Cancel(RequestId id);

  // Runs every step that ends at or before `now` and returns their events in
  // order: per step, one kToken per request in the batch, then kFinished for
  // those that reached their limit right after their last kToken.
  std::vector<EngineEvent> Advance(Micros now);

  // When the next event is due (the end of the step in progress, or the
  // start of the next step when only waiting requests remain); nullopt when
  // the engine has nothing to do.
  std::optional<Micros> NextEventTime() const;

  int running() const { return static_cast<int>(running_.size()); }
  int waiting() const { return waiting_live_; }
  const EngineStats& stats() const { return stats_; }

 private:
  struct Sequence {
    int64_t prompt_tokens = 0;
    int limit = 0;  // tokens after which it finishes
    FinishReason reason = FinishReason::kLength;
    int produced = 0;
    Micros submitted = 0;
    bool running = false;
    size_t slot = 0;  // index in running_ while running
  };

  bool StartStep(Micros now);
  void CompleteStep(std::vector<EngineEvent>& events);
  void DropCancelledFront();

  Profile profile_;
  RequestId next_id_ = 1;
  std::unordered_map<RequestId, Sequence> sequences_;  // waiting and running
  std::deque<RequestId> waiting_;  // FIFO; may hold cancelled ids, never at the front
  int waiting_live_ = 0;
  std::vector<RequestId> running_;
  bool in_step_ = false;
  Micros step_end_ = 0;
  Micros clock_ = 0;  // end of the last completed step
  EngineStats stats_;
};

}  // namespace atrium::engine_sim
