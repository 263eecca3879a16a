#include "threads/thread_name.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>

namespace atrium {
namespace {

TEST(ThreadNameTest, NamesTheCallingThreadOnly) {
  const std::string before = ThisThreadName();
  std::string seen;
  std::thread t([&] {
    NameThisThread("gw-loop-1");
    seen = ThisThreadName();
  });
  t.join();
  EXPECT_EQ(seen, "gw-loop-1");
  EXPECT_EQ(ThisThreadName(), before);
}

TEST(ThreadNameTest, ALongNameIsCutToFifteenBytes) {
  std::string seen;
  std::thread t([&] {
    NameThisThread("a-name-longer-than-the-kernel-keeps");
    seen = ThisThreadName();
  });
  t.join();
  EXPECT_EQ(seen, "a-name-longer-t");
}

}  // namespace
}  // namespace atrium
