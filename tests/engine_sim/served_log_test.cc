#include "engine_sim/served_log.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace atrium::engine_sim {
namespace {

using nlohmann::json;

ServedRecord Record(std::string id, int64_t prompt, bool stream = false) {
  return {.request_id = std::move(id),
          .model = "m",
          .endpoint = "chat.completions",
          .prompt_tokens = prompt,
          .stream = stream};
}

TEST(ServedLogTest, RecordsStartAndEndOfEachRequest) {
  ServedLog log;
  const uint64_t a = log.Begin(Record("req-a", 10, /*stream=*/true));
  const uint64_t b = log.Begin(Record("req-\"b\"", 20));
  log.End(a, 5, /*cancelled=*/false);
  json served = json::parse(log.ToJson());
  ASSERT_EQ(served["requests"].size(), 2u);
  EXPECT_EQ(served["requests"][0], json({{"request_id", "req-a"},
                                         {"model", "m"},
                                         {"endpoint", "chat.completions"},
                                         {"prompt_tokens", 10},
                                         {"cached_tokens", 0},
                                         {"cache_salt", ""},
                                         {"completion_tokens", 5},
                                         {"stream", true},
                                         {"finished", true},
                                         {"cancelled", false}}));
  EXPECT_EQ(served["requests"][1]["request_id"], "req-\"b\"");
  EXPECT_EQ(served["requests"][1]["finished"], false);
  EXPECT_EQ(served["totals"]["in_flight"], 1);

  log.End(b, 3, /*cancelled=*/true);
  log.End(b, 9, /*cancelled=*/false);  // a second end changes nothing
  served = json::parse(log.ToJson());
  EXPECT_EQ(served["requests"][1]["cancelled"], true);
  EXPECT_EQ(served["requests"][1]["finished"], false);
  EXPECT_EQ(served["requests"][1]["completion_tokens"], 3);
  EXPECT_EQ(served["totals"], json({{"requests", 2},
                                    {"finished", 1},
                                    {"cancelled", 1},
                                    {"in_flight", 0},
                                    {"prompt_tokens", 30},
                                    {"completion_tokens", 8},
                                    {"dropped", 0}}));
}

TEST(ServedLogTest, KeepsTheNewestRecordsAndCountsTheRest) {
  ServedLog log(/*capacity=*/2);
  const uint64_t first = log.Begin(Record("1", 1));
  log.Begin(Record("2", 1));
  log.Begin(Record("3", 1));
  log.End(first, 4, false);  // dropped from the list, still counted
  json served = json::parse(log.ToJson());
  ASSERT_EQ(served["requests"].size(), 2u);
  EXPECT_EQ(served["requests"][0]["request_id"], "2");
  EXPECT_EQ(served["totals"]["dropped"], 1);
  EXPECT_EQ(served["totals"]["requests"], 3);
  EXPECT_EQ(served["totals"]["finished"], 1);
  EXPECT_EQ(served["totals"]["completion_tokens"], 4);
  EXPECT_EQ(log.Totals().in_flight, 2);
}

TEST(ServedLogTest, ARecordThatBeginsFinishedCountsAtOnce) {
  ServedLog log;
  ServedRecord r = Record("e", 7);
  r.endpoint = "embeddings";
  r.finished = true;
  log.Begin(r);
  EXPECT_EQ(log.Totals().finished, 1);
  EXPECT_EQ(log.Totals().in_flight, 0);
}

}  // namespace
}  // namespace atrium::engine_sim
