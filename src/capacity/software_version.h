// Versions of a node's GPU software (NVIDIA driver "550.54.15", CUDA "12.4")
// as numbers, so requirements compare them as NVIDIA numbers them: "550.54.15"
// is newer than "535.104.05" although it sorts before it as text. Pure.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace atrium::capacity {

// Up to this many dot-separated components; each is 1..6 decimal digits.
inline constexpr int kMaxVersionComponents = 4;
inline constexpr size_t kMaxVersionLength = 32;

class SoftwareVersion {
 public:
  // "550.54.15", "12.4", "560": 1..4 components of 1..6 digits (leading
  // zeros allowed, as in NVIDIA's "535.104.05"). InvalidArgument naming the
  // text otherwise (empty, a sign, a letter, an empty component, "1..2",
  // too many components or digits). `what` names the field in the message.
  static Result<SoftwareVersion> Parse(std::string_view text, std::string_view what = "version");

  // Missing components count as 0: "12" == "12.0", "12.4" < "12.4.1".
  std::strong_ordering operator<=>(const SoftwareVersion& other) const;
  bool operator==(const SoftwareVersion& other) const { return (*this <=> other) == 0; }

  // The text it was parsed from, as given ("535.104.05" keeps its zero).
  const std::string& text() const { return text_; }

 private:
  std::array<uint32_t, kMaxVersionComponents> parts_{};
  std::string text_;
};

// Whether `have` (a node's version, "" = unknown) is at least `minimum`
// (a requirement, "" = none). An unknown or unparsable `have` never
// satisfies a minimum: placement fails closed on what it cannot check.
bool SatisfiesMinimum(std::string_view have, std::string_view minimum);

}  // namespace atrium::capacity
