// Rating: usage records and prices in, rated usage out. Pure and
// deterministic: the same record and the same price books give the same
// rated usage, so re-rating proves what was stored (`atrium billing verify`).
//
// A record gives one rated row per meter it used (none for a meter it used
// nothing of), keyed by (tenant, source, record id, meter); the store keeps
// the first, so a record rated twice is counted once. Which price applies is
// decided by the record's own time (its arrival for tokens, its start for
// GPU time), never by when it is rated: a record that arrives late is priced
// as it would have been on time.
#pragma once

#include <vector>

#include "billing/price_book.h"
#include "model/billing_records.h"
#include "model/gateway_records.h"
#include "model/metering_records.h"

namespace atrium::billing {

// Token usage (source "tokens"): tokens.input (net of cached tokens when
// cached tokens have a price of their own), tokens.output, tokens.cached;
// item = the model called, key = the API key, no project.
void RateTokenUsage(const UsageRecord& record, const Pricing& pricing,
                    std::vector<RatedUsage>& out);

// GPU time (source "gpu"), allocations' records only: what was held is the
// bill, job records are inside it (docs/billing.md). gpu.whole, gpu.share,
// gpu.node count milli-GPU·ms; gpu.mig counts instance·ms (one MIG
// instance's charge is its compute slices in sevenths of 1000, rounded).
void RateGpuUsage(const GpuUsageRecord& record, const Pricing& pricing,
                  std::vector<RatedUsage>& out);

// Whether a GPU usage record is billed at all (subject kind allocation).
bool IsBilledGpuRecord(const GpuUsageRecord& record);

}  // namespace atrium::billing
