// Fuzzes what a hostile model server sends the gateway: response bodies
// (usage read back, output estimated) and SSE streams (relayed event by
// event, usage-only chunks dropped for a client that did not ask, usage and
// content chunks metered), and the usage record metered from either.
//
// Input: byte 0 chooses the mode (bit 0: a stream, else a whole body), the
// API (bits 1-2) and whether the client asked for usage (bit 3); byte 1 sets
// the size of the pieces a stream arrives in; the rest is what the server
// sent. Invariants checked, beyond not crashing (ASan, UBSan):
//   - token counts are never negative, and an estimate never exceeds the
//     text it was made from;
//   - a relayed stream is the upstream's bytes exactly when the client asked
//     for usage or it is a Responses stream (until [DONE] or the Responses
//     API's last event, where the stream ends), and otherwise those
//     bytes less whole events (a subsequence);
//   - how the bytes were cut into pieces changes neither the relayed bytes
//     nor the metering (for streams whose events fit the relay's 1 MiB cap);
//   - the usage record's tokens are never negative nor above what was reported.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "gateway/openai.h"
#include "gateway/usage_meter.h"

namespace {

using atrium::gateway::Api;
using atrium::gateway::SseRelay;
using atrium::gateway::Usage;

void Check(bool ok) {
  if (!ok) std::abort();
}

// `sub` is `of` less some of its bytes, in order.
bool IsSubsequence(std::string_view sub, std::string_view of) {
  size_t i = 0;
  for (char c : of) {
    if (i < sub.size() && sub[i] == c) ++i;
  }
  return i == sub.size();
}

void CheckUsage(const Usage& u) {
  Check(u.prompt_tokens >= 0 && u.completion_tokens >= 0 && u.cached_tokens >= 0);
  if (!u.present) Check(u.prompt_tokens == 0 && u.completion_tokens == 0 && u.cached_tokens == 0);
}

std::string RelayInPieces(SseRelay& relay, std::string_view bytes, size_t piece) {
  std::string out;
  while (!bytes.empty()) {
    const size_t n = std::min(piece, bytes.size());
    out += relay.Feed(bytes.substr(0, n));
    bytes.remove_prefix(n);
  }
  out += relay.Finish();
  return out;
}

void CheckRecord(Api api, const Usage& reported, std::optional<int64_t> counted) {
  atrium::gateway::Caller caller;
  caller.tenant_id = "tn_fuzz";
  caller.key_id = "key_fuzz";
  atrium::gateway::UsageMeter meter("req_fuzz", caller, api, 1000);
  atrium::gateway::ParsedRequest parsed;
  parsed.model = "m";
  parsed.estimated_input_tokens = 7;
  meter.Parsed(parsed);
  meter.Sent();
  meter.Answered(200);
  meter.FirstByte(1001);
  meter.Tokens(reported, counted);
  const atrium::UsageRecord record =
      meter.Finish(atrium::gateway::UsageStatus::kCompleted, 200, 1002);
  Check(record.input_tokens >= 0 && record.output_tokens >= 0 && record.cached_tokens >= 0);
  // Never more than reported (metering may bound a report, never raise it).
  if (reported.present) Check(record.output_tokens <= reported.completion_tokens);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const bool stream = (data[0] & 1) != 0;
  const Api api = static_cast<Api>((data[0] >> 1) & 3);  // the four APIs
  const bool wants_usage = (data[0] & 8) != 0;
  const size_t piece = 1 + data[1];
  const std::string_view sent(reinterpret_cast<const char*>(data + 2), size - 2);

  if (!stream) {
    const Usage usage = atrium::gateway::UsageFromResponse(sent, api);
    CheckUsage(usage);
    const int64_t estimate = atrium::gateway::EstimateOutputTokens(api, sent);
    Check(estimate >= 0 && estimate <= atrium::gateway::EstimateTokens(sent));
    CheckRecord(api, usage, estimate);
    return 0;
  }

  SseRelay pieces(wants_usage, api);
  // A Responses stream's usage always reaches the client: nothing is dropped.
  const bool relays_all = wants_usage || api == Api::kResponses;
  const std::string out = RelayInPieces(pieces, sent, piece);
  if (relays_all && !pieces.saw_done()) {
    Check(out == sent);
  } else {  // events dropped, or the stream ended at [DONE]
    Check(IsSubsequence(out, sent));
  }
  CheckUsage(pieces.usage());
  Check(pieces.content_chunks() >= 0 && pieces.StreamedTokens() >= 0);
  if (sent.size() <= (size_t{1} << 20)) {
    SseRelay whole(wants_usage, api);
    Check(RelayInPieces(whole, sent, sent.size() + 1) == out);
    Check(whole.usage().present == pieces.usage().present);
    Check(whole.usage().completion_tokens == pieces.usage().completion_tokens);
    Check(whole.usage().prompt_tokens == pieces.usage().prompt_tokens);
    Check(whole.content_chunks() == pieces.content_chunks());
    Check(whole.saw_done() == pieces.saw_done());
  }
  CheckRecord(api, pieces.usage(), pieces.StreamedTokens());
  return 0;
}
