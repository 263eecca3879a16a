#include "gateway/openai.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "common/json_reader.h"

namespace atrium::gateway {

namespace {

// Tool schemas and content parts nest deeper than control-plane bodies.
constexpr int kMaxJsonDepth = 64;
constexpr size_t kMaxModelLength = 256;
constexpr int64_t kTokensPerMessage = 4;
constexpr int64_t kTokensPerNonTextPart = 256;
constexpr size_t kMaxHeldEventBytes = size_t{1} << 20;

Error FieldError(std::string_view field, std::string_view must) {
  return Error::InvalidArgument("'" + std::string(field) + "' must be " + std::string(must));
}

// The member `name` of `object` unless it is absent or null.
const Json* Member(const Json& object, const char* name) {
  auto it = object.find(name);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

Result<std::optional<int64_t>> NonNegativeInt(const Json& body, const char* name) {
  const Json* v = Member(body, name);
  if (v == nullptr) return std::optional<int64_t>();
  if (v->is_number_unsigned()) {
    if (v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return FieldError(name, "a non-negative integer");
    }
    return std::optional<int64_t>(static_cast<int64_t>(v->get<uint64_t>()));
  }
  if (!v->is_number_integer() || v->get<int64_t>() < 0) {
    return FieldError(name, "a non-negative integer");
  }
  return std::optional<int64_t>(v->get<int64_t>());
}

struct TextTally {
  int64_t bytes = 0;   // text, estimated at 4 bytes a token
  int64_t tokens = 0;  // counted directly
};

void TallyString(const Json* v, TextTally& tally) {
  if (v != nullptr && v->is_string()) {
    tally.bytes += static_cast<int64_t>(v->get_ref<const std::string&>().size());
  }
}

// A prompt / input: a string, or an array of strings, token ids or arrays of
// token ids. Other element types are left for the upstream to judge.
Status TallyPrompt(const Json* v, std::string_view field, TextTally& tally) {
  if (v == nullptr)
    return Error::InvalidArgument("missing required field '" + std::string(field) + "'");
  if (v->is_string()) {
    TallyString(v, tally);
    return OkStatus();
  }
  if (!v->is_array()) return FieldError(field, "a string or an array");
  for (const Json& element : *v) {
    if (element.is_string()) {
      TallyString(&element, tally);
    } else if (element.is_number_integer()) {
      ++tally.tokens;
    } else if (element.is_array()) {
      for (const Json& token : element) tally.tokens += token.is_number_integer() ? 1 : 0;
    }
  }
  return OkStatus();
}

Status TallyMessages(const Json* messages, TextTally& tally) {
  if (messages == nullptr) return Error::InvalidArgument("missing required field 'messages'");
  if (!messages->is_array() || messages->empty()) {
    return FieldError("messages", "a non-empty array of messages");
  }
  for (size_t i = 0; i < messages->size(); ++i) {
    const Json& message = (*messages)[i];
    if (!message.is_object()) return FieldError("messages[" + std::to_string(i) + "]", "an object");
    tally.tokens += kTokensPerMessage;
    const Json* content = Member(message, "content");
    if (content != nullptr && content->is_array()) {
      for (const Json& part : *content) {
        if (part.is_string()) {
          TallyString(&part, tally);
        } else if (part.is_object() && part.contains("text")) {
          TallyString(Member(part, "text"), tally);
        } else if (part.is_object()) {
          tally.tokens += kTokensPerNonTextPart;
        }
      }
    } else {
      TallyString(content, tally);
    }
    const Json* tool_calls = Member(message, "tool_calls");
    if (tool_calls == nullptr || !tool_calls->is_array()) continue;
    for (const Json& call : *tool_calls) {
      const Json* function = call.is_object() ? Member(call, "function") : nullptr;
      if (function == nullptr || !function->is_object()) continue;
      TallyString(Member(*function, "name"), tally);
      TallyString(Member(*function, "arguments"), tally);
    }
  }
  return OkStatus();
}

// --- Byte-level JSON scanning for UpstreamBody. The body has already been
// parsed successfully, so the scanner only needs to find boundaries; any
// surprise makes it give up (npos) rather than guess.

constexpr size_t kNpos = std::string_view::npos;

size_t SkipSpace(std::string_view s, size_t i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  return i;
}

// `i` at an opening quote; returns the index after the closing quote.
size_t SkipString(std::string_view s, size_t i) {
  for (++i; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++i;
    } else if (s[i] == '"') {
      return i + 1;
    }
  }
  return kNpos;
}

// `i` at the first byte of a value; returns the index after it.
size_t SkipValue(std::string_view s, size_t i) {
  if (i >= s.size()) return kNpos;
  if (s[i] == '"') return SkipString(s, i);
  if (s[i] != '{' && s[i] != '[') return std::min(s.size(), s.find_first_of(",}] \t\n\r", i));
  int depth = 0;
  while (i < s.size()) {
    char c = s[i];
    if (c == '"') {
      i = SkipString(s, i);
      if (i == kNpos) return kNpos;
      continue;
    }
    if (c == '{' || c == '[') ++depth;
    if ((c == '}' || c == ']') && --depth == 0) return i + 1;
    ++i;
  }
  return kNpos;
}

struct Span {
  size_t begin = kNpos;  // of the value
  size_t end = kNpos;
};

// The value of the last member named `name` (the one a JSON parser keeps) of
// the object whose '{' is at `open`; an empty Span when there is none, and
// nullopt when the text does not scan.
std::optional<Span> LastMember(std::string_view s, size_t open, std::string_view name) {
  Span found;
  size_t i = SkipSpace(s, open + 1);
  if (i < s.size() && s[i] == '}') return found;
  while (i < s.size() && s[i] == '"') {
    size_t key_end = SkipString(s, i);
    if (key_end == kNpos) return std::nullopt;
    std::string_view raw = s.substr(i + 1, key_end - i - 2);
    bool match = raw == name;
    if (!match && raw.find('\\') != kNpos) {
      // An escaped key ("stream\u005foptions") means the same to the upstream.
      std::string_view quoted = s.substr(i, key_end - i);
      Json key = Json::parse(quoted.begin(), quoted.end(), nullptr, false);
      match = key.is_string() && key.get_ref<const std::string&>() == name;
    }
    i = SkipSpace(s, key_end);
    if (i >= s.size() || s[i] != ':') return std::nullopt;
    size_t value = SkipSpace(s, i + 1);
    size_t value_end = SkipValue(s, value);
    if (value_end == kNpos) return std::nullopt;
    if (match) found = {value, value_end};
    i = SkipSpace(s, value_end);
    if (i < s.size() && s[i] == '}') return found;
    if (i >= s.size() || s[i] != ',') return std::nullopt;
    i = SkipSpace(s, i + 1);
  }
  return std::nullopt;
}

// `member` inserted as the first member of the object whose '{' is at `open`.
std::string InsertFirstMember(std::string_view s, size_t open, std::string_view member) {
  size_t next = SkipSpace(s, open + 1);
  bool empty = next < s.size() && s[next] == '}';
  std::string out;
  out.reserve(s.size() + member.size() + 1);
  out.append(s.substr(0, open + 1)).append(member);
  if (!empty) out.push_back(',');
  out.append(s.substr(open + 1));
  return out;
}

std::string Replace(std::string_view s, Span span, std::string_view with) {
  std::string out;
  out.reserve(s.size() + with.size());
  out.append(s.substr(0, span.begin)).append(with).append(s.substr(span.end));
  return out;
}

int64_t CountOf(const Json& object, const char* name) {
  const Json* v = Member(object, name);
  if (v == nullptr || !v->is_number_integer()) return 0;
  if (v->is_number_unsigned()) {
    return static_cast<int64_t>(
        std::min<uint64_t>(v->get<uint64_t>(), std::numeric_limits<int64_t>::max()));
  }
  return std::max<int64_t>(0, v->get<int64_t>());
}

Usage ReadUsage(const Json& usage) {
  Usage u;
  const Json* prompt = Member(usage, "prompt_tokens");
  const Json* completion = Member(usage, "completion_tokens");
  u.present = (prompt != nullptr && prompt->is_number_integer()) ||
              (completion != nullptr && completion->is_number_integer());
  if (!u.present) return u;
  u.prompt_tokens = CountOf(usage, "prompt_tokens");
  u.completion_tokens = CountOf(usage, "completion_tokens");
  const Json* details = Member(usage, "prompt_tokens_details");
  if (details != nullptr && details->is_object())
    u.cached_tokens = CountOf(*details, "cached_tokens");
  return u;
}

bool NonEmptyString(const Json& object, const char* name) {
  const Json* v = Member(object, name);
  return v != nullptr && v->is_string() && !v->get_ref<const std::string&>().empty();
}

bool CarriesContent(const Json& choice) {
  if (!choice.is_object()) return false;
  if (NonEmptyString(choice, "text")) return true;
  const Json* delta = Member(choice, "delta");
  if (delta == nullptr || !delta->is_object()) return false;
  if (NonEmptyString(*delta, "content") || NonEmptyString(*delta, "reasoning_content")) return true;
  const Json* calls = Member(*delta, "tool_calls");
  if (calls == nullptr || !calls->is_array()) return false;
  return std::any_of(calls->begin(), calls->end(), [](const Json& call) {
    const Json* function = call.is_object() ? Member(call, "function") : nullptr;
    return function != nullptr && function->is_object() && NonEmptyString(*function, "arguments");
  });
}

}  // namespace

std::string_view ApiName(Api api) {
  switch (api) {
    case Api::kChatCompletions:
      return "chat.completions";
    case Api::kCompletions:
      return "completions";
    case Api::kEmbeddings:
      return "embeddings";
  }
  return "";
}

int64_t EstimateTokens(std::string_view text) {
  return static_cast<int64_t>((text.size() + 3) / 4);
}

Result<ParsedRequest> ParseRequest(Api api, std::string_view body) {
  auto parsed = ParseJson(body, kMaxJsonDepth);
  if (!parsed.has_value()) {
    return Error::InvalidArgument("the request body is not valid JSON: " + parsed.error().message);
  }
  const Json& json = *parsed;
  if (!json.is_object()) return Error::InvalidArgument("the request body must be a JSON object");

  ParsedRequest request;
  const Json* model = Member(json, "model");
  if (model == nullptr) return Error::InvalidArgument("missing required field 'model'");
  if (!model->is_string() || model->get_ref<const std::string&>().empty()) {
    return FieldError("model", "a non-empty string");
  }
  if (model->get_ref<const std::string&>().size() > kMaxModelLength) {
    return FieldError("model", "at most " + std::to_string(kMaxModelLength) + " bytes");
  }
  request.model = model->get<std::string>();

  TextTally tally;
  if (api == Api::kChatCompletions) {
    ATRIUM_RETURN_IF_ERROR(TallyMessages(Member(json, "messages"), tally));
  } else if (api == Api::kCompletions) {
    ATRIUM_RETURN_IF_ERROR(TallyPrompt(Member(json, "prompt"), "prompt", tally));
  } else {
    ATRIUM_RETURN_IF_ERROR(TallyPrompt(Member(json, "input"), "input", tally));
  }
  request.estimated_input_tokens = std::max<int64_t>(1, (tally.bytes + 3) / 4 + tally.tokens);

  // Embeddings neither stream nor generate: their stream/max_tokens fields,
  // if any, are the upstream's business.
  if (api == Api::kEmbeddings) return request;

  if (const Json* stream = Member(json, "stream")) {
    if (!stream->is_boolean()) return FieldError("stream", "a boolean");
    request.stream = stream->get<bool>();
  }
  if (const Json* options = Member(json, "stream_options")) {
    if (!options->is_object()) return FieldError("stream_options", "an object");
    if (const Json* include = Member(*options, "include_usage")) {
      if (!include->is_boolean()) return FieldError("stream_options.include_usage", "a boolean");
      request.client_wants_usage = include->get<bool>();
    }
  }
  ATRIUM_ASSIGN_OR_RETURN(std::optional<int64_t> max_tokens, NonNegativeInt(json, "max_tokens"));
  ATRIUM_ASSIGN_OR_RETURN(std::optional<int64_t> max_completion,
                          NonNegativeInt(json, "max_completion_tokens"));
  request.max_tokens = max_completion.value_or(max_tokens.value_or(0));
  return request;
}

std::string UpstreamBody(std::string_view body, const ParsedRequest& request) {
  if (!request.stream || request.client_wants_usage) return std::string(body);
  size_t open = 0;
  if (body.substr(0, 3) == "\xEF\xBB\xBF") open = 3;  // a BOM, which JSON parsers skip
  open = SkipSpace(body, open);
  if (open >= body.size() || body[open] != '{') return std::string(body);

  std::optional<Span> options = LastMember(body, open, "stream_options");
  if (!options) return std::string(body);
  if (options->begin == kNpos) {
    return InsertFirstMember(body, open, R"("stream_options":{"include_usage":true})");
  }
  if (body[options->begin] == 'n') return Replace(body, *options, R"({"include_usage":true})");
  if (body[options->begin] != '{') return std::string(body);
  std::optional<Span> include = LastMember(body, options->begin, "include_usage");
  if (!include) return std::string(body);
  if (include->begin == kNpos) {
    return InsertFirstMember(body, options->begin, R"("include_usage":true)");
  }
  return Replace(body, *include, "true");
}

Usage UsageFromResponse(std::string_view body) {
  auto parsed = ParseJson(body, kMaxJsonDepth);
  if (!parsed.has_value() || !parsed->is_object()) return {};
  const Json* usage = Member(*parsed, "usage");
  if (usage == nullptr || !usage->is_object()) return {};
  return ReadUsage(*usage);
}

SseRelay::SseRelay(bool client_wants_usage) : client_wants_usage_(client_wants_usage) {}

std::string SseRelay::Feed(std::string_view bytes) {
  if (pass_through_) return std::string(bytes);
  std::string out;
  held_.append(bytes);
  size_t event_start = 0;
  while (scan_ < held_.size()) {
    if (skip_lf_) {
      skip_lf_ = false;
      if (held_[scan_] == '\n') {
        // The LF of a CRLF that ended the previous event goes wherever that
        // event went.
        if (scan_ == event_start) {
          if (last_forwarded_) out.push_back('\n');
          ++event_start;
        }
        line_start_ = ++scan_;
        continue;
      }
    }
    size_t end = held_.find_first_of("\r\n", scan_);
    if (end == std::string::npos) {
      scan_ = held_.size();
      break;
    }
    std::string_view line(held_.data() + line_start_, end - line_start_);
    skip_lf_ = held_[end] == '\r';
    scan_ = line_start_ = end + 1;
    if (!line.empty()) {
      ProcessLine(line);
      continue;
    }
    last_forwarded_ = !MeterEvent();
    if (last_forwarded_) out.append(held_, event_start, scan_ - event_start);
    event_start = scan_;
  }
  held_.erase(0, event_start);
  scan_ -= event_start;
  line_start_ -= event_start;
  if (held_.size() > kMaxHeldEventBytes) {
    out.append(held_);
    held_.clear();
    pass_through_ = true;
  }
  return out;
}

std::string SseRelay::Finish() {
  if (pass_through_) return {};
  if (line_start_ < held_.size()) ProcessLine(std::string_view(held_).substr(line_start_));
  MeterEvent();
  std::string out = std::move(held_);
  held_.clear();
  scan_ = line_start_ = 0;
  return out;
}

int64_t SseRelay::StreamedTokens() const {
  return usage_.present ? usage_.completion_tokens : content_chunks_;
}

void SseRelay::ProcessLine(std::string_view line) {
  // Only data lines matter here; "event:", "id:" and comments are relayed as is.
  if (line.substr(0, 4) != "data" || (line.size() > 4 && line[4] != ':')) return;
  std::string_view value = line.size() > 5 ? line.substr(5) : std::string_view();
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (has_data_) data_.push_back('\n');
  data_.append(value);
  has_data_ = true;
}

bool SseRelay::MeterEvent() {
  if (!has_data_) return false;
  has_data_ = false;
  std::string data = std::move(data_);
  data_.clear();
  if (data == "[DONE]") {
    saw_done_ = true;
    return false;
  }
  auto chunk = ParseJson(data, kMaxJsonDepth);
  if (!chunk.has_value() || !chunk->is_object()) return false;
  bool has_usage = false;
  if (const Json* usage = Member(*chunk, "usage"); usage != nullptr && usage->is_object()) {
    has_usage = true;
    Usage u = ReadUsage(*usage);
    if (u.present) {
      usage_.present = true;
      usage_.prompt_tokens = std::max(usage_.prompt_tokens, u.prompt_tokens);
      usage_.completion_tokens = std::max(usage_.completion_tokens, u.completion_tokens);
      usage_.cached_tokens = std::max(usage_.cached_tokens, u.cached_tokens);
    }
  }
  const Json* choices = Member(*chunk, "choices");
  if (choices == nullptr || !choices->is_array()) return false;
  for (const Json& choice : *choices) content_chunks_ += CarriesContent(choice) ? 1 : 0;
  return has_usage && choices->empty() && !client_wants_usage_;
}

std::string ErrorBody(std::string_view message, std::string_view type, std::string_view code) {
  nlohmann::ordered_json error;
  error["message"] = std::string(message);
  error["type"] = std::string(type);
  error["param"] = nullptr;
  error["code"] =
      code.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(std::string(code));
  nlohmann::ordered_json body;
  body["error"] = std::move(error);
  // Messages may quote client text; invalid UTF-8 must not throw.
  return body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace atrium::gateway
