#include "gateway/usage_meter.h"

#include <algorithm>
#include <limits>

namespace atrium::gateway {

std::string_view UsageStatusName(UsageStatus status) {
  switch (status) {
    case UsageStatus::kCompleted:
      return "completed";
    case UsageStatus::kFailed:
      return "failed";
    case UsageStatus::kRejected:
      return "rejected";
    case UsageStatus::kCancelled:
      return "cancelled";
    case UsageStatus::kInterrupted:
      return "interrupted";  // as the journal spells a crash's checkpoints
  }
  return "failed";
}

UsageMeter::UsageMeter(std::string request_id, const Caller& caller, Api api, int64_t arrived_ms) {
  record_.id = std::move(request_id);
  record_.tenant_id = caller.tenant_id;
  record_.key_id = caller.key_id;
  record_.api = std::string(ApiName(api));
  record_.created_at = arrived_ms;
}

void UsageMeter::Parsed(const ParsedRequest& request) {
  record_.model = request.model;
  record_.stream = request.stream;
  record_.input_tokens = request.estimated_input_tokens;
  input_bound_ = std::max<int64_t>(request.input_bound, request.estimated_input_tokens);
  max_tokens_ = request.max_tokens;
  choices_ = std::clamp<int64_t>(request.choices, 1, kMaxChoices);
}

void UsageMeter::Reserved(int64_t output_tokens) {
  reserved_output_ = std::max<int64_t>(0, output_tokens);
}

void UsageMeter::Received(int64_t bytes) { received_bytes_ = std::max<int64_t>(0, bytes); }

int64_t UsageMeter::OutputBound() const {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const int64_t margin = kOutputMarginTokens * choices_;
  int64_t bound = 0;
  if (max_tokens_ > 0) {
    bound = max_tokens_ > (kMax - margin) / choices_ ? kMax - margin : max_tokens_ * choices_;
  } else {
    bound = std::min(std::max(reserved_output_, received_bytes_), kMax - margin);
  }
  return bound + margin;
}

void UsageMeter::Routed(const std::string& deployment_id) { record_.deployment_id = deployment_id; }

void UsageMeter::Dequeued(int64_t now_ms) { record_.queue_ms = now_ms - record_.created_at; }

void UsageMeter::Upstream(const std::string& endpoint) { record_.endpoint = endpoint; }

void UsageMeter::Sent() { sent_ = true; }

void UsageMeter::Answered(int upstream_status) { answered_ = upstream_status; }

void UsageMeter::FirstByte(int64_t now_ms) {
  if (first_byte_at_ == 0) first_byte_at_ = now_ms;
}

void UsageMeter::Tokens(const Usage& reported, std::optional<int64_t> counted) {
  if (finished_) return;  // the record is billed: the settlement uses the same figures
  const int64_t output_bound = OutputBound();
  if (reported.present) {
    reported_ = true;
    const int64_t input_bound =
        input_bound_ > 0 ? input_bound_ : std::numeric_limits<int64_t>::max();
    const bool over =
        reported.prompt_tokens > input_bound || reported.completion_tokens > output_bound;
    record_.input_tokens = std::min(reported.prompt_tokens, input_bound);
    record_.output_tokens = std::min(reported.completion_tokens, output_bound);
    record_.cached_tokens = std::min(reported.cached_tokens, record_.input_tokens);
    if (over) record_.flag = kUsageOverBound;
  } else if (counted) {
    // The gateway's own count comes from what it relayed: no bound needed.
    counted_ = std::max<int64_t>(0, *counted);
    record_.output_tokens = counted_;
  }
}

int64_t UsageMeter::UnreportedStreamOutput(UsageStatus status) const {
  switch (status) {
    case UsageStatus::kCancelled:
      return std::max(counted_, reserved_output_);
    case UsageStatus::kCompleted:
      return counted_;
    default:
      return chunks_ >= 0 ? std::min(counted_, chunks_) : counted_;
  }
}

void UsageMeter::Times(int64_t now_ms) {
  record_.total_ms = now_ms - record_.created_at;
  record_.ttft_ms = first_byte_at_ > 0 ? first_byte_at_ - record_.created_at : 0;
}

UsageRecord UsageMeter::Finish(UsageStatus status, int http_status, int64_t now_ms) {
  const bool took_on = sent_ && (answered_ == 0 || (answered_ >= 200 && answered_ < 300));
  if (!reported_ && !took_on) {
    record_.input_tokens = 0;
    record_.output_tokens = 0;
    record_.cached_tokens = 0;
  }
  if (record_.stream && !reported_ && took_on) {
    record_.output_tokens = UnreportedStreamOutput(status);
  }
  record_.status = std::string(UsageStatusName(status));
  record_.http_status = http_status;
  Times(now_ms);
  finished_ = true;
  // Moving leaves the numbers in record_ (the caller settles with them);
  // the text goes with the record.
  return std::move(record_);
}

const UsageRecord& UsageMeter::Snapshot(int64_t now_ms) {
  // A checkpoint stands for a stream the gateway's end cut off.
  if (record_.stream && !reported_) {
    record_.output_tokens = UnreportedStreamOutput(UsageStatus::kInterrupted);
  }
  record_.http_status = 200;
  Times(now_ms);
  return record_;
}

}  // namespace atrium::gateway
