// Small text helpers for building JSON by hand on the simulator's hot paths
// (a DOM per response would cost more than the rest of the request).
#pragma once

#include <string>
#include <string_view>

namespace atrium::engine_sim {

// Appends s as a JSON string literal: quotes, backslashes and control
// characters escaped; other bytes copied as they are.
void AppendJsonString(std::string_view s, std::string& out);

// Appends standard base64 (RFC 4648 section 4, with padding).
void AppendBase64(std::string_view raw, std::string& out);

}  // namespace atrium::engine_sim
