#include "gateway/usage_meter.h"

#include <gtest/gtest.h>

namespace atrium::gateway {
namespace {

Caller TheCaller() {
  Caller c;
  c.tenant_id = "ten_1";
  c.key_id = "key_1";
  return c;
}

ParsedRequest Request(bool stream) {
  ParsedRequest r;
  r.model = "llama";
  r.stream = stream;
  r.estimated_input_tokens = 40;
  return r;
}

TEST(UsageMeterTest, ARelayedRequestRecordsWhoWhatWhereAndHowLong) {
  UsageMeter meter("req_1", TheCaller(), Api::kChatCompletions, 1'000);
  meter.Parsed(Request(false));
  meter.Routed("dep_1");
  meter.Dequeued(1'007);
  meter.Upstream("http://a:8000");
  meter.FirstByte(1'050);
  meter.Tokens(Usage{true, 38, 12, 6}, 99);  // the report wins over the count
  EXPECT_FALSE(meter.finished());
  const UsageRecord& r = meter.Finish(UsageStatus::kCompleted, 200, 1'060);
  EXPECT_TRUE(meter.finished());
  EXPECT_EQ(r.id, "req_1");
  EXPECT_EQ(r.tenant_id, "ten_1");
  EXPECT_EQ(r.key_id, "key_1");
  EXPECT_EQ(r.api, "chat.completions");
  EXPECT_EQ(r.model, "llama");
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(r.deployment_id, "dep_1");
  EXPECT_EQ(r.endpoint, "http://a:8000");
  EXPECT_EQ(r.input_tokens, 38);
  EXPECT_EQ(r.output_tokens, 12);
  EXPECT_EQ(r.cached_tokens, 6);
  EXPECT_EQ(r.queue_ms, 7);
  EXPECT_EQ(r.ttft_ms, 50);
  EXPECT_EQ(r.total_ms, 60);
  EXPECT_EQ(r.status, "completed");
  EXPECT_EQ(r.http_status, 200);
  EXPECT_EQ(r.created_at, 1'000);
  // The record is handed over; the counts stay for settling.
  EXPECT_EQ(meter.record().input_tokens, 38);
  EXPECT_EQ(meter.record().output_tokens, 12);
}

TEST(UsageMeterTest, WithoutAReportTheGatewaysCountStandsForTheOutput) {
  UsageMeter meter("req_2", TheCaller(), Api::kCompletions, 0);
  meter.Parsed(Request(true));
  meter.Tokens(Usage{}, 17);                   // e.g. a stream's content chunks
  EXPECT_EQ(meter.record().input_tokens, 40);  // the admission estimate stays
  EXPECT_EQ(meter.record().output_tokens, 17);
  meter.Tokens(Usage{}, std::nullopt);  // nothing to count: unchanged
  EXPECT_EQ(meter.record().output_tokens, 17);
}

TEST(UsageMeterTest, ARefusedRequestHasNoFirstByteAndNoEndpoint) {
  UsageMeter meter("req_3", TheCaller(), Api::kEmbeddings, 500);
  const UsageRecord& r = meter.Finish(UsageStatus::kRejected, 429, 502);
  EXPECT_EQ(r.api, "embeddings");
  EXPECT_EQ(r.status, "rejected");
  EXPECT_EQ(r.http_status, 429);
  EXPECT_EQ(r.ttft_ms, 0);
  EXPECT_EQ(r.total_ms, 2);
  EXPECT_EQ(r.endpoint, "");
  EXPECT_EQ(r.deployment_id, "");
}

TEST(UsageMeterTest, ARequestNoModelServerTookOnIsRecordedWithNoTokens) {
  auto finished = [](auto&& steps, UsageStatus status, int http_status) {
    UsageMeter meter("req", TheCaller(), Api::kChatCompletions, 0);
    meter.Parsed(Request(false));  // an input estimate of 40
    steps(meter);
    return meter.Finish(status, http_status, 10);
  };
  // Refused by the gateway (a limit, the queue's deadline), or no server reached.
  UsageRecord refused = finished([](UsageMeter&) {}, UsageStatus::kRejected, 429);
  EXPECT_EQ(refused.input_tokens, 0);
  EXPECT_EQ(refused.output_tokens, 0);
  UsageRecord unreached =
      finished([](UsageMeter& m) { m.Upstream("http://a"); }, UsageStatus::kFailed, 502);
  EXPECT_EQ(unreached.input_tokens, 0);
  // The server answered with an error and no usage: nothing served.
  UsageRecord error = finished(
      [](UsageMeter& m) {
        m.Sent();
        m.Answered(503);
        m.Tokens(Usage{}, std::nullopt);
      },
      UsageStatus::kFailed, 503);
  EXPECT_EQ(error.input_tokens, 0);
  // An error that reports usage is billed as reported.
  UsageRecord reported = finished(
      [](UsageMeter& m) {
        m.Sent();
        m.Answered(400);
        m.Tokens(Usage{true, 12, 0, 0}, std::nullopt);
      },
      UsageStatus::kFailed, 400);
  EXPECT_EQ(reported.input_tokens, 12);
  // A 2xx answer without usage: the estimate and the gateway's count.
  UsageRecord answered = finished(
      [](UsageMeter& m) {
        m.Sent();
        m.Answered(200);
        m.Tokens(Usage{}, 9);
      },
      UsageStatus::kCompleted, 200);
  EXPECT_EQ(answered.input_tokens, 40);
  EXPECT_EQ(answered.output_tokens, 9);
  // Sent, and the client left before any answer: the server took it on.
  UsageRecord left = finished([](UsageMeter& m) { m.Sent(); }, UsageStatus::kCancelled, 499);
  EXPECT_EQ(left.input_tokens, 40);
  EXPECT_EQ(left.output_tokens, 0);
}

// Issue 15 #20: a model server answered 3 chunks to a request of max_tokens
// 3 and claimed 1,000,000 completion tokens; the tenant was billed as
// claimed. Issue 15 #7: one claiming 18446744073709551615 was stored as the
// int64 maximum. A claim is believed only up to what the request could
// produce, and the record says the server claimed more.
TEST(UsageMeterTest, AReportAboveWhatTheRequestCouldProduceIsBoundedAndFlagged) {
  const std::string body =
      R"({"model":"m","max_tokens":3,"messages":[{"role":"user","content":"hi"}]})";
  auto request = ParseRequest(Api::kChatCompletions, body);
  ASSERT_TRUE(request.has_value());
  UsageMeter meter("req_b", TheCaller(), Api::kChatCompletions, 0);
  meter.Parsed(*request);
  meter.Sent();
  meter.Answered(200);
  meter.Tokens(UsageFromResponse(R"({"usage":{"prompt_tokens":18446744073709551615,
      "completion_tokens":1000000,"prompt_tokens_details":{"cached_tokens":9223372036854775807}}})"),
               std::nullopt);
  const UsageRecord r = meter.Finish(UsageStatus::kCompleted, 200, 5);
  EXPECT_EQ(r.output_tokens, 3 + kOutputMarginTokens);
  EXPECT_EQ(r.input_tokens, static_cast<int64_t>(body.size()) + kUsageMarginTokens);
  EXPECT_LE(r.cached_tokens, r.input_tokens);
  EXPECT_EQ(r.flag, kUsageOverBound);

  // n choices may each reach max_tokens; a plausible report stands as is.
  auto four = ParseRequest(Api::kChatCompletions, R"({"model":"m","max_tokens":3,"n":4,
      "messages":[{"role":"user","content":"hi"}]})");
  ASSERT_TRUE(four.has_value());
  UsageMeter honest("req_h", TheCaller(), Api::kChatCompletions, 0);
  honest.Parsed(*four);
  honest.Tokens(Usage{true, 9, 12, 0}, std::nullopt);
  EXPECT_EQ(honest.record().output_tokens, 12);
  EXPECT_EQ(honest.record().input_tokens, 9);
  EXPECT_EQ(honest.record().flag, "");
}

TEST(UsageMeterTest, WithoutMaxTokensTheOutputIsBoundedByWhatTheServerSent) {
  UsageMeter meter("req_c", TheCaller(), Api::kChatCompletions, 0);
  meter.Parsed(Request(false));
  meter.Reserved(100);
  meter.Received(5'000);
  meter.Tokens(Usage{true, 40, 4'000, 0}, std::nullopt);
  EXPECT_EQ(meter.record().output_tokens, 4'000);
  EXPECT_EQ(meter.record().flag, "");
  meter.Tokens(Usage{true, 40, 900'000, 0}, std::nullopt);
  EXPECT_EQ(meter.record().output_tokens, 5'000 + kOutputMarginTokens);
  EXPECT_EQ(meter.record().flag, kUsageOverBound);
}

// Issue 15 #17: a client that closed a stream before its usage chunk was
// billed a chunk count (30 for an answer of thousands of tokens). A stream
// its client cut off without usage is billed at least what it reserved; one
// that completed without usage, its relayed text; one the gateway or the
// server cut off, no more than the client surely received.
TEST(UsageMeterTest, AStreamWithoutUsageIsBilledByHowItEnded) {
  auto ended = [](UsageStatus status, int64_t text_tokens, int64_t chunks) {
    UsageMeter meter("req_d", TheCaller(), Api::kChatCompletions, 0);
    meter.Parsed(Request(true));
    meter.Reserved(2'048);
    meter.Sent();
    meter.Answered(200);
    meter.StreamChunks(chunks);
    meter.Tokens(Usage{}, text_tokens);
    return meter.Finish(status, 200, 9).output_tokens;
  };
  EXPECT_EQ(ended(UsageStatus::kCancelled, 40, 30), 2'048);
  EXPECT_EQ(ended(UsageStatus::kCancelled, 5'000, 30), 5'000);  // more relayed than reserved
  EXPECT_EQ(ended(UsageStatus::kCompleted, 3'000, 30), 3'000);  // the text, not the chunks
  EXPECT_EQ(ended(UsageStatus::kInterrupted, 3'000, 30), 30);
  EXPECT_EQ(ended(UsageStatus::kFailed, 20, 30), 20);
  // A checkpoint stands for an interrupted stream.
  UsageMeter running("req_e", TheCaller(), Api::kChatCompletions, 0);
  running.Parsed(Request(true));
  running.Reserved(2'048);
  running.StreamChunks(4);
  running.Tokens(Usage{}, 700);
  EXPECT_EQ(running.Snapshot(5).output_tokens, 4);
  // Not streamed: the whole answer was read, its estimate stands.
  UsageMeter whole("req_f", TheCaller(), Api::kChatCompletions, 0);
  whole.Parsed(Request(false));
  whole.Reserved(2'048);
  whole.Sent();
  whole.Answered(200);
  whole.Tokens(Usage{}, 30);
  EXPECT_EQ(whole.Finish(UsageStatus::kCancelled, 499, 9).output_tokens, 30);
}

TEST(UsageMeterTest, TheFirstTokenIsTimedOnce) {
  UsageMeter meter("req_5", TheCaller(), Api::kChatCompletions, 100);
  meter.Parsed(Request(true));
  meter.FirstByte(180);
  meter.FirstByte(260);  // later chunks do not move it
  EXPECT_EQ(meter.Finish(UsageStatus::kCompleted, 200, 300).ttft_ms, 80);
}

TEST(UsageMeterTest, ASnapshotIsTheRecordSoFarThenFinishSupersedesIt) {
  UsageMeter meter("req_4", TheCaller(), Api::kChatCompletions, 100);
  meter.Parsed(Request(true));
  meter.FirstByte(130);
  meter.StreamChunks(5);
  meter.Tokens(Usage{}, 5);
  const UsageRecord& snap = meter.Snapshot(1'100);
  EXPECT_EQ(snap.http_status, 200);
  EXPECT_EQ(snap.total_ms, 1'000);
  EXPECT_EQ(snap.ttft_ms, 30);
  EXPECT_EQ(snap.output_tokens, 5);
  EXPECT_FALSE(meter.finished());
  const UsageRecord& r = meter.Finish(UsageStatus::kCancelled, 499, 1'500);
  EXPECT_EQ(r.status, "cancelled");
  EXPECT_EQ(r.http_status, 499);
  EXPECT_EQ(r.total_ms, 1'400);
}

TEST(UsageMeterTest, StatusNamesAreTheStoredOnes) {
  EXPECT_EQ(UsageStatusName(UsageStatus::kCompleted), "completed");
  EXPECT_EQ(UsageStatusName(UsageStatus::kFailed), "failed");
  EXPECT_EQ(UsageStatusName(UsageStatus::kRejected), "rejected");
  EXPECT_EQ(UsageStatusName(UsageStatus::kCancelled), "cancelled");
  EXPECT_EQ(UsageStatusName(UsageStatus::kInterrupted), "interrupted");
}

}  // namespace
}  // namespace atrium::gateway
