// The OpenAI wire protocol as the gateway needs it: validating a request
// just enough to route, meter and limit it (everything else is relayed
// untouched), asking a streaming upstream for usage, reading usage back from
// responses and streams, and OpenAI's error body. Pure: no I/O, no clock.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace atrium::gateway {

// kResponses: OpenAI's Responses API (POST /v1/responses), as vLLM serves
// it. kRerank and kScore: vLLM's /v1/rerank (Cohere's shape) and /v1/score.
// kTranscriptions: POST /v1/audio/transcriptions (multipart/form-data).
enum class Api {
  kChatCompletions,
  kCompletions,
  kEmbeddings,
  kResponses,
  kRerank,
  kScore,
  kTranscriptions
};

// "chat.completions" | "completions" | "embeddings" | "responses" |
// "rerank" | "score" | "audio.transcriptions" (UsageRecord::api).
std::string_view ApiName(Api api);
// Embeddings, rerank and score: pooling, no generated tokens, no stream.
bool GeneratesNothing(Api api);
// Every API's body is JSON but a transcription's (multipart/form-data).
bool HasJsonBody(Api api);
// The path a client calls and the gateway calls upstream: "/v1/chat/completions" ...
std::string_view PathOf(Api api);
// The API a request path is for; nullopt for any other path.
std::optional<Api> ApiOfPath(std::string_view path);

struct ParsedRequest {
  std::string model;
  bool stream = false;  // embeddings: always false
  // stream_options.include_usage == true in the client's body; always true
  // for the Responses API, whose usage always comes (on response.completed).
  bool client_wants_usage = false;
  int64_t max_tokens = 0;  // max_completion_tokens or max_tokens; 0 when absent
  int64_t choices = 1;     // completions generated: max(n, best_of), at least 1
  int64_t estimated_input_tokens = 0;
  // The most prompt tokens the request can be: its body's bytes (no
  // tokenizer makes more than one token of a byte of text, and the JSON
  // around the text outweighs a chat template's framing) plus
  // kNonTextPartTokenBound per image / audio part, plus kUsageMarginTokens.
  // A usage report above it is implausible (UsageMeter bounds it).
  int64_t input_bound = 0;
};

// Validates the body: a JSON object; "model" a non-empty string (at most 256
// bytes, no control characters U+0000-U+001F or U+007F); "stream" a bool;
// max_completion_tokens / max_tokens non-negative integers
// (max_completion_tokens wins when both are given); n and best_of
// (completions) integers 1..kMaxChoices; stream_options an
// object whose include_usage is a bool; "messages" (chat) a non-empty array of
// objects, "prompt" (completions) and "input" (embeddings) a string or an
// array. Optional fields may be null, as OpenAI allows. Unknown fields are
// allowed (they are relayed). Errors are kInvalidArgument naming the field,
// for an OpenAI 400.
//
// Rerank: "query" a string, "documents" a non-empty array (of strings or
// objects), "top_n" a non-negative integer. Score: "text_1" and "text_2"
// each a string or a non-empty array. Every string of theirs counts as
// input; they never stream.
//
// Responses: "input" a string or a non-empty array of items (a message's
// text parts count as text, its image / file / audio parts as non-text
// parts, every string of any other item as text); "max_output_tokens" a
// non-negative integer; "stream" a bool. Refused, because the platform
// keeps no responses (the upstream is told store=false): a non-null
// "previous_response_id" or "conversation", and "background": true.
Result<ParsedRequest> ParseRequest(Api api, std::string_view body);

// A transcription's multipart/form-data body (common/multipart.h): "model"
// checked as in JSON, exactly one non-empty "file", "stream" "true"
// refused (streamed transcriptions are not relayed). The input estimate is
// the file at 320 bytes a token (compressed speech) plus the other fields'
// text; the bound on a reported input, the body's bytes plus the margin.
// Everything else is the model server's to judge.
Result<ParsedRequest> ParseFormRequest(Api api, std::string_view content_type,
                                       std::string_view body);
inline constexpr int64_t kMaxChoices = 128;  // OpenAI's own bound on n

// ceil(bytes / 4): the usual rough ratio of text to tokens. The request
// estimate built on it (ParseRequest) is:
//   EstimateTokens(all text) + 1 per token id given as a number
//   + 4 per chat message (role and framing) + 256 per non-text content part
//   (image, audio), at least 1.
// Text is everything in the body that can reach the prompt: chat content
// strings and text parts, every other string of a message but its role
// (tool calls, names, reasoning); prompt / input strings; and every key and
// string of every other top-level field but "model" — tools, functions,
// response_format, tool_choice and whatever fields an engine renders into
// its prompt (a template's kwargs, documents, guided-decoding schemas).
// Counting what might not be prompt costs a client a few tokens of its
// limit; missing what is prompt lets a tenant bill and rate-limit a huge
// prompt as a small one. It is an admission estimate only: the limiter
// reconciles it with the upstream's usage afterwards.
int64_t EstimateTokens(std::string_view text);

// Bounds on what a model server may plausibly report (see
// ParsedRequest::input_bound and UsageMeter).
inline constexpr int64_t kNonTextPartTokenBound = 65536;  // one image / audio part
inline constexpr int64_t kUsageMarginTokens = 256;        // per request, on the input
inline constexpr int64_t kOutputMarginTokens = 16;        // per choice, on max_tokens

// The body sent upstream. For a stream whose client did not already ask for
// usage, stream_options.include_usage is set to true by splicing the bytes,
// so every other field keeps its position, spelling and value; otherwise the
// body unchanged. `body` must be one ParseRequest accepted (anything else is
// returned unchanged).
std::string UpstreamBody(std::string_view body, const ParsedRequest& request);

// `body` (one ParseRequest accepted) with every top-level member `name` set
// to `json_value` (raw JSON text), or the member inserted first when there
// is none; every other byte is kept. kInvalidArgument when the body does
// not scan as ParseRequest left it.
Result<std::string> WithTopLevelMember(std::string_view body, std::string_view name,
                                       std::string_view json_value);

// `body` (one ParseRequest accepted) with its top-level "cache_salt" set to
// `salt` (cache_salt.h says why): every member of that name (escaped
// spellings and duplicates included) gets the value, or the member is
// inserted first when there is none; every other byte is kept. kInvalidArgument when the body does
// not scan as ParseRequest left it, so a client's salt can never slip through.
Result<std::string> WithCacheSalt(std::string_view body, std::string_view salt);

struct Usage {
  bool present = false;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // usage.prompt_tokens_details.cached_tokens
};

// Usage of a non-streamed response body; present=false when the body has no
// usage object (or is not JSON). Negative or non-integer counts read as 0.
// For a pooling API (GeneratesNothing) a usage with only total_tokens (a
// rerank's) is all input.
Usage UsageFromResponse(std::string_view body, Api api = Api::kChatCompletions);

// The output tokens of a successful non-streamed answer that reported no
// usage, estimated (EstimateTokens) from what was generated: chat choices'
// message content (strings or text parts), reasoning content and tool-call
// names and arguments; completions choices' text; nothing for embeddings
// (vectors are not generated tokens); the Responses API's output items'
// text parts, tool calls and reasoning. A body that is not a JSON object is
// estimated whole.
int64_t EstimateOutputTokens(Api api, std::string_view body);

// Incremental relay filter for one streamed (server-sent events) response.
// Chat and completions streams are chunks ending at "data: [DONE]"; a
// Responses stream (Api::kResponses) is typed response.* events ending at
// response.completed, .incomplete or .failed, whose "response.usage" is
// the usage, and whose *.delta events carry the generated text.
//
// Feed() takes upstream body bytes as they arrive — events may be split
// anywhere; lines end with LF, CRLF or CR and a blank line ends an event — and
// returns the bytes to send to the client now: each complete event
// byte-identical, except that a usage-only chunk (choices == [] and a usage
// object) is dropped when the client did not ask for usage. Only the one
// incomplete event is held back. One that grows past 1 MiB (completions with
// echo and logprobs can) is relayed byte for byte as it arrives but neither
// held nor parsed: it is not metered, and filtering and metering resume at
// the next event (oversized_events() counts them).
//
// Metering: usage is taken from every chunk carrying it, field by field the
// largest value seen, never summed (vLLM repeats cumulative usage on every
// chunk). Content chunks are counted (one per choice with non-empty
// delta.content, delta.reasoning_content, tool-call arguments or text), and
// the bytes of that text, so that a stream without usage can still be
// metered: one chunk may carry many tokens, so the text, not the chunk
// count, is what estimates it (EstimatedOutputTokens).
//
// The stream ends at "data: [DONE]": whatever the upstream sends after it
// is neither relayed nor metered (a client stops reading there, and a
// server that goes on would have its tokens relayed unbilled).
class SseRelay {
 public:
  explicit SseRelay(bool client_wants_usage, Api api = Api::kChatCompletions);

  std::string Feed(std::string_view bytes);
  // At the end of the upstream body: whatever is still held (an incomplete
  // last event), passed through, or dropped like any usage-only chunk the
  // client did not ask for; its complete data lines are metered.
  std::string Finish();

  const Usage& usage() const { return usage_; }
  int64_t content_chunks() const { return content_chunks_; }
  // usage.completion_tokens when the upstream sent usage, else content_chunks().
  int64_t StreamedTokens() const;
  // The output relayed so far estimated from its text: EstimateTokens of
  // the content bytes of every chunk (choices' delta content, reasoning
  // content, tool-call names and arguments, text).
  int64_t EstimatedOutputTokens() const { return (content_bytes_ + 3) / 4; }
  bool saw_done() const { return saw_done_; }  // "data: [DONE]" seen
  int64_t oversized_events() const { return oversized_events_; }

 private:
  void ProcessLine(std::string_view line);
  // Inside an oversized event: how many of `bytes` belong to it (through
  // the blank line that ends it, when that comes; skipping_ then ends).
  size_t SkipOversizedEvent(std::string_view bytes);
  // Meters the finished event's data; true when it is to be dropped.
  bool MeterEvent();

  void AddUsage(const Usage& u);  // field by field, the largest seen

  bool client_wants_usage_;
  bool responses_;
  std::string held_;            // the incomplete event
  size_t scan_ = 0;             // held_[0, scan_) has been split into lines
  size_t line_start_ = 0;       // start of the current, unfinished line
  bool skip_lf_ = false;        // the last line ended with CR; a LF next belongs to it
  bool last_forwarded_ = true;  // the last finished event was sent to the client
  std::string data_;            // the current event's data lines, joined by '\n'
  bool has_data_ = false;
  bool skipping_ = false;       // inside an event past the cap: relayed, not parsed
  bool at_line_start_ = false;  // skipping: no byte of the current line seen yet
  int64_t oversized_events_ = 0;
  Usage usage_;
  int64_t content_chunks_ = 0;
  int64_t content_bytes_ = 0;
  bool saw_done_ = false;
};

// OpenAI's error shape: {"error":{"message":..,"type":..,"param":null,"code":..}};
// an empty `code` is written as null.
std::string ErrorBody(std::string_view message, std::string_view type, std::string_view code);

}  // namespace atrium::gateway
