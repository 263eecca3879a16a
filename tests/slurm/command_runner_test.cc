// The process runner finds programs in the PATH it gives its commands, not
// in the caller's: a control plane started with PATH=/usr/bin:/bin still
// runs /usr/sbin/useradd.
#include "slurm/command_runner.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace atrium::slurm {
namespace {

class CommandRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "atrium-runner-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text, mode_t mode) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    ::chmod(path.c_str(), mode);
    return path;
  }

  std::string dir_;
};

TEST_F(CommandRunnerTest, FindsProgramsInTheGivenSearchPathOnly) {
  const std::string tool = Write("atrium-runner-tool", "#!/bin/sh\necho ran \"$@\"\n", 0755);
  Write("not-executable", "#!/bin/sh\n", 0644);
  EXPECT_EQ(FindProgram("atrium-runner-tool", "/nonexistent:" + dir_), tool);
  EXPECT_EQ(FindProgram("atrium-runner-tool", "/nonexistent"), "");
  EXPECT_EQ(FindProgram("not-executable", dir_), "");
  EXPECT_EQ(FindProgram("sh", ""), "");               // no PATH: nothing by name
  EXPECT_EQ(FindProgram("sh", "::/bin"), "/bin/sh");  // empty entries are skipped
  EXPECT_EQ(FindProgram("/bin/sh", ""), "/bin/sh");
  EXPECT_EQ(FindProgram("", dir_), "");
}

TEST_F(CommandRunnerTest, RunsWhatItsOwnPathHasThoughTheCallersHasNot) {
  Write("atrium-runner-tool", "#!/bin/sh\necho ran \"$@\"\n", 0755);
  const char* caller_path = std::getenv("PATH");
  ASSERT_TRUE(caller_path == nullptr || std::string(caller_path).find(dir_) == std::string::npos);
  ProcessCommandRunner runner({{"PATH", dir_ + ":/usr/bin:/bin"}}, 10'000);
  auto out = runner.Run({"atrium-runner-tool", "a b", "$c"});
  ASSERT_TRUE(out.has_value()) << out.error().message;
  EXPECT_EQ(out->exit_code, 0);
  EXPECT_EQ(out->out, "ran a b $c\n");

  auto missing = runner.Run({"no-such-atrium-program"});
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(missing.error().message.find("no-such-atrium-program"), std::string::npos);
}

}  // namespace
}  // namespace atrium::slurm
