// The simulator's OpenAI wire format: request parsing and response shapes.
#include "engine_sim/openai.h"

#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "engine_sim/json_text.h"
#include "support/result_matchers.h"

namespace atrium::engine_sim {
namespace {

using nlohmann::json;

const std::vector<std::string> kModels = {"llama-3.1-8b-instruct", "other"};

Result<CompletionRequest> Chat(const json& body) {
  return ParseCompletionRequest(Endpoint::kChatCompletions, body.dump(), kModels, 0);
}

Result<CompletionRequest> Text(const json& body) {
  return ParseCompletionRequest(Endpoint::kCompletions, body.dump(), kModels, 0);
}

json ChatBody() {
  return {{"model", "llama-3.1-8b-instruct"},
          {"messages",
           {{{"role", "system"}, {"content", "Be brief."}},
            {{"role", "user"}, {"content", "Hello there, model!"}}}}};
}

// The JSON payloads of a run of "data: ...\n\n" events.
std::vector<std::string> SsePayloads(const std::string& text) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = text.find("\n\n", at);
    EXPECT_NE(end, std::string::npos);
    if (end == std::string::npos) break;
    const std::string event = text.substr(at, end - at);
    EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
    out.push_back(event.substr(6));
    at = end + 2;
  }
  return out;
}

TEST(OpenAiParseTest, ChatCountsFourTokensPerMessagePlusTextBytesOverFour) {
  auto request = Chat(ChatBody());
  ASSERT_OK(request);
  EXPECT_EQ(request->model, "llama-3.1-8b-instruct");
  // "Be brief." is 9 bytes (3 tokens), "Hello there, model!" 19 bytes (5 tokens).
  EXPECT_EQ(request->prompt_tokens, (4 + 3) + (4 + 5));
  EXPECT_FALSE(request->stream);
  EXPECT_FALSE(request->include_usage);
  EXPECT_FALSE(request->max_tokens.has_value());
}

TEST(OpenAiParseTest, ChatContentPartsNullContentAndUnknownFields) {
  json body = ChatBody();
  body["messages"] = {{{"role", "user"},
                       {"content",
                        {{{"type", "text"}, {"text", "abcd"}},
                         {{"type", "image_url"}, {"image_url", {{"url", "http://x"}}}},
                         {{"type", "text"}, {"text", "efgh"}}}}},
                      {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array()}}};
  body["temperature"] = 0.2;
  body["some_future_field"] = {{"x", 1}};
  auto request = Chat(body);
  ASSERT_OK(request);
  EXPECT_EQ(request->prompt_tokens, (4 + 2) + 4);
}

TEST(OpenAiParseTest, SameMessagesGiveTheSameHashAndSeedChangesIt) {
  auto a = Chat(ChatBody());
  auto b = Chat(ChatBody());
  json other = ChatBody();
  other["messages"][1]["content"] = "Hello there, model?";
  auto c = Chat(other);
  ASSERT_OK(a);
  ASSERT_OK(c);
  EXPECT_EQ(a->text_hash, b->text_hash);
  EXPECT_NE(a->text_hash, c->text_hash);
  auto seeded =
      ParseCompletionRequest(Endpoint::kChatCompletions, ChatBody().dump(), kModels, /*seed=*/9);
  ASSERT_OK(seeded);
  EXPECT_NE(seeded->text_hash, a->text_hash);
}

TEST(OpenAiParseTest, MaxTokensStreamAndIncludeUsage) {
  json body = ChatBody();
  body["max_tokens"] = 7;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  auto request = Chat(body);
  ASSERT_OK(request);
  EXPECT_EQ(request->max_tokens, 7);
  EXPECT_TRUE(request->stream);
  EXPECT_TRUE(request->include_usage);

  body["max_completion_tokens"] = 9;  // the newer name wins
  EXPECT_EQ(Chat(body)->max_tokens, 9);

  body.erase("stream");  // include_usage means nothing without a stream
  EXPECT_FALSE(Chat(body)->include_usage);
  body["max_tokens"] = nullptr;
  body.erase("max_completion_tokens");
  EXPECT_FALSE(Chat(body)->max_tokens.has_value());
}

TEST(OpenAiParseTest, CacheSaltNamesThePromptsBlocksAndMustBeANonEmptyString) {
  json body = ChatBody();
  body["messages"][1]["content"] = std::string(300, 'q');
  auto plain = Chat(body);
  ASSERT_TRUE(plain.has_value());
  EXPECT_EQ(plain->cache_salt, "");
  EXPECT_GE(plain->prefix_blocks.size(), 4u);
  body["cache_salt"] = "tenant-a";
  auto salted = Chat(body);
  ASSERT_TRUE(salted.has_value());
  EXPECT_EQ(salted->cache_salt, "tenant-a");
  EXPECT_EQ(salted->prefix_blocks.size(), plain->prefix_blocks.size());
  EXPECT_NE(salted->prefix_blocks, plain->prefix_blocks);
  body["cache_salt"] = nullptr;
  EXPECT_TRUE(Chat(body).has_value());
  for (const json& bad : {json(""), json(7), json::object()}) {
    body["cache_salt"] = bad;
    auto refused = Chat(body);
    ASSERT_FALSE(refused.has_value()) << bad;
    EXPECT_NE(refused.error().message.find("cache_salt"), std::string::npos);
  }
  // Completions too, token arrays included.
  auto text = Text({{"model", "other"}, {"prompt", std::vector<int>(40, 7)}, {"cache_salt", "x"}});
  ASSERT_TRUE(text.has_value());
  EXPECT_EQ(text->prefix_blocks.size(), 2u);  // 40 tokens: two whole blocks of 16
}

TEST(OpenAiParseTest, UsageSaysHowManyPromptTokensTheCacheServed) {
  ResponseMeta meta{Endpoint::kChatCompletions, "chatcmpl-1", 1, "m"};
  json body = json::parse(CompletionResponseJson(meta, "x", 40, 32, 1, FinishReason::kStop));
  EXPECT_EQ(body["usage"]["prompt_tokens"], 40);
  EXPECT_EQ(body["usage"]["prompt_tokens_details"]["cached_tokens"], 32);
}

TEST(OpenAiParseTest, ResponsesInputInstructionsAndMaxOutputTokens) {
  auto parse = [](const json& body) {
    return ParseCompletionRequest(Endpoint::kResponses, body.dump(), kModels, 0);
  };
  auto plain = parse({{"model", "other"}, {"input", "Hello there, model!"}});  // 19 bytes
  ASSERT_TRUE(plain.has_value()) << plain.error().message;
  EXPECT_EQ(plain->prompt_tokens, 4 + 5);
  EXPECT_FALSE(plain->max_tokens.has_value());
  EXPECT_FALSE(plain->stream);
  auto items = parse({{"model", "other"},
                      {"input",
                       {{{"role", "user"}, {"content", "Hi"}},
                        {{"type", "function_call_output"}, {"call_id", "c1"}, {"output", "42"}}}},
                      {"max_output_tokens", 7},
                      {"stream", true}});
  ASSERT_TRUE(items.has_value()) << items.error().message;
  EXPECT_EQ(items->max_tokens, 7);
  EXPECT_TRUE(items->stream);
  EXPECT_GT(items->prompt_tokens, 8);
  for (const json& bad :
       {json({{"model", "other"}}), json({{"model", "other"}, {"input", json::array()}}),
        json({{"model", "other"}, {"input", 3}}),
        json({{"model", "other"}, {"input", "x"}, {"instructions", 1}}),
        json({{"model", "other"}, {"input", "x"}, {"max_output_tokens", 0}}),
        json({{"model", "other"}, {"input", "x"}, {"background", true}})}) {
    auto refused = parse(bad);
    ASSERT_FALSE(refused.has_value()) << bad;
    EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument) << bad;
  }
}

TEST(OpenAiParseTest, RejectsMalformedRequests) {
  EXPECT_ERROR(ParseCompletionRequest(Endpoint::kChatCompletions, "{not json", kModels, 0),
               ErrorCode::kInvalidArgument);
  EXPECT_ERROR(ParseCompletionRequest(Endpoint::kChatCompletions, "[1,2]", kModels, 0),
               ErrorCode::kInvalidArgument);
  json body = ChatBody();
  body.erase("model");
  EXPECT_ERROR(Chat(body), ErrorCode::kInvalidArgument);
  body = ChatBody();
  body.erase("messages");
  EXPECT_ERROR(Chat(body), ErrorCode::kInvalidArgument);
  body["messages"] = json::array();
  EXPECT_ERROR(Chat(body), ErrorCode::kInvalidArgument);
  body["messages"] = {{{"content", "no role"}}};
  EXPECT_ERROR(Chat(body), ErrorCode::kInvalidArgument);
  body = ChatBody();
  body["max_tokens"] = 0;
  EXPECT_ERROR(Chat(body), ErrorCode::kInvalidArgument);
  body["max_tokens"] = 1.5;
  EXPECT_ERROR(Chat(body), ErrorCode::kInvalidArgument);
  body = ChatBody();
  body["n"] = 2;
  EXPECT_ERROR(Chat(body), ErrorCode::kInvalidArgument);
  body = ChatBody();
  body["stream"] = "yes";
  EXPECT_ERROR(Chat(body), ErrorCode::kInvalidArgument);
}

TEST(OpenAiParseTest, UnknownModelIsNotFoundAndNamesIt) {
  json body = ChatBody();
  body["model"] = "gpt-5";
  auto request = Chat(body);
  ASSERT_FALSE(request.has_value());
  EXPECT_EQ(request.error().code, ErrorCode::kNotFound);
  EXPECT_NE(request.error().message.find("gpt-5"), std::string::npos);
  body["model"] = "other";
  EXPECT_OK(Chat(body));
}

TEST(OpenAiParseTest, CompletionPromptForms) {
  json body = {{"model", "other"}, {"prompt", "abcdefgh!"}};
  auto one = Text(body);
  ASSERT_OK(one);
  EXPECT_EQ(one->prompt_tokens, 3);
  EXPECT_EQ(one->endpoint, Endpoint::kCompletions);

  body["prompt"] = json::array({"abcdefgh!"});
  EXPECT_EQ(Text(body)->text_hash, one->text_hash);
  body["prompt"] = json::array({1, 2, 3, 4, 5});
  EXPECT_EQ(Text(body)->prompt_tokens, 5);
  body["prompt"] = json::array({json::array({1, 2})});
  EXPECT_EQ(Text(body)->prompt_tokens, 2);
  body["prompt"] = "";
  EXPECT_EQ(Text(body)->prompt_tokens, 1);

  body["prompt"] = json::array({"a", "b"});
  EXPECT_ERROR(Text(body), ErrorCode::kInvalidArgument);
  body["prompt"] = 42;
  EXPECT_ERROR(Text(body), ErrorCode::kInvalidArgument);
  body.erase("prompt");
  EXPECT_ERROR(Text(body), ErrorCode::kInvalidArgument);
}

TEST(OpenAiResponseTest, NonStreamingChatShape) {
  ResponseMeta meta{.endpoint = Endpoint::kChatCompletions,
                    .id = "chatcmpl-1",
                    .created = 1700000000,
                    .model = "m"};
  json body =
      json::parse(CompletionResponseJson(meta, "the \"model\"", 10, 0, 2, FinishReason::kLength));
  EXPECT_EQ(body["id"], "chatcmpl-1");
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["created"], 1700000000);
  EXPECT_EQ(body["model"], "m");
  EXPECT_EQ(body["system_fingerprint"], "atrium-engine-sim");
  ASSERT_EQ(body["choices"].size(), 1u);
  EXPECT_EQ(body["choices"][0]["index"], 0);
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(body["choices"][0]["message"]["content"], "the \"model\"");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"], json({{"prompt_tokens", 10},
                                 {"completion_tokens", 2},
                                 {"total_tokens", 12},
                                 {"prompt_tokens_details", {{"cached_tokens", 0}}}}));

  meta.endpoint = Endpoint::kCompletions;
  body = json::parse(CompletionResponseJson(meta, "x", 1, 0, 1, FinishReason::kStop));
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["choices"][0]["text"], "x");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
}

TEST(OpenAiResponseTest, ChatStreamEventsAreOpenAisChunks) {
  ResponseMeta meta{
      .endpoint = Endpoint::kChatCompletions, .id = "chatcmpl-7", .created = 5, .model = "m"};
  StreamEvents events(meta, /*include_usage=*/false);
  std::string text;
  events.AppendStart(text);
  events.AppendToken("Hello", text);
  events.AppendToken(" world", text);
  events.AppendFinish(FinishReason::kLength, text);
  events.AppendUsage(3, 0, 2, text);  // not asked for: nothing
  StreamEvents::AppendDone(text);
  auto payloads = SsePayloads(text);
  ASSERT_EQ(payloads.size(), 5u);
  EXPECT_EQ(payloads[4], "[DONE]");
  json start = json::parse(payloads[0]);
  EXPECT_EQ(start["object"], "chat.completion.chunk");
  EXPECT_EQ(start["id"], "chatcmpl-7");
  EXPECT_EQ(start["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  EXPECT_TRUE(start["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(start.contains("usage"));
  EXPECT_EQ(json::parse(payloads[1])["choices"][0]["delta"], json({{"content", "Hello"}}));
  EXPECT_EQ(json::parse(payloads[2])["choices"][0]["delta"]["content"], " world");
  json finish = json::parse(payloads[3]);
  EXPECT_EQ(finish["choices"][0]["delta"], json::object());
  EXPECT_EQ(finish["choices"][0]["finish_reason"], "length");
}

TEST(OpenAiResponseTest, IncludeUsageAddsNullUsageAndAFinalUsageEvent) {
  ResponseMeta meta{.endpoint = Endpoint::kChatCompletions, .id = "c", .created = 5, .model = "m"};
  StreamEvents events(meta, /*include_usage=*/true);
  std::string text;
  events.AppendStart(text);
  events.AppendToken("Hi", text);
  events.AppendFinish(FinishReason::kStop, text);
  events.AppendUsage(3, 0, 1, text);
  StreamEvents::AppendDone(text);
  auto payloads = SsePayloads(text);
  ASSERT_EQ(payloads.size(), 5u);
  for (int i = 0; i < 3; ++i) {
    json event = json::parse(payloads[i]);
    ASSERT_TRUE(event.contains("usage")) << payloads[i];
    EXPECT_TRUE(event["usage"].is_null());
  }
  json usage = json::parse(payloads[3]);
  EXPECT_EQ(usage["choices"], json::array());
  EXPECT_EQ(usage["usage"], json({{"prompt_tokens", 3},
                                  {"completion_tokens", 1},
                                  {"total_tokens", 4},
                                  {"prompt_tokens_details", {{"cached_tokens", 0}}}}));
}

TEST(OpenAiResponseTest, CompletionStreamEvents) {
  ResponseMeta meta{.endpoint = Endpoint::kCompletions, .id = "cmpl-1", .created = 5, .model = "m"};
  StreamEvents events(meta, false);
  std::string text;
  events.AppendStart(text);  // nothing for completions
  EXPECT_TRUE(text.empty());
  events.AppendToken("a", text);
  events.AppendFinish(FinishReason::kLength, text);
  auto payloads = SsePayloads(text);
  ASSERT_EQ(payloads.size(), 2u);
  json token = json::parse(payloads[0]);
  EXPECT_EQ(token["object"], "text_completion");
  EXPECT_EQ(token["choices"][0]["text"], "a");
  EXPECT_EQ(json::parse(payloads[1])["choices"][0]["finish_reason"], "length");
}

TEST(OpenAiEmbeddingTest, ParsesInputsAndWritesUnitVectors) {
  auto request = ParseEmbeddingRequest(
      json({{"model", "other"}, {"input", {"abcd", "abcdefgh!"}}}).dump(), kModels, 0);
  ASSERT_OK(request);
  EXPECT_EQ(request->input_hashes.size(), 2u);
  EXPECT_EQ(request->prompt_tokens, 1 + 3);
  EXPECT_EQ(request->dimensions, kDefaultEmbeddingDimensions);
  json body = json::parse(EmbeddingResponseJson(*request));
  EXPECT_EQ(body["object"], "list");
  EXPECT_EQ(body["model"], "other");
  ASSERT_EQ(body["data"].size(), 2u);
  EXPECT_EQ(body["data"][1]["index"], 1);
  double norm = 0;
  for (double x : body["data"][0]["embedding"]) norm += x * x;
  EXPECT_NEAR(norm, 1.0, 1e-4);
  EXPECT_EQ(body["data"][0]["embedding"].size(), 8u);
  EXPECT_NE(body["data"][0]["embedding"], body["data"][1]["embedding"]);
  EXPECT_EQ(body["usage"], json({{"prompt_tokens", 4}, {"total_tokens", 4}}));
  // Deterministic.
  EXPECT_EQ(EmbeddingVector(request->input_hashes[0], 8),
            EmbeddingVector(request->input_hashes[0], 8));
}

TEST(OpenAiEmbeddingTest, Base64AndDimensions) {
  auto request = ParseEmbeddingRequest(
      json({{"model", "other"}, {"input", "x"}, {"dimensions", 3}, {"encoding_format", "base64"}})
          .dump(),
      kModels, 0);
  ASSERT_OK(request);
  EXPECT_TRUE(request->base64);
  json body = json::parse(EmbeddingResponseJson(*request));
  const std::string encoded = body["data"][0]["embedding"];
  EXPECT_EQ(encoded.size(), 16u);  // 12 bytes of float32
  std::vector<float> v = EmbeddingVector(request->input_hashes[0], 3);
  std::string raw(12, '\0');
  std::memcpy(raw.data(), v.data(), 12);  // little-endian host
  std::string expected;
  AppendBase64(raw, expected);
  EXPECT_EQ(encoded, expected);

  EXPECT_ERROR(
      ParseEmbeddingRequest(R"({"model":"other","input":"x","encoding_format":"hex"})", kModels, 0),
      ErrorCode::kInvalidArgument);
  EXPECT_ERROR(ParseEmbeddingRequest(R"({"model":"other","input":[]})", kModels, 0),
               ErrorCode::kInvalidArgument);
  EXPECT_ERROR(ParseEmbeddingRequest(R"({"model":"nope","input":"x"})", kModels, 0),
               ErrorCode::kNotFound);
}

TEST(OpenAiTextTest, Base64MatchesRfc4648) {
  auto encode = [](std::string_view raw) {
    std::string out;
    AppendBase64(raw, out);
    return out;
  };
  EXPECT_EQ(encode(""), "");
  EXPECT_EQ(encode("f"), "Zg==");
  EXPECT_EQ(encode("fo"), "Zm8=");
  EXPECT_EQ(encode("foo"), "Zm9v");
  EXPECT_EQ(encode("foobar"), "Zm9vYmFy");
}

TEST(OpenAiResponseTest, ModelsAndErrors) {
  json models = json::parse(ModelsJson({"a", "b"}, 7, 8192));
  EXPECT_EQ(models["object"], "list");
  ASSERT_EQ(models["data"].size(), 2u);
  EXPECT_EQ(models["data"][1]["id"], "b");
  EXPECT_EQ(models["data"][0]["owned_by"], "atrium-engine-sim");
  EXPECT_EQ(models["data"][0]["object"], "model");

  json error = json::parse(ErrorJson("bad \"x\"", "invalid_request_error"));
  EXPECT_EQ(error, json({{"error",
                          {{"message", "bad \"x\""},
                           {"type", "invalid_request_error"},
                           {"param", nullptr},
                           {"code", nullptr}}}}));
  error = json::parse(ErrorJson("m", "t", "model", "model_not_found"));
  EXPECT_EQ(error["error"]["param"], "model");
  EXPECT_EQ(error["error"]["code"], "model_not_found");
}

}  // namespace
}  // namespace atrium::engine_sim
