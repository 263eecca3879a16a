#include "billing/rating.h"

#include <gtest/gtest.h>

namespace atrium::billing {
namespace {

Pricing MakePricing(const char* entries) {
  PriceBookVersion v;
  v.book_id = "pb_a";
  v.version = 1;
  v.effective_from = 0;
  v.entries = *ParsePriceEntries(Json::parse(entries), "entries");
  BillingPlan fallback;
  fallback.tenant_id = kDefaultPlanTenant;
  fallback.version = 1;
  fallback.price_book_id = "pb_a";
  return Pricing({v}, {fallback});
}

UsageRecord Tokens(int64_t in, int64_t out, int64_t cached) {
  UsageRecord u;
  u.id = "req_1";
  u.tenant_id = "tn_acme";
  u.key_id = "key_1";
  u.model = "llama";
  u.deployment_id = "dp_1";
  u.input_tokens = in;
  u.output_tokens = out;
  u.cached_tokens = cached;
  u.created_at = 5000;
  return u;
}

TEST(Rating, TokensPerMeterNetOfPricedCachedTokens) {
  Pricing with_cached = MakePricing(R"([{"meter": "tokens.input", "price_minor": "10"},
    {"meter": "tokens.output", "price_minor": "30"},
    {"meter": "tokens.cached", "price_minor": "1"}])");
  std::vector<RatedUsage> out;
  RateTokenUsage(Tokens(100, 20, 40), with_cached, out);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].meter, "tokens.input");
  EXPECT_EQ(out[0].quantity, 60);
  EXPECT_EQ(out[1].meter, "tokens.output");
  EXPECT_EQ(out[1].quantity, 20);
  EXPECT_EQ(out[2].meter, "tokens.cached");
  EXPECT_EQ(out[2].quantity, 40);
  EXPECT_EQ(out[0].price_ref, "book:pb_a@1#tokens.input|*||");
  EXPECT_EQ(out[0].key_id, "key_1");
  EXPECT_EQ(out[0].source, "tokens");
  EXPECT_EQ(out[0].usage_at, 5000);

  // Without a price for cached tokens, they are input tokens.
  Pricing without = MakePricing(R"([{"meter": "tokens.input", "price_minor": "10"}])");
  out.clear();
  RateTokenUsage(Tokens(100, 20, 40), without, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].quantity, 100);
  EXPECT_EQ(out[1].meter, "tokens.output");
  EXPECT_EQ(out[1].price_ref, "");  // counted, unpriced

  // Nothing used, nothing rated; claims outside the bounds are clamped.
  out.clear();
  RateTokenUsage(Tokens(0, 0, 0), without, out);
  EXPECT_TRUE(out.empty());
  RateTokenUsage(Tokens(-5, kMaxRecordTokens + 10, 99), with_cached, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].quantity, kMaxRecordTokens);
}

GpuUsageRecord Gpu(std::string kind, std::string profile, int64_t milli) {
  GpuUsageRecord g;
  g.id = "allocation:al_1:0";
  g.tenant_id = "tn_acme";
  g.project = "research";
  g.subject_kind = "allocation";
  g.subject_id = "al_1";
  g.model = "A100-80GB";
  g.kind = std::move(kind);
  g.mig_profile = std::move(profile);
  g.milli = milli;
  g.from_ms = 3'600'000;
  g.to_ms = 5'400'000;
  g.gpu_milli_ms = milli * (g.to_ms - g.from_ms);
  return g;
}

TEST(Rating, GpuTimePerKind) {
  Pricing pricing = MakePricing(R"([{"meter": "gpu.whole", "price_minor": "200"},
    {"meter": "gpu.mig", "price_minor": "50"}])");
  std::vector<RatedUsage> out;
  RateGpuUsage(Gpu("whole", "", 2000), pricing, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].meter, "gpu.whole");
  EXPECT_EQ(out[0].quantity, int64_t{2000} * 1'800'000);
  EXPECT_EQ(out[0].project, "research");
  EXPECT_EQ(out[0].item, "A100-80GB");
  EXPECT_EQ(out[0].usage_at, 3'600'000);
  // A 3g instance is charged 429 milli: one instance for half an hour.
  out.clear();
  RateGpuUsage(Gpu("mig", "3g.40gb", 429), pricing, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].meter, "gpu.mig");
  EXPECT_EQ(out[0].item, "A100-80GB/3g.40gb");
  EXPECT_EQ(out[0].quantity, 1'800'000);
  out.clear();
  RateGpuUsage(Gpu("share", "", 250), pricing, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].meter, "gpu.share");
  EXPECT_EQ(out[0].price_ref, "");
  // Job records are inside their allocation's: never billed.
  out.clear();
  GpuUsageRecord job = Gpu("whole", "", 1000);
  job.subject_kind = "job";
  RateGpuUsage(job, pricing, out);
  EXPECT_TRUE(out.empty());
  EXPECT_FALSE(IsBilledGpuRecord(job));
}

TEST(Rating, SameRecordSameRows) {
  Pricing pricing = MakePricing(R"([{"meter": "tokens.input", "price_minor": "10"}])");
  std::vector<RatedUsage> a;
  std::vector<RatedUsage> b;
  RateTokenUsage(Tokens(7, 3, 0), pricing, a);
  RateTokenUsage(Tokens(7, 3, 0), pricing, b);
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace atrium::billing
