#include "billing/money.h"

#include <gtest/gtest.h>

namespace atrium::billing {
namespace {

TEST(Money, CurrencyExponentsAreIso4217) {
  EXPECT_EQ(*CurrencyExponent("USD"), 2);
  EXPECT_EQ(*CurrencyExponent("EUR"), 2);
  EXPECT_EQ(*CurrencyExponent("JPY"), 0);
  EXPECT_EQ(*CurrencyExponent("KWD"), 3);
  EXPECT_FALSE(CurrencyExponent("usd").has_value());
  EXPECT_FALSE(CurrencyExponent("XXX").has_value());
  EXPECT_FALSE(CurrencyExponent("").has_value());
}

TEST(Money, UnitPricesAreExactMicroMinorUnits) {
  EXPECT_EQ(*ParseUnitPrice("249", "p"), 249'000'000);
  EXPECT_EQ(*ParseUnitPrice("0.0125", "p"), 12'500);
  EXPECT_EQ(*ParseUnitPrice("0.000001", "p"), 1);
  EXPECT_EQ(*ParseUnitPrice("1000000000", "p"), kMaxUnitPriceMicro);
  for (const char* bad : {"", "-1", "1e3", "0.0000001", "1.", ".5", "1,5", " 1", "1 ",
                          "1000000000.000001", "99999999999999999999999999999", "0x10"}) {
    auto r = ParseUnitPrice(bad, "entries[0].price_minor");
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_NE(r.error().message.find("entries[0].price_minor"), std::string::npos);
  }
  for (int64_t v : {int64_t{0}, int64_t{1}, int64_t{12'500}, int64_t{249'000'000},
                    int64_t{1'234'567}, kMaxUnitPriceMicro}) {
    EXPECT_EQ(*ParseUnitPrice(FormatUnitPrice(v), "p"), v) << v;
  }
  EXPECT_EQ(FormatUnitPrice(12'500), "0.0125");
  EXPECT_EQ(FormatUnitPrice(249'000'000), "249");
}

TEST(Money, AmountsPrintWithTheCurrencysExponent) {
  EXPECT_EQ(FormatAmount(1234, 2), "12.34");
  EXPECT_EQ(FormatAmount(5, 2), "0.05");
  EXPECT_EQ(FormatAmount(-5, 2), "-0.05");
  EXPECT_EQ(FormatAmount(7, 0), "7");
  EXPECT_EQ(FormatAmount(1, 3), "0.001");
  EXPECT_EQ(FormatAmount(INT64_MIN, 2), "-92233720368547758.08");
}

// The one rounding rule: to the nearest, halves away from zero.
TEST(Money, RoundingIsHalfAwayFromZero) {
  EXPECT_EQ(RoundedQuotient(5, 10), 1);
  EXPECT_EQ(RoundedQuotient(4, 10), 0);
  EXPECT_EQ(RoundedQuotient(15, 10), 2);
  EXPECT_EQ(RoundedQuotient(25, 10), 3);  // not to even
  EXPECT_EQ(RoundedQuotient(-5, 10), -1);
  EXPECT_EQ(RoundedQuotient(-4, 10), 0);
  EXPECT_EQ(RoundedQuotient(0, 7), 0);
  EXPECT_EQ(RoundedQuotient(20, 10), 2);
}

TEST(Money, AmountsBeyondTheBoundAreRefused) {
  EXPECT_EQ(*AmountWithinBounds(kMaxAmountMinor, "x"), kMaxAmountMinor);
  EXPECT_FALSE(AmountWithinBounds(static_cast<__int128>(kMaxAmountMinor) + 1, "x").has_value());
  EXPECT_FALSE(AmountWithinBounds(-static_cast<__int128>(kMaxAmountMinor) - 1, "x").has_value());
}

}  // namespace
}  // namespace atrium::billing
