// The limit stage's inputs from the request itself: the priority class and
// queue deadline a client may set in headers, and the tokens its request
// reserves from the token buckets before it is admitted.
#pragma once

#include <cstdint>
#include <string_view>
#include <variant>

#include "gateway/fair_queue.h"
#include "gateway/openai.h"
#include "gateway/refusal.h"

namespace atrium::gateway {

struct RequestOptions {
  Priority priority = Priority::kInteractive;
  int64_t deadline_ms = 0;  // longest wait in the fair queue, from arrival
};

struct DeadlineBounds {
  int64_t default_ms = 60'000;  // without the header
  int64_t max_ms = 600'000;     // the header's largest accepted value
};

// X-Atrium-Priority: "interactive" or "batch" (absent: the key's class); a
// request may lower its key's class, not raise it (a 403).
// X-Atrium-Deadline-Ms: decimal digits only, 1..bounds.max_ms (absent: the
// default). Anything else is a 400 naming the header.
std::variant<RequestOptions, Refusal> ReadRequestOptions(std::string_view priority_header,
                                                         std::string_view deadline_header,
                                                         Priority key_priority,
                                                         const DeadlineBounds& bounds);

// Tokens a request takes from the token buckets before admission (settled
// with the real usage afterwards): its input estimate plus max_tokens, or,
// without max_tokens, `default_output` for a completion (the answer's length
// is unknown) and nothing for embeddings (they produce no output), times
// the choices generated (n, best_of).
int64_t ReservedTokens(Api api, const ParsedRequest& request, int64_t default_output);

}  // namespace atrium::gateway
