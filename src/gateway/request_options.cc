#include "gateway/request_options.h"

#include <algorithm>
#include <limits>
#include <string>

namespace atrium::gateway {

std::variant<RequestOptions, Refusal> ReadRequestOptions(std::string_view priority_header,
                                                         std::string_view deadline_header,
                                                         Priority key_priority,
                                                         const DeadlineBounds& bounds) {
  RequestOptions options;
  options.priority = key_priority;
  if (priority_header == "interactive") {
    if (key_priority == Priority::kBatch) {
      // The key's class is a ceiling its admin set: a batch key's requests
      // do not jump the interactive ones.
      return Refusal::PriorityNotAllowed();
    }
    options.priority = Priority::kInteractive;
  } else if (priority_header == "batch") {
    options.priority = Priority::kBatch;
  } else if (!priority_header.empty()) {
    return Refusal::InvalidPriority();
  }
  options.deadline_ms = bounds.default_ms;
  if (!deadline_header.empty()) {
    // At most 18 digits: the value fits an int64_t before the bound is checked.
    bool digits = deadline_header.size() <= 18;
    int64_t value = 0;
    for (char c : deadline_header) {
      digits = digits && c >= '0' && c <= '9';
      if (digits) value = value * 10 + (c - '0');
    }
    if (!digits || value <= 0 || value > bounds.max_ms) {
      return Refusal::InvalidDeadline(bounds.max_ms);
    }
    options.deadline_ms = value;
  }
  return options;
}

int64_t ReservedTokens(Api api, const ParsedRequest& request, int64_t default_output) {
  int64_t output = request.max_tokens;
  if (output <= 0) output = GeneratesNothing(api) ? 0 : default_output;
  // Saturating: max_tokens may be any int64 (the limiter refuses what no
  // bucket can hold).
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const int64_t choices = std::max<int64_t>(request.choices, 1);
  output = output > kMax / choices ? kMax : output * choices;
  const int64_t input = std::max<int64_t>(request.estimated_input_tokens, 0);
  return output > kMax - input ? kMax : input + output;
}

}  // namespace atrium::gateway
