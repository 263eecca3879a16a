#include "billing/rating.h"

#include <algorithm>
#include <string_view>

namespace atrium::billing {
namespace {

void Emit(std::vector<RatedUsage>& out, const std::string& tenant, std::string_view source,
          const std::string& record_id, std::string_view meter, std::string item,
          Pricing::Match match, int64_t quantity, int64_t at, const std::string& project,
          const std::string& key_id, const std::string& deployment) {
  if (quantity <= 0) return;
  RatedUsage& r = out.emplace_back();
  r.tenant_id = tenant;
  r.source = source;
  r.record_id = record_id;
  r.meter = meter;
  r.item = std::move(item);
  r.price_ref = std::move(match.price_ref);
  r.quantity = quantity;
  r.usage_at = at;
  r.project = project;
  r.key_id = key_id;
  r.deployment_id = deployment;
}

// Compute slices of a MIG profile name ("3g.40gb" → 3); 0 when unknown.
int64_t ComputeSlices(std::string_view profile) {
  int64_t slices = 0;
  size_t i = 0;
  while (i < profile.size() && i < 2 && profile[i] >= '0' && profile[i] <= '9') {
    slices = slices * 10 + (profile[i] - '0');
    ++i;
  }
  return i < profile.size() && profile[i] == 'g' ? slices : 0;
}

}  // namespace

void RateTokenUsage(const UsageRecord& u, const Pricing& pricing, std::vector<RatedUsage>& out) {
  const int64_t input = std::clamp<int64_t>(u.input_tokens, 0, kMaxRecordTokens);
  const int64_t output = std::clamp<int64_t>(u.output_tokens, 0, kMaxRecordTokens);
  const int64_t cached = std::clamp<int64_t>(u.cached_tokens, 0, input);
  const int64_t at = u.created_at;
  static const std::string kNoProject;
  const bool cached_priced =
      cached > 0 && pricing.Prices(u.tenant_id, "tokens.cached", u.model, u.deployment_id, at);
  Emit(out, u.tenant_id, "tokens", u.id, "tokens.input", u.model,
       pricing.Find(u.tenant_id, "tokens.input", u.model, "*", u.deployment_id, at),
       cached_priced ? input - cached : input, at, kNoProject, u.key_id, u.deployment_id);
  Emit(out, u.tenant_id, "tokens", u.id, "tokens.output", u.model,
       pricing.Find(u.tenant_id, "tokens.output", u.model, "*", u.deployment_id, at), output, at,
       kNoProject, u.key_id, u.deployment_id);
  if (cached_priced) {
    Emit(out, u.tenant_id, "tokens", u.id, "tokens.cached", u.model,
         pricing.Find(u.tenant_id, "tokens.cached", u.model, "*", u.deployment_id, at), cached, at,
         kNoProject, u.key_id, u.deployment_id);
  }
}

bool IsBilledGpuRecord(const GpuUsageRecord& g) { return g.subject_kind == "allocation"; }

void RateGpuUsage(const GpuUsageRecord& g, const Pricing& pricing, std::vector<RatedUsage>& out) {
  if (!IsBilledGpuRecord(g) || g.to_ms <= g.from_ms || g.milli <= 0) return;
  static const std::string kNoKey;
  const int64_t at = g.from_ms;
  if (g.kind == "mig") {
    // Instances held: the charge over one instance's charge, at least one.
    const int64_t slices = ComputeSlices(g.mig_profile);
    const int64_t per_instance = slices > 0 ? (slices * 1000 + 3) / 7 : g.milli;
    const int64_t instances = std::max<int64_t>(1, g.milli / std::max<int64_t>(1, per_instance));
    Emit(out, g.tenant_id, "gpu", g.id, "gpu.mig", g.model + "/" + g.mig_profile,
         pricing.Find(g.tenant_id, "gpu.mig", g.model, g.mig_profile, g.deployment_id, at),
         instances * (g.to_ms - g.from_ms), at, g.project, kNoKey, g.deployment_id);
    return;
  }
  std::string_view meter = g.kind == "share"  ? "gpu.share"
                           : g.kind == "node" ? "gpu.node"
                                              : "gpu.whole";
  Emit(out, g.tenant_id, "gpu", g.id, meter, g.model,
       pricing.Find(g.tenant_id, meter, g.model, "*", g.deployment_id, at), g.gpu_milli_ms, at,
       g.project, kNoKey, g.deployment_id);
}

}  // namespace atrium::billing
