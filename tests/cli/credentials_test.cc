#include "cli/credentials.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace atrium::cli {
namespace {

TEST(CliCredentialsPathTest, PrefersAbsoluteXdgConfigHomeThenHome) {
  EXPECT_EQ(*CredentialsPath("/x/cfg", "/home/u"), "/x/cfg/atrium/credentials");
  EXPECT_EQ(*CredentialsPath(nullptr, "/home/u"), "/home/u/.config/atrium/credentials");
  // The XDG spec says a relative value is to be ignored.
  EXPECT_EQ(*CredentialsPath("relative", "/home/u"), "/home/u/.config/atrium/credentials");
  EXPECT_EQ(*CredentialsPath("", "/home/u"), "/home/u/.config/atrium/credentials");
  auto none = CredentialsPath(nullptr, nullptr);
  ASSERT_FALSE(none.has_value());
  EXPECT_EQ(none.error().code, ErrorCode::kFailedPrecondition);
}

class CliCredentialsFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "atrium-cred-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    path_ = dir_ + "/cfg/atrium/credentials";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string dir_;
  std::string path_;
};

TEST_F(CliCredentialsFileTest, SaveLoadRemoveRoundTripWithPrivateModes) {
  auto missing = LoadCredentials(path_);
  ASSERT_TRUE(missing.has_value());
  EXPECT_FALSE(missing->has_value());

  Credentials c{"http://127.0.0.1:1", "tok", "ann", "acme", "2030-01-01T00:00:00.000Z"};
  ASSERT_TRUE(SaveCredentials(path_, c).has_value());
  struct stat st {};
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat((dir_ + "/cfg/atrium").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);

  auto loaded = LoadCredentials(path_);
  ASSERT_TRUE(loaded.has_value());
  ASSERT_TRUE(loaded->has_value());
  EXPECT_EQ((*loaded)->server, c.server);
  EXPECT_EQ((*loaded)->token, c.token);
  EXPECT_EQ((*loaded)->username, c.username);
  EXPECT_EQ((*loaded)->tenant, c.tenant);
  EXPECT_EQ((*loaded)->expires_at, c.expires_at);

  // A file left world-readable by someone else is narrowed on the next save.
  ::chmod(path_.c_str(), 0644);
  ASSERT_TRUE(SaveCredentials(path_, c).has_value());
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  EXPECT_EQ(*RemoveCredentials(path_), true);
  EXPECT_EQ(*RemoveCredentials(path_), false);
}

TEST_F(CliCredentialsFileTest, RejectsAFileThatIsNotCredentials) {
  std::filesystem::create_directories(std::filesystem::path(path_).parent_path());
  for (const char* text : {"not json", "[]", R"({"server":"http://x"})"}) {
    std::ofstream(path_) << text;
    auto loaded = LoadCredentials(path_);
    ASSERT_FALSE(loaded.has_value()) << text;
    EXPECT_EQ(loaded.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(loaded.error().message.find("atrium login"), std::string::npos);
  }
}

}  // namespace
}  // namespace atrium::cli
