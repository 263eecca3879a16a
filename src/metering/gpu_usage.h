// GPU-seconds as a tenant is billed for them: the pure rule that turns what a
// subject (an allocation or a job) held into usage records, exactly once.
//
// A subject holds `milli` milli-GPU of one GPU model from `start_ms` until
// `end_ms` (or still). Its usage is cut at every UTC hour boundary: one
// record per boundary crossed and one closing record at the end, each
// covering [from, to) with gpu_milli_ms = milli × (to - from). Amounts are
// integers in milli-GPU × milliseconds (1 GPU-second = 1,000,000), so no
// rounding happens anywhere; a view that shows GPU-seconds divides.
//
// Exactly once, across crashes, without any state of the meter's own: what
// was metered is read back from the records themselves (GpuMeteredPoint: the
// end of the last one, and whether the closing one is stored), and every
// record's id is "<subject_kind>:<subject_id>:<from_ms>". A record's `from`
// is the subject's start or an hour boundary (or, for a zero-length closing
// record, the end of the last record), so two meters that saw the subject
// at different moments — one still open, one already ended — compute the
// same id for the same stretch of time, and the store keeps the first:
// nothing is counted twice. As long as a subject's records are stored in
// order (the store writes one call's records in one transaction), the
// stored records are a prefix of the chain, so the next computation resumes
// where the stored ones end: nothing is lost.
//
// Pure: no clock, no I/O. The caller passes `now_ms`.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "model/metering_records.h"

namespace atrium::metering {

inline constexpr int64_t kHourMs = 3'600'000;
// An open end.
inline constexpr int64_t kStillHeld = -1;
// The most milli-GPU one subject may hold (a million GPUs). With records at
// most an hour long, one record's amount stays below 3.6e15, and a sum of
// amounts fits an int64 up to 9.2e18 milli-GPU·ms: about 292,000 GPU-years,
// far beyond any one tenant's summary.
inline constexpr int64_t kMaxMeteredMilli = 1'000'000'000;
// Times are ms since the epoch from 0 to the end of year 9999.
inline constexpr int64_t kMaxMeteredTimeMs = 253'402'300'799'999;
// Records computed for one subject per call at most: a subject found
// metered long ago (a meter down for a month) catches up over several
// calls instead of in one unbounded batch.
inline constexpr size_t kDefaultMaxRecordsPerSubject = 1000;

// What a subject held. Kinds: "allocation" | "job" (subject), "whole" |
// "mig" | "share" | "node" (GPU kind).
struct HeldInterval {
  std::string subject_kind;
  std::string subject_id;
  std::string tenant_id;
  std::string project;
  std::string model;
  std::string kind;
  std::string mig_profile;  // kind mig only
  int64_t milli = 0;
  std::string deployment_id;  // the managed deployment it serves; "" none
  int64_t start_ms = 0;
  // kStillHeld while held. An end before the start (a clock stepped back
  // between the two writes) is read as the start: nothing is billed.
  int64_t end_ms = kStillHeld;
};

struct MeteringLimits {
  // Open subjects are metered up to now_ms - open_lag_ms: an end recorded
  // up to this late is still billed exactly (an hour boundary metered
  // before an end that happened earlier stays billed; records are never
  // taken back).
  int64_t open_lag_ms = 0;
  size_t max_records = kDefaultMaxRecordsPerSubject;
};

// The records due for `held` at `now_ms`, given what is already metered
// (read back from the stored records), oldest first; created_at = now_ms.
// An open subject gets a record for each hour boundary in
// (metered, now_ms - open_lag_ms]; an ended one gets every boundary before
// its end and then its closing record (even when now_ms is earlier: the
// end is a fact, the clock may be behind). Nothing is due for a closed
// subject, or when the clock went back. Errors: kInvalidArgument for an
// unknown subject or GPU kind, an empty subject id or tenant, a milli or a
// time outside the bounds above (nothing is computed).
Result<std::vector<GpuUsageRecord>> DueGpuUsageRecords(const HeldInterval& held,
                                                       const GpuMeteredPoint& metered,
                                                       int64_t now_ms,
                                                       const MeteringLimits& limits = {});

// "<subject_kind>:<subject_id>:<from_ms>".
std::string GpuUsageRecordId(std::string_view subject_kind, std::string_view subject_id,
                             int64_t from_ms);

// The first UTC hour boundary strictly after `ms` (ms >= 0).
int64_t NextHourBoundary(int64_t ms);

// The GPU kind billed for an allocation's kind: gpu → whole, the others
// (mig, share, node) as they are; "" for an unknown one.
std::string_view GpuKindOfAllocation(std::string_view allocation_kind);

}  // namespace atrium::metering
