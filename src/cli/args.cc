#include "cli/args.h"

#include <limits>

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

}  // namespace atrium::cli
