#include "crypto/ids.h"

#include "crypto/crypto.h"

namespace atrium {
namespace {
constexpr char kCrockford[] = "0123456789abcdefghjkmnpqrstvwxyz";
constexpr size_t kIdChars = 26;
}  // namespace

std::string NewId(std::string_view prefix, const Clock& clock) {
  uint64_t ms = static_cast<uint64_t>(clock.NowMillis());
  std::string out(prefix);
  out.push_back('_');
  char body[kIdChars];
  for (int i = 9; i >= 0; --i) {
    body[i] = kCrockford[ms & 31];
    ms >>= 5;
  }
  std::string random = crypto::RandomBytes(16);
  for (int i = 0; i < 16; ++i)
    body[10 + i] = kCrockford[static_cast<unsigned char>(random[i]) & 31];
  out.append(body, kIdChars);
  return out;
}

bool IsWellFormedId(std::string_view id, std::string_view prefix) {
  if (id.size() != prefix.size() + 1 + kIdChars) return false;
  if (id.substr(0, prefix.size()) != prefix || id[prefix.size()] != '_') return false;
  for (char c : id.substr(prefix.size() + 1)) {
    if (std::string_view(kCrockford).find(c) == std::string_view::npos) return false;
  }
  return true;
}

}  // namespace atrium
