#include "gateway/request_options.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>

namespace atrium::gateway {
namespace {

const DeadlineBounds kBounds{60'000, 600'000};

TEST(RequestOptionsTest, HeadersSetPriorityAndDeadlineWithinBounds) {
  struct Case {
    std::string priority, deadline;
    Priority key_priority;
    Priority want_priority;
    int64_t want_deadline;
  };
  const Case cases[] = {
      {"", "", Priority::kInteractive, Priority::kInteractive, 60'000},  // defaults
      {"", "", Priority::kBatch, Priority::kBatch, 60'000},              // the key's class
      {"interactive", "", Priority::kInteractive, Priority::kInteractive, 60'000},
      {"batch", "1", Priority::kInteractive, Priority::kBatch, 1},
      {"", "600000", Priority::kInteractive, Priority::kInteractive, 600'000},
      {"", "000250", Priority::kInteractive, Priority::kInteractive, 250},
  };
  for (const Case& c : cases) {
    auto got = ReadRequestOptions(c.priority, c.deadline, c.key_priority, kBounds);
    const auto* options = std::get_if<RequestOptions>(&got);
    ASSERT_NE(options, nullptr) << c.priority << " " << c.deadline;
    EXPECT_EQ(options->priority, c.want_priority) << c.priority;
    EXPECT_EQ(options->deadline_ms, c.want_deadline) << c.deadline;
  }
}

TEST(RequestOptionsTest, ARequestMayNotRaiseItsKeysClass) {
  auto got = ReadRequestOptions("interactive", "", Priority::kBatch, kBounds);
  const auto* refusal = std::get_if<Refusal>(&got);
  ASSERT_NE(refusal, nullptr);
  EXPECT_EQ(refusal->status, 403);
  EXPECT_EQ(refusal->code, "priority_not_allowed");
  EXPECT_EQ(refusal->message,
            "X-Atrium-Priority interactive is above this API key's class (batch)");
}

TEST(RequestOptionsTest, BadHeadersAre400sNamingTheHeader) {
  struct Case {
    std::string priority, deadline, code;
  };
  const Case cases[] = {
      {"urgent", "", "invalid_priority"},
      {"Batch", "", "invalid_priority"},  // values are case-sensitive
      {"", "0", "invalid_deadline"},
      {"", "600001", "invalid_deadline"},
      {"", "-5", "invalid_deadline"},
      {"", "1.5", "invalid_deadline"},
      {"", "12abc", "invalid_deadline"},
      {"", " 100", "invalid_deadline"},
      {"", "99999999999999999999999", "invalid_deadline"},  // would overflow
  };
  for (const Case& c : cases) {
    auto got = ReadRequestOptions(c.priority, c.deadline, Priority::kInteractive, kBounds);
    const auto* refusal = std::get_if<Refusal>(&got);
    ASSERT_NE(refusal, nullptr) << c.priority << " " << c.deadline;
    EXPECT_EQ(refusal->status, 400);
    EXPECT_EQ(refusal->code, c.code);
    EXPECT_NE(refusal->message.find(c.code == "invalid_priority" ? "X-Atrium-Priority"
                                                                 : "X-Atrium-Deadline-Ms"),
              std::string::npos);
  }
}

TEST(RequestOptionsTest, ReservesInputAndMaxTokensOrADefaultAnswer) {
  ParsedRequest r;
  r.estimated_input_tokens = 30;
  r.max_tokens = 100;
  EXPECT_EQ(ReservedTokens(Api::kChatCompletions, r, 1024), 130);
  r.max_tokens = 0;  // unknown answer length
  EXPECT_EQ(ReservedTokens(Api::kChatCompletions, r, 1024), 30 + 1024);
  EXPECT_EQ(ReservedTokens(Api::kCompletions, r, 1024), 30 + 1024);
  EXPECT_EQ(ReservedTokens(Api::kEmbeddings, r, 1024), 30);  // no output
  r.max_tokens = 100;
  r.choices = 3;  // n: three answers generated
  EXPECT_EQ(ReservedTokens(Api::kChatCompletions, r, 1024), 30 + 300);
  r.max_tokens = std::numeric_limits<int64_t>::max() / 2;  // saturates, never wraps
  EXPECT_EQ(ReservedTokens(Api::kChatCompletions, r, 1024), std::numeric_limits<int64_t>::max());
}

}  // namespace
}  // namespace atrium::gateway
