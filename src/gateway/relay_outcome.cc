#include "gateway/relay_outcome.h"

namespace atrium::gateway {
namespace {

// A stream: its head (200) went out when its first event was due.
RelayOutcome StreamOutcome(const RelayFacts& f) {
  RelayOutcome out;
  if (f.client == ClientState::kConnected && f.upstream == UpstreamState::kIntact) {
    out.reply = Reply::kStreamEnd;
    out.verdict = EndpointVerdict::kSucceeded;
    if (!f.recorded_at_done) {
      out.usage = UsageStatus::kCompleted;
      out.record_status = 200;
    }
    return out;
  }
  // The stream stopped early: the client must see it break, not end. An
  // endpoint whose stream broke is failed, even after [DONE] and even when
  // Stop() broke it; one whose client left gets no verdict.
  out.reply = Reply::kNothing;
  const bool client_here = f.client == ClientState::kConnected;
  out.verdict = client_here ? EndpointVerdict::kFailed : EndpointVerdict::kAbandoned;
  if (f.recorded_at_done) return out;
  if (!client_here) {
    out.usage = UsageStatus::kCancelled;
    out.record_status = 499;
  } else if (f.shutting_down) {
    out.usage = UsageStatus::kInterrupted;
    out.record_status = 503;
  } else {
    out.usage = UsageStatus::kFailed;
    out.record_status = 502;
  }
  return out;
}

// A whole answer: nothing has gone to the client yet.
RelayOutcome WholeOutcome(const RelayFacts& f) {
  RelayOutcome out;
  if (f.upstream == UpstreamState::kIntact) {
    // Relayed as the server gave it (to a client that left as well: the
    // write tells). The server's 5xx is a verdict on its endpoint; its 4xx
    // is the client's own doing.
    const int status = f.upstream_status;
    out.usage = status < 400 ? UsageStatus::kCompleted : UsageStatus::kFailed;
    out.record_status = status;
    out.reply = Reply::kUpstreamAnswer;
    out.reply_status = status;
    out.verdict = status >= 500 ? EndpointVerdict::kFailed : EndpointVerdict::kSucceeded;
    return out;
  }
  if (f.client == ClientState::kGone) {
    out.usage = UsageStatus::kCancelled;
    out.record_status = 499;
    out.reply = Reply::kNothing;
    out.verdict = EndpointVerdict::kAbandoned;
  } else if (f.shutting_down) {
    out.usage = UsageStatus::kInterrupted;
    out.record_status = 503;
    out.reply = Reply::kShuttingDown;
    out.reply_status = 503;
    out.verdict = EndpointVerdict::kAbandoned;  // the gateway's stop is no verdict on it
  } else if (f.upstream == UpstreamState::kTimedOut) {
    out.usage = UsageStatus::kFailed;
    out.record_status = 504;
    out.reply = Reply::kBodyTimeout;
    out.reply_status = 504;
    out.verdict = EndpointVerdict::kFailed;
  } else {
    out.usage = UsageStatus::kFailed;
    out.record_status = 502;
    out.reply = Reply::kBrokeOff;
    out.reply_status = 502;
    out.verdict = EndpointVerdict::kFailed;
  }
  return out;
}

}  // namespace

RelayOutcome RelayOutcomeOf(const RelayFacts& facts) {
  return facts.streaming ? StreamOutcome(facts) : WholeOutcome(facts);
}

}  // namespace atrium::gateway
