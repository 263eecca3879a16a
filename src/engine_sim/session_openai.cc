// Session: the endpoints a connection answers — completions (streamed or
// not), embeddings, and the simulator's status.
#include <algorithm>
#include <ctime>

#include "engine_sim/json_text.h"
#include "engine_sim/session.h"

namespace atrium::engine_sim {

std::string Session::MetricsText() const {
  std::lock_guard lock(core_->mu);
  // vLLM's names, so what reads a vLLM server's load reads this one's.
  const std::string running = std::to_string(core_->engine.running());
  const std::string waiting = std::to_string(core_->engine.waiting());
  return "# HELP vllm:num_requests_running Requests in the batch (atrium engine simulator).\n"
         "# TYPE vllm:num_requests_running gauge\n"
         "vllm:num_requests_running " +
         running +
         "\n"
         "# HELP vllm:num_requests_waiting Requests waiting for the batch (atrium engine "
         "simulator).\n"
         "# TYPE vllm:num_requests_waiting gauge\n"
         "vllm:num_requests_waiting " +
         waiting + "\n";
}

std::string Session::StatusJson() const {
  std::lock_guard lock(core_->mu);
  const EngineStats& s = core_->engine.stats();
  std::string out = R"({"simulator":"atrium-engine-sim","profile":)";
  AppendJsonString(core_->profile.name, out);
  out += R"(,"max_batch":)" + std::to_string(core_->engine.profile().max_batch);
  out += R"(,"running":)" + std::to_string(core_->engine.running());
  out += R"(,"waiting":)" + std::to_string(core_->engine.waiting());
  out += R"(,"submitted":)" + std::to_string(s.submitted);
  out += R"(,"finished":)" + std::to_string(s.finished);
  out += R"(,"cancelled":)" + std::to_string(s.cancelled);
  out += R"(,"steps":)" + std::to_string(s.steps);
  out += R"(,"tokens_generated":)" + std::to_string(s.tokens_generated);
  out += R"(,"max_batch_seen":)" + std::to_string(s.max_batch_seen);
  out += '}';
  return out;
}

std::string Session::RecordId() {
  return client_request_id_.empty() ? "esim-" + core_->NextId() : client_request_id_;
}

std::string Session::RequestIdHeader(const std::string& id) {
  std::string header = "X-Request-Id: ";
  header += id;
  header += "\r\n";
  return header;
}

void Session::Embeddings(const std::string& body) {
  auto request = ParseEmbeddingRequest(body, core_->Served(), core_->options.seed);
  if (!request.has_value()) return RespondError(request.error());
  const std::string id = RecordId();
  core_->served.Begin({.request_id = id,
                       .model = request->model,
                       .endpoint = std::string(EndpointName(Endpoint::kEmbeddings)),
                       .prompt_tokens = request->prompt_tokens,
                       .stream = false,
                       .finished = true});
  Respond(200, "application/json", EmbeddingResponseJson(*request), AfterWrite::kNextRequest,
          RequestIdHeader(id));
}

void Session::Scores(bool rerank, const std::string& body) {
  auto request = rerank ? ParseRerankRequest(body, core_->Served(), core_->options.seed)
                        : ParseScoreRequest(body, core_->Served(), core_->options.seed);
  if (!request.has_value()) return RespondError(request.error());
  const std::string id = RecordId();
  core_->served.Begin({.request_id = id,
                       .model = request->model,
                       .endpoint = rerank ? "rerank" : "score",
                       .prompt_tokens = request->prompt_tokens,
                       .stream = false,
                       .finished = true});
  const std::string own = (rerank ? "rerank-" : "score-") + core_->NextId();
  Respond(200, "application/json",
          rerank ? RerankResponseJson(*request, own)
                 : ScoreResponseJson(*request, own, static_cast<int64_t>(std::time(nullptr))),
          AfterWrite::kNextRequest, RequestIdHeader(id));
}

void Session::Transcription(const std::string& body) {
  auto request =
      ParseTranscriptionRequest(content_type_, body, core_->Served(), core_->options.seed);
  if (!request.has_value()) return RespondError(request.error());
  const std::string id = RecordId();
  const uint64_t record = core_->served.Begin({.request_id = id,
                                               .model = request->model,
                                               .endpoint = "audio.transcriptions",
                                               .prompt_tokens = request->audio_tokens,
                                               .stream = false,
                                               .finished = false});
  core_->served.End(record, request->words, /*cancelled=*/false);
  Respond(200, request->text_format ? "text/plain; charset=utf-8" : "application/json",
          TranscriptionResponseBody(*request), AfterWrite::kNextRequest, RequestIdHeader(id));
}

void Session::StartCompletion(Endpoint endpoint, const std::string& body) {
  auto parsed = ParseCompletionRequest(endpoint, body, core_->Served(), core_->options.seed);
  if (!parsed.has_value()) return RespondError(parsed.error());
  const Profile& profile = core_->profile;
  const int64_t context_left = profile.max_context - parsed->prompt_tokens;
  const int max_tokens = parsed->max_tokens.value_or(static_cast<int>(
      std::min<int64_t>(core_->options.default_max_tokens, std::max<int64_t>(context_left, 0))));
  if (context_left < 1 || max_tokens > context_left) {
    return RespondError(
        400,
        "This model's maximum context length is " + std::to_string(profile.max_context) +
            " tokens. However, you requested " +
            std::to_string(parsed->prompt_tokens + std::max(max_tokens, 1)) + " tokens (" +
            std::to_string(parsed->prompt_tokens) + " in the prompt, " +
            std::to_string(std::max(max_tokens, 1)) + " in the completion).",
        "invalid_request_error",
        endpoint == Endpoint::kChatCompletions ? "messages"
        : endpoint == Endpoint::kResponses     ? "input"
                                               : "prompt",
        "context_length_exceeded");
  }

  auto c = std::make_unique<Completion>();
  c->request = std::move(*parsed);
  {
    std::lock_guard lock(core_->mu);
    const size_t blocks = core_->prefix_cache.LookupAndInsert(c->request.prefix_blocks);
    c->request.cached_tokens = CachedTokens(blocks, c->request.prompt_tokens);
  }
  const std::string own_id = core_->NextId();
  const std::string record_id = client_request_id_.empty() ? "esim-" + own_id : client_request_id_;
  c->meta = {.endpoint = endpoint,
             .id = (endpoint == Endpoint::kChatCompletions ? "chatcmpl-"
                    : endpoint == Endpoint::kResponses     ? "resp_"
                                                           : "cmpl-") +
                   own_id,
             .created = static_cast<int64_t>(std::time(nullptr)),
             .model = c->request.model};
  if (c->request.stream) {
    if (endpoint == Endpoint::kResponses) {
      c->responses_events.emplace(c->meta, c->request.tool_call);
    } else {
      c->events.emplace(c->meta, c->request.include_usage);
    }
    // HTTP/1.0 has no chunked encoding: the end of the stream is the close.
    if (version_ < 11) keep_alive_ = false;
  }
  chunked_ = version_ >= 11;
  c->record = core_->served.Begin({.request_id = record_id,
                                   .model = c->request.model,
                                   .endpoint = std::string(EndpointName(endpoint)),
                                   .prompt_tokens = c->request.prompt_tokens,
                                   .cached_tokens = c->request.cached_tokens,
                                   .cache_salt = c->request.cache_salt,
                                   .stream = c->request.stream});
  request_id_header_ = RequestIdHeader(record_id);
  after_write_ = keep_alive_ ? AfterWrite::kNextRequest : AfterWrite::kClose;
  // A function call ends with its arguments; text at its natural length.
  const int stop_after =
      c->request.tool_call ? ToolCallTokens(*c->request.tool_call)
                           : NaturalLength(c->request.text_hash, core_->options.max_natural_length);
  const bool stream = c->request.stream;
  completion_ = std::move(c);

  if (profile.IsInstant()) {
    // Every token at once, in one write, without the engine or its timer.
    const bool stops = stop_after > 0 && stop_after <= max_tokens;
    const int n = stops ? stop_after : max_tokens;
    holding_writes_ = true;
    if (stream) {
      for (int i = 0; i < n; ++i) OnToken(i);
    }
    OnFinished(n, stops ? FinishReason::kStop : FinishReason::kLength);
    holding_writes_ = false;
    return Flush();
  }

  // What the prefix cache served is not computed again.
  auto id = core_->Submit(
      {.prompt_tokens = completion_->request.prompt_tokens - completion_->request.cached_tokens,
       .max_tokens = max_tokens,
       .stop_after = stop_after},
      shared_from_this(), stream);
  if (!id.has_value()) {  // the checks above make this unreachable
    core_->served.End(completion_->record, 0, /*cancelled=*/true);
    completion_.reset();
    return RespondError(id.error());
  }
  completion_->engine_id = *id;
  // A long-lived stream keeps no read buffer it does not need.
  if (buffer_.size() == 0) buffer_.shrink_to_fit();
  Watch();
}

}  // namespace atrium::engine_sim
