// Pure parsing of the CLI's argument vocabulary: durations, labels and query
// strings. No I/O, so tests/cli covers them directly.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"

namespace atrium::cli {

// "30d", "12h", "90m", "3600s", "1w", or a sum like "1h30m"; bare digits are
// seconds. Returns whole seconds (> 0). Errors: kInvalidArgument naming the
// text for an unknown unit, a missing number, zero or overflow.
Result<int64_t> ParseDuration(std::string_view text);

// "key=value" (value may be empty). Errors: kInvalidArgument when there is
// no '=' or the key is empty.
Result<std::pair<std::string, std::string>> ParseLabel(std::string_view text);
// Several labels; a later duplicate key replaces an earlier one.
Result<std::map<std::string, std::string>> ParseLabels(const std::vector<std::string>& texts);

// A GPU amount as milli-GPU: "4" (GPUs), "0.5", "1.125" (at most three
// decimals), or "250m" (milli). Errors: kInvalidArgument naming the text
// for anything else, a negative amount or one above a million GPUs.
Result<int64_t> ParseMilliGpus(std::string_view text);
// milli-GPU back as GPUs: 4000 → "4", 500 → "0.5", 1125 → "1.125".
std::string FormatMilliGpus(int64_t milli);

// "--endpoint URL[=CAPACITY[:MAX_PREFILL[:BURST]]]": the URL, and after the
// last '=' the capacity and optionally, after a ':', the max_prefill and
// after another the burst, when what follows the '=' is digits and ':'
// only (URLs carry no query, so such a '=' is taken for the capacity's).
// 0 = not given (the server's default). Errors: kInvalidArgument for an
// empty URL, a capacity outside 1..100000, a max_prefill or burst outside
// 0..100000, or a third ':'.
struct EndpointArg {
  std::string url;
  int64_t capacity = 0;
  int64_t max_prefill = 0;
  int64_t burst = 0;
};
Result<EndpointArg> ParseEndpointArg(std::string_view text);

// Percent-encodes everything but RFC 3986's unreserved characters.
std::string UrlEncode(std::string_view text);
// path + "?k=v&..." over the pairs whose value is not empty, values encoded.
std::string WithQuery(std::string path,
                      const std::vector<std::pair<std::string, std::string>>& params);

}  // namespace atrium::cli
