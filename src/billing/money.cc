#include "billing/money.h"

#include <array>
#include <utility>

namespace atrium::billing {
namespace {

// Active ISO 4217 currencies and their exponents (ISO 4217 list one, as
// published by SIX; the test names its source rows). A currency outside
// this table is refused rather than guessed.
constexpr std::array<std::pair<std::string_view, int>, 46> kCurrencies = {{
    {"AED", 2}, {"ARS", 2}, {"AUD", 2}, {"BHD", 3}, {"BRL", 2}, {"CAD", 2}, {"CHF", 2}, {"CLP", 0},
    {"CNY", 2}, {"COP", 2}, {"CZK", 2}, {"DKK", 2}, {"EGP", 2}, {"EUR", 2}, {"GBP", 2}, {"HKD", 2},
    {"HUF", 2}, {"IDR", 2}, {"ILS", 2}, {"INR", 2}, {"ISK", 0}, {"JOD", 3}, {"JPY", 0}, {"KRW", 0},
    {"KWD", 3}, {"MXN", 2}, {"MYR", 2}, {"NGN", 2}, {"NOK", 2}, {"NZD", 2}, {"OMR", 3}, {"PHP", 2},
    {"PLN", 2}, {"QAR", 2}, {"RON", 2}, {"SAR", 2}, {"SEK", 2}, {"SGD", 2}, {"THB", 2}, {"TND", 3},
    {"TRY", 2}, {"TWD", 2}, {"UAH", 2}, {"USD", 2}, {"VND", 0}, {"ZAR", 2},
}};

}  // namespace

Result<int> CurrencyExponent(std::string_view code) {
  for (const auto& [c, exponent] : kCurrencies) {
    if (c == code) return exponent;
  }
  return Error::InvalidArgument("currency '" + std::string(code.substr(0, 16)) +
                                "' is not an ISO 4217 code this platform bills in (e.g. USD, "
                                "EUR, GBP, JPY)");
}

Result<int64_t> ParseUnitPrice(std::string_view text, std::string_view field) {
  auto bad = [&](const std::string& why) {
    return Error::InvalidArgument(std::string(field) + " must be a decimal number of minor units " +
                                  "with at most six decimals, e.g. \"249\" or \"0.0125\": " + why);
  };
  if (text.empty()) return bad("it is empty");
  if (text.size() > 32) return bad("it is too long");
  const size_t dot = text.find('.');
  const std::string_view whole = text.substr(0, dot);
  const std::string_view fraction =
      dot == std::string_view::npos ? std::string_view() : text.substr(dot + 1);
  if (whole.empty()) return bad("it has no digits before the point");
  if (dot != std::string_view::npos && fraction.empty()) return bad("it ends with a point");
  if (fraction.size() > 6) return bad("it has more than six decimals");
  __int128 micro = 0;
  for (char ch : whole) {
    if (ch < '0' || ch > '9') return bad("'" + std::string(1, ch) + "' is not a digit");
    micro = micro * 10 + (ch - '0');
    if (micro > kMaxUnitPriceMicro) return bad("it is above 10^9 minor units");
  }
  micro *= kMicroPerMinor;
  __int128 scale = kMicroPerMinor;
  for (char ch : fraction) {
    if (ch < '0' || ch > '9') return bad("'" + std::string(1, ch) + "' is not a digit");
    scale /= 10;
    micro += (ch - '0') * scale;
  }
  if (micro > kMaxUnitPriceMicro) return bad("it is above 10^9 minor units");
  return static_cast<int64_t>(micro);
}

std::string FormatUnitPrice(int64_t micro_minor) {
  std::string out = std::to_string(micro_minor / kMicroPerMinor);
  int64_t fraction = micro_minor % kMicroPerMinor;
  if (fraction == 0) return out;
  std::string digits = std::to_string(fraction);
  digits.insert(0, 6 - digits.size(), '0');
  while (!digits.empty() && digits.back() == '0') digits.pop_back();
  return out + "." + digits;
}

std::string FormatAmount(int64_t minor, int exponent) {
  const bool negative = minor < 0;
  // Magnitude as unsigned: -INT64_MIN does not fit an int64.
  uint64_t magnitude = negative ? 0 - static_cast<uint64_t>(minor) : static_cast<uint64_t>(minor);
  std::string digits = std::to_string(magnitude);
  if (exponent > 0) {
    if (digits.size() <= static_cast<size_t>(exponent)) {
      digits.insert(0, static_cast<size_t>(exponent) + 1 - digits.size(), '0');
    }
    digits.insert(digits.size() - static_cast<size_t>(exponent), ".");
  }
  return negative ? "-" + digits : digits;
}

__int128 RoundedQuotient(__int128 numerator, __int128 denominator) {
  const bool negative = numerator < 0;
  const __int128 magnitude = negative ? -numerator : numerator;
  __int128 q = magnitude / denominator;
  const __int128 r = magnitude % denominator;
  if (r * 2 >= denominator) ++q;
  return negative ? -q : q;
}

Result<int64_t> AmountWithinBounds(__int128 value, std::string_view what) {
  if (value > kMaxAmountMinor || value < -kMaxAmountMinor) {
    return Error::InvalidArgument(std::string(what) +
                                  " is beyond 10^15 minor units, the most one amount may be");
  }
  return static_cast<int64_t>(value);
}

}  // namespace atrium::billing
