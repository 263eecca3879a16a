#include "gateway/openai.h"

#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "common/json_reader.h"
#include "common/multipart.h"

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

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;

// Documents up to this size keep the per-thread parser's buffers; a larger
// one is parsed by a parser made for it, so that one huge request does not
// pin its size in memory for every thread.
constexpr size_t kKeepParserBytes = size_t{1} << 20;

// simdjson's DOM parser validates the whole document (structure, UTF-8,
// numbers) like nlohmann's but an order of magnitude faster; one per thread,
// reused, so parsing allocates nothing once warm. The element handed to `use`
// is valid only during the call.
template <class F>
auto WithDocument(std::string_view text, F&& use) {
  thread_local simdjson::dom::parser shared = [] {
    simdjson::dom::parser p;
    // On failure the parser stays empty and parse() reports MEMALLOC itself.
    if (p.allocate(4096, kMaxJsonDepth) != simdjson::SUCCESS) return simdjson::dom::parser();
    return p;
  }();
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);  // a BOM, as nlohmann skips it
  std::optional<simdjson::dom::parser> own;
  simdjson::dom::parser* parser = &shared;
  if (text.size() > kKeepParserBytes) {
    own.emplace();
    if (own->allocate(text.size(), kMaxJsonDepth) != simdjson::SUCCESS) {
      return use(simdjson::simdjson_result<element>(simdjson::MEMALLOC));
    }
    parser = &*own;
  }
  return use(parser->parse(text.data(), text.size(), /*realloc_if_needed=*/true));
}

// The member `name` of `o` that a JSON parser keeps (the last of duplicates)
// unless it is absent or null.
std::optional<element> Member(object o, std::string_view name) {
  std::optional<element> found;
  for (auto field : o) {
    if (field.key == name) found = field.value;
  }
  if (found && found->type() == element_type::NULL_VALUE) return std::nullopt;
  return found;
}

std::optional<object> AsObject(const std::optional<element>& v) {
  object o;
  if (!v || v->get_object().get(o) != simdjson::SUCCESS) return std::nullopt;
  return o;
}

std::optional<array> AsArray(const std::optional<element>& v) {
  array a;
  if (!v || v->get_array().get(a) != simdjson::SUCCESS) return std::nullopt;
  return a;
}

std::optional<std::string_view> AsString(const std::optional<element>& v) {
  std::string_view s;
  if (!v || v->get_string().get(s) != simdjson::SUCCESS) return std::nullopt;
  return s;
}

bool IsInteger(const element& v) {
  return v.type() == element_type::INT64 || v.type() == element_type::UINT64;
}

Result<std::optional<int64_t>> NonNegativeInt(object body, const char* name) {
  auto v = Member(body, name);
  if (!v) return std::optional<int64_t>();
  int64_t n = 0;
  if (v->type() != element_type::INT64 || v->get_int64().get(n) != simdjson::SUCCESS || n < 0) {
    return FieldError(name, "a non-negative integer");  // UINT64: above int64's range
  }
  return std::optional<int64_t>(n);
}

// A count of choices: an integer 1..kMaxChoices, written as one or as a
// number with no fraction (1e0, 2.0: model servers' validators take those).
Result<std::optional<int64_t>> ChoiceCount(object body, const char* name) {
  auto v = Member(body, name);
  if (!v) return std::optional<int64_t>();
  int64_t n = 0;
  double d = 0;
  if (v->type() == element_type::INT64) {
    if (v->get_int64().get(n) != simdjson::SUCCESS) n = 0;
  } else if (v->type() == element_type::DOUBLE && v->get_double().get(d) == simdjson::SUCCESS &&
             d >= 1 && d <= static_cast<double>(kMaxChoices) && d == std::floor(d)) {
    n = static_cast<int64_t>(d);
  }
  if (n < 1 || n > kMaxChoices) {
    return FieldError(name, "an integer from 1 to " + std::to_string(kMaxChoices));
  }
  return std::optional<int64_t>(n);
}

struct TextTally {
  int64_t bytes = 0;   // text, estimated at 4 bytes a token
  int64_t tokens = 0;  // counted directly
  int64_t non_text_parts = 0;
};

void TallyString(const std::optional<element>& v, TextTally& tally) {
  if (auto s = AsString(v)) tally.bytes += static_cast<int64_t>(s->size());
}

// Every string in `v`, at any depth, and with `keys` every object key too
// (a tool's parameter names are prompt as much as its description). The
// document's depth is bounded by the parser (kMaxJsonDepth).
void TallyAllText(const element& v, bool keys, TextTally& tally) {
  if (v.type() == element_type::STRING) {
    TallyString(v, tally);
  } else if (auto items = AsArray(v)) {
    for (element item : *items) TallyAllText(item, keys, tally);
  } else if (auto fields = AsObject(v)) {
    for (auto field : *fields) {
      if (keys) tally.bytes += static_cast<int64_t>(field.key.size());
      TallyAllText(field.value, keys, tally);
    }
  }
}

// A prompt / input: a string, or an array of strings, token ids or arrays of
// token ids. Other element types are left for the upstream to judge.
Status TallyPrompt(const std::optional<element>& v, std::string_view field, TextTally& tally) {
  if (!v) return Error::InvalidArgument("missing required field '" + std::string(field) + "'");
  if (v->type() == element_type::STRING) {
    TallyString(v, tally);
    return OkStatus();
  }
  auto elements = AsArray(v);
  if (!elements) return FieldError(field, "a string or an array");
  for (element e : *elements) {
    if (e.type() == element_type::STRING) {
      TallyString(e, tally);
    } else if (IsInteger(e)) {
      ++tally.tokens;
    } else if (auto tokens = AsArray(e)) {
      for (element token : *tokens) tally.tokens += IsInteger(token) ? 1 : 0;
    }
  }
  return OkStatus();
}

// A content part: its "text" when it has one, else a non-text part (an
// image, a file, audio).
void TallyPart(element part, TextTally& tally) {
  if (part.type() == element_type::STRING) {
    TallyString(part, tally);
    return;
  }
  auto fields = AsObject(part);
  if (!fields) return;
  bool has_text = false;
  for (auto field : *fields) has_text = has_text || field.key == "text";
  if (has_text) {
    TallyString(Member(*fields, "text"), tally);
  } else {
    tally.tokens += kTokensPerNonTextPart;
    ++tally.non_text_parts;
  }
}

// The Responses API's input: a string, or items — messages (a role and
// content) and others (tool calls and their outputs, reasoning ...).
Status TallyResponsesInput(const std::optional<element>& v, TextTally& tally) {
  if (!v) return Error::InvalidArgument("missing required field 'input'");
  if (v->type() == element_type::STRING) {
    TallyString(v, tally);
    tally.tokens += kTokensPerMessage;
    return OkStatus();
  }
  auto items = AsArray(v);
  if (!items || items->size() == 0) return FieldError("input", "a string or a non-empty array");
  size_t i = 0;
  for (element it : *items) {
    auto item = AsObject(it);
    if (!item) return FieldError("input[" + std::to_string(i) + "]", "an object");
    ++i;
    tally.tokens += kTokensPerMessage;
    for (auto field : *item) {
      if (field.key == "role" || field.key == "type" || field.key == "id" ||
          field.key == "status") {
        continue;
      }
      if (field.key == "content") {
        if (auto parts = AsArray(field.value)) {
          for (element part : *parts) TallyPart(part, tally);
          continue;
        }
      }
      TallyAllText(field.value, false, tally);
    }
  }
  return OkStatus();
}

// A rerank's query and documents, a score's two texts: present and of the
// right shape (their text is counted with every other field's).
Status CheckPoolingFields(Api api, object body) {
  auto text_or_list = [&](const char* name) -> Status {
    auto v = Member(body, name);
    if (!v) return Error::InvalidArgument(std::string("missing required field '") + name + "'");
    if (v->type() == element_type::STRING) return OkStatus();
    auto list = AsArray(v);
    if (!list || list->size() == 0) return FieldError(name, "a string or a non-empty array");
    return OkStatus();
  };
  if (api == Api::kScore) {
    ATRIUM_RETURN_IF_ERROR(text_or_list("text_1"));
    return text_or_list("text_2");
  }
  auto query = Member(body, "query");
  if (!query) return Error::InvalidArgument("missing required field 'query'");
  if (query->type() != element_type::STRING) return FieldError("query", "a string");
  auto documents = AsArray(Member(body, "documents"));
  if (!Member(body, "documents")) {
    return Error::InvalidArgument("missing required field 'documents'");
  }
  if (!documents || documents->size() == 0) return FieldError("documents", "a non-empty array");
  ATRIUM_ASSIGN_OR_RETURN(std::optional<int64_t> top_n, NonNegativeInt(body, "top_n"));
  (void)top_n;
  return OkStatus();
}

// A model name as it may reach the usage record (and logs) before it is
// resolved: a NUL there once made the store refuse the record, and the
// journal's shipper stall behind it for every tenant.
Result<std::string> CheckModelName(std::string_view model) {
  if (model.empty()) return FieldError("model", "a non-empty string");
  if (model.size() > kMaxModelLength) {
    return FieldError("model", "at most " + std::to_string(kMaxModelLength) + " bytes");
  }
  if (std::any_of(model.begin(), model.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7F; })) {
    return FieldError("model", "a name without control characters");
  }
  return std::string(model);
}

// Top-level request fields known never to reach the prompt whose values
// hold strings or keys (numbers and booleans count nothing anyway).
bool IsNonPromptField(std::string_view name) {
  for (std::string_view known :
       {"model", "stream_options", "logit_bias", "user", "stop", "metadata", "service_tier"}) {
    if (name == known) return true;
  }
  return false;
}

// A message's tool calls: each function's name and arguments.
void TallyToolCalls(object message, TextTally& tally) {
  auto calls = AsArray(Member(message, "tool_calls"));
  if (!calls) return;
  for (element call : *calls) {
    auto call_object = AsObject(call);
    auto function = call_object ? AsObject(Member(*call_object, "function")) : std::nullopt;
    if (!function) continue;
    TallyString(Member(*function, "name"), tally);
    TallyString(Member(*function, "arguments"), tally);
  }
}

Status TallyMessages(const std::optional<element>& v, TextTally& tally) {
  if (!v) return Error::InvalidArgument("missing required field 'messages'");
  auto messages = AsArray(v);
  if (!messages || messages->size() == 0) {
    return FieldError("messages", "a non-empty array of messages");
  }
  size_t i = 0;
  for (element m : *messages) {
    auto message = AsObject(m);
    if (!message) return FieldError("messages[" + std::to_string(i) + "]", "an object");
    ++i;
    tally.tokens += kTokensPerMessage;
    auto content = Member(*message, "content");
    if (auto parts = AsArray(content)) {
      for (element part : *parts) TallyPart(part, tally);
    } else {
      TallyString(content, tally);
    }
    // Tool calls, names, reasoning and whatever else a template renders:
    // every string but the role (counted in the framing).
    for (auto field : *message) {
      if (field.key != "role" && field.key != "content") TallyAllText(field.value, false, tally);
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

// The values of every member named `name` of the object whose '{' is at
// `open`, in order; nullopt when the text does not scan.
std::optional<std::vector<Span>> MembersNamed(std::string_view s, size_t open,
                                              std::string_view name) {
  std::vector<Span> found;
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
    if (match) found.push_back({value, value_end});
    i = SkipSpace(s, value_end);
    if (i < s.size() && s[i] == '}') return found;
    if (i >= s.size() || s[i] != ',') return std::nullopt;
    i = SkipSpace(s, i + 1);
  }
  return std::nullopt;
}

// The value of the last member named `name` (the one a JSON parser keeps);
// an empty Span when there is none, nullopt when the text does not scan.
std::optional<Span> LastMember(std::string_view s, size_t open, std::string_view name) {
  auto all = MembersNamed(s, open, name);
  if (!all) return std::nullopt;
  return all->empty() ? Span{} : all->back();
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

int64_t CountOf(object o, const char* name) {
  auto v = Member(o, name);
  if (!v) return 0;
  int64_t n = 0;
  if (v->type() == element_type::UINT64) return std::numeric_limits<int64_t>::max();
  if (v->type() != element_type::INT64 || v->get_int64().get(n) != simdjson::SUCCESS) return 0;
  return std::max<int64_t>(0, n);
}

// Chat and completions name usage prompt_tokens / completion_tokens /
// prompt_tokens_details; the Responses API input_tokens / output_tokens /
// input_tokens_details. A usage object uses one naming or the other.
Usage ReadUsage(object usage) {
  Usage u;
  const bool responses = Member(usage, "input_tokens") || Member(usage, "output_tokens");
  const char* input = responses ? "input_tokens" : "prompt_tokens";
  const char* output = responses ? "output_tokens" : "completion_tokens";
  auto prompt = Member(usage, input);
  auto completion = Member(usage, output);
  u.present = (prompt && IsInteger(*prompt)) || (completion && IsInteger(*completion));
  if (!u.present) return u;
  u.prompt_tokens = CountOf(usage, input);
  u.completion_tokens = CountOf(usage, output);
  if (auto details =
          AsObject(Member(usage, responses ? "input_tokens_details" : "prompt_tokens_details"))) {
    u.cached_tokens = CountOf(*details, "cached_tokens");
  }
  return u;
}

bool NonEmptyString(object o, const char* name) {
  auto s = AsString(Member(o, name));
  return s && !s->empty();
}

bool CarriesContent(const element& c) {
  auto choice = AsObject(c);
  if (!choice) return false;
  if (NonEmptyString(*choice, "text")) return true;
  auto delta = AsObject(Member(*choice, "delta"));
  if (!delta) return false;
  if (NonEmptyString(*delta, "content") || NonEmptyString(*delta, "reasoning_content")) return true;
  auto calls = AsArray(Member(*delta, "tool_calls"));
  if (!calls) return false;
  for (element call : *calls) {
    auto call_object = AsObject(call);
    auto function = call_object ? AsObject(Member(*call_object, "function")) : std::nullopt;
    if (function && NonEmptyString(*function, "arguments")) return true;
  }
  return false;
}

// The bytes of generated text a stream chunk's choice carries: its text,
// delta content (a string or text parts), reasoning content and tool-call
// names and arguments.
int64_t ContentBytes(const element& c) {
  auto choice = AsObject(c);
  if (!choice) return 0;
  TextTally tally;
  TallyString(Member(*choice, "text"), tally);
  if (auto delta = AsObject(Member(*choice, "delta"))) {
    auto content = Member(*delta, "content");
    TallyString(content, tally);
    if (auto parts = AsArray(content)) {
      for (element part : *parts) {
        if (auto p = AsObject(part)) TallyString(Member(*p, "text"), tally);
      }
    }
    TallyString(Member(*delta, "reasoning_content"), tally);
    TallyToolCalls(*delta, tally);
  }
  return tally.bytes;
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
    case Api::kResponses:
      return "responses";
    case Api::kRerank:
      return "rerank";
    case Api::kScore:
      return "score";
    case Api::kTranscriptions:
      return "audio.transcriptions";
  }
  return "";
}

bool HasJsonBody(Api api) { return api != Api::kTranscriptions; }

Result<ParsedRequest> ParseFormRequest(Api api, std::string_view content_type,
                                       std::string_view body) {
  if (api != Api::kTranscriptions) return Error::InvalidArgument("not a form request");
  ATRIUM_ASSIGN_OR_RETURN(std::string boundary, FormBoundary(content_type));
  ATRIUM_ASSIGN_OR_RETURN(std::vector<FormPart> parts, ParseForm(body, boundary));
  ParsedRequest request;
  const FormPart* model = nullptr;
  const FormPart* file = nullptr;
  int64_t text_bytes = 0;
  for (const FormPart& part : parts) {
    if (part.name == "model") {
      model = &part;
    } else if (part.name == "file") {
      if (file != nullptr) return FieldError("file", "one file");
      file = &part;
    } else if (part.name == "stream") {
      if (part.data == "true") {
        return Error::InvalidArgument("'stream' is not supported for transcriptions");
      }
    } else {
      text_bytes += static_cast<int64_t>(part.data.size());  // prompt and the rest
    }
  }
  if (model == nullptr) return Error::InvalidArgument("missing required field 'model'");
  ATRIUM_ASSIGN_OR_RETURN(request.model, CheckModelName(model->data));
  if (file == nullptr || file->data.empty()) {
    return Error::InvalidArgument("missing required field 'file' (non-empty audio)");
  }
  constexpr int64_t kAudioBytesPerToken = 320;  // compressed speech; raw PCM is ~640
  request.estimated_input_tokens = std::max<int64_t>(
      1, (static_cast<int64_t>(file->data.size()) + kAudioBytesPerToken - 1) / kAudioBytesPerToken +
             (text_bytes + 3) / 4);
  request.input_bound = static_cast<int64_t>(body.size()) + kUsageMarginTokens;
  return request;
}

std::string_view PathOf(Api api) {
  switch (api) {
    case Api::kChatCompletions:
      return "/v1/chat/completions";
    case Api::kCompletions:
      return "/v1/completions";
    case Api::kEmbeddings:
      return "/v1/embeddings";
    case Api::kResponses:
      return "/v1/responses";
    case Api::kRerank:
      return "/v1/rerank";
    case Api::kScore:
      return "/v1/score";
    case Api::kTranscriptions:
      return "/v1/audio/transcriptions";
  }
  return "";
}

std::optional<Api> ApiOfPath(std::string_view path) {
  for (Api api : {Api::kChatCompletions, Api::kCompletions, Api::kEmbeddings, Api::kResponses,
                  Api::kRerank, Api::kScore, Api::kTranscriptions}) {
    if (path == PathOf(api)) return api;
  }
  return std::nullopt;
}

bool GeneratesNothing(Api api) {
  return api == Api::kEmbeddings || api == Api::kRerank || api == Api::kScore;
}

int64_t EstimateTokens(std::string_view text) {
  return static_cast<int64_t>((text.size() + 3) / 4);
}

Result<ParsedRequest> ParseRequest(Api api, std::string_view body) {
  return WithDocument(
      body, [&](simdjson::simdjson_result<element> parsed) -> Result<ParsedRequest> {
        element root;
        if (auto error = parsed.get(root); error != simdjson::SUCCESS) {
          return Error::InvalidArgument(std::string("the request body is not valid JSON: ") +
                                        simdjson::error_message(error));
        }
        auto json = AsObject(root);
        if (!json) return Error::InvalidArgument("the request body must be a JSON object");

        ParsedRequest request;
        auto model_field = Member(*json, "model");
        if (!model_field) return Error::InvalidArgument("missing required field 'model'");
        auto model = AsString(model_field);
        if (!model) return FieldError("model", "a non-empty string");
        ATRIUM_ASSIGN_OR_RETURN(request.model, CheckModelName(*model));

        TextTally tally;
        std::string_view prompt_field;
        if (api == Api::kChatCompletions) {
          prompt_field = "messages";
          ATRIUM_RETURN_IF_ERROR(TallyMessages(Member(*json, "messages"), tally));
        } else if (api == Api::kCompletions) {
          prompt_field = "prompt";
          ATRIUM_RETURN_IF_ERROR(TallyPrompt(Member(*json, "prompt"), "prompt", tally));
        } else if (api == Api::kResponses) {
          prompt_field = "input";
          ATRIUM_RETURN_IF_ERROR(TallyResponsesInput(Member(*json, "input"), tally));
        } else if (api == Api::kRerank || api == Api::kScore) {
          // Everything they hold is input: the loop below counts it.
          ATRIUM_RETURN_IF_ERROR(CheckPoolingFields(api, *json));
          tally.tokens += 1;
        } else {
          prompt_field = "input";
          ATRIUM_RETURN_IF_ERROR(TallyPrompt(Member(*json, "input"), "input", tally));
        }
        // Every other field that may carry prompt text (tools, functions,
        // response_format, unknown ones): the keys and strings in its value.
        // Duplicated members all count: which one an upstream keeps is its
        // business.
        for (auto field : *json) {
          if (field.key == prompt_field || IsNonPromptField(field.key)) continue;
          TallyAllText(field.value, true, tally);
        }
        request.estimated_input_tokens = std::max<int64_t>(1, (tally.bytes + 3) / 4 + tally.tokens);
        request.input_bound = static_cast<int64_t>(body.size()) +
                              tally.non_text_parts * kNonTextPartTokenBound + kUsageMarginTokens;

        // Embeddings neither stream nor generate: their stream/max_tokens fields,
        // if any, are the upstream's business.
        if (GeneratesNothing(api)) return request;
        if (api == Api::kResponses) {
          // Nothing is stored upstream (store=false), so nothing can be
          // continued or fetched later: say so rather than fail upstream.
          for (const char* stored : {"previous_response_id", "conversation"}) {
            if (Member(*json, stored)) {
              return Error::InvalidArgument(
                  std::string("'") + stored +
                  "' is not supported: responses are not stored; send the conversation's items "
                  "in 'input'");
            }
          }
          if (auto background = Member(*json, "background")) {
            bool on = false;
            if (background->get_bool().get(on) != simdjson::SUCCESS) {
              return FieldError("background", "a boolean");
            }
            if (on) {
              return Error::InvalidArgument(
                  "'background' is not supported: responses are not stored");
            }
          }
          if (auto stream = Member(*json, "stream")) {
            if (stream->get_bool().get(request.stream) != simdjson::SUCCESS) {
              return FieldError("stream", "a boolean");
            }
          }
          ATRIUM_ASSIGN_OR_RETURN(std::optional<int64_t> max_output,
                                  NonNegativeInt(*json, "max_output_tokens"));
          request.max_tokens = max_output.value_or(0);
          request.client_wants_usage = true;  // always sent, on response.completed
          return request;
        }

        if (auto stream = Member(*json, "stream")) {
          if (stream->get_bool().get(request.stream) != simdjson::SUCCESS) {
            return FieldError("stream", "a boolean");
          }
        }
        if (auto options_field = Member(*json, "stream_options")) {
          auto options = AsObject(options_field);
          if (!options) return FieldError("stream_options", "an object");
          if (auto include = Member(*options, "include_usage")) {
            if (include->get_bool().get(request.client_wants_usage) != simdjson::SUCCESS) {
              return FieldError("stream_options.include_usage", "a boolean");
            }
          }
        }
        ATRIUM_ASSIGN_OR_RETURN(std::optional<int64_t> max_tokens,
                                NonNegativeInt(*json, "max_tokens"));
        ATRIUM_ASSIGN_OR_RETURN(std::optional<int64_t> max_completion,
                                NonNegativeInt(*json, "max_completion_tokens"));
        request.max_tokens = max_completion.value_or(max_tokens.value_or(0));
        // Each of n choices (best_of candidates, for completions) is generated.
        for (const char* name : {"n", "best_of"}) {
          if (api != Api::kCompletions && std::string_view(name) == "best_of") continue;
          ATRIUM_ASSIGN_OR_RETURN(std::optional<int64_t> count, ChoiceCount(*json, name));
          request.choices = std::max(request.choices, count.value_or(1));
        }
        return request;
      });
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

Result<std::string> WithCacheSalt(std::string_view body, std::string_view salt) {
  return WithTopLevelMember(body, "cache_salt", Json(std::string(salt)).dump());
}

Result<std::string> WithTopLevelMember(std::string_view body, std::string_view name,
                                       std::string_view json_value) {
  size_t open = 0;
  if (body.substr(0, 3) == "\xEF\xBB\xBF") open = 3;
  open = SkipSpace(body, open);
  auto unscannable = [] {
    return Error::InvalidArgument("the request body could not be prepared for the model server");
  };
  if (open >= body.size() || body[open] != '{') return unscannable();
  std::optional<std::vector<Span>> members = MembersNamed(body, open, name);
  if (!members) return unscannable();
  const std::string value(json_value);
  if (members->empty()) {
    return InsertFirstMember(body, open, Json(std::string(name)).dump() + ":" + value);
  }
  // From the last to the first, so earlier spans keep their offsets.
  std::string out(body);
  for (auto it = members->rbegin(); it != members->rend(); ++it) {
    out.replace(it->begin, it->end - it->begin, value);
  }
  return out;
}

Usage UsageFromResponse(std::string_view body, Api api) {
  return WithDocument(body, [api](simdjson::simdjson_result<element> parsed) {
    element root;
    if (parsed.get(root) != simdjson::SUCCESS) return Usage{};
    auto response = AsObject(root);
    auto usage = response ? AsObject(Member(*response, "usage")) : std::nullopt;
    if (!usage) return Usage{};
    Usage u = ReadUsage(*usage);
    if (!u.present && GeneratesNothing(api)) {
      // A rerank reports {"total_tokens": N}: all of it input.
      auto total = Member(*usage, "total_tokens");
      if (total && IsInteger(*total)) {
        u.present = true;
        u.prompt_tokens = CountOf(*usage, "total_tokens");
      }
    }
    return u;
  });
}

int64_t EstimateOutputTokens(Api api, std::string_view body) {
  if (GeneratesNothing(api)) return 0;
  return WithDocument(body, [&](simdjson::simdjson_result<element> parsed) -> int64_t {
    element root;
    if (parsed.get(root) != simdjson::SUCCESS) return EstimateTokens(body);
    auto response = AsObject(root);
    if (!response) return EstimateTokens(body);
    TextTally tally;
    if (api == Api::kTranscriptions) {
      TallyString(Member(*response, "text"), tally);
      return (tally.bytes + 3) / 4;
    }
    if (api == Api::kResponses) {
      // Its output items: messages' text parts, tool calls' names and
      // arguments, reasoning: every string but ids, types and statuses.
      auto output = AsArray(Member(*response, "output"));
      if (!output) return 0;
      for (element it : *output) {
        auto item = AsObject(it);
        if (!item) continue;
        for (auto field : *item) {
          if (field.key == "id" || field.key == "type" || field.key == "status" ||
              field.key == "role" || field.key == "call_id") {
            continue;
          }
          if (field.key == "content") {
            if (auto parts = AsArray(field.value)) {
              for (element part : *parts) {
                if (auto p = AsObject(part)) {
                  TallyString(Member(*p, "text"), tally);
                  TallyString(Member(*p, "refusal"), tally);
                }
              }
              continue;
            }
          }
          TallyAllText(field.value, false, tally);
        }
      }
      return (tally.bytes + 3) / 4;
    }
    auto choices = AsArray(Member(*response, "choices"));
    if (!choices) return 0;
    for (element c : *choices) {
      auto choice = AsObject(c);
      if (!choice) continue;
      TallyString(Member(*choice, "text"), tally);
      auto message = AsObject(Member(*choice, "message"));
      if (!message) continue;
      auto content = Member(*message, "content");
      TallyString(content, tally);
      if (auto parts = AsArray(content)) {
        for (element part : *parts) {
          if (auto p = AsObject(part)) TallyString(Member(*p, "text"), tally);
        }
      }
      TallyString(Member(*message, "reasoning_content"), tally);
      TallyToolCalls(*message, tally);
    }
    return (tally.bytes + 3) / 4;  // EstimateTokens' ratio
  });
}

SseRelay::SseRelay(bool client_wants_usage, Api api)
    : client_wants_usage_(client_wants_usage || api == Api::kResponses),
      responses_(api == Api::kResponses) {}

void SseRelay::AddUsage(const Usage& u) {
  if (!u.present) return;
  usage_.present = true;
  usage_.prompt_tokens = std::max(usage_.prompt_tokens, u.prompt_tokens);
  usage_.completion_tokens = std::max(usage_.completion_tokens, u.completion_tokens);
  usage_.cached_tokens = std::max(usage_.cached_tokens, u.cached_tokens);
}

std::string SseRelay::Feed(std::string_view bytes) {
  if (saw_done_ && held_.empty()) {
    // After [DONE] only the LF of its event's CRLF still goes out.
    std::string out;
    if (skip_lf_ && !bytes.empty() && bytes.front() == '\n' && last_forwarded_) out = "\n";
    skip_lf_ = false;
    return out;
  }
  std::string out;
  if (skipping_) {
    const size_t end = SkipOversizedEvent(bytes);
    out.append(bytes.substr(0, end));
    bytes.remove_prefix(end);
    if (skipping_ || bytes.empty()) return out;
  }
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
    if (saw_done_) {
      // The stream ends at [DONE]: nothing after it is scanned, so what
      // follows cannot leave state (a CR's pending LF) that depends on how
      // the upstream's bytes were cut. Only the LF of a CRLF that ended the
      // [DONE] event is still its own; if it has not arrived, the next Feed
      // sends it.
      if (skip_lf_ && scan_ < held_.size()) {
        if (held_[scan_] == '\n' && last_forwarded_) out.push_back('\n');
        skip_lf_ = false;
      }
      break;
    }
  }
  held_.erase(0, event_start);
  scan_ -= event_start;
  line_start_ -= event_start;
  if (saw_done_) {
    held_.clear();
    scan_ = line_start_ = 0;
    data_.clear();
    has_data_ = false;
    return out;
  }
  if (held_.size() > kMaxHeldEventBytes) {
    // Too large to hold and parse: relayed as it is (no usage-only chunk is
    // that large), unmetered, and the relay finds its feet again at the
    // event's end.
    ++oversized_events_;
    at_line_start_ = line_start_ == held_.size();
    out.append(held_);
    held_.clear();
    scan_ = line_start_ = 0;
    data_.clear();
    has_data_ = false;
    last_forwarded_ = true;
    skipping_ = true;
  }
  return out;
}

size_t SseRelay::SkipOversizedEvent(std::string_view bytes) {
  for (size_t i = 0; i < bytes.size(); ++i) {
    const char c = bytes[i];
    if (skip_lf_) {
      skip_lf_ = false;
      if (c == '\n') continue;  // the CRLF's LF: the line ended at the CR
    }
    if (c != '\r' && c != '\n') {
      at_line_start_ = false;
      continue;
    }
    skip_lf_ = c == '\r';
    if (at_line_start_) {  // a blank line: the oversized event ends here
      skipping_ = false;
      return i + 1;
    }
    at_line_start_ = true;
  }
  return bytes.size();
}

std::string SseRelay::Finish() {
  // After [DONE] nothing more goes out; an oversized event's bytes have all
  // been relayed.
  if (skipping_ || saw_done_) return {};
  if (line_start_ < held_.size()) ProcessLine(std::string_view(held_).substr(line_start_));
  const bool drop = MeterEvent();  // a usage-only chunk the client did not ask for
  std::string out = drop ? std::string() : std::move(held_);
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
  if (saw_done_) {  // the stream has ended: nothing more goes out
    has_data_ = false;
    data_.clear();
    return true;
  }
  if (!has_data_) return false;
  has_data_ = false;
  std::string data = std::move(data_);
  data_.clear();
  if (data == "[DONE]") {
    saw_done_ = true;
    return false;
  }
  return WithDocument(data, [&](simdjson::simdjson_result<element> parsed) {
    element root;
    if (parsed.get(root) != simdjson::SUCCESS) return false;
    auto chunk = AsObject(root);
    if (!chunk) return false;
    if (responses_) {
      auto type = AsString(Member(*chunk, "type"));
      if (!type) return false;
      if (type->size() > 6 && type->substr(type->size() - 6) == ".delta") {
        // Text, tool-call arguments, reasoning, a refusal: generated.
        auto delta = AsString(Member(*chunk, "delta"));
        if (delta && !delta->empty()) {
          ++content_chunks_;
          content_bytes_ += static_cast<int64_t>(delta->size());
        }
      } else if (*type == "response.completed" || *type == "response.incomplete" ||
                 *type == "response.failed") {
        auto response = AsObject(Member(*chunk, "response"));
        auto usage = response ? AsObject(Member(*response, "usage")) : std::nullopt;
        if (usage) AddUsage(ReadUsage(*usage));
        saw_done_ = true;  // the last event: relayed, nothing after it
      }
      return false;
    }
    bool has_usage = false;
    if (auto usage = AsObject(Member(*chunk, "usage"))) {
      has_usage = true;
      AddUsage(ReadUsage(*usage));
    }
    auto choices = AsArray(Member(*chunk, "choices"));
    if (!choices) return false;
    for (element choice : *choices) {
      content_chunks_ += CarriesContent(choice) ? 1 : 0;
      content_bytes_ += ContentBytes(choice);
    }
    return has_usage && choices->size() == 0 && !client_wants_usage_;
  });
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
