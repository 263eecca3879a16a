// Runs every case of tests/gateway/usage_meter_cases.json: a request's
// metering events, in the order the exchange reports them, and the one usage
// record UsageMeter must hand over when the request ends (and, on the way, the
// checkpoints a running stream would be billed by). A new case needs no C++.
//
// File format (JSON with comments): an array of cases,
// {
//   "case": "what it pins, as a sentence",
//   "request": {"api": "chat.completions", "stream": false, "input": 40,
//               "input_bound": 0, "max_tokens": 0, "choices": 1},
//     // the parsed request (ParsedRequest: "input" is its input estimate;
//     // the meter never bounds the input below it, so input_bound 0 makes
//     // the estimate the bound); every field optional but "input"; absent:
//     // the request was refused before it was parsed
//   "arrived": 1000,                  // ms
//   "events": [                       // each [name, arguments...]:
//     ["reserved", 2048],             // output tokens reserved at admission
//     ["routed", "dep_1"], ["dequeued", 1007], ["upstream", "http://a"],
//     ["sent"],                       // the body went to the model server
//     ["answered", 200],              // its status line came
//     ["first_byte", 1050],           // the first body bytes reached the client
//     ["stream", {"bytes": 900, "chunks": 30, "text_tokens": 40,
//                 "usage": [prompt, completion, cached]}],
//       // what a stream's relay has seen so far: bytes received, content
//       // chunks relayed, the estimate of their text, the usage chunk if any
//     ["whole", {"bytes": 900, "estimate": 12, "usage": [p, c, cached]}],
//       // a whole answer: its bytes, the estimate from its text (absent:
//       // none made), its usage if it had one
//     ["checkpoint", 1080, {...record fields...}]   // Snapshot(1080)
//   ],
//   "finish": ["cancelled", 499, 1100],  // usage status, HTTP status, ms
//   "record": {"status": "cancelled", "http_status": 499, "input_tokens": 40,
//              "output_tokens": 2048, "cached_tokens": 0, "flag": "", ...}
//     // status, http_status, input/output/cached tokens and flag always;
//     // ttft_ms, total_ms, queue_ms, deployment_id, endpoint, stream, model
//     // when given
// }
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "gateway/usage_meter.h"

namespace atrium::gateway {
namespace {

using nlohmann::json;

Api ApiOf(const std::string& name) {
  if (name == "completions") return Api::kCompletions;
  if (name == "embeddings") return Api::kEmbeddings;
  EXPECT_EQ(name, "chat.completions");
  return Api::kChatCompletions;
}

UsageStatus StatusOf(const std::string& name) {
  for (UsageStatus s : {UsageStatus::kCompleted, UsageStatus::kFailed, UsageStatus::kRejected,
                        UsageStatus::kCancelled, UsageStatus::kInterrupted}) {
    if (UsageStatusName(s) == name) return s;
  }
  ADD_FAILURE() << "unknown usage status " << name;
  return UsageStatus::kFailed;
}

Usage UsageOf(const json& j) {
  if (!j.contains("usage")) return Usage{};
  const json& u = j.at("usage");
  return Usage{true, u.at(0).get<int64_t>(), u.at(1).get<int64_t>(), u.at(2).get<int64_t>()};
}

// Every field of `want` is the record's; the ones every case must state
// are required.
void ExpectRecord(const UsageRecord& got, const json& want) {
  for (const char* required :
       {"status", "http_status", "input_tokens", "output_tokens", "cached_tokens", "flag"}) {
    EXPECT_TRUE(want.contains(required)) << "the expected record lacks " << required;
  }
  const json actual = {{"status", got.status},
                       {"http_status", got.http_status},
                       {"input_tokens", got.input_tokens},
                       {"output_tokens", got.output_tokens},
                       {"cached_tokens", got.cached_tokens},
                       {"flag", got.flag},
                       {"ttft_ms", got.ttft_ms},
                       {"total_ms", got.total_ms},
                       {"queue_ms", got.queue_ms},
                       {"deployment_id", got.deployment_id},
                       {"endpoint", got.endpoint},
                       {"stream", got.stream},
                       {"model", got.model}};
  for (const auto& [field, value] : want.items()) {
    ASSERT_TRUE(actual.contains(field)) << "no record field " << field;
    EXPECT_EQ(actual.at(field), value) << field;
  }
}

void Apply(UsageMeter& meter, const json& event) {
  const std::string name = event.at(0).get<std::string>();
  if (name == "reserved") {
    meter.Reserved(event.at(1).get<int64_t>());
  } else if (name == "routed") {
    meter.Routed(event.at(1).get<std::string>());
  } else if (name == "dequeued") {
    meter.Dequeued(event.at(1).get<int64_t>());
  } else if (name == "upstream") {
    meter.Upstream(event.at(1).get<std::string>());
  } else if (name == "sent") {
    meter.Sent();
  } else if (name == "answered") {
    meter.Answered(event.at(1).get<int>());
  } else if (name == "first_byte") {
    meter.FirstByte(event.at(1).get<int64_t>());
  } else if (name == "stream") {
    const json& s = event.at(1);
    meter.Received(s.value("bytes", int64_t{0}));
    meter.StreamChunks(s.value("chunks", int64_t{0}));
    meter.Tokens(UsageOf(s), s.value("text_tokens", int64_t{0}));
  } else if (name == "whole") {
    const json& w = event.at(1);
    meter.Received(w.value("bytes", int64_t{0}));
    std::optional<int64_t> estimate;
    if (w.contains("estimate")) estimate = w.at("estimate").get<int64_t>();
    meter.Tokens(UsageOf(w), estimate);
  } else if (name == "checkpoint") {
    SCOPED_TRACE("checkpoint");
    const UsageRecord& snapshot = meter.Snapshot(event.at(1).get<int64_t>());
    ExpectRecord(snapshot, event.at(2));
  } else {
    ADD_FAILURE() << "unknown event " << name;
  }
}

void RunCase(const json& c) {
  Caller caller;
  caller.tenant_id = "ten_1";
  caller.key_id = "key_1";
  const json request = c.value("request", json(nullptr));
  const Api api = ApiOf(request.is_object() ? request.value("api", "chat.completions")
                                            : std::string("chat.completions"));
  UsageMeter meter("req_1", caller, api, c.at("arrived").get<int64_t>());
  if (request.is_object()) {
    ParsedRequest parsed;
    parsed.model = request.value("model", "m");
    parsed.stream = request.value("stream", false);
    parsed.estimated_input_tokens = request.at("input").get<int64_t>();
    parsed.input_bound = request.value("input_bound", int64_t{0});
    parsed.max_tokens = request.value("max_tokens", int64_t{0});
    parsed.choices = request.value("choices", int64_t{1});
    meter.Parsed(parsed);
  }
  for (const json& event : c.value("events", json::array())) {
    SCOPED_TRACE(event.dump());
    Apply(meter, event);
  }
  const json& finish = c.at("finish");
  const UsageRecord record = meter.Finish(StatusOf(finish.at(0).get<std::string>()),
                                          finish.at(1).get<int>(), finish.at(2).get<int64_t>());
  EXPECT_TRUE(meter.finished());
  ExpectRecord(record, c.at("record"));
}

std::vector<json> Cases() {
  std::ifstream in(ATRIUM_USAGE_METER_CASES);
  EXPECT_TRUE(in) << ATRIUM_USAGE_METER_CASES;
  if (!in) return {};
  const json doc = json::parse(in, nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  return doc.get<std::vector<json>>();
}

class UsageMeterTableTest : public testing::TestWithParam<json> {};

TEST_P(UsageMeterTableTest, RecordsWhatTheEventsSay) {
  SCOPED_TRACE(GetParam().at("case").get<std::string>());
  RunCase(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Cases, UsageMeterTableTest, testing::ValuesIn(Cases()),
                         [](const testing::TestParamInfo<json>& info) {
                           std::string name = info.param.at("case").get<std::string>();
                           std::string out;
                           bool upper = true;
                           for (char c : name) {
                             if (c == '\'') continue;  // "server's" → "Servers"
                             if (!std::isalnum(static_cast<unsigned char>(c))) {
                               upper = true;
                               continue;
                             }
                             out += upper ? static_cast<char>(std::toupper(c)) : c;
                             upper = false;
                           }
                           return out;
                         });

}  // namespace
}  // namespace atrium::gateway
