#include "common/remove_tree.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace atrium {
namespace {

namespace fs = std::filesystem;

class RemoveTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/atrium-rmtree-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_F(RemoveTreeTest, RemovesFoldersFilesAndLinksButNothingALinkPointsTo) {
  // What a tenant leaves behind: nested folders, a link to a folder it does
  // not own and a link to a file it does not own.
  fs::create_directories(root_ / "outside" / "keep");
  std::ofstream(root_ / "outside" / "keep" / "secret") << "not yours";
  const fs::path tree = root_ / "work";
  fs::create_directories(tree / "a" / "b" / "c");
  std::ofstream(tree / "a" / "b" / "c" / "file") << "x";
  std::ofstream(tree / "top") << "y";
  fs::create_directory_symlink(root_ / "outside" / "keep", tree / "a" / "dirlink");
  fs::create_symlink(root_ / "outside" / "keep" / "secret", tree / "filelink");
  fs::create_symlink(root_ / "nowhere", tree / "dangling");

  ASSERT_TRUE(RemoveTreeNoFollow(tree.string()).has_value());
  EXPECT_FALSE(fs::exists(fs::symlink_status(tree)));
  EXPECT_TRUE(fs::exists(root_ / "outside" / "keep" / "secret"));
}

TEST_F(RemoveTreeTest, APathThatIsALinkLosesOnlyTheLink) {
  fs::create_directories(root_ / "target");
  std::ofstream(root_ / "target" / "f") << "x";
  fs::create_directory_symlink(root_ / "target", root_ / "link");
  ASSERT_TRUE(RemoveTreeNoFollow((root_ / "link").string()).has_value());
  EXPECT_FALSE(fs::exists(fs::symlink_status(root_ / "link")));
  EXPECT_TRUE(fs::exists(root_ / "target" / "f"));
}

TEST_F(RemoveTreeTest, AMissingPathOrAPlainFileIsFine) {
  EXPECT_TRUE(RemoveTreeNoFollow((root_ / "missing").string()).has_value());
  std::ofstream(root_ / "plain") << "x";
  EXPECT_TRUE(RemoveTreeNoFollow((root_ / "plain").string()).has_value());
  EXPECT_FALSE(fs::exists(root_ / "plain"));
}

TEST_F(RemoveTreeTest, ATreeDeeperThanTheBoundIsRefusedNotFollowedForever) {
  fs::path deep = root_ / "deep";
  fs::path at = deep;
  for (int i = 0; i < 300; ++i) at /= "d";
  fs::create_directories(at);
  auto removed = RemoveTreeNoFollow(deep.string());
  ASSERT_FALSE(removed.has_value());
  EXPECT_EQ(removed.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(removed.error().message.find("cannot remove"), std::string::npos);
}

}  // namespace
}  // namespace atrium
