// Turns raw bytes into a Request with the same limits and the same
// conversion the server uses. The server reads with Beast; this entry point
// exists so the fuzzer can drive exactly that code without a socket.
#pragma once

#include <string_view>

#include "common/result.h"
#include "http/message.h"
#include "http/server.h"

namespace atrium::http {

// Parses one complete request from `raw`. Errors: kInvalidArgument for bad
// syntax or bad percent-encoding, kPayloadTooLarge for a body over the limit,
// kInvalidArgument also for headers over the limit (the server answers 431).
Result<Request> ParseRequest(std::string_view raw, const ServerOptions& limits);

}  // namespace atrium::http
