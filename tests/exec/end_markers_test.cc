// End markers (src/exec/end_markers.h): what a supervisor or Slurm's
// EpilogSlurmctld writes, and the watcher that hands each marker over once
// and removes it, refusing names that are no workload id.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "exec/end_marker_watcher.h"

namespace atrium::exec {
namespace {

namespace fs = std::filesystem;

class EndMarkersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "atrium-end-markers.XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  EndHint Collect() {
    return [this](const std::string& id) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        heard_.push_back(id);
      }
      cv_.notify_all();
    };
  }
  // Waits until `n` hints came (true) or 10 s passed.
  bool WaitForHints(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return heard_.size() >= n; });
  }
  std::vector<std::string> heard() {
    std::lock_guard<std::mutex> lock(mu_);
    return heard_;
  }
  size_t Entries() { return static_cast<size_t>(std::distance(fs::directory_iterator(dir_), {})); }

  std::string dir_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> heard_;
};

TEST_F(EndMarkersTest, MarkEndedMakesOnePrivateFileAndRefusesBadIds) {
  ASSERT_TRUE(MarkEnded(dir_, "job_abc.1").has_value());
  ASSERT_TRUE(MarkEnded(dir_, "job_abc.1").has_value());  // twice: still one
  EXPECT_EQ(Entries(), 1u);
  struct stat st {};
  ASSERT_EQ(::stat((dir_ + "/job_abc.1").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  for (const char* bad : {"", "..", "../escape", "a/b", ".hidden", "sp ace"}) {
    auto refused = MarkEnded(dir_, bad);
    ASSERT_FALSE(refused.has_value()) << bad;
    EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(Entries(), 1u);
  EXPECT_FALSE(fs::exists(fs::path(dir_).parent_path() / "escape"));
}

TEST_F(EndMarkersTest, MarkEndedNeverFollowsALink) {
  const std::string target = dir_ + "-target";
  { std::ofstream(target) << "keep"; }
  fs::create_symlink(target, dir_ + "/job_abc.1");
  EXPECT_FALSE(MarkEnded(dir_, "job_abc.1").has_value());
  std::ifstream in(target);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text, "keep");
  fs::remove(target);
}

TEST_F(EndMarkersTest, TheWatcherHandsEachMarkerOverOnceAndRemovesIt) {
  ASSERT_TRUE(MarkEnded(dir_, "job_before.1").has_value());  // made while nobody watched
  { std::ofstream(dir_ + "/not a workload id") << ""; }
  EndMarkerWatcher watcher(dir_, /*scan_ms=*/60'000);  // inotify, not the scan
  ASSERT_TRUE(watcher.Start(Collect()).has_value());
  ASSERT_TRUE(WaitForHints(1));
  ASSERT_TRUE(MarkEnded(dir_, "job_after.2").has_value());
  ASSERT_TRUE(WaitForHints(2));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (Entries() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(Entries(), 0u);  // the bad name is removed, unread
  watcher.Stop();
  EXPECT_EQ(heard(), (std::vector<std::string>{"job_before.1", "job_after.2"}));
  ASSERT_TRUE(MarkEnded(dir_, "job_late.3").has_value());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(heard().size(), 2u);  // nothing after Stop
  EXPECT_EQ(Entries(), 1u);       // kept for the next watcher
  watcher.Stop();                 // idempotent
}

// Two control planes on one Slurm controller share its markers' folder:
// each takes its own workloads' and leaves the other's; what nobody takes
// goes once it is old.
TEST_F(EndMarkersTest, AWatcherTakesOnlyTheMarkersItClaims) {
  auto mine = [](const std::string& id) { return id.rfind("job_mine", 0) == 0; };
  ASSERT_TRUE(MarkEnded(dir_, "job_other.1").has_value());
  {
    EndMarkerWatcher watcher(dir_, /*scan_ms=*/20, mine, /*unclaimed_ttl_ms=*/3'600'000);
    ASSERT_TRUE(watcher.Start(Collect()).has_value());
    ASSERT_TRUE(MarkEnded(dir_, "job_mine.1").has_value());
    ASSERT_TRUE(WaitForHints(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // several scans
  }
  EXPECT_EQ(heard(), (std::vector<std::string>{"job_mine.1"}));
  EXPECT_TRUE(fs::exists(dir_ + "/job_other.1"));  // the other's, still there
  // Nobody claimed it for longer than the limit: removed, never handed over.
  EndMarkerWatcher sweeper(dir_, /*scan_ms=*/20, mine, /*unclaimed_ttl_ms=*/0);
  fs::last_write_time(dir_ + "/job_other.1",
                      fs::last_write_time(dir_ + "/job_other.1") - std::chrono::seconds(5));
  ASSERT_TRUE(sweeper.Start(Collect()).has_value());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (fs::exists(dir_ + "/job_other.1") && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_FALSE(fs::exists(dir_ + "/job_other.1"));
  sweeper.Stop();
  EXPECT_EQ(heard().size(), 1u);
}

TEST_F(EndMarkersTest, StartFailsOnAMissingFolder) {
  EndMarkerWatcher watcher(dir_ + "/missing", 100);
  auto started = watcher.Start(Collect());
  ASSERT_FALSE(started.has_value());
  EXPECT_EQ(started.error().code, ErrorCode::kUnavailable);
}

}  // namespace
}  // namespace atrium::exec
