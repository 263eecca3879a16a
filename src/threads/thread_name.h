// Names the calling thread as `top -H`, `ps -L`, perf and gdb show it, so an
// operator can tell the gateway's event loops from the usage shipper or the
// API's workers. Linux keeps at most 15 bytes; longer names are cut.
#pragma once

#include <string>
#include <string_view>

namespace atrium {

void NameThisThread(std::string_view name);
// The calling thread's name ("" when it cannot be read).
std::string ThisThreadName();

}  // namespace atrium
