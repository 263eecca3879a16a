#pragma once

#include <string>
#include <string_view>

#include "common/clock.h"

namespace atrium {

// A new object id: `<prefix>_` + 10 base32 chars of milliseconds + 16 random
// base32 chars (ULID layout, lower case). Ids sort by creation time, which
// keyset pagination relies on. Example: tn_01jq3k8x9f7d2m4n6p8r0t2v4w.
std::string NewId(std::string_view prefix, const Clock& clock);

// True if `id` has the shape NewId makes with this prefix.
bool IsWellFormedId(std::string_view id, std::string_view prefix);

}  // namespace atrium
