#include "common/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace atrium {
namespace {

namespace fs = std::filesystem;

std::string Read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/atrium-atomic-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(AtomicFileTest, ReplacesTheContentsAndNarrowsTheMode) {
  const fs::path path = dir_ / "state";
  { std::ofstream(path) << "old contents, longer than the new"; }
  ::chmod(path.c_str(), 0644);
  ASSERT_TRUE(ReplaceFileAtomically(path.string(), "new").has_value());
  EXPECT_EQ(Read(path), "new");
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_FALSE(fs::exists(dir_ / "state.tmp"));
}

TEST_F(AtomicFileTest, AFailureLeavesTheOldFileAndNoTemporary) {
  const fs::path path = dir_ / "state";
  { std::ofstream(path) << "old"; }
  // The temporary name is taken by a folder: the write fails before the
  // rename, and the old contents stay.
  fs::create_directory(dir_ / "state.tmp");
  auto done = ReplaceFileAtomically(path.string(), "new");
  ASSERT_FALSE(done.has_value());
  EXPECT_EQ(done.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(done.error().message.find("state.tmp"), std::string::npos) << done.error().message;
  EXPECT_EQ(Read(path), "old");
}

TEST_F(AtomicFileTest, NeverWritesThroughALinkAtTheTemporaryName) {
  const fs::path path = dir_ / "state";
  const fs::path elsewhere = dir_ / "elsewhere";
  { std::ofstream(elsewhere) << "untouched"; }
  fs::create_symlink(elsewhere, dir_ / "state.tmp");
  EXPECT_FALSE(ReplaceFileAtomically(path.string(), "new").has_value());
  EXPECT_EQ(Read(elsewhere), "untouched");
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(AtomicFileTest, ARelativePathSyncsTheCurrentFolder) {
  const fs::path old = fs::current_path();
  fs::current_path(dir_);
  const auto done = ReplaceFileAtomically("relative", "x");
  fs::current_path(old);
  ASSERT_TRUE(done.has_value()) << done.error().message;
  EXPECT_EQ(Read(dir_ / "relative"), "x");
}

}  // namespace
}  // namespace atrium
