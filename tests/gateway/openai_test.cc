#include "gateway/openai.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/json_reader.h"
#include "gateway/cache_salt.h"
#include "support/result_matchers.h"

namespace atrium::gateway {
namespace {

Json MustParse(std::string_view text) {
  auto parsed = ParseJson(text, 64);
  EXPECT_TRUE(parsed.has_value()) << text;
  return parsed.has_value() ? *parsed : Json();
}

// The request must fail with kInvalidArgument and a message naming `field`.
void ExpectFieldError(Api api, const std::string& body, const std::string& field) {
  auto parsed = ParseRequest(api, body);
  ASSERT_FALSE(parsed.has_value()) << body;
  EXPECT_EQ(parsed.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(parsed.error().message.find(field), std::string::npos)
      << body << " -> " << parsed.error().message;
}

TEST(OpenAiTest, ApiNames) {
  EXPECT_EQ(ApiName(Api::kChatCompletions), "chat.completions");
  EXPECT_EQ(ApiName(Api::kCompletions), "completions");
  EXPECT_EQ(ApiName(Api::kEmbeddings), "embeddings");
}

TEST(OpenAiTest, ParsesAChatRequest) {
  auto r = ParseRequest(Api::kChatCompletions, R"({"model":"llama","stream":true,
      "stream_options":{"include_usage":true},"max_tokens":100,"temperature":0.2,
      "messages":[{"role":"user","content":"abcdefgh"}],"some_future_field":{"x":[1]}})");
  ASSERT_OK(r);
  EXPECT_EQ(r->model, "llama");
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->client_wants_usage);
  EXPECT_EQ(r->max_tokens, 100);
  // 8 bytes of content and the unknown field's key "x" (it may be prompt):
  // 9 bytes / 4, rounded up, + one message.
  EXPECT_EQ(r->estimated_input_tokens, 3 + 4);
}

TEST(OpenAiTest, DefaultsWhenOptionalFieldsAreAbsentOrNull) {
  auto r = ParseRequest(Api::kChatCompletions,
                        R"({"model":"m","messages":[{"role":"user","content":"hi"}]})");
  ASSERT_OK(r);
  EXPECT_FALSE(r->stream);
  EXPECT_FALSE(r->client_wants_usage);
  EXPECT_EQ(r->max_tokens, 0);

  auto nulls = ParseRequest(Api::kChatCompletions, R"({"model":"m","stream":null,
      "stream_options":null,"max_tokens":null,"max_completion_tokens":null,
      "messages":[{"role":"user","content":"hi"}]})");
  ASSERT_OK(nulls);
  EXPECT_FALSE(nulls->stream);
  EXPECT_EQ(nulls->max_tokens, 0);
}

TEST(OpenAiTest, EveryChoiceGeneratedCounts) {
  auto chat = ParseRequest(Api::kChatCompletions,
                           R"({"model":"m","n":4,"messages":[{"role":"user","content":"x"}]})");
  ASSERT_OK(chat);
  EXPECT_EQ(chat->choices, 4);
  auto best = ParseRequest(Api::kCompletions, R"({"model":"m","prompt":"x","n":2,"best_of":5})");
  ASSERT_OK(best);
  EXPECT_EQ(best->choices, 5);
  auto plain = ParseRequest(Api::kCompletions, R"({"model":"m","prompt":"x","n":null})");
  ASSERT_OK(plain);
  EXPECT_EQ(plain->choices, 1);
}

TEST(OpenAiTest, MaxCompletionTokensWinsOverMaxTokens) {
  auto r = ParseRequest(Api::kChatCompletions, R"({"model":"m","max_tokens":10,
      "max_completion_tokens":20,"messages":[{"role":"user","content":"x"}]})");
  ASSERT_OK(r);
  EXPECT_EQ(r->max_tokens, 20);
  auto only_old = ParseRequest(Api::kCompletions,
                               R"({"model":"m","max_tokens":7,"prompt":"x","stream":false})");
  ASSERT_OK(only_old);
  EXPECT_EQ(only_old->max_tokens, 7);
}

TEST(OpenAiTest, IncludeUsageFalseIsNotAskingForUsage) {
  auto r = ParseRequest(Api::kCompletions,
                        R"({"model":"m","prompt":"x","stream":true,
                            "stream_options":{"include_usage":false}})");
  ASSERT_OK(r);
  EXPECT_TRUE(r->stream);
  EXPECT_FALSE(r->client_wants_usage);
}

TEST(OpenAiTest, EstimatesChatContentPartsAndToolCalls) {
  // Text: "abcd", tool call "c1", "function", "fn" and "{\"a\"}", tool call
  // id "c1", "done" = 27 bytes = 7 tokens; one image part; three messages.
  auto r = ParseRequest(Api::kChatCompletions, R"({"model":"m","messages":[
      {"role":"user","content":[{"type":"text","text":"abcd"},
                                {"type":"image_url","image_url":{"url":"data:xxxxxxxxxxxxxxxx"}}]},
      {"role":"assistant","content":null,
       "tool_calls":[{"id":"c1","type":"function","function":{"name":"fn","arguments":"{\"a\"}"}}]},
      {"role":"tool","tool_call_id":"c1","content":"done"}]})");
  ASSERT_OK(r);
  EXPECT_EQ(r->estimated_input_tokens, 7 + 256 + 3 * 4);
}

// Issue 15 #17: a 337 KB prompt sent in `tools` was estimated at 5 tokens
// (only message contents counted), billed 5 input tokens and let through a
// 2,000 tokens/minute limit that refused the same text as a message. Every
// field that can reach the prompt counts.
TEST(OpenAiTest, EstimatesEveryPromptBearingFieldNotOnlyTheMessages) {
  const std::string text(337'000, 'a');
  const std::string message = R"({"model":"m","messages":[{"role":"user","content":"hi"}],)";
  for (
      const std::string& field :
      {R"("tools":[{"type":"function","function":{"name":"f","description":")" + text +
           R"(","parameters":{"type":"object"}}}])",
       R"("functions":[{"name":"f","description":")" + text + R"("}])",
       R"("response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{"description":")" +
           text + R"("}}})",
       R"("tool_choice":{"type":"function","function":{"name":")" + text + R"("}})",
       R"("chat_template_kwargs":{"documents":[")" + text + R"("]})",
       // Keys are prompt too: a schema's property names.
       R"("guided_json":{"properties":{")" + text + R"(":{}}})"}) {
    auto r = ParseRequest(Api::kChatCompletions, message + field + "}");
    ASSERT_OK(r);
    EXPECT_GE(r->estimated_input_tokens, 337'000 / 4) << field.substr(0, 40);
  }
  // The same text as a message estimates the same.
  auto as_message =
      ParseRequest(Api::kChatCompletions,
                   R"({"model":"m","messages":[{"role":"user","content":")" + text + R"("}]})");
  ASSERT_OK(as_message);
  EXPECT_EQ(as_message->estimated_input_tokens, 337'000 / 4 + 4);
  // Fields that never reach the prompt cost nothing.
  auto controls = ParseRequest(Api::kChatCompletions,
                               R"({"model":"m","messages":[{"role":"user","content":"hi"}],
      "user":"someone-with-a-long-name","stop":["\n\n","END"],"logit_bias":{"50256":-100},
      "stream_options":{"include_usage":true},"temperature":0.5,"seed":7})");
  ASSERT_OK(controls);
  EXPECT_EQ(controls->estimated_input_tokens, 1 + 4);
  // A message's other fields (its name, reasoning) count; its role does not.
  auto named = ParseRequest(Api::kChatCompletions,
                            R"({"model":"m","messages":[{"role":"user","name":"abcdefgh",
      "content":"hi","reasoning_content":"12345678"}]})");
  ASSERT_OK(named);
  EXPECT_EQ(named->estimated_input_tokens, 5 + 4);  // 18 bytes
}

TEST(OpenAiTest, TheInputBoundIsTheBodyPlusRoomForImagesAndAMargin) {
  const std::string body = R"({"model":"m","messages":[{"role":"user","content":[
      {"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"http://x/y.png"}}]}]})";
  auto r = ParseRequest(Api::kChatCompletions, body);
  ASSERT_OK(r);
  EXPECT_EQ(r->input_bound,
            static_cast<int64_t>(body.size()) + kNonTextPartTokenBound + kUsageMarginTokens);
}

TEST(OpenAiTest, EstimatesPromptsAndInputs) {
  EXPECT_EQ(EstimateTokens(""), 0);
  EXPECT_EQ(EstimateTokens("abc"), 1);
  EXPECT_EQ(EstimateTokens("abcd"), 1);
  EXPECT_EQ(EstimateTokens("abcde"), 2);

  auto text = ParseRequest(Api::kCompletions, R"({"model":"m","prompt":"0123456789"})");
  ASSERT_OK(text);
  EXPECT_EQ(text->estimated_input_tokens, 3);
  auto list = ParseRequest(Api::kCompletions, R"({"model":"m","prompt":["0123","4567"]})");
  ASSERT_OK(list);
  EXPECT_EQ(list->estimated_input_tokens, 2);
  auto ids = ParseRequest(Api::kCompletions, R"({"model":"m","prompt":[1,2,3]})");
  ASSERT_OK(ids);
  EXPECT_EQ(ids->estimated_input_tokens, 3);
  auto batches = ParseRequest(Api::kEmbeddings, R"({"model":"e","input":[[1,2],[3,4,5]]})");
  ASSERT_OK(batches);
  EXPECT_EQ(batches->estimated_input_tokens, 5);
  // Never 0 for a valid request.
  auto empty = ParseRequest(Api::kCompletions, R"({"model":"m","prompt":""})");
  ASSERT_OK(empty);
  EXPECT_EQ(empty->estimated_input_tokens, 1);
}

TEST(OpenAiTest, EmbeddingsNeverStreamAndIgnoreGenerationFields) {
  auto r = ParseRequest(Api::kEmbeddings,
                        R"({"model":"e","input":"hello","stream":"yes","max_tokens":-1})");
  ASSERT_OK(r);
  EXPECT_FALSE(r->stream);
  EXPECT_EQ(r->max_tokens, 0);
  EXPECT_EQ(r->estimated_input_tokens, 2);
}

TEST(OpenAiTest, RejectsMalformedBodiesNamingTheField) {
  const std::string msgs = R"("messages":[{"role":"user","content":"x"}])";
  ExpectFieldError(Api::kChatCompletions, "{\"model\":", "JSON");
  ExpectFieldError(Api::kChatCompletions, "[1,2]", "JSON object");
  ExpectFieldError(Api::kChatCompletions, "{" + msgs + "}", "model");
  ExpectFieldError(Api::kChatCompletions, R"({"model":"",)" + msgs + "}", "model");
  ExpectFieldError(Api::kChatCompletions, R"({"model":7,)" + msgs + "}", "model");
  ExpectFieldError(Api::kChatCompletions,
                   R"({"model":")" + std::string(300, 'm') + "\"," + msgs + "}", "model");
  ExpectFieldError(Api::kChatCompletions, R"({"model":"m","stream":"true",)" + msgs + "}",
                   "stream");
  ExpectFieldError(Api::kChatCompletions, R"({"model":"m","max_tokens":-1,)" + msgs + "}",
                   "max_tokens");
  ExpectFieldError(Api::kChatCompletions, R"({"model":"m","max_tokens":1.5,)" + msgs + "}",
                   "max_tokens");
  ExpectFieldError(Api::kChatCompletions, R"({"model":"m","max_tokens":"10",)" + msgs + "}",
                   "max_tokens");
  ExpectFieldError(Api::kChatCompletions,
                   R"({"model":"m","max_completion_tokens":18446744073709551615,)" + msgs + "}",
                   "max_completion_tokens");
  ExpectFieldError(Api::kChatCompletions, R"({"model":"m","stream_options":true,)" + msgs + "}",
                   "stream_options");
  ExpectFieldError(Api::kChatCompletions, R"({"model":"m","n":0,)" + msgs + "}", "n");
  ExpectFieldError(Api::kChatCompletions, R"({"model":"m","n":129,)" + msgs + "}", "n");
  ExpectFieldError(Api::kCompletions, R"({"model":"m","prompt":"x","best_of":"2"})", "best_of");
  ExpectFieldError(Api::kChatCompletions,
                   R"({"model":"m","stream_options":{"include_usage":1},)" + msgs + "}",
                   "stream_options.include_usage");
  ExpectFieldError(Api::kChatCompletions, R"({"model":"m"})", "messages");
  ExpectFieldError(Api::kChatCompletions, R"({"model":"m","messages":"hi"})", "messages");
  ExpectFieldError(Api::kChatCompletions, R"({"model":"m","messages":[]})", "messages");
  ExpectFieldError(Api::kChatCompletions, R"({"model":"m","messages":[{"role":"user"},3]})",
                   "messages[1]");
  ExpectFieldError(Api::kCompletions, R"({"model":"m"})", "prompt");
  ExpectFieldError(Api::kCompletions, R"({"model":"m","prompt":42})", "prompt");
  ExpectFieldError(Api::kEmbeddings, R"({"model":"m"})", "input");
  ExpectFieldError(Api::kEmbeddings, R"({"model":"m","input":{"text":"x"}})", "input");
}

// Issue 15, item 16: {"model":"p\u0000q"} reached the usage record (the
// model is copied before it is resolved), and the store's refusal of the NUL
// stalled the usage of every tenant behind it. Refused here, with a 400.
TEST(OpenAiTest, RejectsControlCharactersInTheModelName) {
  for (const char* model :
       {R"(p\u0000q)", R"(p\u0001)", R"(a\nb)", R"(tab\there)", R"(del\u007f)"}) {
    SCOPED_TRACE(model);
    ExpectFieldError(
        Api::kChatCompletions,
        std::string(R"({"model":")") + model + R"(","messages":[{"role":"user","content":"x"}]})",
        "model");
  }
  auto unicode =
      ParseRequest(Api::kEmbeddings, R"({"model":"mod\u00e8le-\u6a21\u578b","input":"x"})");
  ASSERT_OK(unicode);
  EXPECT_EQ(unicode->model, "mod\xC3\xA8le-\xE6\xA8\xA1\xE5\x9E\x8B");
}

TEST(OpenAiTest, AcceptsDeepToolSchemasButNotUnboundedNesting) {
  auto nested = [](int depth) {
    std::string schema;
    for (int i = 0; i < depth; ++i) schema += R"({"a":)";
    schema += "1";
    for (int i = 0; i < depth; ++i) schema += "}";
    return R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":)" + schema + "}";
  };
  EXPECT_OK(ParseRequest(Api::kChatCompletions, nested(40)));
  EXPECT_ERROR(ParseRequest(Api::kChatCompletions, nested(200)), ErrorCode::kInvalidArgument);
}

ParsedRequest Parsed(Api api, const std::string& body) {
  auto r = ParseRequest(api, body);
  EXPECT_TRUE(r.has_value()) << body;
  return r.has_value() ? *r : ParsedRequest{};
}

TEST(OpenAiTest, UpstreamBodyIsUnchangedWithoutStreamOrWhenUsageIsAsked) {
  const std::string plain =
      "{ \"model\" : \"m\",\n  \"messages\":[{\"role\":\"user\",\"content\":\"x\"}], "
      "\"temperature\": 0.70 }";
  EXPECT_EQ(UpstreamBody(plain, Parsed(Api::kChatCompletions, plain)), plain);
  const std::string asked =
      R"({"model":"m","stream":true,"stream_options":{"include_usage":true},"prompt":"x"})";
  EXPECT_EQ(UpstreamBody(asked, Parsed(Api::kCompletions, asked)), asked);
}

TEST(OpenAiTest, UpstreamBodyAddsStreamOptionsKeepingEveryByte) {
  const std::string body =
      "{\"model\":\"m\", \"stream\":true,\"temperature\":1.000,\"n\":1e0,\"user\":\"\\u00e9\","
      "\"messages\":[{\"role\":\"user\",\"content\":\"}{\\\"stream_options\\\":null\"}]}";
  std::string upstream = UpstreamBody(body, Parsed(Api::kChatCompletions, body));
  EXPECT_EQ(upstream, "{\"stream_options\":{\"include_usage\":true}," + body.substr(1));
}

TEST(OpenAiTest, UpstreamBodySetsIncludeUsageInTheClientsStreamOptions) {
  struct Case {
    std::string body;
    std::string want;
  };
  const std::vector<Case> cases = {
      {R"({"model":"m","prompt":"x","stream":true,"stream_options":{}})",
       R"({"model":"m","prompt":"x","stream":true,"stream_options":{"include_usage":true}})"},
      {R"({"model":"m","prompt":"x","stream":true,"stream_options": { } })",
       R"({"model":"m","prompt":"x","stream":true,"stream_options": {"include_usage":true } })"},
      {R"({"model":"m","prompt":"x","stream":true,"stream_options":{"continuous_usage_stats":true}})",
       R"({"model":"m","prompt":"x","stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}})"},
      {R"({"model":"m","prompt":"x","stream":true,"stream_options":{"include_usage": false ,"x":1}})",
       R"({"model":"m","prompt":"x","stream":true,"stream_options":{"include_usage": true ,"x":1}})"},
      {R"({"model":"m","prompt":"x","stream":true,"stream_options":{"include_usage":null}})",
       R"({"model":"m","prompt":"x","stream":true,"stream_options":{"include_usage":true}})"},
      {R"({"model":"m","prompt":"x","stream":true,"stream_options":null})",
       R"({"model":"m","prompt":"x","stream":true,"stream_options":{"include_usage":true}})"},
      // An escaped key is the same member to the upstream's parser.
      {R"({"model":"m","prompt":"x","stream":true,"stream\u005foptions":{}})",
       R"({"model":"m","prompt":"x","stream":true,"stream\u005foptions":{"include_usage":true}})"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(UpstreamBody(c.body, Parsed(Api::kCompletions, c.body)), c.want) << c.body;
  }
}

TEST(OpenAiTest, UpstreamBodyChangesTheMemberTheUpstreamKeeps) {
  // With a duplicated key JSON parsers keep the last one; so must the splice.
  const std::string body =
      R"({"model":"m","prompt":"x","stream_options":{"include_usage":true},"stream":true,"stream_options":{"include_usage":false}})";
  ParsedRequest parsed = Parsed(Api::kCompletions, body);
  EXPECT_FALSE(parsed.client_wants_usage);
  Json upstream = MustParse(UpstreamBody(body, parsed));
  EXPECT_EQ(upstream["stream_options"]["include_usage"], true);
}

TEST(OpenAiTest, UpstreamBodyHandlesAByteOrderMark) {
  const std::string body = "\xEF\xBB\xBF {\"model\":\"m\",\"prompt\":\"x\",\"stream\":true}";
  std::string upstream = UpstreamBody(body, Parsed(Api::kCompletions, body));
  EXPECT_EQ(upstream,
            "\xEF\xBB\xBF {\"stream_options\":{\"include_usage\":true},\"model\":\"m\","
            "\"prompt\":\"x\",\"stream\":true}");
}

TEST(OpenAiTest, UsageFromResponse) {
  Usage u = UsageFromResponse(R"({"id":"x","choices":[{"message":{"content":"hi"}}],
      "usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17,
               "prompt_tokens_details":{"cached_tokens":8}}})");
  EXPECT_TRUE(u.present);
  EXPECT_EQ(u.prompt_tokens, 12);
  EXPECT_EQ(u.completion_tokens, 5);
  EXPECT_EQ(u.cached_tokens, 8);

  Usage embeddings = UsageFromResponse(
      R"({"object":"list","data":[],"usage":{"prompt_tokens":6,"total_tokens":6}})");
  EXPECT_TRUE(embeddings.present);
  EXPECT_EQ(embeddings.prompt_tokens, 6);
  EXPECT_EQ(embeddings.completion_tokens, 0);

  Usage negative = UsageFromResponse(R"({"usage":{"prompt_tokens":-3,"completion_tokens":2}})");
  EXPECT_TRUE(negative.present);
  EXPECT_EQ(negative.prompt_tokens, 0);

  EXPECT_FALSE(UsageFromResponse(R"({"id":"x"})").present);
  EXPECT_FALSE(UsageFromResponse(R"({"usage":null})").present);
  EXPECT_FALSE(UsageFromResponse(R"({"usage":{"prompt_tokens":"7"}})").present);
  EXPECT_FALSE(UsageFromResponse("<html>502 Bad Gateway</html>").present);
  EXPECT_FALSE(UsageFromResponse("").present);
}

TEST(OpenAiTest, WithoutUsageTheOutputIsEstimatedFromWhatWasGenerated) {
  // 40 bytes of content, 8 of reasoning, a tool call's name and arguments
  // (4 + 10 bytes): 62 bytes, 16 tokens; the JSON around them is not output.
  const std::string chat = R"({"id":"c","object":"chat.completion","choices":[
      {"index":0,"message":{"role":"assistant","content":"0123456789012345678901234567890123456789",
       "reasoning_content":"thinking","tool_calls":[{"id":"t","type":"function",
       "function":{"name":"look","arguments":"{\"q\": \"x\"}"}}]},"finish_reason":"stop"}]})";
  EXPECT_EQ(EstimateOutputTokens(Api::kChatCompletions, chat), 16);
  // Content given as parts; two choices add up.
  EXPECT_EQ(
      EstimateOutputTokens(Api::kChatCompletions,
                           R"({"choices":[{"message":{"content":[{"type":"text","text":"abcd"}]}},
                                                {"message":{"content":"efgh"}}]})"),
      2);
  EXPECT_EQ(EstimateOutputTokens(Api::kCompletions, R"({"choices":[{"text":"12345678"}]})"), 2);
  // Embeddings generate no tokens, however long the vectors.
  EXPECT_EQ(EstimateOutputTokens(Api::kEmbeddings,
                                 R"({"data":[{"embedding":[0.1,0.2,0.3,0.4,0.5,0.6]}]})"),
            0);
  EXPECT_EQ(EstimateOutputTokens(Api::kChatCompletions, R"({"id":"x"})"), 0);
  EXPECT_EQ(EstimateOutputTokens(Api::kCompletions, "plain text answer"), 5);  // not JSON: whole
}

// --- SseRelay

std::string Chunk(const std::string& json) { return "data: " + json + "\n\n"; }

std::string ContentChunk(const std::string& text) {
  return Chunk(
      R"({"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":")" +
      text + R"("},"finish_reason":null}]})");
}

const std::string kRoleChunk =
    Chunk(R"({"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})");
const std::string kUsageChunk = Chunk(
    R"({"id":"c","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":4}}})");
const std::string kDone = "data: [DONE]\n\n";

std::string Stream() {
  return kRoleChunk + ContentChunk("Hel") + ContentChunk("lo") + ContentChunk("!") + kUsageChunk +
         kDone;
}

// Feeds `stream` cut at the given offsets; returns everything relayed.
std::string Relay(SseRelay& relay, const std::string& stream, const std::vector<size_t>& cuts) {
  std::string out;
  size_t from = 0;
  for (size_t cut : cuts) {
    out += relay.Feed(std::string_view(stream).substr(from, cut - from));
    from = cut;
  }
  out += relay.Feed(std::string_view(stream).substr(from));
  out += relay.Finish();
  return out;
}

TEST(SseRelayTest, DropsTheUsageChunkForAClientThatDidNotAskAndMetersIt) {
  SseRelay relay(false);
  std::string out = Relay(relay, Stream(), {});
  EXPECT_EQ(out, kRoleChunk + ContentChunk("Hel") + ContentChunk("lo") + ContentChunk("!") + kDone);
  EXPECT_TRUE(relay.usage().present);
  EXPECT_EQ(relay.usage().prompt_tokens, 9);
  EXPECT_EQ(relay.usage().completion_tokens, 3);
  EXPECT_EQ(relay.usage().cached_tokens, 4);
  EXPECT_EQ(relay.content_chunks(), 3);
  EXPECT_EQ(relay.StreamedTokens(), 3);
  EXPECT_TRUE(relay.saw_done());
}

TEST(SseRelayTest, RelaysEverythingToAClientThatAskedForUsage) {
  SseRelay relay(true);
  EXPECT_EQ(Relay(relay, Stream(), {}), Stream());
  EXPECT_EQ(relay.usage().completion_tokens, 3);
}

TEST(SseRelayTest, SplitsAnywhereGiveTheSameBytesAndMeters) {
  const std::string stream = Stream();
  SseRelay whole(false);
  const std::string expected = Relay(whole, stream, {});
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    SseRelay relay(false);
    ASSERT_EQ(Relay(relay, stream, {cut}), expected) << "cut at " << cut;
    EXPECT_EQ(relay.usage().completion_tokens, 3);
    EXPECT_EQ(relay.content_chunks(), 3);
    EXPECT_TRUE(relay.saw_done());
  }
  std::vector<size_t> every_byte;
  for (size_t i = 1; i < stream.size(); ++i) every_byte.push_back(i);
  SseRelay bytewise(false);
  EXPECT_EQ(Relay(bytewise, stream, every_byte), expected);
  EXPECT_EQ(bytewise.StreamedTokens(), 3);
}

TEST(SseRelayTest, HoldsAnEventUntilItIsComplete) {
  SseRelay relay(false);
  const std::string event = ContentChunk("a");
  EXPECT_EQ(relay.Feed(event.substr(0, event.size() - 1)), "");
  EXPECT_EQ(relay.Feed(event.substr(event.size() - 1)), event);
  EXPECT_EQ(relay.Finish(), "");
}

std::string WithLineEnds(const std::string& stream, const std::string& eol) {
  std::string out;
  for (char c : stream) {
    if (c == '\n') {
      out += eol;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

TEST(SseRelayTest, UnderstandsCrLfAndCrLineEnds) {
  for (const std::string eol : {"\r\n", "\r"}) {
    const std::string stream = WithLineEnds(Stream(), eol);
    const std::string expected = WithLineEnds(
        kRoleChunk + ContentChunk("Hel") + ContentChunk("lo") + ContentChunk("!") + kDone, eol);
    for (size_t cut = 0; cut <= stream.size(); ++cut) {
      SseRelay relay(false);
      ASSERT_EQ(Relay(relay, stream, {cut}), expected) << "cut at " << cut;
      EXPECT_EQ(relay.usage().completion_tokens, 3);
      EXPECT_TRUE(relay.saw_done());
    }
  }
}

TEST(SseRelayTest, KeepsUsageOnAChunkWithChoices) {
  // Some servers put usage on the last content chunk: it is content, so relayed.
  const std::string stream =
      ContentChunk("a") +
      Chunk(
          R"({"choices":[{"index":0,"delta":{"content":"b"}}],"usage":{"prompt_tokens":2,"completion_tokens":2}})") +
      kDone;
  SseRelay relay(false);
  EXPECT_EQ(Relay(relay, stream, {}), stream);
  EXPECT_EQ(relay.usage().completion_tokens, 2);
  EXPECT_EQ(relay.content_chunks(), 2);
}

TEST(SseRelayTest, TakesTheLargestCumulativeUsageNeverTheSum) {
  std::string stream;
  for (int i = 1; i <= 5; ++i) {
    stream += Chunk(
        R"({"choices":[{"index":0,"delta":{"content":"t"}}],"usage":{"prompt_tokens":10,"completion_tokens":)" +
        std::to_string(i) + "}}");
  }
  stream += Chunk(R"({"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5}})") + kDone;
  SseRelay relay(false);
  Relay(relay, stream, {});
  EXPECT_EQ(relay.usage().prompt_tokens, 10);
  EXPECT_EQ(relay.usage().completion_tokens, 5);
  EXPECT_EQ(relay.StreamedTokens(), 5);
}

TEST(SseRelayTest, CountsContentChunksWhenTheUpstreamSendsNoUsage) {
  // An interrupted stream: no usage, no [DONE].
  const std::string stream =
      kRoleChunk + ContentChunk("a") + ContentChunk("b") +
      Chunk(R"({"choices":[{"index":0,"delta":{"reasoning_content":"hmm"}}]})") +
      Chunk(
          R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]})") +
      Chunk(R"({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]})");
  SseRelay relay(false);
  EXPECT_EQ(Relay(relay, stream, {}), stream);
  EXPECT_FALSE(relay.usage().present);
  EXPECT_EQ(relay.content_chunks(), 4);
  EXPECT_EQ(relay.StreamedTokens(), 4);
  EXPECT_FALSE(relay.saw_done());
}

// Issue 15 #17: one chunk may carry many tokens; a stream without usage is
// estimated from the text it relayed, not from its chunk count.
TEST(SseRelayTest, EstimatesTheOutputFromTheTextRelayedNotTheChunkCount) {
  const std::string big(4'000, 'x');
  const std::string stream =
      kRoleChunk + ContentChunk(big) +
      Chunk(R"({"choices":[{"index":0,"delta":{"reasoning_content":"12345678"}}]})") +
      Chunk(
          R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"look","arguments":"{}"}}]}}]})") +
      Chunk(R"({"choices":[{"index":0,"text":"abcd"}]})");
  SseRelay relay(false);
  Relay(relay, stream, {});
  EXPECT_EQ(relay.content_chunks(), 4);
  EXPECT_EQ(relay.EstimatedOutputTokens(), (4'000 + 8 + 4 + 2 + 4 + 3) / 4);
}

// Issue 15 #20: a server sent [DONE] first, then 200 tokens; the client got
// them and the request was billed 0. The stream ends at [DONE]: nothing
// after it is relayed (nor metered).
TEST(SseRelayTest, NothingAfterDoneIsRelayed) {
  std::string after;
  for (int i = 0; i < 200; ++i) after += ContentChunk("tok");
  after += Chunk(R"({"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":999}})");
  const std::string stream = kRoleChunk + kDone + after;
  for (std::vector<size_t> cuts :
       {std::vector<size_t>{}, std::vector<size_t>{kRoleChunk.size() + 3},
        std::vector<size_t>{kRoleChunk.size() + kDone.size() + 7}}) {
    SseRelay relay(true);
    EXPECT_EQ(Relay(relay, stream, cuts), kRoleChunk + kDone);
    EXPECT_TRUE(relay.saw_done());
    EXPECT_EQ(relay.content_chunks(), 0);
    EXPECT_FALSE(relay.usage().present);
  }
  // Also when the rest arrives byte by byte.
  SseRelay bytewise(true);
  std::string out;
  for (char c : stream) out += bytewise.Feed(std::string_view(&c, 1));
  out += bytewise.Finish();
  EXPECT_EQ(out, kRoleChunk + kDone);
}

// Regression (found by upstream_response_fuzz): a CR in what followed
// [DONE] within the same read left a pending "LF of a CRLF", so a LF at the
// start of the next read went out after the stream had ended — the relayed
// bytes depended on how the model server's bytes were cut.
TEST(SseRelayTest, WhatFollowsDoneLeavesNothingBehindWhereverTheReadsAreCut) {
  const std::string stream = kRoleChunk + "data: [DONE]\n\n" + "junk\r" + "\nmore\n\n";
  const size_t cr_end = kRoleChunk.size() + std::string("data: [DONE]\n\njunk\r").size();
  for (std::vector<size_t> cuts : {std::vector<size_t>{}, std::vector<size_t>{cr_end}}) {
    SseRelay relay(true);
    EXPECT_EQ(Relay(relay, stream, cuts), kRoleChunk + "data: [DONE]\n\n");
  }
  // The LF of a CRLF that ends [DONE] itself is still relayed, however cut.
  const std::string crlf = kRoleChunk + "data: [DONE]\r\n\r\n";
  for (size_t cut = kRoleChunk.size(); cut <= crlf.size(); ++cut) {
    SseRelay relay(true);
    EXPECT_EQ(Relay(relay, crlf + "x\r\n", {cut}), crlf) << "cut at " << cut;
  }
}

TEST(SseRelayTest, CountsCompletionsTextAndEveryChoice) {
  const std::string stream =
      Chunk(
          R"({"object":"text_completion","choices":[{"index":0,"text":"a"},{"index":1,"text":"b"}]})") +
      Chunk(R"({"choices":[{"index":0,"text":""}]})") + kDone;
  SseRelay relay(false);
  Relay(relay, stream, {});
  EXPECT_EQ(relay.content_chunks(), 2);
}

TEST(SseRelayTest, PassesCommentsEventFieldsAndNonJsonData) {
  const std::string stream =
      ": keep-alive\n\nevent: error\ndata: {not json\n\nid: 7\nretry: 10\n\n" + ContentChunk("x") +
      "\n\n" + kDone;
  SseRelay relay(false);
  EXPECT_EQ(Relay(relay, stream, {}), stream);
  EXPECT_EQ(relay.content_chunks(), 1);
}

TEST(SseRelayTest, JoinsMultiLineData) {
  const std::string stream =
      "data: {\"choices\":[],\ndata: \"usage\":{\"prompt_tokens\":1,\"completion_tokens\":6}}\n\n" +
      kDone;
  SseRelay relay(false);
  EXPECT_EQ(Relay(relay, stream, {}), kDone);
  EXPECT_EQ(relay.usage().completion_tokens, 6);
}

TEST(SseRelayTest, FinishPassesAnIncompleteLastEventAndMetersIt) {
  const std::string tail =
      R"(data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":4}})";
  SseRelay asked(true);
  EXPECT_EQ(asked.Feed(ContentChunk("a") + tail), ContentChunk("a"));
  EXPECT_EQ(asked.Finish(), tail);
  EXPECT_EQ(asked.usage().completion_tokens, 4);
  // Unterminated or not, a usage-only chunk reaches only a client that asked.
  SseRelay not_asked(false);
  EXPECT_EQ(not_asked.Feed(ContentChunk("a") + tail), ContentChunk("a"));
  EXPECT_EQ(not_asked.Finish(), "");
  EXPECT_EQ(not_asked.usage().completion_tokens, 4);
  const std::string content_tail = R"(data: {"choices":[{"delta":{"content":"b"}}]})";
  SseRelay content(false);
  EXPECT_EQ(content.Feed(content_tail), "");
  EXPECT_EQ(content.Finish(), content_tail);
}

// Issue 15, item 18: one event over 1 MiB (a 1.1 MB first event, as
// completions with echo and logprobs produce) switched metering off for the
// rest of the stream: 50 chunks and real usage after it were billed 0 output
// tokens, and the usage-only chunk reached a client that had not asked for
// it. Only the oversized event is passed unparsed; the rest is metered.
TEST(SseRelayTest, AnOversizedEventIsRelayedUnparsedAndMeteringGoesOn) {
  for (const std::string eol : {"\n", "\r\n", "\r"}) {
    SCOPED_TRACE(eol == "\n" ? "LF" : eol == "\r" ? "CR" : "CRLF");
    const std::string huge = "data: {\"choices\":[{\"text\":\"" + std::string(1'100'000, 'x') +
                             "\"}]}" + eol + "data: more" + eol + eol;
    std::string after;
    for (int i = 0; i < 50; ++i) after += ContentChunk("t");
    const std::string usage =
        Chunk(R"({"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":50}})");
    // Read as the gateway reads: 4 KiB at a time.
    const std::string stream = huge + after + usage + kDone;
    std::vector<size_t> cuts;
    for (size_t at = 4096; at < stream.size(); at += 4096) cuts.push_back(at);
    SseRelay relay(false);
    const std::string out = Relay(relay, stream, cuts);
    EXPECT_TRUE(out == huge + after + kDone) << "relayed " << out.size() << " bytes";
    EXPECT_EQ(relay.oversized_events(), 1);
    EXPECT_EQ(relay.content_chunks(), 50);
    EXPECT_TRUE(relay.usage().present);
    EXPECT_EQ(relay.usage().completion_tokens, 50);
    EXPECT_TRUE(relay.saw_done());
  }
}

TEST(SseRelayTest, AnOversizedEventEndsWhereverTheReadsCutIt) {
  // The blank line that ends it, and a CRLF's halves, split across reads.
  const std::string huge = "data: " + std::string((1 << 20) + 10, 'x') + "\r\n\r\n";
  const std::string stream = huge + ContentChunk("a") + kUsageChunk + kDone;
  for (size_t cut = huge.size() - 5; cut <= huge.size() + 2; ++cut) {
    SseRelay relay(false);
    ASSERT_EQ(Relay(relay, stream, {huge.size() - 100, cut}), huge + ContentChunk("a") + kDone)
        << "cut at " << cut;
    EXPECT_EQ(relay.usage().completion_tokens, 3);
    EXPECT_EQ(relay.content_chunks(), 1);
  }
  // A stream that ends inside the oversized event: all of it relayed.
  SseRelay cut_off(false);
  const std::string partial = "data: " + std::string((1 << 20) + 10, 'y');
  EXPECT_EQ(Relay(cut_off, partial + "\ndata: z", {1000}), partial + "\ndata: z");
  EXPECT_EQ(cut_off.oversized_events(), 1);
}

TEST(SseRelayTest, HoldsAtMostOneIncompleteEvent) {
  SseRelay relay(false);
  // Many complete events plus half of one: only the half is held back.
  std::string events;
  for (int i = 0; i < 100; ++i) events += ContentChunk("t");
  EXPECT_EQ(relay.Feed(events + "data: {\"cho"), events);
  EXPECT_EQ(relay.Finish(), "data: {\"cho");
}

TEST(OpenAiTest, ErrorBodyHasOpenAisShape) {
  EXPECT_EQ(
      ErrorBody("Bad key", "invalid_request_error", "invalid_api_key"),
      R"({"error":{"message":"Bad key","type":"invalid_request_error","param":null,"code":"invalid_api_key"}})");
  Json body = MustParse(ErrorBody("quote \" and\nnewline", "server_error", ""));
  EXPECT_EQ(body["error"]["message"], "quote \" and\nnewline");
  EXPECT_TRUE(body["error"]["code"].is_null());
  // Client text with invalid UTF-8 must not throw.
  std::string odd = ErrorBody("The model `\xff\xfe` does not exist", "invalid_request_error", "x");
  EXPECT_NE(odd.find("does not exist"), std::string::npos);
}

// --- the Responses API ----------------------------------------------------

TEST(ResponsesApiTest, ParsesInputItemsAndAlwaysHasUsage) {
  auto plain = ParseRequest(Api::kResponses, R"({"model":"m","input":"Hello there"})");
  ASSERT_TRUE(plain.has_value()) << plain.error().message;
  EXPECT_EQ(plain->model, "m");
  EXPECT_FALSE(plain->stream);
  EXPECT_TRUE(plain->client_wants_usage);  // it comes on response.completed, always
  EXPECT_EQ(plain->max_tokens, 0);
  EXPECT_EQ(plain->estimated_input_tokens, (11 + 3) / 4 + 4);
  auto items = ParseRequest(
      Api::kResponses,
      R"({"model":"m","stream":true,"max_output_tokens":50,"instructions":"Be brief.",)"
      R"("input":[{"role":"user","content":[{"type":"input_text","text":"What is in it?"},)"
      R"({"type":"input_image","image_url":"https://x/y.png"}]},)"
      R"({"type":"function_call_output","call_id":"c1","output":"42 degrees"}]})");
  ASSERT_TRUE(items.has_value()) << items.error().message;
  EXPECT_TRUE(items->stream);
  EXPECT_EQ(items->max_tokens, 50);
  // Two items' framing, an image part, and the text (instructions included).
  EXPECT_GT(items->estimated_input_tokens, 2 * 4 + 256);
  EXPECT_GT(items->input_bound, kNonTextPartTokenBound);
}

TEST(ResponsesApiTest, WhatNeedsStoredResponsesIsRefusedNamingIt) {
  ExpectFieldError(Api::kResponses, R"({"model":"m"})", "input");
  ExpectFieldError(Api::kResponses, R"({"model":"m","input":[]})", "input");
  ExpectFieldError(Api::kResponses, R"({"model":"m","input":7})", "input");
  ExpectFieldError(Api::kResponses, R"({"model":"m","input":[3]})", "input[0]");
  ExpectFieldError(Api::kResponses, R"({"model":"m","input":"x","max_output_tokens":-1})",
                   "max_output_tokens");
  ExpectFieldError(Api::kResponses, R"({"model":"m","input":"x","stream":"yes"})", "stream");
  ExpectFieldError(Api::kResponses, R"({"model":"m","input":"x","previous_response_id":"resp_1"})",
                   "previous_response_id");
  ExpectFieldError(Api::kResponses, R"({"model":"m","input":"x","conversation":"conv_1"})",
                   "conversation");
  ExpectFieldError(Api::kResponses, R"({"model":"m","input":"x","background":true})", "background");
  EXPECT_TRUE(
      ParseRequest(Api::kResponses,
                   R"({"model":"m","input":"x","background":false,"previous_response_id":null})")
          .has_value());
}

TEST(ResponsesApiTest, TheUpstreamBodyIsTheClientsWithStoreOff) {
  const std::string body = R"({"model":"m","input":"x","stream":true})";
  auto parsed = ParseRequest(Api::kResponses, body);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(UpstreamBody(body, *parsed), body);  // no stream_options: not in this API
  auto unstored = WithTopLevelMember(body, "store", "false");
  ASSERT_TRUE(unstored.has_value());
  EXPECT_EQ(*unstored, R"({"store":false,"model":"m","input":"x","stream":true})");
  auto replaced =
      WithTopLevelMember(R"({"store":true,"model":"m","store" : {"a":1}})", "store", "false");
  ASSERT_TRUE(replaced.has_value());
  EXPECT_EQ(*replaced, R"({"store":false,"model":"m","store" : false})");
}

TEST(ResponsesApiTest, UsageAndOutputOfAWholeResponse) {
  const std::string body =
      R"({"id":"resp_1","object":"response","status":"completed","output":[)"
      R"({"id":"msg_1","type":"message","status":"completed","role":"assistant",)"
      R"("content":[{"type":"output_text","text":"Twelve bytes","annotations":[]}]},)"
      R"({"id":"fc_1","type":"function_call","call_id":"c1","name":"get","arguments":"{}"}],)"
      R"("usage":{"input_tokens":20,"input_tokens_details":{"cached_tokens":16},)"
      R"("output_tokens":5,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":25}})";
  Usage u = UsageFromResponse(body);
  EXPECT_TRUE(u.present);
  EXPECT_EQ(u.prompt_tokens, 20);
  EXPECT_EQ(u.completion_tokens, 5);
  EXPECT_EQ(u.cached_tokens, 16);
  // Without usage: "Twelve bytes" + "get" + "{}" = 17 bytes.
  EXPECT_EQ(EstimateOutputTokens(Api::kResponses, body), (17 + 3) / 4);
}

std::string ResponsesEvent(const std::string& type, const std::string& fields) {
  return "event: " + type + "\ndata: {\"type\":\"" + type + "\"" +
         (fields.empty() ? "" : "," + fields) + "}\n\n";
}

std::string ResponsesStream() {
  return ResponsesEvent("response.created", R"("response":{"id":"resp_1","usage":null})") +
         ResponsesEvent("response.output_text.delta", R"("delta":"Hel")") +
         ResponsesEvent("response.output_text.delta", R"("delta":"lo")") +
         ResponsesEvent("response.function_call_arguments.delta", R"("delta":"{}")") +
         ResponsesEvent("response.output_text.done", R"("text":"Hello")") +
         ResponsesEvent("response.completed",
                        R"("response":{"id":"resp_1","usage":{"input_tokens":9,)"
                        R"("input_tokens_details":{"cached_tokens":4},"output_tokens":3}})");
}

TEST(ResponsesApiTest, AStreamIsRelayedWholeAndEndsAtItsLastEvent) {
  const std::string stream = ResponsesStream();
  for (size_t cut = 0; cut <= stream.size(); cut += 7) {
    SseRelay relay(false, Api::kResponses);
    // What a server sends after the end is neither relayed nor metered.
    const std::string after =
        ResponsesEvent("response.output_text.delta", R"("delta":"unbilled")") + "data: [DONE]\n\n";
    ASSERT_EQ(Relay(relay, stream + after, {cut}), stream) << "cut at " << cut;
    EXPECT_TRUE(relay.saw_done());
    EXPECT_TRUE(relay.usage().present);
    EXPECT_EQ(relay.usage().prompt_tokens, 9);
    EXPECT_EQ(relay.usage().completion_tokens, 3);
    EXPECT_EQ(relay.usage().cached_tokens, 4);
    EXPECT_EQ(relay.content_chunks(), 3);
    EXPECT_EQ(relay.EstimatedOutputTokens(), (3 + 2 + 2 + 3) / 4);
  }
  // Cut short before its end: no usage, the deltas still tell the output.
  SseRelay cut_short(false, Api::kResponses);
  const std::string head = stream.substr(0, stream.find("event: response.output_text.done"));
  EXPECT_EQ(Relay(cut_short, head, {}), head);
  EXPECT_FALSE(cut_short.saw_done());
  EXPECT_FALSE(cut_short.usage().present);
  EXPECT_EQ(cut_short.StreamedTokens(), 3);
}

// --- rerank and score ------------------------------------------------------

TEST(PoolingApiTest, RerankAndScoreCountEveryTextAsInputAndGenerateNothing) {
  auto rerank = ParseRequest(Api::kRerank,
                             R"({"model":"m","query":"abcd","documents":["efgh",{"text":"ijkl"}],)"
                             R"("top_n":1,"max_tokens":99,"stream":true})");
  ASSERT_TRUE(rerank.has_value()) << rerank.error().message;
  EXPECT_FALSE(rerank->stream);
  EXPECT_EQ(rerank->max_tokens, 0);
  EXPECT_GE(rerank->estimated_input_tokens, 3);
  EXPECT_TRUE(GeneratesNothing(Api::kRerank));
  EXPECT_TRUE(GeneratesNothing(Api::kScore));
  EXPECT_FALSE(GeneratesNothing(Api::kResponses));
  auto score = ParseRequest(Api::kScore, R"({"model":"m","text_1":"a","text_2":["b","c"]})");
  ASSERT_TRUE(score.has_value()) << score.error().message;
  ExpectFieldError(Api::kRerank, R"({"model":"m","documents":["d"]})", "query");
  ExpectFieldError(Api::kRerank, R"({"model":"m","query":1,"documents":["d"]})", "query");
  ExpectFieldError(Api::kRerank, R"({"model":"m","query":"q","documents":[]})", "documents");
  ExpectFieldError(Api::kRerank, R"({"model":"m","query":"q","documents":["d"],"top_n":-1})",
                   "top_n");
  ExpectFieldError(Api::kScore, R"({"model":"m","text_2":"b"})", "text_1");
  ExpectFieldError(Api::kScore, R"({"model":"m","text_1":"a","text_2":[]})", "text_2");
  // A rerank's usage is a total: all of it input. Not so for a chat answer.
  const std::string body = R"({"results":[],"usage":{"total_tokens":12}})";
  Usage u = UsageFromResponse(body, Api::kRerank);
  EXPECT_TRUE(u.present);
  EXPECT_EQ(u.prompt_tokens, 12);
  EXPECT_EQ(u.completion_tokens, 0);
  EXPECT_FALSE(UsageFromResponse(body, Api::kChatCompletions).present);
  EXPECT_EQ(EstimateOutputTokens(Api::kScore, R"({"data":[{"score":0.5}]})"), 0);
}

TEST(PoolingApiTest, PathsAndApisMapBothWays) {
  for (Api api : {Api::kChatCompletions, Api::kCompletions, Api::kEmbeddings, Api::kResponses,
                  Api::kRerank, Api::kScore, Api::kTranscriptions}) {
    EXPECT_EQ(ApiOfPath(PathOf(api)), api) << PathOf(api);
  }
  EXPECT_FALSE(ApiOfPath("/v1/models").has_value());
  EXPECT_FALSE(ApiOfPath("/v1/rerank/").has_value());
}

// --- transcriptions (multipart/form-data) -----------------------------------

std::string Form(const std::vector<std::pair<std::string, std::string>>& fields) {
  std::string body;
  for (const auto& [name, value] : fields) {
    body += "--B0undary\r\nContent-Disposition: form-data; name=\"" + name + "\"";
    if (name == "file") body += "; filename=\"a.wav\"\r\nContent-Type: audio/wav";
    body += "\r\n\r\n" + value + "\r\n";
  }
  return body + "--B0undary--\r\n";
}

TEST(TranscriptionTest, AFormIsReadForItsModelAndItsAudio) {
  const std::string type = "multipart/form-data; boundary=B0undary";
  auto parsed = ParseFormRequest(
      Api::kTranscriptions, type,
      Form({{"model", "whisper"}, {"file", std::string(3200, 'a')}, {"prompt", "GPU words"}}));
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message;
  EXPECT_EQ(parsed->model, "whisper");
  EXPECT_FALSE(parsed->stream);
  EXPECT_EQ(parsed->estimated_input_tokens, 3200 / 320 + (9 + 3) / 4);
  EXPECT_FALSE(HasJsonBody(Api::kTranscriptions));
  EXPECT_TRUE(HasJsonBody(Api::kResponses));
  EXPECT_EQ(EstimateOutputTokens(Api::kTranscriptions, R"({"text":"twelve bytes"})"), 3);
  EXPECT_EQ(EstimateOutputTokens(Api::kTranscriptions, "bare text answer"), 4);

  const std::vector<std::pair<std::string, std::string>> bad = {
      {"application/json", Form({{"model", "w"}, {"file", "x"}})},
      {type, Form({{"file", "x"}})},
      {type, Form({{"model", "w"}})},
      {type, Form({{"model", "w"}, {"file", ""}})},
      {type, Form({{"model", "w"}, {"file", "x"}, {"file", "y"}})},
      {type, Form({{"model", "w"}, {"file", "x"}, {"stream", "true"}})},
      {type, Form({{"model", std::string("w\0x", 3)}, {"file", "x"}})},
      {type, "--B0undary\r\nno headers end"},
  };
  for (const auto& [content_type, body] : bad) {
    auto refused = ParseFormRequest(Api::kTranscriptions, content_type, body);
    ASSERT_FALSE(refused.has_value()) << body;
    EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);
  }
}

// --- prefix-cache salt -------------------------------------------------

TEST(CacheSaltTest, EachTenantItsOwnSaltTheSameOnEveryGatewayNoneFromThePlatformKeyAlone) {
  const std::string platform_key(32, 'k');
  const std::string salt_key = CacheSaltKey(platform_key);
  EXPECT_EQ(salt_key.size(), 32u);
  EXPECT_NE(salt_key, platform_key);
  EXPECT_EQ(CacheSaltKey(platform_key), salt_key);  // every gateway derives the same
  const std::string a = CacheSalt(salt_key, "tn_a");
  EXPECT_EQ(a.size(), 43u);
  EXPECT_EQ(CacheSalt(salt_key, "tn_a"), a);
  EXPECT_NE(CacheSalt(salt_key, "tn_b"), a);
  EXPECT_NE(CacheSalt(CacheSaltKey(std::string(32, 'x')), "tn_a"), a);  // another platform
  // Not the tenant id in disguise: nothing of it shows.
  EXPECT_EQ(a.find("tn_a"), std::string::npos);
}

TEST(CacheSaltTest, InsertedWhenAbsentEveryOtherByteKept) {
  const std::string body = R"({"model":"m","messages":[{"role":"user","content":"hi"}]})";
  auto salted = WithCacheSalt(body, "S1");
  ASSERT_TRUE(salted.has_value());
  EXPECT_EQ(*salted,
            R"({"cache_salt":"S1","model":"m","messages":[{"role":"user","content":"hi"}]})");
  auto empty = WithCacheSalt("  {}", "S1");
  ASSERT_TRUE(empty.has_value());
  EXPECT_EQ(*empty, R"(  {"cache_salt":"S1"})");
}

// A hostile tenant names another's salt — or hides its own behind a
// duplicate key or an escaped spelling, which the engine's parser would
// keep: every one of them becomes the gateway's.
TEST(CacheSaltTest, EveryClientSaltIsReplacedDuplicatesAndEscapedSpellingsIncluded) {
  const std::string body =
      R"({"cache_salt":"victims-salt","model":"m","cache\u005fsalt":{"x":1},)"
      R"("messages":[{"role":"user","content":"hi","cache_salt":"nested stays"}],)"
      R"("cache_salt" : 7})";
  auto salted = WithCacheSalt(body, "mine");
  ASSERT_TRUE(salted.has_value());
  Json parsed = MustParse(*salted);
  EXPECT_EQ(parsed["cache_salt"], "mine");
  EXPECT_EQ(salted->find("victims-salt"), std::string::npos) << *salted;
  EXPECT_EQ(salted->find("{\"x\":1}"), std::string::npos) << *salted;
  size_t ours = 0;
  for (size_t at = 0; (at = salted->find("\"mine\"", at)) != std::string::npos; ++at) ++ours;
  EXPECT_EQ(ours, 3u);
  EXPECT_EQ(parsed["messages"][0]["cache_salt"], "nested stays");  // not the engine's field
  // Still valid for ParseRequest, and asks the same of the model.
  auto request = ParseRequest(Api::kChatCompletions, *salted);
  ASSERT_TRUE(request.has_value()) << *salted;
  EXPECT_EQ(request->model, "m");
}

TEST(CacheSaltTest, ASaltIsAJsonStringWhateverItHolds) {
  auto salted = WithCacheSalt(R"({"model":"m"})", "a\"b\\c");
  ASSERT_TRUE(salted.has_value());
  EXPECT_EQ(MustParse(*salted)["cache_salt"], "a\"b\\c");
}

TEST(CacheSaltTest, ABodyThatDoesNotScanIsRefusedNotRelayedWithTheClientsSalt) {
  for (const std::string body : {R"([1,2])", R"({"cache_salt":"x")", "", R"({"a" 1})"}) {
    auto salted = WithCacheSalt(body, "mine");
    ASSERT_FALSE(salted.has_value()) << body;
    EXPECT_EQ(salted.error().code, ErrorCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace atrium::gateway
