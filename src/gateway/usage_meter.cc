#include "gateway/usage_meter.h"

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
  if (reported.present) {
    reported_ = true;
    record_.input_tokens = reported.prompt_tokens;
    record_.output_tokens = reported.completion_tokens;
    record_.cached_tokens = reported.cached_tokens;
  } else if (counted) {
    record_.output_tokens = *counted;
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
  record_.status = std::string(UsageStatusName(status));
  record_.http_status = http_status;
  Times(now_ms);
  finished_ = true;
  // Moving leaves the numbers in record_ (the caller settles with them);
  // the text goes with the record.
  return std::move(record_);
}

const UsageRecord& UsageMeter::Snapshot(int64_t now_ms) {
  record_.http_status = 200;
  Times(now_ms);
  return record_;
}

}  // namespace atrium::gateway
