// The OpenAI wire format as the engine simulator speaks it: request bodies
// in, response bodies and stream events out. Pure: no I/O, no clock.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "engine_sim/engine.h"
#include "engine_sim/prefix_cache.h"
#include "engine_sim/tools.h"

namespace atrium::engine_sim {

// owned_by of every model, system_fingerprint of every completion and the
// Server header: the simulator never passes for a real engine.
inline constexpr std::string_view kSimulatorName = "atrium-engine-sim";

enum class Endpoint { kChatCompletions, kCompletions, kEmbeddings, kResponses };
// "chat.completions", "completions", "embeddings", "responses"
std::string_view EndpointName(Endpoint endpoint);

struct CompletionRequest {
  Endpoint endpoint = Endpoint::kChatCompletions;
  std::string model;
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage; false unless streaming
  std::optional<int> max_tokens;  // max_tokens, or max_completion_tokens (chat); >= 1
  int64_t prompt_tokens = 0;      // see CountTextTokens and kTokensPerChatMessage
  uint64_t text_hash = 0;         // TextHasher(seed) over the prompt: picks the text
  // `cache_salt` (vLLM's; "" = none): the prompt's prefix-cache blocks are
  // named under it (prefix_cache.h).
  std::string cache_salt;
  std::vector<uint64_t> prefix_blocks;  // PrefixBlocks(cache_salt, the prompt)
  int64_t cached_tokens = 0;            // set by the server from its prefix cache
  // Chat and Responses: the function call it answers with instead of text
  // (tools.h); none: text.
  std::optional<ToolCall> tool_call;
};

// Parses a /v1/chat/completions, /v1/completions or /v1/responses body.
// Responses (OpenAI's Responses API, as vLLM serves it): `input` a string or
// a non-empty array of items (a message's `content` a string or parts whose
// "text" counts; other items' strings count), `instructions` a string
// counted as a system message, `max_output_tokens` >= 1; `stream` as for
// chat, never usage options (usage comes with response.completed);
// `previous_response_id` and `background` are refused (nothing is stored).
// Chat and completions: Fields the
// simulator does not use are ignored, as OpenAI-compatible servers do.
// Accepted prompts: chat `messages` (non-empty array of objects with a string
// `role` and `content` that is a string, null, or an array of parts whose
// "text" parts count); completions `prompt` as a string, or an array holding
// one string or one token array, or a token array (one prompt per request).
// Errors: kInvalidArgument for malformed JSON, a missing or ill-typed model,
// messages, prompt, max_tokens (< 1), stream, stream_options, or n != 1;
// kNotFound (message naming the model) when `model` is not one of `models`.
Result<CompletionRequest> ParseCompletionRequest(Endpoint endpoint, std::string_view body,
                                                 const std::vector<std::string>& models,
                                                 uint64_t seed);

inline constexpr int kDefaultEmbeddingDimensions = 8;

struct EmbeddingRequest {
  std::string model;
  std::vector<uint64_t> input_hashes;  // one per input, in order
  int64_t prompt_tokens = 0;           // sum of max(1, ceil(bytes / 4)) (or token count) per input
  int dimensions = kDefaultEmbeddingDimensions;
  bool base64 = false;  // encoding_format "base64" (what the openai SDKs ask for by default)
};

// Parses a /v1/embeddings body: `input` as a string, an array of strings, a
// token array or an array of token arrays; optional `dimensions` (1..4096)
// and `encoding_format` ("float" or "base64"). Errors as for completions.
Result<EmbeddingRequest> ParseEmbeddingRequest(std::string_view body,
                                               const std::vector<std::string>& models,
                                               uint64_t seed);

// vLLM's pooling endpoints with a cross-encoder's answers: a relevance
// score in [0, 1) per (query, document) pair, from their hash.
struct PairScores {
  std::string model;
  std::vector<std::string> documents;  // in the request's order
  std::vector<double> scores;          // one per document
  int64_t prompt_tokens = 0;           // per pair: its query's tokens + its document's
  int64_t top_n = 0;                   // rerank: the best this many; 0 = all
};
// POST /v1/rerank: "query" a string, "documents" a non-empty array of
// strings or {"text": ...} objects, "top_n" >= 0. Errors as for completions.
Result<PairScores> ParseRerankRequest(std::string_view body, const std::vector<std::string>& models,
                                      uint64_t seed);
// POST /v1/score: "text_1" and "text_2" strings or non-empty arrays; one
// text_1 is scored against every text_2, else they pair up (equal lengths).
Result<PairScores> ParseScoreRequest(std::string_view body, const std::vector<std::string>& models,
                                     uint64_t seed);
// vLLM's answers: results sorted by relevance_score, best first, at most
// top_n, usage {"total_tokens"}; and a list of {"index","object":"score",
// "score"} with usage prompt_tokens / total_tokens / completion_tokens 0.
std::string RerankResponseJson(const PairScores& scores, std::string_view id);
std::string ScoreResponseJson(const PairScores& scores, std::string_view id, int64_t created);

// POST /v1/audio/transcriptions, as OpenAI's transcription models answer it:
// multipart/form-data with "model" and a non-empty "file" (any audio: the
// simulator hears only its bytes), optional "prompt", "language" and
// "response_format" (json, the default, or text). The audio is ~640 bytes a
// token (16 kHz 16-bit PCM at ~50 tokens a second); the text is a word per
// 10 of them (at least 1, at most 256), picked by the file's hash. A
// streamed transcription is refused.
struct Transcription {
  std::string model;
  bool text_format = false;  // response_format "text": the bare text
  int64_t audio_tokens = 0;
  int64_t prompt_tokens = 0;  // the "prompt" field's text
  int words = 0;
  uint64_t audio_hash = 0;
};
Result<Transcription> ParseTranscriptionRequest(std::string_view content_type,
                                                std::string_view body,
                                                const std::vector<std::string>& models,
                                                uint64_t seed);
// The json body: {"text", "usage":{"type":"tokens","input_tokens",
// "input_token_details":{"audio_tokens","text_tokens"},"output_tokens",
// "total_tokens"}}; with text_format just the text.
std::string TranscriptionResponseBody(const Transcription& t);

// A deterministic unit vector for an input hash.
std::vector<float> EmbeddingVector(uint64_t input_hash, int dimensions);

// What all the bodies of one response share.
struct ResponseMeta {
  Endpoint endpoint = Endpoint::kChatCompletions;
  std::string id;       // "chatcmpl-..." or "cmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;    // as the client named it
};

// The non-streaming body: chat.completion or text_completion with usage
// (prompt_tokens_details.cached_tokens: the prompt's tokens the prefix
// cache served).
// With `call` (chat only), the message is that function call — its
// arguments as far as `completion_tokens` got — and finish_reason
// "tool_calls" (or "length").
std::string CompletionResponseJson(const ResponseMeta& meta, std::string_view text,
                                   int64_t prompt_tokens, int64_t cached_tokens,
                                   int completion_tokens, FinishReason reason,
                                   const ToolCall* call = nullptr);

// The Responses API's non-streaming body: a `response` object, status
// "completed" ("incomplete" with incomplete_details.reason
// "max_output_tokens" when the length stopped it), one assistant message
// with one output_text part, and usage as input_tokens / output_tokens /
// input_tokens_details.cached_tokens.
// With `call`, the one output item is that function_call instead.
std::string ResponsesResponseJson(const ResponseMeta& meta, std::string_view text,
                                  int64_t prompt_tokens, int64_t cached_tokens,
                                  int completion_tokens, FinishReason reason,
                                  const ToolCall* call = nullptr);

// The Responses API's stream, each event "event: <type>\ndata: {...}\n\n"
// with its type and sequence_number: response.created and .in_progress,
// output_item.added, content_part.added, one output_text.delta per token,
// then output_text.done, content_part.done, output_item.done and
// response.completed (or .incomplete) carrying the whole response with its
// usage. No [DONE]: the last event ends it. With a function call:
// output_item.added (the function_call), one function_call_arguments.delta
// per token, function_call_arguments.done, output_item.done, the end.
class ResponsesEvents {
 public:
  ResponsesEvents(const ResponseMeta& meta, std::optional<ToolCall> call);

  void AppendStart(std::string& out);
  void AppendToken(std::string_view text, std::string& out);
  void AppendEnd(FinishReason reason, int64_t prompt_tokens, int64_t cached_tokens,
                 int completion_tokens, std::string& out);

 private:
  void AppendEvent(std::string_view type, std::string_view fields, std::string& out);

  ResponseMeta meta_;
  std::optional<ToolCall> call_;
  std::string item_id_;
  std::string text_;  // every delta so far
  int64_t sequence_ = 0;
};

// The SSE events of one streamed completion, each a complete
// "data: {...}\n\n", shaped as OpenAI's: for chat, a first event with the
// assistant role and empty content, one event per token, an event with an
// empty delta and the finish_reason; for completions, one event per token and
// one with empty text and the finish_reason. With include_usage every event
// carries "usage":null and a last event has "choices":[] and the usage.
class StreamEvents {
 public:
  StreamEvents(const ResponseMeta& meta, bool include_usage);

  void AppendStart(std::string& out) const;  // chat only; nothing for completions
  void AppendToken(std::string_view text, std::string& out) const;
  // A chat function call: its id, type and name with empty arguments, then
  // the arguments a piece a token, then a finish_reason of "tool_calls".
  void AppendToolCallStart(const ToolCall& call, std::string& out) const;
  void AppendToolCallArguments(std::string_view piece, std::string& out) const;
  void AppendFinish(FinishReason reason, std::string& out, bool tool_call = false) const;
  // Nothing unless include_usage.
  void AppendUsage(int64_t prompt_tokens, int64_t cached_tokens, int completion_tokens,
                   std::string& out) const;
  static void AppendDone(std::string& out);  // "data: [DONE]\n\n"

 private:
  bool chat_;
  bool include_usage_;
  std::string head_;  // "data: {" ... "\"choices\":["
};

std::string EmbeddingResponseJson(const EmbeddingRequest& request);
// GET /v1/models and GET /v1/models/{id}.
std::string ModelsJson(const std::vector<std::string>& models, int64_t created, int max_context);
std::string ModelJson(std::string_view model, int64_t created, int max_context);
// {"error":{"message":..,"type":..,"param":..,"code":..}}; empty param or
// code are written as null.
std::string ErrorJson(std::string_view message, std::string_view type, std::string_view param = {},
                      std::string_view code = {});

}  // namespace atrium::engine_sim
