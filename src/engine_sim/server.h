// The engine simulator's HTTP shell: an OpenAI-compatible model server that
// behaves like a GPU inference engine without a GPU. HTTP/1.1 with
// keep-alive (Boost.Beast parses requests; responses are written as bytes),
// its own io_context and threads, one pump timer driving the pure Engine
// (engine.h) under one mutex, and per-connection strands.
//
// Endpoints (errors in OpenAI's shape {"error":{"message","type","param","code"}}):
//   POST /v1/chat/completions, /v1/completions   non-streaming, or SSE with
//        "stream": true (one event per token as the engine produces it;
//        stream_options.include_usage adds OpenAI's usage event)
//   POST /v1/responses                           OpenAI's Responses API, whole or
//        streamed as its response.* events (usage on response.completed)
//   POST /v1/embeddings                          deterministic unit vectors
//   POST /v1/audio/transcriptions                multipart audio in, text out
//   POST /v1/rerank, /v1/score                   vLLM's cross-encoder endpoints:
//        deterministic relevance scores
//   GET  /v1/models, /v1/models/{id}             owned_by "atrium-engine-sim"
//   POST /v1/load_lora_adapter, /v1/unload_lora_adapter   with --enable-lora:
//        adapters served as models (vLLM's run-time LoRA API)
//   GET  /sim/served                             what was served (served_log.h)
//   GET  /sim/status                             the engine's batch and counters
//   GET  /healthz                                {"status":"ok"}
// 400 malformed JSON or fields, 404 unknown model or path, 405 wrong method,
// 413 bodies over 4 MiB, 431 headers over 16 KiB.
//
// Costs: no thread per connection; an idle or streaming connection holds a
// socket, a timer and a few hundred bytes. With the `instant` profile a
// request never touches the engine, its mutex or the timer: it is answered
// inline on its connection's strand.
//
// A client that disconnects while its request waits or runs in the engine
// cancels it there at once (its batch slot is free for the next step) and the
// request is recorded as cancelled with the tokens actually written.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "engine_sim/engine.h"
#include "engine_sim/served_log.h"

namespace atrium::engine_sim {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  // The served model name; a comma-separated list serves several names from
  // the one engine.
  std::string model = "llama-3.1-8b-instruct";
  std::string profile = "h100-llama3-8b";  // a built-in profile (engine.h)
  std::optional<Profile> custom_profile;   // when set, used instead of `profile`
  int max_batch = 0;                       // > 0: overrides the profile's max_batch
  int threads = 2;                         // I/O threads
  // Completion tokens of a request that gives no max_tokens (capped by the
  // context left after the prompt).
  int default_max_tokens = 16;
  // > 0: each prompt also has a deterministic natural length in
  // [1, max_natural_length] (finish_reason "stop" when reached first).
  // 0: every request runs to its max_tokens ("length"), so usage is predictable.
  int max_natural_length = 0;
  uint64_t seed = 0;  // changes every completion text and embedding
  size_t max_served_records = ServedLog::kDefaultCapacity;
  // A connection waiting for (or sending) a request is closed after this long.
  int idle_timeout_ms = 300'000;
  // LoRA adapters loaded while it runs, as vLLM with --enable-lora and
  // VLLM_ALLOW_RUNTIME_LORA_UPDATING: POST /v1/load_lora_adapter
  // {"lora_name", "lora_path"} (a folder holding adapter_config.json, a JSON
  // object) serves `lora_name` as one more model; POST
  // /v1/unload_lora_adapter {"lora_name"} stops. At most kMaxAdapters.
  bool enable_lora = false;
  static constexpr size_t kMaxAdapters = 1024;
};

// GET /sim/status, also for tests.
struct EngineStatus {
  std::string profile;
  int max_batch = 0;
  int running = 0;
  int waiting = 0;
  EngineStats stats;
};

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();  // Stop()s if still running
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and starts serving on background threads; returns the bound port.
  // Errors: kInvalidArgument (bad options), kNotFound (unknown profile),
  // kUnavailable (cannot listen), kFailedPrecondition (started before).
  Result<int> Start();
  // Closes the listener and every connection (streams end abruptly and are
  // recorded as cancelled) and joins the threads. Idempotent.
  void Stop();

  // The profile in effect (with max_batch applied) and the served model
  // names; only after a successful Start(), valid as long as the Server.
  const Profile& profile() const;
  const std::vector<std::string>& models() const;
  // Zero values before Start().
  EngineStatus Status() const;
  ServedTotals Served() const;

  struct Core;  // server.cc's; public only so that its connection type can name it

 private:
  ServerOptions options_;
  std::unique_ptr<Core> core_;
  enum class Lifecycle { kNew, kRunning, kStopped } lifecycle_ = Lifecycle::kNew;
};

}  // namespace atrium::engine_sim
