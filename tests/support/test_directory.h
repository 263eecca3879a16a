// A directory of the running test's own under the system's temporary
// directory, named after the test and the process (parallel runs and
// repeated tests never share one), emptied before the test uses it.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <string_view>

namespace atrium {

inline std::filesystem::path TestDirectory(std::string_view prefix) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      (std::string(prefix) + "-" + std::to_string(::getpid()) + "-" +
       ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(dir);
  return dir;
}

}  // namespace atrium
