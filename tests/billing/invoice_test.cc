#include "billing/invoice.h"

#include <gtest/gtest.h>

#include <numeric>

#include "billing/money.h"

namespace atrium::billing {
namespace {

constexpr int64_t kStart = 1'793'491'200'000;  // 2026-11-01
const Period kNov = PeriodContaining(kStart, 1);

PriceEntry Entry(const char* json) {
  return ParsePriceEntries(Json::parse(std::string("[") + json + "]"), "e")->at(0);
}

TEST(Invoice, ChargesFlatVolumeAndGraduatedOnTheWholeQuantity) {
  // 249 cents per GPU-hour; 1.5 GPU-hours.
  EXPECT_EQ(*ChargeOf(Entry(R"({"meter": "gpu.whole", "price_minor": "249"})"),
                      int64_t{1'500} * 3'600'000),
            374);  // 373.5 rounds away from zero
  // 0.15 cents per million tokens: 3 tokens cost 0.00000045 cents: 0.
  EXPECT_EQ(*ChargeOf(Entry(R"({"meter": "tokens.input", "price_minor": "0.15"})"), 3), 0);
  const char* tiers = R"("tiers": [{"up_to": 10, "price_minor": "100"},
                                   {"up_to": 20, "price_minor": "50"},
                                   {"price_minor": "10"}]})";
  PriceEntry graduated = Entry(
      (std::string(R"({"meter": "tokens.output", "tier_mode": "graduated", )") + tiers).c_str());
  PriceEntry volume =
      Entry((std::string(R"({"meter": "tokens.output", "tier_mode": "volume", )") + tiers).c_str());
  constexpr int64_t kM = 1'000'000;
  EXPECT_EQ(*ChargeOf(graduated, 5 * kM), 500);
  EXPECT_EQ(*ChargeOf(graduated, 15 * kM), 1000 + 250);
  EXPECT_EQ(*ChargeOf(graduated, 25 * kM), 1000 + 500 + 50);
  EXPECT_EQ(*ChargeOf(volume, 5 * kM), 500);
  EXPECT_EQ(*ChargeOf(volume, 10 * kM), 1000);
  EXPECT_EQ(*ChargeOf(volume, 15 * kM), 750);
  EXPECT_EQ(*ChargeOf(volume, 25 * kM), 250);
  EXPECT_EQ(*ChargeOf(graduated, 0), 0);
  // Beyond the bound: refused, not wrapped.
  PriceEntry dear = Entry(R"({"meter": "tokens.output", "price_minor": "1000000000"})");
  EXPECT_FALSE(ChargeOf(dear, INT64_MAX).has_value());
}

// Graduated pricing by brute force: each unit at its tier's price.
TEST(Invoice, GraduatedEqualsUnitByUnit) {
  PriceEntry e = Entry(R"({"meter": "gpu.share", "tier_mode": "graduated",
      "tiers": [{"up_to": 2, "price_minor": "7"}, {"up_to": 3, "price_minor": "3"},
                {"price_minor": "1"}]})");
  const int64_t unit = 3'600'000;  // a milli-GPU-hour
  for (int64_t units = 0; units <= 6; ++units) {
    int64_t expect = 0;
    for (int64_t i = 1; i <= units; ++i) expect += i <= 2 ? 7 : i <= 3 ? 3 : 1;
    EXPECT_EQ(*ChargeOf(e, units * unit), expect) << units;
  }
}

PriceBookVersion Book(const char* entries) {
  PriceBookVersion v;
  v.book_id = "pb_a";
  v.version = 1;
  v.effective_from = 0;
  v.entries = *ParsePriceEntries(Json::parse(entries), "entries");
  return v;
}

constexpr char kRefGpu[] = "book:pb_a@1#gpu.whole|*||";
constexpr char kRefOut[] = "book:pb_a@1#tokens.output|*||";

TEST(Invoice, LinesBreakdownsDiscountCommitmentMinimum) {
  Pricing pricing({Book(R"([{"meter": "gpu.whole", "price_minor": "300"},
      {"meter": "tokens.output", "price_minor": "100"}])")},
                  {});
  const int64_t gpu_hour = 3'600'000'000;
  std::vector<RatedGroup> groups = {
      {kRefGpu, "gpu.whole", "H100", kNov.start_ms, "research", "", gpu_hour, 3},
      {kRefGpu, "gpu.whole", "H100", kNov.start_ms, "prod", "", 2 * gpu_hour, 2},
      {kRefOut, "tokens.output", "llama", kNov.start_ms, "", "key_a", 1'000'000, 10},
      {kRefOut, "tokens.output", "llama", kNov.start_ms, "", "key_b", 2'000'000, 20},
      {"", "tokens.output", "mystery", kNov.start_ms, "", "key_a", 5, 1},
  };
  InvoiceTerms terms{"USD", 2, 1000, 2000, 0};
  auto inv = ComputeInvoice("tn_acme", kNov, terms, groups, pricing, {});
  ASSERT_TRUE(inv.has_value()) << inv.error().message;
  ASSERT_EQ(inv->lines.size(), 5u);  // 3 usage, discount, commitment
  const InvoiceLine& gpu = inv->lines[0];
  EXPECT_EQ(gpu.meter, "gpu.whole");
  EXPECT_EQ(gpu.amount_minor, 900);
  EXPECT_EQ(gpu.quantity_text, "3");
  EXPECT_EQ(gpu.records, 5);
  ASSERT_EQ(gpu.by_project.size(), 2u);
  EXPECT_EQ(gpu.by_project[0].name, "prod");
  EXPECT_EQ(gpu.by_project[0].amount_minor, 600);
  EXPECT_EQ(gpu.by_project[1].amount_minor, 300);
  EXPECT_FALSE(inv->lines[2].priced);
  EXPECT_EQ(inv->lines[2].amount_minor, 0);
  const InvoiceLine& out = inv->lines[1];
  EXPECT_EQ(out.amount_minor, 300);
  ASSERT_EQ(out.by_key.size(), 2u);
  EXPECT_EQ(out.by_key[0].amount_minor + out.by_key[1].amount_minor, 300);
  EXPECT_EQ(inv->usage_minor, 1200);
  EXPECT_EQ(inv->discount_minor, -120);
  EXPECT_EQ(inv->commitment_minor, 2000 - 1080);
  EXPECT_EQ(inv->total_minor, 2000);
  EXPECT_EQ(inv->records, 36);

  // A minimum above the commitment tops up the rest.
  terms.minimum_charge_minor = 2500;
  inv = ComputeInvoice("tn_acme", kNov, terms, groups, pricing, {});
  EXPECT_EQ(inv->minimum_minor, 500);
  EXPECT_EQ(inv->total_minor, 2500);
}

TEST(Invoice, SharesAlwaysSumToTheLine) {
  Pricing pricing({Book(R"([{"meter": "tokens.output", "price_minor": "7"}])")}, {});
  std::vector<RatedGroup> groups;
  for (int i = 0; i < 7; ++i) {
    groups.push_back({kRefOut, "tokens.output", "m", kNov.start_ms, "", "key_" + std::to_string(i),
                      1'000'000 + i * 333'333, 1});
  }
  auto inv = ComputeInvoice("t", kNov, {"USD", 2}, groups, pricing, {});
  ASSERT_TRUE(inv.has_value());
  const auto& line = inv->lines[0];
  int64_t sum = 0;
  for (const auto& s : line.by_key) sum += s.amount_minor;
  EXPECT_EQ(sum, line.amount_minor);
}

TEST(Invoice, LateUsageIsAnAdjustmentAtTheMargin) {
  Pricing pricing({Book(R"([{"meter": "tokens.output", "tier_mode": "graduated",
      "tiers": [{"up_to": 1, "price_minor": "100"}, {"price_minor": "10"}]}])")},
                  {});
  const std::string ref = "book:pb_a@1#tokens.output|*||";
  const Period oct = PeriodContaining(kNov.start_ms - 1, 1);
  std::vector<RatedGroup> groups = {
      {ref, "tokens.output", "m", kNov.start_ms, "", "k", 500'000, 1},
      {ref, "tokens.output", "m", oct.start_ms, "", "k", 1'000'000, 1},
  };
  // October was invoiced with 800,000 tokens: of the late million, 200,000
  // are in the first tier and 800,000 in the second.
  PriorQuantities prior = {{{oct.start_ms, ref}, 800'000}};
  auto inv = ComputeInvoice("t", kNov, {"USD", 2}, groups, pricing, prior);
  ASSERT_TRUE(inv.has_value()) << inv.error().message;
  ASSERT_EQ(inv->lines.size(), 2u);
  EXPECT_EQ(inv->lines[0].kind, "usage");
  EXPECT_EQ(inv->lines[0].amount_minor, 50);
  EXPECT_EQ(inv->lines[1].kind, "adjustment");
  EXPECT_EQ(inv->lines[1].amount_minor, 20 + 8);
  EXPECT_NE(inv->lines[1].description.find("2026-10"), std::string::npos);
  EXPECT_EQ(inv->adjustments_minor, 28);
  EXPECT_EQ(inv->total_minor, 78);
}

TEST(Invoice, AnUnknownPriceIsAnInternalError) {
  Pricing pricing({}, {});
  std::vector<RatedGroup> groups = {
      {"book:pb_x@1#tokens.output|*||", "tokens.output", "m", kNov.start_ms, "", "k", 5, 1}};
  auto inv = ComputeInvoice("t", kNov, {"USD", 2}, groups, pricing, {});
  ASSERT_FALSE(inv.has_value());
  EXPECT_EQ(inv.error().code, ErrorCode::kInternal);
}

TEST(Invoice, JsonAndCsv) {
  Pricing pricing({Book(R"([{"meter": "tokens.output", "price_minor": "100"}])")}, {});
  std::vector<RatedGroup> groups = {
      {kRefOut, "tokens.output", "=cmd|' /C calc'!A0", kNov.start_ms, "", "key_a", 2'000'000, 2}};
  auto inv = ComputeInvoice("tn_acme", kNov, {"EUR", 2}, groups, pricing, {});
  ASSERT_TRUE(inv.has_value());
  Json doc = InvoiceToJson(*inv);
  EXPECT_EQ(doc["total"], "2.00");
  EXPECT_EQ(doc["period"], "2026-11");
  EXPECT_EQ(doc["lines"][0]["by_key"][0]["amount"], "2.00");
  doc["number"] = "INV-000001";
  std::string csv = InvoiceCsv(doc);
  EXPECT_NE(csv.find("INV-000001,2026-11,EUR,line,usage,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",key,usage,"), std::string::npos);
  EXPECT_NE(csv.find(",total,"), std::string::npos);
  // A name a spreadsheet would run is quoted as text.
  EXPECT_EQ(csv.find(",=cmd"), std::string::npos) << csv;
}

}  // namespace
}  // namespace atrium::billing
