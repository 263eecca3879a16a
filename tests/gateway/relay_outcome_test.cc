#include "gateway/relay_outcome.h"

#include <gtest/gtest.h>

#include <string>

#include "gateway/refusal.h"

namespace atrium::gateway {
namespace {

constexpr ClientState kHere = ClientState::kConnected;
constexpr ClientState kGone = ClientState::kGone;
constexpr UpstreamState kIntact = UpstreamState::kIntact;
constexpr UpstreamState kBroke = UpstreamState::kBrokeOff;
constexpr UpstreamState kLate = UpstreamState::kTimedOut;
constexpr bool kStream = true;
constexpr bool kWhole = false;
constexpr bool kStop = true;   // shutting down
constexpr bool kRun = false;   // not shutting down
constexpr bool kDone = true;   // recorded at [DONE]
constexpr bool kOpen = false;  // not recorded yet
constexpr std::optional<UsageStatus> kNoRecord = std::nullopt;
constexpr UsageStatus kCompleted = UsageStatus::kCompleted;
constexpr UsageStatus kFailed = UsageStatus::kFailed;
constexpr UsageStatus kCancelled = UsageStatus::kCancelled;
constexpr UsageStatus kInterrupted = UsageStatus::kInterrupted;
constexpr EndpointVerdict kOk = EndpointVerdict::kSucceeded;
constexpr EndpointVerdict kBad = EndpointVerdict::kFailed;
constexpr EndpointVerdict kNone = EndpointVerdict::kAbandoned;

struct Row {
  // (streaming, client, upstream, shutting down, upstream status, recorded at [DONE])
  bool streaming;
  ClientState client;
  UpstreamState upstream;
  bool shutting_down;
  int upstream_status;
  bool recorded_at_done;
  // -> (usage status, its HTTP status, reply, reply's status, endpoint verdict)
  std::optional<UsageStatus> usage;
  int record_status;
  Reply reply;
  int reply_status;
  EndpointVerdict verdict;
};

std::string Describe(const Row& r) {
  return std::string(r.streaming ? "stream" : "whole") +
         (r.client == kHere ? " client-here" : " client-gone") +
         (r.upstream == kIntact  ? " upstream-intact"
          : r.upstream == kBroke ? " upstream-broke-off"
                                 : " upstream-timed-out") +
         (r.shutting_down ? " stopping" : "") + " status-" + std::to_string(r.upstream_status) +
         (r.recorded_at_done ? " recorded-at-done" : "");
}

// Every combination the relay stages can reach, as the gateway has always
// ended them (before the table, in one 220-line Session::Relay). A stream's
// status is always 200 (anything else is relayed whole); [DONE] is a
// stream's; a stream has no body deadline.
const Row kRows[] = {
    // A stream that ran to its end.
    {kStream, kHere, kIntact, kRun, 200, kOpen, kCompleted, 200, Reply::kStreamEnd, 0, kOk},
    {kStream, kHere, kIntact, kStop, 200, kOpen, kCompleted, 200, Reply::kStreamEnd, 0, kOk},
    {kStream, kHere, kIntact, kRun, 200, kDone, kNoRecord, 0, Reply::kStreamEnd, 0, kOk},
    {kStream, kHere, kIntact, kStop, 200, kDone, kNoRecord, 0, Reply::kStreamEnd, 0, kOk},
    // A stream that broke off: cut, not ended; the endpoint failed, even
    // after [DONE], even when Stop() cut it.
    {kStream, kHere, kBroke, kRun, 200, kOpen, kFailed, 502, Reply::kNothing, 0, kBad},
    {kStream, kHere, kBroke, kStop, 200, kOpen, kInterrupted, 503, Reply::kNothing, 0, kBad},
    {kStream, kHere, kBroke, kRun, 200, kDone, kNoRecord, 0, Reply::kNothing, 0, kBad},
    {kStream, kHere, kBroke, kStop, 200, kDone, kNoRecord, 0, Reply::kNothing, 0, kBad},
    // A stream whose client left (the watch saw it, or a write failed).
    {kStream, kGone, kIntact, kRun, 200, kOpen, kCancelled, 499, Reply::kNothing, 0, kNone},
    {kStream, kGone, kIntact, kStop, 200, kOpen, kCancelled, 499, Reply::kNothing, 0, kNone},
    {kStream, kGone, kIntact, kRun, 200, kDone, kNoRecord, 0, Reply::kNothing, 0, kNone},
    {kStream, kGone, kIntact, kStop, 200, kDone, kNoRecord, 0, Reply::kNothing, 0, kNone},
    {kStream, kGone, kBroke, kRun, 200, kOpen, kCancelled, 499, Reply::kNothing, 0, kNone},
    {kStream, kGone, kBroke, kStop, 200, kOpen, kCancelled, 499, Reply::kNothing, 0, kNone},
    {kStream, kGone, kBroke, kRun, 200, kDone, kNoRecord, 0, Reply::kNothing, 0, kNone},
    {kStream, kGone, kBroke, kStop, 200, kDone, kNoRecord, 0, Reply::kNothing, 0, kNone},

    // A whole answer read to its end is relayed with the server's status,
    // whoever is still there; a 5xx fails the endpoint, a 4xx does not.
    {kWhole, kHere, kIntact, kRun, 200, kOpen, kCompleted, 200, Reply::kUpstreamAnswer, 200, kOk},
    {kWhole, kHere, kIntact, kRun, 201, kOpen, kCompleted, 201, Reply::kUpstreamAnswer, 201, kOk},
    {kWhole, kHere, kIntact, kRun, 400, kOpen, kFailed, 400, Reply::kUpstreamAnswer, 400, kOk},
    {kWhole, kHere, kIntact, kRun, 429, kOpen, kFailed, 429, Reply::kUpstreamAnswer, 429, kOk},
    {kWhole, kHere, kIntact, kRun, 500, kOpen, kFailed, 500, Reply::kUpstreamAnswer, 500, kBad},
    {kWhole, kHere, kIntact, kRun, 503, kOpen, kFailed, 503, Reply::kUpstreamAnswer, 503, kBad},
    {kWhole, kHere, kIntact, kStop, 200, kOpen, kCompleted, 200, Reply::kUpstreamAnswer, 200, kOk},
    {kWhole, kHere, kIntact, kStop, 503, kOpen, kFailed, 503, Reply::kUpstreamAnswer, 503, kBad},
    {kWhole, kGone, kIntact, kRun, 200, kOpen, kCompleted, 200, Reply::kUpstreamAnswer, 200, kOk},
    {kWhole, kGone, kIntact, kRun, 503, kOpen, kFailed, 503, Reply::kUpstreamAnswer, 503, kBad},
    {kWhole, kGone, kIntact, kStop, 200, kOpen, kCompleted, 200, Reply::kUpstreamAnswer, 200, kOk},
    {kWhole, kGone, kIntact, kStop, 503, kOpen, kFailed, 503, Reply::kUpstreamAnswer, 503, kBad},
    // A whole answer that did not arrive: a client that left is cancelled,
    // a stop interrupts (no verdict on the endpoint), else the endpoint failed.
    {kWhole, kHere, kBroke, kRun, 200, kOpen, kFailed, 502, Reply::kBrokeOff, 502, kBad},
    {kWhole, kHere, kBroke, kStop, 200, kOpen, kInterrupted, 503, Reply::kShuttingDown, 503, kNone},
    {kWhole, kHere, kLate, kRun, 200, kOpen, kFailed, 504, Reply::kBodyTimeout, 504, kBad},
    {kWhole, kHere, kLate, kStop, 200, kOpen, kInterrupted, 503, Reply::kShuttingDown, 503, kNone},
    {kWhole, kGone, kBroke, kRun, 200, kOpen, kCancelled, 499, Reply::kNothing, 0, kNone},
    {kWhole, kGone, kBroke, kStop, 200, kOpen, kCancelled, 499, Reply::kNothing, 0, kNone},
    {kWhole, kGone, kLate, kRun, 200, kOpen, kCancelled, 499, Reply::kNothing, 0, kNone},
    {kWhole, kGone, kLate, kStop, 200, kOpen, kCancelled, 499, Reply::kNothing, 0, kNone},
};

TEST(RelayOutcomeTest, EachReachableEndingAsTheGatewayEndsIt) {
  for (const Row& row : kRows) {
    const RelayOutcome got =
        RelayOutcomeOf({row.streaming, row.client, row.upstream, row.shutting_down,
                        row.upstream_status, row.recorded_at_done});
    const std::string what = Describe(row);
    EXPECT_EQ(got.usage, row.usage) << what;
    EXPECT_EQ(got.record_status, row.record_status) << what;
    EXPECT_EQ(got.reply, row.reply) << what;
    EXPECT_EQ(got.reply_status, row.reply_status) << what;
    EXPECT_EQ(got.verdict, row.verdict) << what;
  }
}

// The table covers each reachable combination exactly once.
TEST(RelayOutcomeTest, TableHasNoDuplicateRows) {
  for (size_t i = 0; i < std::size(kRows); ++i) {
    for (size_t j = i + 1; j < std::size(kRows); ++j) {
      const Row& a = kRows[i];
      const Row& b = kRows[j];
      EXPECT_FALSE(a.streaming == b.streaming && a.client == b.client && a.upstream == b.upstream &&
                   a.shutting_down == b.shutting_down && a.upstream_status == b.upstream_status &&
                   a.recorded_at_done == b.recorded_at_done)
          << Describe(a);
    }
  }
}

// A stream has no body deadline; were one reported, it ends as a break.
TEST(RelayOutcomeTest, StreamTimedOutEndsAsBrokeOff) {
  for (ClientState client : {kHere, kGone}) {
    for (bool stopping : {kRun, kStop}) {
      for (bool recorded : {kOpen, kDone}) {
        EXPECT_EQ(RelayOutcomeOf({kStream, client, kLate, stopping, 200, recorded}),
                  RelayOutcomeOf({kStream, client, kBroke, stopping, 200, recorded}));
      }
    }
  }
}

// The refusal a reply names is sent with the status the table gives it.
TEST(RelayOutcomeTest, RefusalRepliesCarryTheirRefusalsStatus) {
  EXPECT_EQ(RelayOutcomeOf({kWhole, kHere, kBroke, kStop, 200, kOpen}).reply_status,
            Refusal::ShuttingDown().status);
  EXPECT_EQ(RelayOutcomeOf({kWhole, kHere, kLate, kRun, 200, kOpen}).reply_status,
            Refusal::UpstreamBodyTimeout(1).status);
  EXPECT_EQ(RelayOutcomeOf({kWhole, kHere, kBroke, kRun, 200, kOpen}).reply_status,
            Refusal::UpstreamBrokeOff().status);
}

}  // namespace
}  // namespace atrium::gateway
