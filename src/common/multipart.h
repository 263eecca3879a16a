// multipart/form-data (RFC 7578) as OpenAI's audio endpoints take it: the
// boundary from a Content-Type, and a body cut into its named parts. Strict
// and bounded, for bodies a hostile client wrote: at most kMaxParts parts,
// part headers of at most kMaxPartHeaderBytes, a boundary of 1..70
// characters (RFC 2046); anything else is refused, never guessed. Pure.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace atrium {

inline constexpr size_t kMaxParts = 64;
inline constexpr size_t kMaxPartHeaderBytes = size_t{8} * 1024;

struct FormPart {
  std::string name;          // Content-Disposition's name
  std::string filename;      // its filename, "" when none
  std::string content_type;  // the part's Content-Type, "" when none
  std::string_view data;     // into the body
};

// The boundary of a "multipart/form-data; boundary=..." Content-Type (quoted
// or not). kInvalidArgument for another type or a missing or bad boundary.
Result<std::string> FormBoundary(std::string_view content_type);

// The parts of `body`, in order. kInvalidArgument naming what is wrong.
Result<std::vector<FormPart>> ParseForm(std::string_view body, std::string_view boundary);

}  // namespace atrium
