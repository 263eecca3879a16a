#include "common/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "support/fault_injecting_file_system.h"

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

// Each step failing on the way to the rename leaves the old contents and no
// temporary; the error names the step.
struct StepFault {
  const char* name;
  FaultInjectingFileSystem::Fault fault;
  const char* step;  // in the error message
};
void PrintTo(const StepFault& f, std::ostream* os) { *os << f.name; }

std::vector<StepFault> FaultsBeforeTheRename() {
  using F = FaultInjectingFileSystem::Fault;
  return {
      {"Open", F{.op = FileOp::kOpen, .error = EACCES}, "cannot open"},
      {"Write", F{.op = FileOp::kWrite, .error = ENOSPC}, "cannot write"},
      {"ShortWrite", F{.op = FileOp::kWrite, .partial_bytes = 4, .error = ENOSPC}, "cannot write"},
      {"Sync", F{.op = FileOp::kSync, .error = EIO}, "cannot sync"},
      {"Close", F{.op = FileOp::kClose, .error = EIO}, "cannot close"},
      {"Rename", F{.op = FileOp::kRename, .error = EXDEV}, "cannot replace"},
  };
}

class AtomicFileFaultTest : public AtomicFileTest,
                            public ::testing::WithParamInterface<StepFault> {};

TEST_P(AtomicFileFaultTest, AFailedStepLeavesTheOldFileWholeAndNoTemporary) {
  const fs::path path = dir_ / "state";
  { std::ofstream(path) << "old contents"; }
  FaultInjectingFileSystem files;
  files.Inject(GetParam().fault);
  const auto done = ReplaceFileAtomically(files, path.string(), "new contents, longer");
  ASSERT_FALSE(done.has_value());
  EXPECT_EQ(done.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(done.error().message.find(GetParam().step), std::string::npos) << done.error().message;
  EXPECT_EQ(Read(path), "old contents");
  EXPECT_FALSE(fs::exists(dir_ / "state.tmp"));
  // The next attempt, with the fault gone, goes through.
  ASSERT_TRUE(ReplaceFileAtomically(files, path.string(), "new").has_value());
  EXPECT_EQ(Read(path), "new");
}

INSTANTIATE_TEST_SUITE_P(EachStep, AtomicFileFaultTest,
                         ::testing::ValuesIn(FaultsBeforeTheRename()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST_F(AtomicFileTest, AFolderThatCannotBeSyncedIsReportedAfterTheRename) {
  // The rename has happened: the new contents are in place, only their
  // surviving a machine crash is in doubt, and the caller hears of it.
  const fs::path path = dir_ / "state";
  { std::ofstream(path) << "old"; }
  FaultInjectingFileSystem files;
  files.Inject({.op = FileOp::kSyncDirectory});
  const auto done = ReplaceFileAtomically(files, path.string(), "new");
  ASSERT_FALSE(done.has_value());
  EXPECT_NE(done.error().message.find("cannot sync the folder"), std::string::npos)
      << done.error().message;
  EXPECT_EQ(Read(path), "new");
  EXPECT_FALSE(fs::exists(dir_ / "state.tmp"));
}

TEST_F(AtomicFileTest, EveryStepGoesThroughTheFileSystemItIsGiven) {
  const fs::path path = dir_ / "state";
  FaultInjectingFileSystem files;
  ASSERT_TRUE(ReplaceFileAtomically(files, path.string(), "x").has_value());
  EXPECT_EQ(files.Count(FileOp::kOpen, "state.tmp"), 1);
  EXPECT_EQ(files.Count(FileOp::kWrite, "state.tmp"), 1);
  EXPECT_EQ(files.Count(FileOp::kSync, "state.tmp"), 1);
  EXPECT_EQ(files.Count(FileOp::kClose, "state.tmp"), 1);
  EXPECT_EQ(files.Count(FileOp::kRename, "/state"), 1);
  EXPECT_EQ(files.Count(FileOp::kSyncDirectory, dir_.filename().string()), 1);
}

}  // namespace
}  // namespace atrium
