#include "billing/price_book.h"

#include <gtest/gtest.h>

namespace atrium::billing {
namespace {

Json J(const char* text) { return Json::parse(text); }

std::string ErrorOf(const char* text) {
  auto r = ParsePriceEntries(J(text), "entries");
  return r.has_value() ? "" : r.error().message;
}

TEST(PriceBook, ReadsFlatAndTieredEntries) {
  auto entries = ParsePriceEntries(J(R"([
    {"meter": "gpu.whole", "model": "H100-80GB", "price_minor": "249"},
    {"meter": "gpu.mig", "model": "A100-80GB", "mig_profile": "3g.40gb", "price_minor": "120"},
    {"meter": "gpu.node", "model": "H100-80GB", "gpus_per_node": 8, "price_minor": "1800"},
    {"meter": "tokens.output", "tier_mode": "graduated",
     "tiers": [{"up_to": 10, "price_minor": "60"}, {"price_minor": "40"}]}
  ])"),
                                   "entries");
  ASSERT_TRUE(entries.has_value()) << entries.error().message;
  ASSERT_EQ(entries->size(), 4u);
  EXPECT_EQ((*entries)[0].tiers[0].price_micro, 249'000'000);
  EXPECT_EQ((*entries)[1].mig_profile, "3g.40gb");
  EXPECT_EQ(DivisorOf((*entries)[2]), 8 * 3'600'000'000LL);
  EXPECT_EQ((*entries)[3].model, "*");
  EXPECT_EQ((*entries)[3].tier_mode, "graduated");
  // Written back and read again: the same entries.
  Json back = PriceEntriesToJson(*entries);
  for (auto& e : back) e.erase("unit");
  auto again = ParsePriceEntries(back, "entries");
  ASSERT_TRUE(again.has_value()) << again.error().message;
  EXPECT_EQ(*again, *entries);
}

TEST(PriceBook, RefusesWhatItCannotPrice) {
  EXPECT_NE(ErrorOf(R"({})").find("array"), std::string::npos);
  EXPECT_NE(ErrorOf(R"([{"meter": "gpu.hours", "price_minor": "1"}])").find("not a meter"),
            std::string::npos);
  EXPECT_NE(
      ErrorOf(R"([{"meter": "gpu.whole", "price_minor": "1", "colour": "red"}])").find("colour"),
      std::string::npos);
  EXPECT_NE(ErrorOf(R"([{"meter": "gpu.whole"}])").find("either"), std::string::npos);
  EXPECT_NE(ErrorOf(R"([{"meter": "gpu.whole", "price_minor": "1", "tier_mode": "volume",
                         "tiers": [{"price_minor": "1"}]}])")
                .find("either"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"([{"meter": "gpu.whole", "price_minor": "-1"}])").find("price_minor"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"([{"meter": "gpu.whole", "price_minor": 1}])").find("price_minor"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"([{"meter": "gpu.node", "price_minor": "1"}])").find("gpus_per_node"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"([{"meter": "gpu.whole", "gpus_per_node": 8, "price_minor": "1"}])")
                .find("gpu.node only"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"([{"meter": "tokens.input", "mig_profile": "1g", "price_minor": "1"}])")
                .find("gpu.mig only"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"([{"meter": "tokens.input", "tier_mode": "stepped",
                         "tiers": [{"price_minor": "1"}]}])")
                .find("tier_mode"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"([{"meter": "tokens.input", "tier_mode": "volume",
                         "tiers": [{"up_to": 5, "price_minor": "2"}, {"up_to": 5, "price_minor": "1"}, {"price_minor": "1"}]}])")
                .find("above the tier before"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"([{"meter": "tokens.input", "tier_mode": "volume",
                         "tiers": [{"up_to": 5, "price_minor": "2"}]}])")
                .find("last tier"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"([{"meter": "tokens.input", "tier_mode": "volume",
                         "tiers": [{"price_minor": "2"}, {"price_minor": "1"}]}])")
                .find("up_to is required"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"([{"meter": "tokens.input", "model": "a", "price_minor": "1"},
                        {"meter": "tokens.input", "model": "a", "price_minor": "2"}])")
                .find("same usage"),
            std::string::npos);
  EXPECT_NE(
      ErrorOf(R"([{"meter": "tokens.input", "model": "a#b", "price_minor": "1"}])").find("'#'"),
      std::string::npos);
}

PriceBookVersion Version(std::string book, int64_t v, int64_t from, const char* entries) {
  PriceBookVersion out;
  out.book_id = std::move(book);
  out.version = v;
  out.effective_from = from;
  out.entries = *ParsePriceEntries(J(entries), "entries");
  return out;
}

TEST(PriceBook, TheMostSpecificEntryInForcePrices) {
  std::vector<PriceBookVersion> versions = {
      Version("pb_a", 1, 1000, R"([
        {"meter": "tokens.input", "price_minor": "10"},
        {"meter": "tokens.input", "model": "big", "price_minor": "30"},
        {"meter": "tokens.input", "model": "big", "deployment": "dp_1", "price_minor": "50"},
        {"meter": "gpu.mig", "model": "A100-80GB", "price_minor": "100"},
        {"meter": "gpu.mig", "model": "A100-80GB", "mig_profile": "1g.10gb", "price_minor": "20"}
      ])"),
      Version("pb_a", 2, 5000, R"([{"meter": "tokens.input", "price_minor": "11"}])"),
  };
  BillingPlan plan;
  plan.tenant_id = "tn_acme";
  plan.version = 1;
  plan.effective_from = 0;
  plan.price_book_id = "pb_a";
  plan.entries = *ParsePriceEntries(
      J(R"([{"meter": "tokens.input", "model": "small", "price_minor": "5"}])"), "entries");
  BillingPlan fallback;
  fallback.tenant_id = kDefaultPlanTenant;
  fallback.version = 1;
  fallback.price_book_id = "pb_a";
  Pricing pricing(versions, {plan, fallback});

  EXPECT_EQ(pricing.Find("tn_acme", "tokens.input", "small", "*", "", 2000).price_ref,
            "plan:tn_acme@1#tokens.input|small||");
  EXPECT_EQ(pricing.Find("tn_acme", "tokens.input", "big", "*", "dp_1", 2000).price_ref,
            "book:pb_a@1#tokens.input|big||dp_1");
  EXPECT_EQ(pricing.Find("tn_acme", "tokens.input", "big", "*", "dp_2", 2000).price_ref,
            "book:pb_a@1#tokens.input|big||");
  EXPECT_EQ(pricing.Find("tn_acme", "tokens.input", "other", "*", "", 2000).price_ref,
            "book:pb_a@1#tokens.input|*||");
  // Version 2 from 5000: "big" has no entry of its own there.
  EXPECT_EQ(pricing.Find("tn_acme", "tokens.input", "big", "*", "dp_1", 5000).price_ref,
            "book:pb_a@2#tokens.input|*||");
  // Before any version: unpriced.
  EXPECT_EQ(pricing.Find("tn_other", "tokens.input", "x", "*", "", 999).entry, nullptr);
  // A tenant without a plan: the default book.
  EXPECT_EQ(pricing.Find("tn_other", "tokens.input", "x", "*", "", 1000).price_ref,
            "book:pb_a@1#tokens.input|*||");
  EXPECT_EQ(pricing.Find("tn_x", "gpu.mig", "A100-80GB", "1g.10gb", "", 1000).price_ref,
            "book:pb_a@1#gpu.mig|A100-80GB|1g.10gb|");
  EXPECT_EQ(pricing.Find("tn_x", "gpu.mig", "A100-80GB", "3g.40gb", "", 1000).price_ref,
            "book:pb_a@1#gpu.mig|A100-80GB|*|");
  EXPECT_EQ(pricing.Find("tn_x", "gpu.whole", "A100-80GB", "*", "", 1000).entry, nullptr);
  // A price_ref resolves to its entry, in any version.
  const PriceEntry* e = pricing.EntryOf("book:pb_a@1#tokens.input|big||dp_1");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->tiers[0].price_micro, 50'000'000);
  EXPECT_EQ(pricing.EntryOf("book:pb_a@3#tokens.input|*||"), nullptr);
  EXPECT_EQ(pricing.EntryOf("garbage"), nullptr);
}

TEST(PriceBook, NoDefaultPlanMeansUnpriced) {
  Pricing pricing({Version("pb_a", 1, 0, R"([{"meter": "tokens.input", "price_minor": "1"}])")},
                  {});
  EXPECT_EQ(pricing.Find("tn_x", "tokens.input", "m", "*", "", 10).entry, nullptr);
}

}  // namespace
}  // namespace atrium::billing
