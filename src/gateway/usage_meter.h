// The metering stage: the one usage record of an authenticated request,
// filled in as the request passes the other stages (parse, route, queue,
// upstream, first byte, tokens) and finished once with how it ended.
//
// Tokens: what the upstream reported in its usage wins; without a report the
// gateway's own count stands for the output (a stream's content chunks, or
// an estimate from a non-streamed answer's generated text) and the input is
// the admission estimate. A request no model server took on (refused by the
// gateway, never sent to one, or answered with an error status and no
// usage) is recorded with no tokens: nothing was served. One sent and never
// answered (the client left, the gateway stopped, the server went silent)
// keeps the input estimate: the server took it on.
//
// A model server's report is believed only up to what the request could
// have produced: the input up to ParsedRequest::input_bound, the output up
// to max_tokens x choices (+ kOutputMarginTokens each) or, without
// max_tokens, up to the larger of the reserved output and the bytes the
// server sent (no token decodes to less than a byte of text) plus that
// margin. A report above it is recorded at the bound and flagged
// (kUsageOverBound): a hostile or broken server cannot bill, nor lock out
// through the token limits, a tenant for tokens it never delivered.
//
// A stream that reported no usage is billed by how it ended. Cut off by its
// client (cancelled): at least the output it reserved at admission, or the
// text it relayed if more — a client cannot stop reading just before the
// usage chunk to have a long answer billed as a few chunks. Completed (a
// server that sends no usage): the relayed text's estimate, never a chunk
// count (one chunk may carry many tokens). Cut off by the gateway or the
// server (interrupted, failed; a checkpoint): the lesser of the text
// estimate and the content chunks, what the client surely received — the
// platform's failure is not the tenant's to pay.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "gateway/openai.h"
#include "gateway/policy.h"
#include "model/gateway_records.h"

namespace atrium::gateway {

// How a request ended, as UsageRecord::status spells it.
enum class UsageStatus {
  kCompleted,    // answered (2xx/3xx/4xx relayed from the model server)
  kFailed,       // the model server failed or broke off, or none could be reached
  kRejected,     // refused by the gateway before reaching a model server
  kCancelled,    // the client went away
  kInterrupted,  // cut off by the gateway's own end (a stop whose drain time ran out)
};
std::string_view UsageStatusName(UsageStatus status);

class UsageMeter {
 public:
  UsageMeter(std::string request_id, const Caller& caller, Api api, int64_t arrived_ms);

  void Parsed(const ParsedRequest& request);  // model, stream, input estimate and bounds
  // The output tokens the request reserved at admission (max_tokens x
  // choices, or the gateway's default reservation).
  void Reserved(int64_t output_tokens);
  // Bytes of the model server's response body received so far.
  void Received(int64_t bytes);
  void Routed(const std::string& deployment_id);
  void Dequeued(int64_t now_ms);  // the wait in the fair queue ends
  void Upstream(const std::string& endpoint);
  // The request's body went to a model server.
  void Sent();
  // The model server answered with this status (its response head came).
  void Answered(int upstream_status);
  // The first token reaches the client: a stream's first body bytes, or a
  // whole answer as it goes out (time to first token; 0 when none did).
  void FirstByte(int64_t now_ms);
  // `reported`: the upstream's usage (present or not), bounded as above;
  // `counted`: the gateway's own output count, used only when nothing was
  // reported (for a stream: the estimate from its relayed text). Ignored
  // once finished.
  void Tokens(const Usage& reported, std::optional<int64_t> counted);
  // A stream's content chunks relayed so far (see above).
  void StreamChunks(int64_t chunks) { chunks_ = chunks; }
  // The most output tokens a report may claim now (see above).
  int64_t OutputBound() const;
  int64_t reserved_output() const { return reserved_output_; }

  // The record as the request ends now, handed over (moved out: record()
  // keeps the counts and times, not the text); total and first-byte times
  // are measured from arrival (first byte 0 when none was sent).
  UsageRecord Finish(UsageStatus status, int http_status, int64_t now_ms);
  // The record a running stream would have if cut off now (its status is
  // set by the journal): HTTP 200 and the times so far.
  const UsageRecord& Snapshot(int64_t now_ms);

  const UsageRecord& record() const { return record_; }
  bool finished() const { return finished_; }

 private:
  void Times(int64_t now_ms);
  // A stream's output without usage, ending with `status` (see above).
  int64_t UnreportedStreamOutput(UsageStatus status) const;

  UsageRecord record_;
  int64_t input_bound_ = 0;  // 0 until Parsed(): no bound
  int64_t max_tokens_ = 0;
  int64_t choices_ = 1;
  int64_t reserved_output_ = 0;
  int64_t counted_ = 0;  // the gateway's own count (a stream's text estimate)
  int64_t chunks_ = -1;  // -1: not relayed as a stream (no chunks to count)
  int64_t received_bytes_ = 0;
  int64_t first_byte_at_ = 0;
  bool sent_ = false;      // a model server has the request
  int answered_ = 0;       // the status it answered (0: none yet)
  bool reported_ = false;  // it reported usage
  bool finished_ = false;
};

}  // namespace atrium::gateway
