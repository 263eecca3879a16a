#include "capacity/software_version.h"

namespace atrium::capacity {

Result<SoftwareVersion> SoftwareVersion::Parse(std::string_view text, std::string_view what) {
  auto bad = [&](std::string_view why) {
    std::string shown(text.substr(0, kMaxVersionLength));
    if (text.size() > kMaxVersionLength) shown += "...";
    return Error::InvalidArgument(std::string(what) + " \"" + shown + "\": " + std::string(why) +
                                  " (expected numbers separated by dots, e.g. 550.54.15)");
  };
  if (text.empty()) return bad("empty");
  if (text.size() > kMaxVersionLength) return bad("too long");
  SoftwareVersion v;
  int component = 0;
  int digits = 0;
  uint32_t value = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == '.') {
      if (digits == 0) return bad("empty component");
      if (component == kMaxVersionComponents) return bad("more than 4 components");
      v.parts_[size_t(component++)] = value;
      digits = 0;
      value = 0;
      continue;
    }
    const char c = text[i];
    if (c < '0' || c > '9') return bad("not a number");
    if (++digits > 6) return bad("a component has more than 6 digits");
    value = value * 10 + uint32_t(c - '0');
  }
  v.text_ = std::string(text);
  return v;
}

std::strong_ordering SoftwareVersion::operator<=>(const SoftwareVersion& other) const {
  return parts_ <=> other.parts_;
}

bool SatisfiesMinimum(std::string_view have, std::string_view minimum) {
  if (minimum.empty()) return true;
  auto need = SoftwareVersion::Parse(minimum);
  auto got = SoftwareVersion::Parse(have);
  if (!need || !got) return false;
  return *got >= *need;
}

}  // namespace atrium::capacity
