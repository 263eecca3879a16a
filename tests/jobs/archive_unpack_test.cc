// Unpacking a kept archive on the control plane's side (an adapter's
// files): folders and files only, readable by an engine's user, all or
// nothing, a symbolic link refused before anything is left behind.
#include "jobs/archive_unpack.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "jobs/archive_test_util.h"
#include "support/test_directory.h"

namespace atrium::jobs {
namespace {

using testing::Dir;
using testing::File;
using testing::Hardlink;
using testing::MakeTar;
using testing::Symlink;

class ArchiveUnpackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestDirectory("unpack");
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // `upload` checked and rewritten as ArchiveService keeps it; its path.
  std::string Kept(const std::string& upload) {
    const std::string path = (dir_ / "kept.tar").string();
    FILE* f = std::fopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    auto summary = RewriteArchive(upload, {}, fileno(f));
    std::fclose(f);
    EXPECT_TRUE(summary.has_value()) << summary.error().message;
    return path;
  }
  static std::string Read(const std::filesystem::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  static mode_t Mode(const std::filesystem::path& p) {
    struct stat st {};
    EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
    return st.st_mode & 07777;
  }
  // Everything under dir_ but the kept tar.
  size_t Entries() {
    size_t n = 0;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir_)) {
      if (e.path().filename() != "kept.tar") ++n;
    }
    return n;
  }

  std::filesystem::path dir_;
};

TEST_F(ArchiveUnpackTest, FoldersAndFilesLandReadableByAnyoneAndHardLinksAsCopies) {
  const std::string tar = Kept(MakeTar({Dir("lora"), File("lora/adapter_config.json", "{}", 0600),
                                        File("lora/weights/w.bin", "abc", 0700),
                                        Hardlink("lora/copy.bin", "lora/weights/w.bin")}));
  const auto dest = dir_ / "ad_1";
  ASSERT_TRUE(UnpackFilesAndFolders(tar, dest.string(), {}).has_value());
  EXPECT_EQ(Read(dest / "lora" / "adapter_config.json"), "{}");
  EXPECT_EQ(Read(dest / "lora" / "weights" / "w.bin"), "abc");
  EXPECT_EQ(Read(dest / "lora" / "copy.bin"), "abc");
  EXPECT_EQ(Mode(dest), 0755U);
  EXPECT_EQ(Mode(dest / "lora" / "weights"), 0755U);
  EXPECT_EQ(Mode(dest / "lora" / "adapter_config.json"), 0644U);
  EXPECT_EQ(Mode(dest / "lora" / "weights" / "w.bin"), 0644U);
  // Never over what is there.
  auto again = UnpackFilesAndFolders(tar, dest.string(), {});
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().code, ErrorCode::kAlreadyExists);
}

TEST_F(ArchiveUnpackTest, ASymbolicLinkOrAnArchiveOverItsBoundsLeavesNothingBehind) {
  const std::string linked =
      Kept(MakeTar({File("adapter_config.json", "{}"), Symlink("w.bin", "adapter_config.json")}));
  auto refused = UnpackFilesAndFolders(linked, (dir_ / "ad_1").string(), {});
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(refused.error().message.find("'w.bin'"), std::string::npos) << refused.error().message;
  EXPECT_EQ(Entries(), 0U);

  const std::string big = Kept(MakeTar({File("a", std::string(100, 'x')), File("b", "y")}));
  ArchiveLimits limits;
  limits.max_unpacked_bytes = 100;
  refused = UnpackFilesAndFolders(big, (dir_ / "ad_2").string(), limits);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);
  limits = {};
  limits.max_entries = 1;
  EXPECT_FALSE(UnpackFilesAndFolders(big, (dir_ / "ad_3").string(), limits).has_value());
  EXPECT_FALSE(UnpackFilesAndFolders((dir_ / "missing.tar").string(), (dir_ / "ad_4").string(), {})
                   .has_value());
  EXPECT_EQ(Entries(), 0U);
}

}  // namespace
}  // namespace atrium::jobs
