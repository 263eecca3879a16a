#include "metering/gpu_usage.h"

#include <algorithm>

namespace atrium::metering {
namespace {

bool InTimeRange(int64_t ms) { return ms >= 0 && ms <= kMaxMeteredTimeMs; }

Status Validate(const HeldInterval& held, const GpuMeteredPoint& metered, int64_t now_ms) {
  if (held.subject_kind != "allocation" && held.subject_kind != "job") {
    return Error::InvalidArgument("unknown metered subject kind '" + held.subject_kind + "'");
  }
  if (held.subject_id.empty()) return Error::InvalidArgument("metered subject without id");
  const std::string who = held.subject_kind + " " + held.subject_id;
  if (held.tenant_id.empty()) return Error::InvalidArgument(who + " has no tenant");
  if (held.kind != "whole" && held.kind != "mig" && held.kind != "share" && held.kind != "node") {
    return Error::InvalidArgument(who + " has unknown GPU kind '" + held.kind + "'");
  }
  if (held.milli < 0 || held.milli > kMaxMeteredMilli) {
    return Error::InvalidArgument(who + " holds " + std::to_string(held.milli) +
                                  " milli-GPU, outside 0.." + std::to_string(kMaxMeteredMilli));
  }
  if (!InTimeRange(held.start_ms) || (held.end_ms != kStillHeld && !InTimeRange(held.end_ms)) ||
      (metered.to_ms != -1 && !InTimeRange(metered.to_ms)) || !InTimeRange(now_ms)) {
    return Error::InvalidArgument(who + " has a time outside 0.." +
                                  std::to_string(kMaxMeteredTimeMs) + " ms");
  }
  return OkStatus();
}

}  // namespace

std::string GpuUsageRecordId(std::string_view subject_kind, std::string_view subject_id,
                             int64_t from_ms) {
  std::string id;
  id.reserve(subject_kind.size() + subject_id.size() + 22);
  id.append(subject_kind).append(":").append(subject_id).append(":");
  id += std::to_string(from_ms);
  return id;
}

int64_t NextHourBoundary(int64_t ms) { return (ms / kHourMs + 1) * kHourMs; }

std::string_view GpuKindOfAllocation(std::string_view allocation_kind) {
  if (allocation_kind == "gpu") return "whole";
  if (allocation_kind == "mig" || allocation_kind == "share" || allocation_kind == "node") {
    return allocation_kind;
  }
  return "";
}

Result<std::vector<GpuUsageRecord>> DueGpuUsageRecords(const HeldInterval& held,
                                                       const GpuMeteredPoint& metered,
                                                       int64_t now_ms,
                                                       const MeteringLimits& limits) {
  ATRIUM_RETURN_IF_ERROR(Validate(held, metered, now_ms));
  std::vector<GpuUsageRecord> out;
  if (metered.closed) return out;
  const bool ended = held.end_ms != kStillHeld;
  const int64_t end = ended ? std::max(held.end_ms, held.start_ms) : kStillHeld;
  // Where the next record starts: after the stored ones, never before the
  // start (records of an earlier start would be someone else's mistake).
  int64_t cursor = std::max(held.start_ms, metered.to_ms);
  const int64_t open_until = now_ms - std::max<int64_t>(limits.open_lag_ms, 0);

  auto emit = [&](int64_t from, int64_t to, bool closes) {
    GpuUsageRecord r;
    r.id = GpuUsageRecordId(held.subject_kind, held.subject_id, from);
    r.tenant_id = held.tenant_id;
    r.project = held.project;
    r.deployment_id = held.deployment_id;
    r.subject_kind = held.subject_kind;
    r.subject_id = held.subject_id;
    r.model = held.model;
    r.kind = held.kind;
    r.mig_profile = held.kind == "mig" ? held.mig_profile : "";
    r.milli = held.milli;
    r.from_ms = from;
    r.to_ms = to;
    // to - from <= kHourMs and milli <= kMaxMeteredMilli: below 3.6e15.
    r.gpu_milli_ms = held.milli * (to - from);
    r.closes_subject = closes;
    r.created_at = now_ms;
    out.push_back(std::move(r));
  };

  while (out.size() < limits.max_records) {
    const int64_t boundary = NextHourBoundary(cursor);
    if (ended ? boundary >= end : boundary > open_until) break;
    emit(cursor, boundary, false);
    cursor = boundary;
  }
  // The closing record: up to the end, or zero-length where the records
  // already reach past it (an end recorded after a boundary was metered).
  if (ended && out.size() < limits.max_records) emit(cursor, std::max(cursor, end), true);
  return out;
}

}  // namespace atrium::metering
