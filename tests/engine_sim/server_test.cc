// The engine simulator's HTTP server, started on port 0 and driven over real
// sockets: the blocking http::Client for plain requests, raw connections for
// streams, pipelining and disconnects.
#include "engine_sim/server.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine_sim/raw_http.h"
#include "http/client.h"
#include "support/result_matchers.h"
#include "support/test_directory.h"
#include "support/wait.h"

namespace atrium::engine_sim {
namespace {

using nlohmann::json;
using testing::PostRequest;
using testing::RawConnection;
using testing::ReadAll;
using testing::ResponseReader;
using testing::SteadyClock;
using Millis = std::chrono::milliseconds;

constexpr const char* kModel = "llama-3.1-8b-instruct";

struct Running {
  std::unique_ptr<Server> server;
  int port = 0;
  std::unique_ptr<http::Client> client;

  Result<http::ClientResponse> Get(const std::string& path) { return client->Send("GET", path); }
  Result<http::ClientResponse> Post(const std::string& path, const json& body,
                                    const std::map<std::string, std::string>& headers = {}) {
    return client->Send("POST", path, body.dump(), headers);
  }
  json Served() {
    auto response = Get("/sim/served");
    EXPECT_TRUE(response.has_value());
    return response.has_value() ? json::parse(response->body) : json();
  }
};

Running Start(ServerOptions options) {
  Running running;
  running.server = std::make_unique<Server>(std::move(options));
  auto port = running.server->Start();
  EXPECT_TRUE(port.has_value()) << (port.has_value() ? "" : port.error().message);
  running.port = port.has_value() ? *port : 0;
  auto client = http::Client::Create("http://127.0.0.1:" + std::to_string(running.port), 5000);
  EXPECT_TRUE(client.has_value());
  if (client.has_value()) running.client = std::move(*client);
  return running;
}

ServerOptions WithProfile(const std::string& profile) {
  ServerOptions options;
  options.profile = profile;
  return options;
}

json ChatBody(const std::string& content, int max_tokens = 0, bool stream = false) {
  json body = {{"model", kModel}, {"messages", {{{"role", "user"}, {"content", content}}}}};
  if (max_tokens > 0) body["max_tokens"] = max_tokens;
  if (stream) body["stream"] = true;
  return body;
}

// Polls `done` every few milliseconds for up to timeout_ms.
template <typename F>
bool WaitFor(F done, int timeout_ms = 2000) {
  const auto deadline = SteadyClock::now() + Millis(timeout_ms);
  while (SteadyClock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(Millis(2));
  }
  return done();
}

const json* FindRecord(const json& served, const std::string& request_id) {
  for (const json& r : served["requests"]) {
    if (r["request_id"] == request_id) return &r;
  }
  return nullptr;
}

TEST(EngineSimServerTest, HealthModelsAndStatus) {
  ServerOptions options = WithProfile("instant");
  options.model = "llama-3.1-8b-instruct, tiny";
  Running sim = Start(options);
  auto health = sim.Get("/healthz");
  ASSERT_OK(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(json::parse(health->body), json({{"status", "ok"}}));
  EXPECT_EQ(health->headers["server"], "atrium-engine-sim");

  auto models = sim.Get("/v1/models");
  ASSERT_OK(models);
  json list = json::parse(models->body);
  ASSERT_EQ(list["data"].size(), 2u);
  EXPECT_EQ(list["data"][0]["id"], kModel);
  EXPECT_EQ(list["data"][1]["id"], "tiny");
  EXPECT_EQ(list["data"][0]["owned_by"], "atrium-engine-sim");
  auto one = sim.Get("/v1/models/tiny");
  ASSERT_OK(one);
  EXPECT_EQ(json::parse(one->body)["id"], "tiny");
  EXPECT_EQ(sim.Get("/v1/models/nope")->status, 404);

  auto status = sim.Get("/sim/status");
  ASSERT_OK(status);
  EXPECT_EQ(json::parse(status->body)["profile"], "instant");

  json body = ChatBody("hi");
  body["model"] = "tiny";
  EXPECT_EQ(sim.Post("/v1/chat/completions", body)->status, 200);
}

TEST(EngineSimServerTest, LoraAdaptersLoadWhileItRunsAsVllmsRuntimeApi) {
  const std::filesystem::path dir = TestDirectory("engine-sim-lora");
  std::filesystem::create_directories(dir / "good");
  std::ofstream(dir / "good" / "adapter_config.json") << R"({"r": 8, "lora_alpha": 16})";
  std::filesystem::create_directories(dir / "empty");
  std::filesystem::create_directories(dir / "broken");
  std::ofstream(dir / "broken" / "adapter_config.json") << "[not an object";

  // Without --enable-lora there is no such API.
  Running plain = Start(WithProfile("instant"));
  EXPECT_EQ(plain.Post("/v1/load_lora_adapter", {{"lora_name", "x"}, {"lora_path", "/x"}})->status,
            404);

  ServerOptions options = WithProfile("instant");
  options.enable_lora = true;
  Running sim = Start(options);
  json chat = ChatBody("hello", 3);
  chat["model"] = "ad_1";
  EXPECT_EQ(sim.Post("/v1/chat/completions", chat)->status, 404);

  auto loaded = sim.Post("/v1/load_lora_adapter",
                         {{"lora_name", "ad_1"}, {"lora_path", (dir / "good").string()}});
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->status, 200) << loaded->body;
  auto models = json::parse(sim.Get("/v1/models")->body);
  ASSERT_EQ(models["data"].size(), 2u);
  EXPECT_EQ(models["data"][1]["id"], "ad_1");
  EXPECT_EQ(sim.Get("/v1/models/ad_1")->status, 200);
  auto answered = sim.Post("/v1/chat/completions", chat);
  ASSERT_OK(answered);
  EXPECT_EQ(answered->status, 200);
  EXPECT_EQ(json::parse(answered->body)["model"], "ad_1");

  // What vLLM refuses: twice the same name, a folder without a config or
  // with a broken one, a served model's name, malformed bodies.
  EXPECT_EQ(sim.Post("/v1/load_lora_adapter",
                     {{"lora_name", "ad_1"}, {"lora_path", (dir / "good").string()}})
                ->status,
            400);
  for (const char* bad : {"empty", "broken", "missing"}) {
    EXPECT_EQ(sim.Post("/v1/load_lora_adapter",
                       {{"lora_name", "ad_2"}, {"lora_path", (dir / bad).string()}})
                  ->status,
              400)
        << bad;
  }
  EXPECT_EQ(sim.Post("/v1/load_lora_adapter",
                     {{"lora_name", kModel}, {"lora_path", (dir / "good").string()}})
                ->status,
            400);
  EXPECT_EQ(sim.Post("/v1/load_lora_adapter", {{"lora_name", 7}})->status, 400);
  EXPECT_EQ(sim.Post("/v1/load_lora_adapter", json::array())->status, 400);

  auto unloaded = sim.Post("/v1/unload_lora_adapter", {{"lora_name", "ad_1"}});
  ASSERT_OK(unloaded);
  EXPECT_EQ(unloaded->status, 200);
  EXPECT_EQ(sim.Post("/v1/unload_lora_adapter", {{"lora_name", "ad_1"}})->status, 404);
  EXPECT_EQ(sim.Post("/v1/chat/completions", chat)->status, 404);
  EXPECT_EQ(json::parse(sim.Get("/v1/models")->body)["data"].size(), 1u);
  std::filesystem::remove_all(dir);
}

TEST(EngineSimServerTest, NonStreamingChatHasOpenAisShapeAndUsage) {
  Running sim = Start(WithProfile("instant"));
  const std::string prompt = "Tell me about GPUs.";  // 19 bytes: 5 tokens, +4 for the message
  auto response = sim.Post("/v1/chat/completions", ChatBody(prompt));
  ASSERT_OK(response);
  ASSERT_EQ(response->status, 200) << response->body;
  EXPECT_EQ(response->headers["content-type"], "application/json");
  json body = json::parse(response->body);
  EXPECT_EQ(body["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["model"], kModel);
  EXPECT_TRUE(body["created"].is_number_integer());
  ASSERT_EQ(body["choices"].size(), 1u);
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  const std::string content = body["choices"][0]["message"]["content"];
  EXPECT_EQ(std::count(content.begin(), content.end(), ' '), 15);  // 16 words: the default
  EXPECT_EQ(body["usage"], json({{"prompt_tokens", 9},
                                 {"completion_tokens", 16},
                                 {"total_tokens", 25},
                                 {"prompt_tokens_details", {{"cached_tokens", 0}}}}));

  auto limited = sim.Post("/v1/chat/completions", ChatBody(prompt, /*max_tokens=*/3));
  ASSERT_OK(limited);
  EXPECT_EQ(json::parse(limited->body)["usage"]["completion_tokens"], 3);
}

TEST(EngineSimServerTest, SameRequestSameTextAndTheEngineGivesTheSameTextAsInstant) {
  Running instant = Start(WithProfile("instant"));
  auto text = [](Running& sim, const std::string& prompt) {
    auto response = sim.Post("/v1/chat/completions", ChatBody(prompt, 6));
    EXPECT_TRUE(response.has_value() && response->status == 200);
    return json::parse(response->body)["choices"][0]["message"]["content"].get<std::string>();
  };
  const std::string a = text(instant, "What is a GPU?");
  EXPECT_EQ(a, text(instant, "What is a GPU?"));
  EXPECT_NE(a, text(instant, "What is a TPU?"));
  Running h100 = Start(WithProfile("h100-llama3-8b"));
  EXPECT_EQ(a, text(h100, "What is a GPU?"));
}

TEST(EngineSimServerTest, LegacyCompletions) {
  Running sim = Start(WithProfile("instant"));
  auto response =
      sim.Post("/v1/completions", {{"model", kModel}, {"prompt", "Once upon"}, {"max_tokens", 4}});
  ASSERT_OK(response);
  ASSERT_EQ(response->status, 200) << response->body;
  json body = json::parse(response->body);
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_FALSE(body["choices"][0]["text"].get<std::string>().empty());
  EXPECT_EQ(body["usage"], json({{"prompt_tokens", 3},
                                 {"completion_tokens", 4},
                                 {"total_tokens", 7},
                                 {"prompt_tokens_details", {{"cached_tokens", 0}}}}));
}

// Streams one request over a raw connection and returns the reader.
std::unique_ptr<ResponseReader> Stream(int port, const json& body,
                                       const std::string& extra_headers = "",
                                       const std::string& path = "/v1/chat/completions") {
  RawConnection connection(port);
  EXPECT_TRUE(connection.connected());
  EXPECT_TRUE(connection.Send(PostRequest(path, body.dump(), extra_headers)));
  auto reader = std::make_unique<ResponseReader>();
  EXPECT_TRUE(ReadAll({{&connection, reader.get()}}, 5000));
  return reader;
}

TEST(EngineSimServerTest, StreamIsOneChunkPerEventInOpenAisFormat) {
  Running sim = Start(WithProfile("instant"));
  auto reader = Stream(sim.port, ChatBody("Stream please", 5, /*stream=*/true));
  ASSERT_TRUE(reader->complete());
  EXPECT_EQ(reader->status(), 200);
  EXPECT_EQ(reader->Header("content-type"), "text/event-stream");
  EXPECT_EQ(reader->Header("transfer-encoding"), "chunked");
  EXPECT_EQ(reader->Header("server"), "atrium-engine-sim");
  auto events = reader->Events();
  // role, 5 tokens, finish, [DONE]: each its own HTTP chunk.
  ASSERT_EQ(events.size(), 8u);
  EXPECT_EQ(reader->chunks().size(), 8u);
  EXPECT_EQ(events.back().first, "[DONE]");
  json role = json::parse(events[0].first);
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  for (int i = 1; i <= 5; ++i) {
    json token = json::parse(events[i].first);
    EXPECT_TRUE(token["choices"][0]["finish_reason"].is_null());
    EXPECT_FALSE(token.contains("usage"));
    text += token["choices"][0]["delta"]["content"].get<std::string>();
  }
  json finish = json::parse(events[6].first);
  EXPECT_EQ(finish["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(finish["id"], role["id"]);

  // The streamed text is the non-streamed text.
  auto whole = sim.Post("/v1/chat/completions", ChatBody("Stream please", 5));
  ASSERT_OK(whole);
  EXPECT_EQ(json::parse(whole->body)["choices"][0]["message"]["content"], text);
}

// OpenAI's Responses API, as vLLM serves it: the same engine and text, a
// `response` object, and a stream of response.* events with the usage on
// the last.
TEST(EngineSimServerTest, ResponsesApiWholeAndStreamed) {
  Running sim = Start(WithProfile("instant"));
  json body = {
      {"model", kModel},
      {"instructions", "Be brief."},
      {"input", {{{"role", "user"}, {"content", {{{"type", "input_text"}, {"text", "Hi"}}}}}}},
      {"max_output_tokens", 6}};
  auto whole = sim.Post("/v1/responses", body);
  ASSERT_OK(whole);
  ASSERT_EQ(whole->status, 200) << whole->body;
  json response = json::parse(whole->body);
  EXPECT_EQ(response["object"], "response");
  EXPECT_EQ(response["id"].get<std::string>().rfind("resp_", 0), 0u);
  EXPECT_EQ(response["status"], "incomplete");  // stopped by max_output_tokens
  EXPECT_EQ(response["incomplete_details"]["reason"], "max_output_tokens");
  ASSERT_EQ(response["output"].size(), 1u);
  const std::string text = response["output"][0]["content"][0]["text"];
  EXPECT_EQ(response["output"][0]["content"][0]["type"], "output_text");
  EXPECT_EQ(response["usage"]["output_tokens"], 6);
  // "system" + "Be brief." (3) and "user" + "Hi" (1), 4 each for framing.
  EXPECT_EQ(response["usage"]["input_tokens"], 4 + 3 + 4 + 1);
  EXPECT_EQ(response["usage"]["total_tokens"], 4 + 3 + 4 + 1 + 6);
  EXPECT_EQ(response["usage"]["input_tokens_details"]["cached_tokens"], 0);

  body["stream"] = true;
  auto reader = Stream(sim.port, body, "", "/v1/responses");
  ASSERT_TRUE(reader->complete());
  EXPECT_EQ(reader->Header("content-type"), "text/event-stream");
  std::vector<std::string> types;
  std::string streamed;
  json last;
  int64_t sequence = 0;
  for (const auto& [event, at] : reader->Events()) {
    ASSERT_EQ(event.rfind("event: ", 0), 0u) << event;
    const size_t data = event.find("\ndata: ");
    ASSERT_NE(data, std::string::npos) << event;
    const std::string type = event.substr(7, data - 7);
    json payload = json::parse(event.substr(data + 7));
    EXPECT_EQ(payload["type"], type);
    EXPECT_EQ(payload["sequence_number"], sequence++);
    types.push_back(type);
    if (type == "response.output_text.delta") streamed += payload["delta"].get<std::string>();
    last = payload;
  }
  const std::vector<std::string> want_head = {"response.created", "response.in_progress",
                                              "response.output_item.added",
                                              "response.content_part.added"};
  ASSERT_GE(types.size(), 4u + 6u + 4u);
  EXPECT_EQ(std::vector<std::string>(types.begin(), types.begin() + 4), want_head);
  EXPECT_EQ(std::count(types.begin(), types.end(), "response.output_text.delta"), 6);
  EXPECT_EQ(types.back(), "response.incomplete");
  EXPECT_EQ(streamed, text);  // the streamed text is the whole one
  EXPECT_EQ(last["response"]["usage"]["output_tokens"], 6);
  EXPECT_EQ(last["response"]["output"][0]["content"][0]["text"], text);
  EXPECT_EQ(reader->body().find("[DONE]"), std::string::npos);

  // What needs a stored response is refused, as an engine without a store does.
  json chained = body;
  chained["previous_response_id"] = "resp_1";
  auto refused = sim.Post("/v1/responses", chained);
  ASSERT_OK(refused);
  EXPECT_EQ(refused->status, 400);
  EXPECT_NE(refused->body.find("previous_response_id"), std::string::npos);
}

// Tools: a request whose user names a tool gets that function call — whole,
// as streamed deltas that add up to the same arguments, and in the
// Responses API's shape — instead of text.
TEST(EngineSimServerTest, ToolCallsWholeStreamedAndInTheResponsesApi) {
  Running sim = Start(WithProfile("instant"));
  json body = ChatBody("Please call get_weather for me.");
  body["tools"] = json::parse(R"([{"type":"function","function":{"name":"get_weather",
      "parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}])");
  auto whole = sim.Post("/v1/chat/completions", body);
  ASSERT_OK(whole);
  ASSERT_EQ(whole->status, 200) << whole->body;
  json answer = json::parse(whole->body);
  EXPECT_EQ(answer["choices"][0]["finish_reason"], "tool_calls");
  const json& message = answer["choices"][0]["message"];
  EXPECT_TRUE(message["content"].is_null());
  ASSERT_EQ(message["tool_calls"].size(), 1u);
  EXPECT_EQ(message["tool_calls"][0]["type"], "function");
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "get_weather");
  const std::string arguments = message["tool_calls"][0]["function"]["arguments"];
  EXPECT_TRUE(json::parse(arguments).contains("city"));
  EXPECT_EQ(answer["usage"]["completion_tokens"], (arguments.size() + 3) / 4);

  body["stream"] = true;
  auto reader = Stream(sim.port, body);
  std::string streamed;
  std::string finish;
  for (const auto& [event, at] : reader->Events()) {
    if (event == "[DONE]") continue;
    json chunk = json::parse(event);
    const json& choice = chunk["choices"][0];
    if (choice["delta"].contains("tool_calls")) {
      const json& call = choice["delta"]["tool_calls"][0];
      EXPECT_EQ(call["index"], 0);
      streamed += call["function"]["arguments"].get<std::string>();
      if (call.contains("id")) EXPECT_EQ(call["function"]["name"], "get_weather");
    }
    if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
  }
  EXPECT_EQ(streamed, arguments);
  EXPECT_EQ(finish, "tool_calls");

  json responses = {{"model", kModel},
                    {"input", "Please call get_weather for me."},
                    {"tools", json::parse(R"([{"type":"function","name":"get_weather",
                        "parameters":{"type":"object","properties":{"city":{"type":"string"}}}}])")}};
  auto flat = sim.Post("/v1/responses", responses);
  ASSERT_OK(flat);
  json response = json::parse(flat->body);
  EXPECT_EQ(response["status"], "completed");
  ASSERT_EQ(response["output"].size(), 1u);
  EXPECT_EQ(response["output"][0]["type"], "function_call");
  EXPECT_EQ(response["output"][0]["name"], "get_weather");
  EXPECT_EQ(response["output"][0]["arguments"], arguments);
  responses["stream"] = true;
  auto events = Stream(sim.port, responses, "", "/v1/responses");
  std::string deltas;
  bool done = false;
  for (const auto& [event, at] : events->Events()) {
    const size_t data = event.find("\ndata: ");
    json payload = json::parse(event.substr(data + 7));
    if (payload["type"] == "response.function_call_arguments.delta") deltas += payload["delta"];
    if (payload["type"] == "response.function_call_arguments.done") {
      EXPECT_EQ(payload["arguments"], arguments);
    }
    done = done || payload["type"] == "response.completed";
  }
  EXPECT_EQ(deltas, arguments);
  EXPECT_TRUE(done);

  // "required" without tools is refused; "none" answers text.
  json required = ChatBody("hi");
  required["tool_choice"] = "required";
  EXPECT_EQ(sim.Post("/v1/chat/completions", required)->status, 400);
  body.erase("stream");
  body["tool_choice"] = "none";
  json text = json::parse(sim.Post("/v1/chat/completions", body)->body);
  EXPECT_FALSE(text["choices"][0]["message"].contains("tool_calls"));
}

// vLLM's cross-encoder endpoints: rerank (Cohere's shape) and score.
TEST(EngineSimServerTest, RerankAndScoreAreDeterministicAndCountTheirTokens) {
  Running sim = Start(WithProfile("instant"));
  json rerank = {{"model", kModel},
                 {"query", "gpu"},  // 1 token
                 {"documents", {"eight bytes", {{"text", "twelve bytes"}}, "four"}},
                 {"top_n", 2}};
  auto r = sim.Post("/v1/rerank", rerank);
  ASSERT_OK(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json ranked = json::parse(r->body);
  ASSERT_EQ(ranked["results"].size(), 2u);  // top_n
  EXPECT_GE(ranked["results"][0]["relevance_score"], ranked["results"][1]["relevance_score"]);
  EXPECT_EQ(ranked["usage"]["total_tokens"], (1 + 3) + (1 + 3) + (1 + 1));
  EXPECT_EQ(json::parse(sim.Post("/v1/rerank", rerank)->body)["results"], ranked["results"]);

  json score = {{"model", kModel}, {"text_1", "gpu"}, {"text_2", {"eight bytes", "four"}}};
  auto sc = sim.Post("/v1/score", score);
  ASSERT_OK(sc);
  ASSERT_EQ(sc->status, 200) << sc->body;
  json scored = json::parse(sc->body);
  ASSERT_EQ(scored["data"].size(), 2u);
  EXPECT_EQ(scored["data"][1]["object"], "score");
  EXPECT_EQ(scored["usage"]["prompt_tokens"], (1 + 3) + (1 + 1));
  EXPECT_EQ(scored["usage"]["completion_tokens"], 0);

  for (const auto& [path, bad] : std::vector<std::pair<std::string, json>>{
           {"/v1/rerank", {{"model", kModel}, {"query", "q"}}},
           {"/v1/rerank", {{"model", kModel}, {"query", 3}, {"documents", {"d"}}}},
           {"/v1/score", {{"model", kModel}, {"text_1", {"a", "b"}}, {"text_2", {"c", "d", "e"}}}},
           {"/v1/score", {{"model", "nope"}, {"text_1", "a"}, {"text_2", "b"}}}}) {
    auto refused = sim.Post(path, bad);
    ASSERT_OK(refused);
    EXPECT_GE(refused->status, 400) << bad;
    EXPECT_LT(refused->status, 500) << bad;
  }
}

TEST(EngineSimServerTest, TranscriptionsTakeAFormAndAnswerTextWithTokenUsage) {
  Running sim = Start(WithProfile("instant"));
  const auto form = [](const std::string& format) {
    std::string body =
        "--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\n" + std::string(kModel) +
        "\r\n--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n"
        "Content-Type: audio/wav\r\n\r\n" +
        std::string(64000, '\x01') + "\r\n";
    if (!format.empty()) {
      body += "--b\r\nContent-Disposition: form-data; name=\"response_format\"\r\n\r\n" + format +
              "\r\n";
    }
    return body + "--b--\r\n";
  };
  const auto post = [&](const std::string& body, const std::string& type) {
    RawConnection connection(sim.port);
    EXPECT_TRUE(connection.Send(
        "POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\nContent-Type: " + type +
        "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body));
    auto reader = std::make_unique<ResponseReader>();
    EXPECT_TRUE(ReadAll({{&connection, reader.get()}}, 5000));
    return reader;
  };
  auto whole = post(form(""), "multipart/form-data; boundary=b");
  ASSERT_EQ(whole->status(), 200) << whole->body();
  json answer = json::parse(whole->body());
  EXPECT_FALSE(answer["text"].get<std::string>().empty());
  EXPECT_EQ(answer["usage"]["type"], "tokens");
  EXPECT_EQ(answer["usage"]["input_tokens"], 100);  // 64,000 bytes at 640 a token
  EXPECT_EQ(answer["usage"]["output_tokens"], 10);
  auto text = post(form("text"), "multipart/form-data; boundary=b");
  ASSERT_EQ(text->status(), 200);
  EXPECT_EQ(text->body(), answer["text"]);
  EXPECT_EQ(post(form(""), "application/json")->status(), 400);
  EXPECT_EQ(post("--b--\r\n", "multipart/form-data; boundary=b")->status(), 400);  // no file
}

TEST(EngineSimServerTest, IncludeUsageAddsTheUsageChunkOnlyWhenAsked) {
  Running sim = Start(WithProfile("instant"));
  json body = ChatBody("Count me", 3, /*stream=*/true);
  body["stream_options"] = {{"include_usage", true}};
  auto reader = Stream(sim.port, body);
  auto events = reader->Events();
  ASSERT_EQ(events.size(), 1u + 3 + 1 + 1 + 1);
  EXPECT_EQ(events.back().first, "[DONE]");
  json usage = json::parse(events[events.size() - 2].first);
  EXPECT_EQ(usage["choices"], json::array());
  EXPECT_EQ(usage["usage"], json({{"prompt_tokens", 4 + 2},
                                  {"completion_tokens", 3},
                                  {"total_tokens", 9},
                                  {"prompt_tokens_details", {{"cached_tokens", 0}}}}));
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    json event = json::parse(events[i].first);
    EXPECT_TRUE(event.contains("usage") && event["usage"].is_null()) << events[i].first;
  }

  body["stream_options"] = {{"include_usage", false}};
  auto without = Stream(sim.port, body);
  for (const auto& [event, at] : without->Events()) {
    if (event != "[DONE]") {
      EXPECT_FALSE(json::parse(event).contains("usage")) << event;
    }
  }
  EXPECT_EQ(without->Events().size(), 1u + 3 + 1 + 1);
}

TEST(EngineSimServerTest, TokensAreWrittenAsTheEngineProducesThem) {
  Running sim = Start(WithProfile("h100-llama3-8b"));
  auto reader = Stream(sim.port, ChatBody("Take your time", 10, /*stream=*/true));
  ASSERT_TRUE(reader->complete());
  auto events = reader->Events();
  ASSERT_EQ(events.size(), 1u + 10 + 1 + 1);
  // ~12 ms per decode step: the first token arrives ~110 ms before the last.
  const auto spread = events[10].second - events[1].second;
  EXPECT_GE(spread, Millis(60));
  EXPECT_LT(spread, Millis(2000));
  EXPECT_EQ(reader->chunks().size(), events.size());
}

TEST(EngineSimServerTest, ServedRecordsUseTheClientsRequestId) {
  Running sim = Start(WithProfile("instant"));
  ASSERT_EQ(
      sim.Post("/v1/chat/completions", ChatBody("one", 2), {{"X-Request-Id", "gw-1"}})->status,
      200);
  auto streamed = Stream(sim.port, ChatBody("two", 3, true), "X-Request-Id: gw-2\r\n");
  EXPECT_EQ(streamed->Header("x-request-id"), "gw-2");
  ASSERT_EQ(sim.Post("/v1/embeddings", {{"model", kModel}, {"input", "abcdefgh"}})->status, 200);

  // The stream's record ends when the simulator's last write completes, which
  // the client may see before the simulator does: wait for it, not for time.
  json served;
  EXPECT_TRUE(testing_support::WaitUntil([&] {
    served = sim.Served();
    const json* record = FindRecord(served, "gw-2");
    return record != nullptr && (*record)["finished"] == true;
  }));
  ASSERT_EQ(served["requests"].size(), 3u);
  const json* one = FindRecord(served, "gw-1");
  ASSERT_NE(one, nullptr);
  EXPECT_EQ((*one)["prompt_tokens"], 4 + 1);
  EXPECT_EQ((*one)["completion_tokens"], 2);
  EXPECT_EQ((*one)["stream"], false);
  EXPECT_EQ((*one)["finished"], true);
  EXPECT_EQ((*one)["cancelled"], false);
  const json* two = FindRecord(served, "gw-2");
  ASSERT_NE(two, nullptr);
  EXPECT_EQ((*two)["completion_tokens"], 3);
  EXPECT_EQ((*two)["stream"], true);
  EXPECT_EQ((*two)["finished"], true);
  const json& embedding = served["requests"][2];
  EXPECT_EQ(embedding["request_id"].get<std::string>().rfind("esim-", 0), 0u);
  EXPECT_EQ(embedding["endpoint"], "embeddings");
  EXPECT_EQ(embedding["prompt_tokens"], 2);
  EXPECT_EQ(served["totals"]["requests"], 3);
  EXPECT_EQ(served["totals"]["completion_tokens"], 5);
  EXPECT_EQ(served["totals"]["prompt_tokens"], 5 + 5 + 2);
}

TEST(EngineSimServerTest, DisconnectMidStreamCancelsAndFreesTheSlot) {
  ServerOptions options;
  options.custom_profile =
      Profile{.name = "one-slot", .max_batch = 1, .decode_base_ms = 20, .max_context = 8192};
  Running sim = Start(options);
  {
    RawConnection connection(sim.port);
    ASSERT_TRUE(
        connection.Send(PostRequest("/v1/chat/completions", ChatBody("long one", 1000, true).dump(),
                                    "X-Request-Id: gone\r\n")));
    ResponseReader reader;
    ASSERT_TRUE(ReadAll({{&connection, &reader}}, 5000,
                        [](const ResponseReader& r) { return r.Events().size() >= 3; }));
  }  // closes mid-stream
  ASSERT_TRUE(WaitFor([&] {
    EngineStatus status = sim.server->Status();
    return status.running == 0 && status.stats.cancelled == 1;
  }));
  const json* record = nullptr;
  json served;
  ASSERT_TRUE(WaitFor([&] {
    served = sim.Served();
    record = FindRecord(served, "gone");
    return record != nullptr && (*record)["cancelled"] == true;
  }));
  EXPECT_EQ((*record)["finished"], false);
  EXPECT_GE((*record)["completion_tokens"], 2);
  EXPECT_LT((*record)["completion_tokens"], 1000);

  // The one slot is free: a short request runs now, not after 20 s.
  const auto start = SteadyClock::now();
  auto next = sim.Post("/v1/chat/completions", ChatBody("short", 2));
  ASSERT_OK(next);
  EXPECT_EQ(next->status, 200);
  EXPECT_LT(SteadyClock::now() - start, Millis(1500));
}

TEST(EngineSimServerTest, MaxBatchMakesTheThirdRequestWait) {
  ServerOptions options = WithProfile("h100-llama3-8b");
  options.max_batch = 2;
  Running sim = Start(options);
  std::vector<std::unique_ptr<RawConnection>> connections;
  std::vector<ResponseReader> readers(4);
  for (int i = 0; i < 4; ++i) {
    connections.push_back(std::make_unique<RawConnection>(sim.port));
    ASSERT_TRUE(connections.back()->Send(PostRequest(
        "/v1/chat/completions", ChatBody("request " + std::to_string(i), 20, true).dump())));
  }
  // The first request may run a step alone (the others arrive during it);
  // from the next step boundary on, two run and two wait.
  ASSERT_TRUE(WaitFor([&] {
    EngineStatus status = sim.server->Status();
    return status.stats.submitted == 4 && status.running == 2 && status.waiting == 2;
  }));
  EXPECT_EQ(sim.server->Status().max_batch, 2);

  std::vector<std::pair<RawConnection*, ResponseReader*>> streams;
  for (int i = 0; i < 4; ++i) streams.emplace_back(connections[i].get(), &readers[i]);
  ASSERT_TRUE(ReadAll(streams, 5000));
  std::vector<SteadyClock::time_point> first_tokens;
  for (const ResponseReader& reader : readers) {
    auto events = reader.Events();
    ASSERT_EQ(events.size(), 1u + 20 + 1 + 1);
    first_tokens.push_back(events[1].second);
  }
  std::sort(first_tokens.begin(), first_tokens.end());
  // The last two start only when the first two have produced their 20 tokens
  // (~250 ms at ~12 ms per step).
  EXPECT_GE(first_tokens[2] - first_tokens[1], Millis(100));
  EXPECT_EQ(sim.server->Status().stats.max_batch_seen, 2);
}

TEST(EngineSimServerTest, ErrorsUseOpenAisShape) {
  Running sim = Start(WithProfile("h100-llama3-8b"));
  auto expect_error = [&](const Result<http::ClientResponse>& response, int status,
                          const std::string& code) {
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->status, status) << response->body;
    json body = json::parse(response->body);
    ASSERT_TRUE(body.contains("error")) << response->body;
    EXPECT_TRUE(body["error"]["message"].is_string());
    EXPECT_EQ(body["error"]["type"], "invalid_request_error");
    EXPECT_TRUE(body["error"].contains("param"));
    if (code.empty()) {
      EXPECT_TRUE(body["error"]["code"].is_null());
    } else {
      EXPECT_EQ(body["error"]["code"], code);
    }
  };
  expect_error(sim.client->Send("POST", "/v1/chat/completions", "{not json"), 400, "");
  expect_error(sim.Post("/v1/chat/completions", {{"messages", ChatBody("x")["messages"]}}), 400,
               "");
  expect_error(sim.Post("/v1/chat/completions", {{"model", kModel}}), 400, "");
  json unknown = ChatBody("x");
  unknown["model"] = "gpt-4o";
  expect_error(sim.Post("/v1/chat/completions", unknown), 404, "model_not_found");
  expect_error(sim.Get("/v1/nothing"), 404, "unknown_url");
  expect_error(sim.Get("/v1/chat/completions"), 405, "method_not_allowed");
  expect_error(sim.Post("/v1/chat/completions", ChatBody(std::string(40'000, 'x'))), 400,
               "context_length_exceeded");
  expect_error(
      sim.client->Send("POST", "/v1/chat/completions", std::string(4 * 1024 * 1024 + 1, ' ')), 413,
      "request_too_large");
  // Nothing of that was served, and the server still answers.
  EXPECT_EQ(sim.Served()["totals"]["requests"], 0);
  EXPECT_EQ(sim.Get("/healthz")->status, 200);
}

TEST(EngineSimServerTest, EmbeddingsAreDeterministicUnitVectors) {
  Running sim = Start(WithProfile("h100-llama3-8b"));
  json request = {{"model", kModel}, {"input", {"first text", "second"}}};
  auto response = sim.Post("/v1/embeddings", request);
  ASSERT_OK(response);
  ASSERT_EQ(response->status, 200) << response->body;
  json body = json::parse(response->body);
  ASSERT_EQ(body["data"].size(), 2u);
  EXPECT_EQ(body["data"][0]["embedding"].size(), 8u);
  EXPECT_EQ(body["usage"]["prompt_tokens"], 3 + 2);
  EXPECT_EQ(json::parse(sim.Post("/v1/embeddings", request)->body), body);
  request["encoding_format"] = "base64";
  json encoded = json::parse(sim.Post("/v1/embeddings", request)->body);
  EXPECT_TRUE(encoded["data"][0]["embedding"].is_string());
}

TEST(EngineSimServerTest, PipelinedRequestsWhileTheFirstIsInTheEngine) {
  Running sim = Start(WithProfile("h100-llama3-8b"));
  RawConnection connection(sim.port);
  ASSERT_TRUE(connection.Send(
      PostRequest("/v1/chat/completions", ChatBody("first", 3).dump(), "X-Request-Id: p1\r\n") +
      PostRequest("/v1/chat/completions", ChatBody("second", 3).dump(), "X-Request-Id: p2\r\n")));
  ResponseReader first;
  ASSERT_TRUE(ReadAll({{&connection, &first}}, 5000));
  ResponseReader second;
  second.Feed(first.rest());
  if (!second.complete()) {
    ASSERT_TRUE(ReadAll({{&connection, &second}}, 5000));
  }
  EXPECT_EQ(first.status(), 200);
  EXPECT_EQ(second.status(), 200);
  EXPECT_EQ(first.Header("x-request-id"), "p1");
  EXPECT_EQ(second.Header("x-request-id"), "p2");
  EXPECT_EQ(json::parse(second.body())["usage"]["completion_tokens"], 3);
}

TEST(EngineSimServerTest, NaturalLengthStopsEarlyWithStop) {
  ServerOptions options = WithProfile("instant");
  options.max_natural_length = 4;
  Running sim = Start(options);
  auto response = sim.Post("/v1/chat/completions", ChatBody("stop early", 100));
  ASSERT_OK(response);
  json body = json::parse(response->body);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_LE(body["usage"]["completion_tokens"], 4);
  EXPECT_GE(body["usage"]["completion_tokens"], 1);
}

TEST(EngineSimServerTest, StopEndsOpenStreamsPromptly) {
  Running sim = Start(WithProfile("slow"));
  RawConnection connection(sim.port);
  ASSERT_TRUE(
      connection.Send(PostRequest("/v1/chat/completions", ChatBody("idle", 100, true).dump())));
  ASSERT_TRUE(WaitFor([&] { return sim.server->Status().running == 1; }));
  const auto start = SteadyClock::now();
  sim.server->Stop();
  EXPECT_LT(SteadyClock::now() - start, Millis(1000));
  std::string bytes;
  while (connection.ReadSome(bytes, 1000)) {
  }
  EXPECT_TRUE(connection.eof());
}

TEST(EngineSimServerTest, StartFailsCleanly) {
  ServerOptions unknown = WithProfile("nope");
  EXPECT_ERROR(Server(unknown).Start(), ErrorCode::kNotFound);
  ServerOptions no_model;
  no_model.model = " , ";
  EXPECT_ERROR(Server(no_model).Start(), ErrorCode::kInvalidArgument);
  Running sim = Start(WithProfile("instant"));
  ServerOptions taken;
  taken.port = sim.port;
  EXPECT_ERROR(Server(taken).Start(), ErrorCode::kUnavailable);
  EXPECT_ERROR(sim.server->Start(), ErrorCode::kFailedPrecondition);
}

}  // namespace
}  // namespace atrium::engine_sim
