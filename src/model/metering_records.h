// Rows of GPU metering: what a tenant held on GPUs, per hour, exactly once.
// Plain data; the rules that cut held time into records live in
// src/metering, the table in the store (gpu_usage_records).
#pragma once

#include <cstdint>
#include <string>

namespace atrium {

// GPU time one allocation or job held within one clock hour (UTC), or up to
// its end. Records of one subject form a chain: each starts where the one
// before it ended (the first at the subject's start), none crosses an hour
// boundary, and the last is marked `closes_subject`. The id is
// "<subject_kind>:<subject_id>:<from_ms>", so a record computed twice is
// stored once (see src/metering/gpu_usage.h for why `from` and not `to`).
struct GpuUsageRecord {
  std::string id;
  std::string tenant_id;
  std::string project;
  std::string subject_kind;  // allocation | job
  std::string subject_id;
  std::string model;        // GPU model, e.g. H100-80GB
  std::string kind;         // whole | mig | share | node
  std::string mig_profile;  // kind mig only, e.g. 3g.40gb
  int64_t milli = 0;        // milli-GPU held: 1000 per whole GPU
  int64_t from_ms = 0;      // [from_ms, to_ms), ms since the epoch
  int64_t to_ms = 0;
  int64_t gpu_milli_ms = 0;  // milli × (to_ms - from_ms): the billed amount
  bool closes_subject = false;
  int64_t created_at = 0;  // when the meter wrote it
  // The managed deployment whose replica held it (src/serving); "" for any
  // other allocation or job.
  std::string deployment_id;

  bool operator==(const GpuUsageRecord&) const = default;
};

// How far a subject was metered, read back from its records: the end of its
// last record (-1: none yet) and whether its closing record is stored.
struct GpuMeteredPoint {
  int64_t to_ms = -1;
  bool closed = false;

  bool operator==(const GpuMeteredPoint&) const = default;
};

// Sums of GPU usage records, one row per group.
struct GpuUsageTotals {
  // What the row sums: {model, kind} for group_by "model", {project} for
  // "project", {deployment_id} for "deployment", all empty for the grand
  // total.
  std::string model;
  std::string kind;
  std::string project;
  std::string deployment_id;
  int64_t records = 0;
  int64_t gpu_milli_ms = 0;
};

}  // namespace atrium
