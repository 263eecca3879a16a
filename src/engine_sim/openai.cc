#include "engine_sim/openai.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstring>

#include "common/json_reader.h"
#include "common/multipart.h"
#include "engine_sim/json_text.h"

namespace atrium::engine_sim {
namespace {

constexpr int kMaxEmbeddingDimensions = 4096;
constexpr size_t kMaxEmbeddingInputs = 2048;  // OpenAI's limit per request

// The model field, checked against the served names.
Result<std::string> ReadModel(const Json& body, const std::vector<std::string>& models) {
  auto it = body.find("model");
  if (it == body.end() || it->is_null()) {
    return Error::InvalidArgument("you must provide a model parameter");
  }
  if (!it->is_string()) return Error::InvalidArgument("'model' must be a string");
  const auto& model = it->get_ref<const std::string&>();
  if (std::find(models.begin(), models.end(), model) == models.end()) {
    return Error::NotFound("The model `" + model + "` does not exist.");
  }
  return model;
}

Result<Json> ParseBodyObject(std::string_view body) {
  auto parsed = ParseJson(body, /*max_depth=*/64);
  if (!parsed.has_value()) {
    return Error::InvalidArgument("We could not parse the JSON body of your request: " +
                                  parsed.error().message);
  }
  if (!parsed->is_object()) return Error::InvalidArgument("the request body must be a JSON object");
  return std::move(parsed).value();
}

// An optional boolean field (absent or null: nullopt).
Result<std::optional<bool>> ReadBool(const Json& object, const char* name) {
  auto it = object.find(name);
  if (it == object.end() || it->is_null()) return std::optional<bool>();
  if (!it->is_boolean()) {
    return Error::InvalidArgument(std::string("'") + name + "' must be a boolean");
  }
  return std::optional<bool>(it->get<bool>());
}

// An optional integer field >= min (absent or null: nullopt); large values are capped.
Result<std::optional<int>> ReadInt(const Json& object, const char* name, int min) {
  auto it = object.find(name);
  if (it == object.end() || it->is_null()) return std::optional<int>();
  if (!it->is_number_integer()) {
    return Error::InvalidArgument(std::string("'") + name + "' must be an integer");
  }
  const int64_t v = it->is_number_unsigned()
                        ? static_cast<int64_t>(std::min<uint64_t>(it->get<uint64_t>(), INT64_MAX))
                        : it->get<int64_t>();
  if (v < min) {
    return Error::InvalidArgument(std::string("'") + name + "' must be at least " +
                                  std::to_string(min) + ", got " + std::to_string(v));
  }
  return std::optional<int>(static_cast<int>(std::min<int64_t>(v, INT_MAX)));
}

bool IsTokenArray(const Json& value) {
  return value.is_array() && std::all_of(value.begin(), value.end(),
                                         [](const Json& t) { return t.is_number_integer(); });
}

// Hashes a token array by its decimal text.
void HashTokens(const Json& tokens, TextHasher& hasher) {
  std::string text;
  for (const Json& t : tokens) {
    text += std::to_string(t.get<int64_t>());
    text += ' ';
  }
  hasher.Add(text);
}

// The text of a chat message's content (string, null, or an array of parts).
Result<std::string> MessageText(const Json& message, size_t index) {
  auto it = message.find("content");
  if (it == message.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array()) {
    return Error::InvalidArgument("messages[" + std::to_string(index) +
                                  "].content must be a string, an array of parts or null");
  }
  std::string text;
  for (const Json& part : *it) {
    if (!part.is_object()) {
      return Error::InvalidArgument("messages[" + std::to_string(index) +
                                    "].content parts must be objects");
    }
    auto type = part.find("type");
    auto part_text = part.find("text");
    // Chat's "text" parts; the Responses API's "input_text" and (earlier
    // turns) "output_text".
    const bool text_part =
        type != part.end() && (*type == "text" || *type == "input_text" || *type == "output_text");
    if (text_part && part_text != part.end() && part_text->is_string()) {
      text += part_text->get_ref<const std::string&>();
    }
  }
  return text;
}

// What a prompt's messages add up to, as they are read.
struct PromptSink {
  TextHasher& hasher;
  int64_t& prompt_tokens;
  std::string& prompt_bytes;    // as a chat template lays it out: role, then content
  std::string& last_user_text;  // the last message's text when it is the user's

  void Add(std::string_view role, const std::string& text) {
    last_user_text = role == "user" ? text : std::string();
    hasher.Add(role);
    hasher.Add(text);
    prompt_tokens += kTokensPerChatMessage + CountTextTokens(text);
    prompt_bytes += role;
    prompt_bytes += '\n';
    prompt_bytes += text;
    prompt_bytes += '\n';
  }
};

Status ReadChatPrompt(const Json& body, PromptSink& sink) {
  auto messages = body.find("messages");
  if (messages == body.end() || messages->is_null()) {
    return Error::InvalidArgument("you must provide a messages parameter");
  }
  if (!messages->is_array() || messages->empty()) {
    return Error::InvalidArgument("'messages' must be a non-empty array");
  }
  for (size_t i = 0; i < messages->size(); ++i) {
    const Json& message = (*messages)[i];
    if (!message.is_object()) {
      return Error::InvalidArgument("messages[" + std::to_string(i) + "] must be an object");
    }
    auto role = message.find("role");
    if (role == message.end() || !role->is_string()) {
      return Error::InvalidArgument("messages[" + std::to_string(i) + "].role must be a string");
    }
    ATRIUM_ASSIGN_OR_RETURN(std::string text, MessageText(message, i));
    sink.Add(role->get_ref<const std::string&>(), text);
  }
  return OkStatus();
}

Status ReadTextPrompt(const Json& body, TextHasher& hasher, int64_t& prompt_tokens,
                      std::string& prompt_bytes) {
  auto prompt = body.find("prompt");
  if (prompt == body.end() || prompt->is_null()) {
    return Error::InvalidArgument("you must provide a prompt parameter");
  }
  const Json* one = &*prompt;
  if (prompt->is_array() && !prompt->empty() && !IsTokenArray(*prompt)) {
    if (prompt->size() != 1) {
      return Error::InvalidArgument("the engine simulator serves one prompt per request");
    }
    one = &(*prompt)[0];
  }
  if (one->is_string()) {
    const auto& text = one->get_ref<const std::string&>();
    hasher.Add(text);
    prompt_tokens = std::max<int64_t>(1, CountTextTokens(text));
    prompt_bytes = text;
    return OkStatus();
  }
  if (IsTokenArray(*one) && !one->empty()) {
    HashTokens(*one, hasher);
    prompt_tokens = static_cast<int64_t>(one->size());
    // Each token id as 4 bytes, so a block holds kPrefixBlockTokens of them.
    for (const Json& t : *one) {
      const uint64_t id = static_cast<uint64_t>(t.get<int64_t>());
      for (int b = 0; b < 4; ++b) prompt_bytes += static_cast<char>((id >> (8 * b)) & 0xFF);
    }
    return OkStatus();
  }
  return Error::InvalidArgument(
      "'prompt' must be a string, a non-empty token array, or an array holding one of those");
}

// Every string in `v`, at any depth, appended to `text`.
void AllStrings(const Json& v, std::string& text) {
  if (v.is_string()) {
    text += v.get_ref<const std::string&>();
  } else if (v.is_array() || v.is_object()) {
    for (const Json& item : v) AllStrings(item, text);
  }
}

Status ReadResponsesInput(const Json& body, PromptSink& sink) {
  for (const char* unsupported : {"previous_response_id", "background", "conversation"}) {
    auto it = body.find(unsupported);
    if (it != body.end() && !it->is_null() && *it != false) {
      return Error::InvalidArgument(std::string("'") + unsupported +
                                    "' needs stored responses, which the engine simulator does "
                                    "not keep");
    }
  }
  if (auto it = body.find("instructions"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) return Error::InvalidArgument("'instructions' must be a string");
    sink.Add("system", it->get<std::string>());
  }
  auto input = body.find("input");
  if (input == body.end() || input->is_null()) {
    return Error::InvalidArgument("you must provide an input parameter");
  }
  if (input->is_string()) {
    sink.Add("user", input->get<std::string>());
    return OkStatus();
  }
  if (!input->is_array() || input->empty()) {
    return Error::InvalidArgument("'input' must be a string or a non-empty array of items");
  }
  for (size_t i = 0; i < input->size(); ++i) {
    const Json& item = (*input)[i];
    if (!item.is_object()) {
      return Error::InvalidArgument("input[" + std::to_string(i) + "] must be an object");
    }
    auto role = item.find("role");
    if (role != item.end() && role->is_string()) {
      ATRIUM_ASSIGN_OR_RETURN(std::string text, MessageText(item, i));
      sink.Add(role->get_ref<const std::string&>(), text);
    } else {
      // A tool call's output, a reasoning item ...: its strings.
      std::string text;
      AllStrings(item, text);
      sink.Add("item", text);
    }
  }
  return OkStatus();
}

std::string FormatFloat(float v) {
  char buffer[32];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), v);
  return ec == std::errc() ? std::string(buffer, end) : "0";
}

void AppendUsageObject(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens,
                       std::string& out) {
  out += R"({"prompt_tokens":)";
  out += std::to_string(prompt_tokens);
  out += R"(,"completion_tokens":)";
  out += std::to_string(completion_tokens);
  out += R"(,"total_tokens":)";
  out += std::to_string(prompt_tokens + completion_tokens);
  out += R"(,"prompt_tokens_details":{"cached_tokens":)";
  out += std::to_string(cached_tokens);
  out += "}}";
}

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

std::string_view EndpointName(Endpoint endpoint) {
  switch (endpoint) {
    case Endpoint::kChatCompletions:
      return "chat.completions";
    case Endpoint::kCompletions:
      return "completions";
    case Endpoint::kEmbeddings:
      return "embeddings";
    case Endpoint::kResponses:
      return "responses";
  }
  return "unknown";
}

Result<CompletionRequest> ParseCompletionRequest(Endpoint endpoint, std::string_view body,
                                                 const std::vector<std::string>& models,
                                                 uint64_t seed) {
  ATRIUM_ASSIGN_OR_RETURN(Json json, ParseBodyObject(body));
  CompletionRequest request;
  request.endpoint = endpoint;
  TextHasher hasher(seed);
  std::string prompt_bytes;
  std::string last_user_text;
  PromptSink sink{hasher, request.prompt_tokens, prompt_bytes, last_user_text};
  if (endpoint == Endpoint::kResponses) {
    ATRIUM_RETURN_IF_ERROR(ReadResponsesInput(json, sink));
  } else if (endpoint == Endpoint::kChatCompletions) {
    ATRIUM_RETURN_IF_ERROR(ReadChatPrompt(json, sink));
  } else {
    ATRIUM_RETURN_IF_ERROR(ReadTextPrompt(json, hasher, request.prompt_tokens, prompt_bytes));
  }
  // vLLM's rule: absent or null, or a non-empty string.
  if (auto salt = json.find("cache_salt"); salt != json.end() && !salt->is_null()) {
    if (!salt->is_string() || salt->get_ref<const std::string&>().empty()) {
      return Error::InvalidArgument("'cache_salt' must be a non-empty string if provided");
    }
    request.cache_salt = salt->get<std::string>();
  }
  request.prefix_blocks = PrefixBlocks(request.cache_salt, prompt_bytes);
  // The model is checked after the prompt so that a request that is both
  // malformed and for an unknown model gets the 400, as OpenAI answers.
  ATRIUM_ASSIGN_OR_RETURN(request.model, ReadModel(json, models));
  request.text_hash = hasher.value();
  if (endpoint != Endpoint::kCompletions) {
    ATRIUM_ASSIGN_OR_RETURN(
        request.tool_call,
        DecideToolCall(json, endpoint == Endpoint::kResponses, last_user_text, request.text_hash));
  }

  if (endpoint == Endpoint::kResponses) {
    ATRIUM_ASSIGN_OR_RETURN(request.max_tokens, ReadInt(json, "max_output_tokens", 1));
    ATRIUM_ASSIGN_OR_RETURN(std::optional<bool> stream, ReadBool(json, "stream"));
    request.stream = stream.value_or(false);
    return request;
  }
  ATRIUM_ASSIGN_OR_RETURN(std::optional<int> max_tokens, ReadInt(json, "max_tokens", 1));
  if (endpoint == Endpoint::kChatCompletions) {
    ATRIUM_ASSIGN_OR_RETURN(std::optional<int> max_completion,
                            ReadInt(json, "max_completion_tokens", 1));
    if (max_completion) max_tokens = max_completion;
  }
  request.max_tokens = max_tokens;

  ATRIUM_ASSIGN_OR_RETURN(std::optional<int> n, ReadInt(json, "n", 1));
  if (n && *n != 1) return Error::InvalidArgument("the engine simulator supports only n=1");

  ATRIUM_ASSIGN_OR_RETURN(std::optional<bool> stream, ReadBool(json, "stream"));
  request.stream = stream.value_or(false);
  auto options = json.find("stream_options");
  if (options != json.end() && !options->is_null()) {
    if (!options->is_object()) return Error::InvalidArgument("'stream_options' must be an object");
    ATRIUM_ASSIGN_OR_RETURN(std::optional<bool> include_usage, ReadBool(*options, "include_usage"));
    request.include_usage = request.stream && include_usage.value_or(false);
  }
  return request;
}

namespace {

// A string, or with `objects` a {"text": ...} object, else "".
std::optional<std::string> TextOf(const Json& v, bool objects) {
  if (v.is_string()) return v.get<std::string>();
  if (objects && v.is_object()) {
    auto text = v.find("text");
    if (text != v.end() && text->is_string()) return text->get<std::string>();
  }
  return std::nullopt;
}

// A string or a non-empty array of strings (`objects`: or {"text"} objects).
Result<std::vector<std::string>> ReadTexts(const Json& body, const char* name, bool objects) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) {
    return Error::InvalidArgument(std::string("you must provide a ") + name + " parameter");
  }
  std::vector<std::string> texts;
  if (auto one = TextOf(*it, false)) {
    texts.push_back(std::move(*one));
    return texts;
  }
  if (!it->is_array() || it->empty()) {
    return Error::InvalidArgument(std::string("'") + name +
                                  "' must be a string or a non-empty array");
  }
  for (const Json& item : *it) {
    auto text = TextOf(item, objects);
    if (!text) {
      return Error::InvalidArgument(std::string("'") + name + "' must hold " +
                                    (objects ? "strings or {\"text\": ...} objects" : "strings"));
    }
    texts.push_back(std::move(*text));
  }
  return texts;
}

double PairScore(uint64_t seed, const std::string& query, const std::string& document) {
  TextHasher hasher(seed);
  hasher.Add(query);
  hasher.Add(document);
  return static_cast<double>(Mix(hasher.value()) >> 11) / 9007199254740992.0;  // 2^53
}

void ScorePairs(uint64_t seed, const std::vector<std::string>& queries, PairScores& out) {
  for (size_t i = 0; i < out.documents.size(); ++i) {
    const std::string& query = queries.size() == 1 ? queries[0] : queries[i];
    out.scores.push_back(PairScore(seed, query, out.documents[i]));
    out.prompt_tokens += CountTextTokens(query) + CountTextTokens(out.documents[i]);
  }
}

}  // namespace

Result<PairScores> ParseRerankRequest(std::string_view body, const std::vector<std::string>& models,
                                      uint64_t seed) {
  ATRIUM_ASSIGN_OR_RETURN(Json json, ParseBodyObject(body));
  PairScores out;
  auto query = json.find("query");
  if (query == json.end() || !query->is_string()) {
    return Error::InvalidArgument("'query' must be a string");
  }
  auto documents = json.find("documents");
  if (documents == json.end() || !documents->is_array() || documents->empty()) {
    return Error::InvalidArgument("'documents' must be a non-empty array");
  }
  ATRIUM_ASSIGN_OR_RETURN(out.documents, ReadTexts(json, "documents", true));
  ATRIUM_ASSIGN_OR_RETURN(std::optional<int> top_n, ReadInt(json, "top_n", 0));
  out.top_n = top_n.value_or(0);
  ATRIUM_ASSIGN_OR_RETURN(out.model, ReadModel(json, models));
  ScorePairs(seed, {query->get<std::string>()}, out);
  return out;
}

Result<PairScores> ParseScoreRequest(std::string_view body, const std::vector<std::string>& models,
                                     uint64_t seed) {
  ATRIUM_ASSIGN_OR_RETURN(Json json, ParseBodyObject(body));
  PairScores out;
  ATRIUM_ASSIGN_OR_RETURN(std::vector<std::string> first, ReadTexts(json, "text_1", false));
  ATRIUM_ASSIGN_OR_RETURN(out.documents, ReadTexts(json, "text_2", false));
  if (first.size() != 1 && first.size() != out.documents.size()) {
    return Error::InvalidArgument("'text_1' must be one text or as many as 'text_2'");
  }
  ATRIUM_ASSIGN_OR_RETURN(out.model, ReadModel(json, models));
  ScorePairs(seed, first, out);
  return out;
}

std::string RerankResponseJson(const PairScores& scores, std::string_view id) {
  std::vector<size_t> order(scores.documents.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return scores.scores[a] > scores.scores[b]; });
  if (scores.top_n > 0 && static_cast<size_t>(scores.top_n) < order.size()) {
    order.resize(static_cast<size_t>(scores.top_n));
  }
  std::string out = R"({"id":)";
  AppendJsonString(id, out);
  out += R"(,"model":)";
  AppendJsonString(scores.model, out);
  out += R"(,"usage":{"total_tokens":)";
  out += std::to_string(scores.prompt_tokens);
  out += R"(},"results":[)";
  for (size_t k = 0; k < order.size(); ++k) {
    if (k > 0) out += ',';
    out += R"({"index":)";
    out += std::to_string(order[k]);
    out += R"(,"document":{"text":)";
    AppendJsonString(scores.documents[order[k]], out);
    out += R"(},"relevance_score":)";
    out += FormatFloat(static_cast<float>(scores.scores[order[k]]));
    out += '}';
  }
  out += "]}";
  return out;
}

std::string ScoreResponseJson(const PairScores& scores, std::string_view id, int64_t created) {
  std::string out = R"({"id":)";
  AppendJsonString(id, out);
  out += R"(,"object":"list","created":)";
  out += std::to_string(created);
  out += R"(,"model":)";
  AppendJsonString(scores.model, out);
  out += R"(,"data":[)";
  for (size_t i = 0; i < scores.scores.size(); ++i) {
    if (i > 0) out += ',';
    out += R"({"index":)";
    out += std::to_string(i);
    out += R"(,"object":"score","score":)";
    out += FormatFloat(static_cast<float>(scores.scores[i]));
    out += '}';
  }
  out += R"(],"usage":{"prompt_tokens":)";
  out += std::to_string(scores.prompt_tokens);
  out += R"(,"total_tokens":)";
  out += std::to_string(scores.prompt_tokens);
  out += R"(,"completion_tokens":0}})";
  return out;
}

Result<Transcription> ParseTranscriptionRequest(std::string_view content_type,
                                                std::string_view body,
                                                const std::vector<std::string>& models,
                                                uint64_t seed) {
  ATRIUM_ASSIGN_OR_RETURN(std::string boundary, FormBoundary(content_type));
  ATRIUM_ASSIGN_OR_RETURN(std::vector<FormPart> parts, ParseForm(body, boundary));
  Transcription t;
  Json fields = Json::object();
  const FormPart* file = nullptr;
  for (const FormPart& part : parts) {
    if (part.name == "file") {
      file = &part;
    } else {
      fields[part.name] = std::string(part.data);
    }
  }
  if (file == nullptr || file->data.empty()) {
    return Error::InvalidArgument("you must provide a non-empty file");
  }
  if (fields.value("stream", "false") == "true") {
    return Error::InvalidArgument("the engine simulator does not stream transcriptions");
  }
  const std::string format = fields.value("response_format", "json");
  if (format != "json" && format != "text") {
    return Error::InvalidArgument("'response_format' must be json or text");
  }
  t.text_format = format == "text";
  ATRIUM_ASSIGN_OR_RETURN(t.model, ReadModel(fields, models));
  TextHasher hasher(seed);
  hasher.Add(file->data);
  t.audio_hash = hasher.value();
  t.audio_tokens = std::max<int64_t>(1, static_cast<int64_t>(file->data.size() + 639) / 640);
  t.prompt_tokens = CountTextTokens(fields.value("prompt", ""));
  t.words = static_cast<int>(std::clamp<int64_t>(t.audio_tokens / 10, 1, 256));
  return t;
}

std::string TranscriptionResponseBody(const Transcription& t) {
  std::string text = CompletionText(t.audio_hash, t.words);
  if (t.text_format) return text;
  std::string out = R"({"text":)";
  AppendJsonString(text, out);
  out += R"(,"usage":{"type":"tokens","input_tokens":)";
  out += std::to_string(t.audio_tokens + t.prompt_tokens);
  out += R"(,"input_token_details":{"audio_tokens":)";
  out += std::to_string(t.audio_tokens);
  out += R"(,"text_tokens":)";
  out += std::to_string(t.prompt_tokens);
  out += R"(},"output_tokens":)";
  out += std::to_string(t.words);
  out += R"(,"total_tokens":)";
  out += std::to_string(t.audio_tokens + t.prompt_tokens + t.words);
  out += "}}";
  return out;
}

Result<EmbeddingRequest> ParseEmbeddingRequest(std::string_view body,
                                               const std::vector<std::string>& models,
                                               uint64_t seed) {
  ATRIUM_ASSIGN_OR_RETURN(Json json, ParseBodyObject(body));
  EmbeddingRequest request;
  auto input = json.find("input");
  if (input == json.end() || input->is_null()) {
    return Error::InvalidArgument("you must provide an input parameter");
  }
  auto add_text = [&](const std::string& text) {
    TextHasher hasher(seed);
    hasher.Add(text);
    request.input_hashes.push_back(hasher.value());
    request.prompt_tokens += std::max<int64_t>(1, CountTextTokens(text));
  };
  auto add_tokens = [&](const Json& tokens) {
    TextHasher hasher(seed);
    HashTokens(tokens, hasher);
    request.input_hashes.push_back(hasher.value());
    request.prompt_tokens += static_cast<int64_t>(tokens.size());
  };
  const char* kShape =
      "'input' must be a string, an array of strings, a token array or an array of token arrays";
  if (input->is_string()) {
    add_text(input->get_ref<const std::string&>());
  } else if (input->is_array() && !input->empty()) {
    if (input->size() > kMaxEmbeddingInputs) {
      return Error::InvalidArgument("'input' holds more than 2048 items");
    }
    if (IsTokenArray(*input)) {
      add_tokens(*input);
    } else {
      for (const Json& item : *input) {
        if (item.is_string()) {
          add_text(item.get_ref<const std::string&>());
        } else if (IsTokenArray(item) && !item.empty()) {
          add_tokens(item);
        } else {
          return Error::InvalidArgument(kShape);
        }
      }
    }
  } else {
    return Error::InvalidArgument(kShape);
  }
  ATRIUM_ASSIGN_OR_RETURN(request.model, ReadModel(json, models));
  ATRIUM_ASSIGN_OR_RETURN(std::optional<int> dimensions, ReadInt(json, "dimensions", 1));
  if (dimensions && *dimensions > kMaxEmbeddingDimensions) {
    return Error::InvalidArgument("'dimensions' must be at most 4096");
  }
  request.dimensions = dimensions.value_or(kDefaultEmbeddingDimensions);
  auto format = json.find("encoding_format");
  if (format != json.end() && !format->is_null()) {
    if (*format == "base64") {
      request.base64 = true;
    } else if (*format != "float") {
      return Error::InvalidArgument("'encoding_format' must be \"float\" or \"base64\"");
    }
  }
  return request;
}

std::vector<float> EmbeddingVector(uint64_t input_hash, int dimensions) {
  std::vector<float> v(static_cast<size_t>(std::max(1, dimensions)));
  double norm = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    // Uniform in [-1, 1) from the top 24 bits; never all zero in practice,
    // and a zero vector is left as it is.
    const uint64_t bits = Mix(input_hash + 0x632be59bd9b4e019ULL * (i + 1)) >> 40;
    v[i] = static_cast<float>(static_cast<double>(bits) / (1 << 23) - 1.0);
    norm += static_cast<double>(v[i]) * v[i];
  }
  if (norm > 0) {
    const double scale = 1.0 / std::sqrt(norm);
    for (float& x : v) x = static_cast<float>(x * scale);
  }
  return v;
}

namespace {

// {"id":..,"type":"function","function":{"name":..,"arguments":..}}, with
// "index":0 first when `index` (stream deltas).
void AppendToolCallObject(const ToolCall& call, std::string_view arguments, bool index,
                          std::string& out) {
  out += index ? R"({"index":0,"id":)" : R"({"id":)";
  AppendJsonString(call.call_id, out);
  out += R"(,"type":"function","function":{"name":)";
  AppendJsonString(call.name, out);
  out += R"(,"arguments":)";
  AppendJsonString(arguments, out);
  out += "}}";
}

std::string_view ChatFinishName(FinishReason reason, bool tool_call) {
  return tool_call && reason == FinishReason::kStop ? "tool_calls" : FinishReasonName(reason);
}

}  // namespace

std::string CompletionResponseJson(const ResponseMeta& meta, std::string_view text,
                                   int64_t prompt_tokens, int64_t cached_tokens,
                                   int completion_tokens, FinishReason reason,
                                   const ToolCall* call) {
  const bool chat = meta.endpoint == Endpoint::kChatCompletions;
  std::string out;
  out.reserve(256 + text.size());
  out += R"({"id":)";
  AppendJsonString(meta.id, out);
  out += chat ? R"(,"object":"chat.completion","created":)"
              : R"(,"object":"text_completion","created":)";
  out += std::to_string(meta.created);
  out += R"(,"model":)";
  AppendJsonString(meta.model, out);
  out += R"(,"system_fingerprint":"atrium-engine-sim","choices":[{"index":0,)";
  if (chat && call != nullptr) {
    out += R"("message":{"role":"assistant","content":null,"tool_calls":[)";
    AppendToolCallObject(*call, ArgumentsAfter(*call, completion_tokens), false, out);
    out += "]},";
  } else if (chat) {
    out += R"("message":{"role":"assistant","content":)";
    AppendJsonString(text, out);
    out += "},";
  } else {
    out += R"("text":)";
    AppendJsonString(text, out);
    out += ',';
  }
  out += R"("logprobs":null,"finish_reason":")";
  out += ChatFinishName(reason, chat && call != nullptr);
  out += R"("}],"usage":)";
  AppendUsageObject(prompt_tokens, completion_tokens, cached_tokens, out);
  out += '}';
  return out;
}

namespace {

// A Responses API `response` object: `status` "in_progress" (no output, usage
// null), "completed" or "incomplete" (the one message and the usage).
// The output item: a message with `text`, or with `call` a function_call
// with its arguments as far as `completion_tokens` got.
void AppendOutputItem(std::string_view item_id, std::string_view status, std::string_view text,
                      const ToolCall* call, int completion_tokens, std::string& out) {
  out += R"({"id":)";
  AppendJsonString(item_id, out);
  if (call != nullptr) {
    out += R"(,"type":"function_call","status":")";
    out += status;
    out += R"(","call_id":)";
    AppendJsonString(call->call_id, out);
    out += R"(,"name":)";
    AppendJsonString(call->name, out);
    out += R"(,"arguments":)";
    AppendJsonString(ArgumentsAfter(*call, completion_tokens), out);
    out += '}';
    return;
  }
  out += R"(,"type":"message","status":")";
  out += status;
  out += R"(","role":"assistant","content":[)";
  if (status == "completed") {
    out += R"({"type":"output_text","text":)";
    AppendJsonString(text, out);
    out += R"(,"annotations":[]})";
  }
  out += "]}";
}

void AppendResponseObject(const ResponseMeta& meta, std::string_view item_id,
                          std::string_view status, std::string_view text, int64_t prompt_tokens,
                          int64_t cached_tokens, int completion_tokens, std::string& out,
                          const ToolCall* call = nullptr) {
  const bool done = status != "in_progress";
  out += R"({"id":)";
  AppendJsonString(meta.id, out);
  out += R"(,"object":"response","created_at":)";
  out += std::to_string(meta.created);
  out += R"(,"status":")";
  out += status;
  out += R"(","error":null,"incomplete_details":)";
  out += status == "incomplete" ? R"({"reason":"max_output_tokens"})" : "null";
  out += R"(,"instructions":null,"model":)";
  AppendJsonString(meta.model, out);
  out += R"(,"output":[)";
  if (done) AppendOutputItem(item_id, "completed", text, call, completion_tokens, out);
  out += R"(],"parallel_tool_calls":true,"tool_choice":"auto","tools":[],"usage":)";
  if (!done) {
    out += "null}";
    return;
  }
  out += R"({"input_tokens":)";
  out += std::to_string(prompt_tokens);
  out += R"(,"input_tokens_details":{"cached_tokens":)";
  out += std::to_string(cached_tokens);
  out += R"(},"output_tokens":)";
  out += std::to_string(completion_tokens);
  out += R"(,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":)";
  out += std::to_string(prompt_tokens + completion_tokens);
  out += "}}";
}

std::string_view ResponseStatus(FinishReason reason) {
  return reason == FinishReason::kLength ? "incomplete" : "completed";
}

std::string ItemIdOf(const ResponseMeta& meta, bool call) {
  // "resp_<n>" -> "msg_<n>" (a message) or "fc_<n>" (a function call)
  const size_t underscore = meta.id.find('_');
  return (call ? "fc_" : "msg_") +
         (underscore == std::string::npos ? meta.id : meta.id.substr(underscore + 1));
}

}  // namespace

std::string ResponsesResponseJson(const ResponseMeta& meta, std::string_view text,
                                  int64_t prompt_tokens, int64_t cached_tokens,
                                  int completion_tokens, FinishReason reason,
                                  const ToolCall* call) {
  std::string out;
  out.reserve(512 + text.size());
  AppendResponseObject(meta, ItemIdOf(meta, call != nullptr), ResponseStatus(reason), text,
                       prompt_tokens, cached_tokens, completion_tokens, out, call);
  return out;
}

ResponsesEvents::ResponsesEvents(const ResponseMeta& meta, std::optional<ToolCall> call)
    : meta_(meta), call_(std::move(call)), item_id_(ItemIdOf(meta, call_.has_value())) {}

void ResponsesEvents::AppendEvent(std::string_view type, std::string_view fields,
                                  std::string& out) {
  out += "event: ";
  out += type;
  out += "\ndata: {\"type\":\"";
  out += type;
  out += "\",\"sequence_number\":";
  out += std::to_string(sequence_++);
  if (!fields.empty()) {
    out += ',';
    out += fields;
  }
  out += "}\n\n";
}

void ResponsesEvents::AppendStart(std::string& out) {
  std::string response = R"("response":)";
  AppendResponseObject(meta_, item_id_, "in_progress", "", 0, 0, 0, response);
  AppendEvent("response.created", response, out);
  AppendEvent("response.in_progress", response, out);
  const ToolCall* call = call_ ? &*call_ : nullptr;
  std::string item = R"("output_index":0,"item":)";
  AppendOutputItem(item_id_, "in_progress", "", call, 0, item);
  AppendEvent("response.output_item.added", item, out);
  if (call != nullptr) return;
  std::string part = R"("item_id":)";
  AppendJsonString(item_id_, part);
  part +=
      R"(,"output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]})";
  AppendEvent("response.content_part.added", part, out);
}

void ResponsesEvents::AppendToken(std::string_view text, std::string& out) {
  text_ += text;
  std::string fields = R"("item_id":)";
  AppendJsonString(item_id_, fields);
  fields +=
      call_ ? R"(,"output_index":0,"delta":)" : R"(,"output_index":0,"content_index":0,"delta":)";
  AppendJsonString(text, fields);
  AppendEvent(call_ ? "response.function_call_arguments.delta" : "response.output_text.delta",
              fields, out);
}

void ResponsesEvents::AppendEnd(FinishReason reason, int64_t prompt_tokens, int64_t cached_tokens,
                                int completion_tokens, std::string& out) {
  const ToolCall* call = call_ ? &*call_ : nullptr;
  std::string where = R"("item_id":)";
  AppendJsonString(item_id_, where);
  if (call != nullptr) {
    std::string done = where + R"(,"output_index":0,"arguments":)";
    AppendJsonString(text_, done);
    AppendEvent("response.function_call_arguments.done", done, out);
  } else {
    where += R"(,"output_index":0,"content_index":0)";
    std::string text_done = where + R"(,"text":)";
    AppendJsonString(text_, text_done);
    AppendEvent("response.output_text.done", text_done, out);
    std::string part = R"({"type":"output_text","text":)";
    AppendJsonString(text_, part);
    part += R"(,"annotations":[]})";
    AppendEvent("response.content_part.done", where + R"(,"part":)" + part, out);
  }
  std::string item = R"("output_index":0,"item":)";
  AppendOutputItem(item_id_, "completed", text_, call, completion_tokens, item);
  AppendEvent("response.output_item.done", item, out);
  const std::string_view status = ResponseStatus(reason);
  std::string response = R"("response":)";
  AppendResponseObject(meta_, item_id_, status, text_, prompt_tokens, cached_tokens,
                       completion_tokens, response, call);
  AppendEvent(status == "completed" ? "response.completed" : "response.incomplete", response, out);
}

StreamEvents::StreamEvents(const ResponseMeta& meta, bool include_usage)
    : chat_(meta.endpoint == Endpoint::kChatCompletions), include_usage_(include_usage) {
  head_ = R"(data: {"id":)";
  AppendJsonString(meta.id, head_);
  head_ += chat_ ? R"(,"object":"chat.completion.chunk","created":)"
                 : R"(,"object":"text_completion","created":)";
  head_ += std::to_string(meta.created);
  head_ += R"(,"model":)";
  AppendJsonString(meta.model, head_);
  head_ += R"(,"system_fingerprint":"atrium-engine-sim","choices":[)";
}

namespace {
void CloseEvent(bool include_usage, std::string& out) {
  out += include_usage ? R"(],"usage":null})"
                         "\n\n"
                       : "]}\n\n";
}
}  // namespace

void StreamEvents::AppendStart(std::string& out) const {
  if (!chat_) return;
  out += head_;
  out +=
      R"({"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null})";
  CloseEvent(include_usage_, out);
}

void StreamEvents::AppendToken(std::string_view text, std::string& out) const {
  out += head_;
  if (chat_) {
    out += R"({"index":0,"delta":{"content":)";
    AppendJsonString(text, out);
    out += R"(},"logprobs":null,"finish_reason":null})";
  } else {
    out += R"({"index":0,"text":)";
    AppendJsonString(text, out);
    out += R"(,"logprobs":null,"finish_reason":null})";
  }
  CloseEvent(include_usage_, out);
}

void StreamEvents::AppendToolCallStart(const ToolCall& call, std::string& out) const {
  out += head_;
  out += R"({"index":0,"delta":{"tool_calls":[)";
  AppendToolCallObject(call, "", true, out);
  out += R"(]},"logprobs":null,"finish_reason":null})";
  CloseEvent(include_usage_, out);
}

void StreamEvents::AppendToolCallArguments(std::string_view piece, std::string& out) const {
  out += head_;
  out += R"({"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":)";
  AppendJsonString(piece, out);
  out += R"(}}]},"logprobs":null,"finish_reason":null})";
  CloseEvent(include_usage_, out);
}

void StreamEvents::AppendFinish(FinishReason reason, std::string& out, bool tool_call) const {
  out += head_;
  out += chat_ ? R"({"index":0,"delta":{},"logprobs":null,"finish_reason":")"
               : R"({"index":0,"text":"","logprobs":null,"finish_reason":")";
  out += ChatFinishName(reason, chat_ && tool_call);
  out += R"("})";
  CloseEvent(include_usage_, out);
}

void StreamEvents::AppendUsage(int64_t prompt_tokens, int64_t cached_tokens, int completion_tokens,
                               std::string& out) const {
  if (!include_usage_) return;
  out += head_;
  out += R"(],"usage":)";
  AppendUsageObject(prompt_tokens, completion_tokens, cached_tokens, out);
  out += "}\n\n";
}

void StreamEvents::AppendDone(std::string& out) { out += "data: [DONE]\n\n"; }

std::string EmbeddingResponseJson(const EmbeddingRequest& request) {
  std::string out;
  out.reserve(128 + request.input_hashes.size() * (64 + request.dimensions * 12));
  out += R"({"object":"list","data":[)";
  for (size_t i = 0; i < request.input_hashes.size(); ++i) {
    if (i > 0) out += ',';
    out += R"({"object":"embedding","index":)";
    out += std::to_string(i);
    out += R"(,"embedding":)";
    const std::vector<float> v = EmbeddingVector(request.input_hashes[i], request.dimensions);
    if (request.base64) {
      // Little-endian float32, as OpenAI sends it.
      std::string raw(v.size() * sizeof(float), '\0');
      for (size_t j = 0; j < v.size(); ++j) {
        uint32_t bits;
        std::memcpy(&bits, &v[j], sizeof(bits));
        for (int b = 0; b < 4; ++b) raw[j * 4 + b] = static_cast<char>((bits >> (8 * b)) & 0xff);
      }
      out += '"';
      AppendBase64(raw, out);
      out += '"';
    } else {
      out += '[';
      for (size_t j = 0; j < v.size(); ++j) {
        if (j > 0) out += ',';
        out += FormatFloat(v[j]);
      }
      out += ']';
    }
    out += '}';
  }
  out += R"(],"model":)";
  AppendJsonString(request.model, out);
  out += R"(,"usage":{"prompt_tokens":)";
  out += std::to_string(request.prompt_tokens);
  out += R"(,"total_tokens":)";
  out += std::to_string(request.prompt_tokens);
  out += "}}";
  return out;
}

std::string ModelJson(std::string_view model, int64_t created, int max_context) {
  std::string out = R"({"id":)";
  AppendJsonString(model, out);
  out += R"(,"object":"model","created":)";
  out += std::to_string(created);
  out += R"(,"owned_by":"atrium-engine-sim","max_model_len":)";
  out += std::to_string(max_context);
  out += '}';
  return out;
}

std::string ModelsJson(const std::vector<std::string>& models, int64_t created, int max_context) {
  std::string out = R"({"object":"list","data":[)";
  for (size_t i = 0; i < models.size(); ++i) {
    if (i > 0) out += ',';
    out += ModelJson(models[i], created, max_context);
  }
  out += "]}";
  return out;
}

std::string ErrorJson(std::string_view message, std::string_view type, std::string_view param,
                      std::string_view code) {
  std::string out = R"({"error":{"message":)";
  AppendJsonString(message, out);
  out += R"(,"type":)";
  AppendJsonString(type, out);
  out += R"(,"param":)";
  if (param.empty()) {
    out += "null";
  } else {
    AppendJsonString(param, out);
  }
  out += R"(,"code":)";
  if (code.empty()) {
    out += "null";
  } else {
    AppendJsonString(code, out);
  }
  out += "}}";
  return out;
}

}  // namespace atrium::engine_sim
