// Money as the platform counts it: integers, never floating point.
//
// An amount is an integer number of the currency's minor units (cents for
// USD, yen for JPY, fils for KWD), with the ISO 4217 exponent of its
// currency. A unit price may be finer than a minor unit (a token costs a
// few millionths of a cent), so it is an integer number of micro-minor
// units: a millionth of a minor unit. Prices are written as decimal strings
// of minor units with at most six decimals ("249" cents per GPU-hour,
// "0.0125" cents per milli-GPU-hour) and kept exactly.
//
// The one rounding rule: an amount is computed exactly (a 128-bit product)
// and rounded once, to the nearest minor unit, halves away from zero
// (RoundedQuotient). Invoice lines round once each, on their whole
// quantity; nothing is rounded per record.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace atrium::billing {

// A millionth of a minor unit: what unit prices are counted in.
inline constexpr int64_t kMicroPerMinor = 1'000'000;
// The largest unit price (micro-minor units): 10^15, a billion minor units
// per unit. With quantities below 2^63 the exact product stays below 2^113.
inline constexpr int64_t kMaxUnitPriceMicro = 1'000'000'000'000'000;
// The largest amount an invoice line, a budget or a charge may hold, in
// minor units (10^15: ten trillion dollars); a sum of 8,000 of them still
// fits an int64.
inline constexpr int64_t kMaxAmountMinor = 1'000'000'000'000'000;

// The ISO 4217 exponent (digits after the decimal point) of a currency the
// platform bills in; InvalidArgument naming the code for one it does not
// know (a code must be three capital letters of an active currency).
Result<int> CurrencyExponent(std::string_view code);

// "249", "0.0125" (minor units, at most six decimals, no sign, no
// exponent) → micro-minor units. InvalidArgument naming `field` otherwise,
// or above kMaxUnitPriceMicro.
Result<int64_t> ParseUnitPrice(std::string_view text, std::string_view field);
// The inverse: the shortest decimal string of minor units ("249", "0.0125").
std::string FormatUnitPrice(int64_t micro_minor);

// An amount in minor units as a decimal of major units with the currency's
// exponent: (1234, 2) → "12.34", (-5, 2) → "-0.05", (7, 0) → "7".
std::string FormatAmount(int64_t minor, int exponent);

// round(numerator / denominator), halves away from zero; denominator > 0.
// The one rounding rule of rating (see above).
__int128 RoundedQuotient(__int128 numerator, __int128 denominator);

// `value` as an int64 amount of minor units; InvalidArgument naming `what`
// when it is beyond ±kMaxAmountMinor.
Result<int64_t> AmountWithinBounds(__int128 value, std::string_view what);

}  // namespace atrium::billing
