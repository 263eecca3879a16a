#include "identity/login_throttle.h"

#include <gtest/gtest.h>

#include <string>

#include "common/clock.h"

namespace atrium {
namespace {

constexpr int64_t kWindowMs = 15 * 60 * 1000;

#define EXPECT_ALLOWED(throttle, account, source)                                               \
  do {                                                                                          \
    auto _s = (throttle).Check(account, source);                                                \
    EXPECT_TRUE(_s.has_value()) << account << " from " << source << ": " << _s.error().message; \
  } while (0)

// Expects the check to refuse with a Retry-After of `retry_s` seconds.
#define EXPECT_THROTTLED(throttle, account, source, retry_s)       \
  do {                                                             \
    auto _s = (throttle).Check(account, source);                   \
    ASSERT_FALSE(_s.has_value()) << account << " from " << source; \
    EXPECT_EQ(_s.error().code, ErrorCode::kResourceExhausted);     \
    EXPECT_EQ(_s.error().retry_after_s, retry_s);                  \
  } while (0)

class LoginThrottleTest : public ::testing::Test {
 protected:
  void Fail(const std::string& account, const std::string& source, int times = 1) {
    for (int i = 0; i < times; ++i) throttle_.RecordFailure(account, source);
  }

  ManualClock clock_;
  LoginThrottle throttle_{clock_};
};

TEST_F(LoginThrottleTest, FiveFailuresLockTheAccountForTheWindow) {
  EXPECT_ALLOWED(throttle_, "acme/alice", "10.0.0.1");
  Fail("acme/alice", "10.0.0.1", 4);
  EXPECT_ALLOWED(throttle_, "acme/alice", "10.0.0.1");
  Fail("acme/alice", "10.0.0.1");
  EXPECT_THROTTLED(throttle_, "acme/alice", "10.0.0.1", kWindowMs / 1000);
  // The account is locked from every source; other accounts are not.
  EXPECT_THROTTLED(throttle_, "acme/alice", "192.0.2.7", kWindowMs / 1000);
  EXPECT_ALLOWED(throttle_, "acme/bob", "10.0.0.1");
  EXPECT_ALLOWED(throttle_, "other/alice", "10.0.0.1");
}

TEST_F(LoginThrottleTest, RetryAfterCountsDownAndTheWindowSlides) {
  for (int i = 0; i < 5; ++i) {
    Fail("acme/alice", "10.0.0.1");
    clock_.AdvanceSeconds(10);
  }
  // Failures at t, t+10 .. t+40; now t+50. The first leaves the window at
  // t+900.
  EXPECT_THROTTLED(throttle_, "acme/alice", "10.0.0.1", 850);
  clock_.AdvanceSeconds(849);
  EXPECT_THROTTLED(throttle_, "acme/alice", "10.0.0.1", 1);
  clock_.AdvanceMillis(999);  // t+899.999
  EXPECT_THROTTLED(throttle_, "acme/alice", "10.0.0.1", 1);
  clock_.AdvanceMillis(1);  // t+900: four failures left in the window
  EXPECT_ALLOWED(throttle_, "acme/alice", "10.0.0.1");

  // One more failure makes five again; now the one at t+10 must leave.
  Fail("acme/alice", "10.0.0.1");
  EXPECT_THROTTLED(throttle_, "acme/alice", "10.0.0.1", 10);
  clock_.AdvanceSeconds(10);
  EXPECT_ALLOWED(throttle_, "acme/alice", "10.0.0.1");

  // Long after, everything has left the window.
  clock_.AdvanceSeconds(3600);
  Fail("acme/alice", "10.0.0.1", 4);
  EXPECT_ALLOWED(throttle_, "acme/alice", "10.0.0.1");
}

TEST_F(LoginThrottleTest, SuccessResetsTheAccountButNotTheSource) {
  Fail("acme/alice", "10.0.0.1", 4);
  throttle_.RecordSuccess("acme/alice");
  Fail("acme/alice", "10.0.0.1", 4);
  EXPECT_ALLOWED(throttle_, "acme/alice", "10.0.0.1");  // success reset the count
  Fail("acme/alice", "10.0.0.1");
  EXPECT_THROTTLED(throttle_, "acme/alice", "10.0.0.1", kWindowMs / 1000);
  throttle_.RecordSuccess("acme/alice");
  EXPECT_ALLOWED(throttle_, "acme/alice", "10.0.0.1");

  // The source has 9 failures; 11 more on other accounts lock it, and a
  // success on one account does not unlock it.
  for (int i = 0; i < 11; ++i) Fail("acme/u" + std::to_string(i), "10.0.0.1");
  throttle_.RecordSuccess("acme/alice");
  throttle_.RecordSuccess("acme/u0");
  EXPECT_THROTTLED(throttle_, "acme/alice", "10.0.0.1", kWindowMs / 1000);
}

TEST_F(LoginThrottleTest, SourceLimitSpansAccounts) {
  // One failure each on many accounts: no account reaches its limit.
  for (int i = 0; i < 19; ++i) Fail("acme/user" + std::to_string(i), "203.0.113.9");
  EXPECT_ALLOWED(throttle_, "acme/fresh", "203.0.113.9");
  Fail("acme/user19", "203.0.113.9");
  EXPECT_THROTTLED(throttle_, "acme/fresh", "203.0.113.9", kWindowMs / 1000);
  EXPECT_THROTTLED(throttle_, "acme/user0", "203.0.113.9", kWindowMs / 1000);
  // The accounts themselves are fine from elsewhere.
  EXPECT_ALLOWED(throttle_, "acme/user0", "198.51.100.1");
  EXPECT_ALLOWED(throttle_, "acme/fresh", "198.51.100.1");

  clock_.AdvanceMillis(kWindowMs);
  EXPECT_ALLOWED(throttle_, "acme/fresh", "203.0.113.9");
}

TEST(LoginThrottleOptionsTest, LimitsAndWindowAreConfigurable) {
  ManualClock clock;
  LoginThrottleOptions options;
  options.max_failures_per_account = 2;
  options.max_failures_per_source = 3;
  options.window_ms = 60'000;
  LoginThrottle throttle(clock, options);
  throttle.RecordFailure("a", "s1");
  EXPECT_ALLOWED(throttle, "a", "s1");
  throttle.RecordFailure("a", "s1");
  EXPECT_THROTTLED(throttle, "a", "s2", 60);
  throttle.RecordFailure("b", "s1");
  EXPECT_THROTTLED(throttle, "c", "s1", 60);
  clock.AdvanceSeconds(30);
  EXPECT_THROTTLED(throttle, "a", "s2", 30);
  clock.AdvanceSeconds(30);
  EXPECT_ALLOWED(throttle, "a", "s1");
}

}  // namespace
}  // namespace atrium
