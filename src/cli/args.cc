#include "cli/args.h"

#include <limits>
#include <optional>
#include <string>

namespace atrium::cli {

Result<int64_t> ParseDuration(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return Error::InvalidArgument("bad duration '" + std::string(text) + "': " + std::string(why) +
                                  " (use e.g. 30d, 12h, 90m, 3600s)");
  };
  if (text.empty()) return bad("empty");
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t total = 0;
  size_t i = 0;
  while (i < text.size()) {
    size_t start = i;
    int64_t number = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
      int digit = text[i] - '0';
      if (number > (kMax - digit) / 10) return bad("too large");
      number = number * 10 + digit;
      ++i;
    }
    if (i == start) return bad("expected a number");
    int64_t unit = 1;
    if (i < text.size()) {
      switch (text[i]) {
        case 's':
          unit = 1;
          break;
        case 'm':
          unit = 60;
          break;
        case 'h':
          unit = 3600;
          break;
        case 'd':
          unit = 86400;
          break;
        case 'w':
          unit = 7 * 86400;
          break;
        default:
          return bad("unknown unit '" + std::string(1, text[i]) + "'");
      }
      ++i;
    } else if (start != 0) {
      return bad("a number without a unit must stand alone");
    }
    if (number > kMax / unit || total > kMax - number * unit) return bad("too large");
    total += number * unit;
  }
  if (total <= 0) return bad("must be positive");
  return total;
}

Result<std::pair<std::string, std::string>> ParseLabel(std::string_view text) {
  size_t eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    return Error::InvalidArgument("bad label '" + std::string(text) + "': expected key=value");
  }
  return std::make_pair(std::string(text.substr(0, eq)), std::string(text.substr(eq + 1)));
}

Result<std::map<std::string, std::string>> ParseLabels(const std::vector<std::string>& texts) {
  std::map<std::string, std::string> labels;
  for (const auto& text : texts) {
    ATRIUM_ASSIGN_OR_RETURN(auto label, ParseLabel(text));
    labels[label.first] = std::move(label.second);
  }
  return labels;
}

Result<EndpointArg> ParseEndpointArg(std::string_view text) {
  EndpointArg out;
  const std::string usage = "bad endpoint '" + std::string(text) +
                            "': expected URL, URL=CAPACITY, URL=CAPACITY:MAX_PREFILL or "
                            "URL=CAPACITY:MAX_PREFILL:BURST, e.g. "
                            "http://10.0.0.5:8000=16";
  // A number of at most six digits in [min, 100000].
  auto number = [](std::string_view digits, int64_t min) -> std::optional<int64_t> {
    if (digits.empty() || digits.size() > 6 ||
        digits.find_first_not_of("0123456789") != std::string_view::npos) {
      return std::nullopt;
    }
    const int64_t n = std::stoll(std::string(digits));
    if (n < min || n > 100'000) return std::nullopt;
    return n;
  };
  std::string_view url = text;
  size_t eq = text.rfind('=');
  if (eq != std::string_view::npos) {
    std::string_view suffix = text.substr(eq + 1);
    // Only a suffix of digits and colons is a capacity: '=' may also belong
    // to the URL's path.
    if (!suffix.empty() && suffix.find_first_not_of("0123456789:") == std::string_view::npos) {
      // CAPACITY[:MAX_PREFILL[:BURST]], each a number in its range.
      struct Field {
        const char* name;
        int64_t min;
        int64_t* value;
      };
      const Field fields[] = {{"capacity", 1, &out.capacity},
                              {"max_prefill", 0, &out.max_prefill},
                              {"burst", 0, &out.burst}};
      size_t from = 0;
      for (const Field& field : fields) {
        const size_t colon = suffix.find(':', from);
        auto n = number(suffix.substr(from, colon == std::string_view::npos ? colon : colon - from),
                        field.min);
        if (!n) {
          return Error::InvalidArgument("bad endpoint '" + std::string(text) + "': " + field.name +
                                        " must be " + std::to_string(field.min) + "..100000");
        }
        *field.value = *n;
        if (colon == std::string_view::npos) {
          from = std::string_view::npos;
          break;
        }
        from = colon + 1;
      }
      if (from != std::string_view::npos) return Error::InvalidArgument(usage);  // a 4th field
      url = text.substr(0, eq);
    }
  }
  if (url.empty()) return Error::InvalidArgument(usage);
  out.url = std::string(url);
  return out;
}

std::string UrlEncode(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '_' || c == '.' || c == '~';
    if (unreserved) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xf]);
    }
  }
  return out;
}

std::string WithQuery(std::string path,
                      const std::vector<std::pair<std::string, std::string>>& params) {
  char sep = path.find('?') == std::string::npos ? '?' : '&';
  for (const auto& [key, value] : params) {
    if (value.empty()) continue;
    path += sep;
    path += UrlEncode(key) + "=" + UrlEncode(value);
    sep = '&';
  }
  return path;
}

Result<int64_t> ParseMilliGpus(std::string_view text) {
  const std::string quoted = "'" + std::string(text) + "'";
  constexpr int64_t kMax = int64_t{1'000'000} * 1000;
  if (text.empty()) return Error::InvalidArgument("empty GPU amount");
  if (text.back() == 'm') {
    std::string_view digits = text.substr(0, text.size() - 1);
    if (digits.empty() || digits.size() > 10 ||
        digits.find_first_not_of("0123456789") != std::string_view::npos) {
      return Error::InvalidArgument("bad GPU amount " + quoted + "; use e.g. 4, 0.5 or 250m");
    }
    int64_t v = std::stoll(std::string(digits));
    if (v > kMax) return Error::InvalidArgument("GPU amount " + quoted + " is too large");
    return v;
  }
  size_t dot = text.find('.');
  std::string_view whole = text.substr(0, dot);
  std::string_view frac = dot == std::string_view::npos ? std::string_view() : text.substr(dot + 1);
  if (whole.empty() || whole.size() > 7 || frac.size() > 3 ||
      whole.find_first_not_of("0123456789") != std::string_view::npos ||
      frac.find_first_not_of("0123456789") != std::string_view::npos ||
      (dot != std::string_view::npos && frac.empty())) {
    return Error::InvalidArgument("bad GPU amount " + quoted +
                                  "; use e.g. 4, 0.5 or 250m (at most three decimals)");
  }
  int64_t v = std::stoll(std::string(whole)) * 1000;
  std::string f(frac);
  while (f.size() < 3) f += '0';
  v += std::stoll(f);
  if (v > kMax) return Error::InvalidArgument("GPU amount " + quoted + " is too large");
  return v;
}

std::string FormatMilliGpus(int64_t milli) {
  std::string out = std::to_string(milli / 1000);
  int64_t frac = milli % 1000;
  if (frac == 0) return out;
  std::string f = std::to_string(frac);
  while (f.size() < 3) f = "0" + f;
  while (!f.empty() && f.back() == '0') f.pop_back();
  return out + "." + f;
}

}  // namespace atrium::cli
