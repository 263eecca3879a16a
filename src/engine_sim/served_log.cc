#include "engine_sim/served_log.h"

#include <algorithm>

#include "engine_sim/json_text.h"

namespace atrium::engine_sim {

ServedLog::ServedLog(size_t capacity) : capacity_(std::max<size_t>(1, capacity)) {}

uint64_t ServedLog::Begin(ServedRecord record) {
  std::lock_guard lock(mu_);
  ++totals_.requests;
  totals_.prompt_tokens += record.prompt_tokens;
  if (record.finished || record.cancelled) {
    totals_.finished += record.finished ? 1 : 0;
    totals_.cancelled += record.cancelled ? 1 : 0;
    totals_.completion_tokens += record.completion_tokens;
  } else {
    ++totals_.in_flight;
  }
  if (records_.size() == capacity_) {
    records_.pop_front();
    ++first_handle_;
    ++totals_.dropped;
  }
  records_.push_back(std::move(record));
  return first_handle_ + records_.size() - 1;
}

void ServedLog::End(uint64_t handle, int64_t completion_tokens, bool cancelled) {
  std::lock_guard lock(mu_);
  ServedRecord* record = nullptr;
  if (handle >= first_handle_ && handle - first_handle_ < records_.size()) {
    record = &records_[handle - first_handle_];
    if (record->finished || record->cancelled) return;  // already ended
  }
  --totals_.in_flight;
  totals_.completion_tokens += completion_tokens;
  (cancelled ? totals_.cancelled : totals_.finished) += 1;
  if (record == nullptr) return;
  record->completion_tokens = completion_tokens;
  record->finished = !cancelled;
  record->cancelled = cancelled;
}

ServedTotals ServedLog::Totals() const {
  std::lock_guard lock(mu_);
  return totals_;
}

std::string ServedLog::ToJson() const {
  std::lock_guard lock(mu_);
  std::string out;
  out.reserve(64 + records_.size() * 160);
  out += R"({"requests":[)";
  bool first = true;
  for (const ServedRecord& r : records_) {
    if (!first) out += ',';
    first = false;
    out += R"({"request_id":)";
    AppendJsonString(r.request_id, out);
    out += R"(,"model":)";
    AppendJsonString(r.model, out);
    out += R"(,"endpoint":")";
    out += r.endpoint;
    out += R"(","prompt_tokens":)";
    out += std::to_string(r.prompt_tokens);
    out += R"(,"cached_tokens":)";
    out += std::to_string(r.cached_tokens);
    out += R"(,"cache_salt":)";
    AppendJsonString(r.cache_salt, out);
    out += R"(,"completion_tokens":)";
    out += std::to_string(r.completion_tokens);
    out += R"(,"stream":)";
    out += r.stream ? "true" : "false";
    out += R"(,"finished":)";
    out += r.finished ? "true" : "false";
    out += R"(,"cancelled":)";
    out += r.cancelled ? "true" : "false";
    out += '}';
  }
  out += R"(],"totals":{"requests":)";
  out += std::to_string(totals_.requests);
  out += R"(,"finished":)";
  out += std::to_string(totals_.finished);
  out += R"(,"cancelled":)";
  out += std::to_string(totals_.cancelled);
  out += R"(,"in_flight":)";
  out += std::to_string(totals_.in_flight);
  out += R"(,"prompt_tokens":)";
  out += std::to_string(totals_.prompt_tokens);
  out += R"(,"completion_tokens":)";
  out += std::to_string(totals_.completion_tokens);
  out += R"(,"dropped":)";
  out += std::to_string(totals_.dropped);
  out += "}}";
  return out;
}

}  // namespace atrium::engine_sim
