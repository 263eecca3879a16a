// Data-driven tests: one parameterized test per JSON file in a folder, named
// after the file (`INSTANTIATE_TEST_SUITE_P(Scenarios, Suite,
// testing::ValuesIn(JsonFilesIn(DIR)), NameOfFile)`), in file-name order.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <string>
#include <vector>

namespace atrium::testing_support {

inline std::vector<std::filesystem::path> JsonFilesIn(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".json") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The file's stem with every character gtest does not allow in a name as '_'.
inline std::string NameOfFile(const testing::TestParamInfo<std::filesystem::path>& info) {
  std::string name = info.param.stem().string();
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

}  // namespace atrium::testing_support
