#include "runtime/audit_checkpointer.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/result_matchers.h"
#include "support/test_directory.h"

namespace atrium {
namespace {

std::string ReadAll(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class AuditCheckpointerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestDirectory("audit-checkpointer");
    std::filesystem::create_directories(dir_);
    auto store = Store::Open("sqlite://" + (dir_ / "atrium.db").string(), 2);
    ASSERT_TRUE(store.has_value()) << store.error().message;
    store_ = std::move(*store);
    options_.checkpoint_file = (dir_ / "checkpoints.jsonl").string();
    options_.signing_key_file = (dir_ / "signing.key").string();
    options_.interval_ms = 0;
  }

  void Append(const std::string& action) {
    AuditRecord r;
    r.time = clock_.NowMillis();
    r.actor = "user:u";
    r.action = action;
    r.target = "platform";
    r.outcome = "allowed";
    r.status = 200;
    ASSERT_OK(store_->AppendAudit(r));
  }

  // What someone with write access to the database does: remove the newest
  // record and set the counter and the head back to match.
  void RemoveNewestAndRewind() {
    auto& db = store_->database();
    ASSERT_OK(db.Exec("DELETE FROM audit_log WHERE seq = (SELECT MAX(seq) FROM audit_log)"));
    ASSERT_OK(db.Exec("UPDATE audit_counter SET last_seq = (SELECT MAX(seq) FROM audit_log)"));
    ASSERT_OK(db.Exec(
        "UPDATE audit_heads SET chain_seq = (SELECT MAX(chain_seq) FROM audit_log a WHERE "
        "a.chain = audit_heads.chain), hash = (SELECT hash FROM audit_log a WHERE a.chain = "
        "audit_heads.chain ORDER BY chain_seq DESC LIMIT 1)"));
  }

  std::filesystem::path dir_;
  ManualClock clock_;
  std::unique_ptr<Store> store_;
  AuditCheckpointOptions options_;
};

TEST_F(AuditCheckpointerTest, SignsEachNewStateOnceWithAPrivateKey) {
  Append("tenant.create");
  AuditCheckpointer checkpointer(*store_, clock_, options_);
  ASSERT_OK(checkpointer.Start());
  struct stat st {};
  ASSERT_EQ(::stat(options_.signing_key_file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::string pub = ReadAll(options_.signing_key_file + ".pub");
  EXPECT_EQ(pub, checkpointer.public_key_hex() + "\n");

  auto first = checkpointer.Latest();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->last_seq, 1);
  ASSERT_OK(audit::VerifyCheckpointSignatures(*first, checkpointer.public_key_hex()));
  ASSERT_OK(checkpointer.CheckpointNow());  // nothing new: no line
  Append("tenant.update");
  ASSERT_OK(checkpointer.CheckpointNow());
  EXPECT_EQ(checkpointer.Latest()->last_seq, 2);
  checkpointer.Stop();  // nothing new since: no line either

  auto latest = audit::LatestCheckpointIn(ReadAll(options_.checkpoint_file));
  ASSERT_TRUE(latest.has_value());
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ((*latest)->last_seq, 2);
  std::string file = ReadAll(options_.checkpoint_file);
  EXPECT_EQ(std::count(file.begin(), file.end(), '\n'), 2);
}

// Regression: deleting rows and rewinding the chain heads went undetected.
// A running checkpointer refuses to sign over it, and a restart refuses to
// run on it.
TEST_F(AuditCheckpointerTest, RewoundTrailIsNeverSignedAndStopsTheNextStart) {
  Append("a");
  Append("b");
  {
    AuditCheckpointer checkpointer(*store_, clock_, options_);
    ASSERT_OK(checkpointer.Start());
    RemoveNewestAndRewind();
    Append("c");  // the same count as before, a different record
    auto refused = checkpointer.CheckpointNow();
    ASSERT_FALSE(refused.has_value());
    EXPECT_EQ(refused.error().code, ErrorCode::kFailedPrecondition);
    EXPECT_NE(refused.error().message.find("record #2 is not the one signed"), std::string::npos)
        << refused.error().message;
    EXPECT_EQ(checkpointer.Latest()->last_seq, 2);
  }
  RemoveNewestAndRewind();
  AuditCheckpointer restarted(*store_, clock_, options_);
  auto start = restarted.Start();
  ASSERT_FALSE(start.has_value());
  EXPECT_EQ(start.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_NE(start.error().message.find("no longer reaches the checkpoint of seq 2"),
            std::string::npos)
      << start.error().message;
}

TEST_F(AuditCheckpointerTest, KeyReadableByOthersOrForeignCheckpointIsRefused) {
  Append("a");
  {
    AuditCheckpointer checkpointer(*store_, clock_, options_);
    ASSERT_OK(checkpointer.Start());
  }
  ASSERT_EQ(::chmod(options_.signing_key_file.c_str(), 0644), 0);
  AuditCheckpointer loose(*store_, clock_, options_);
  EXPECT_ERROR(loose.Start(), ErrorCode::kFailedPrecondition);

  // A new key cannot take over the old checkpoints.
  std::filesystem::remove(options_.signing_key_file);
  std::filesystem::remove(options_.signing_key_file + ".pub");
  AuditCheckpointer other_key(*store_, clock_, options_);
  auto start = other_key.Start();
  ASSERT_FALSE(start.has_value());
  EXPECT_NE(start.error().message.find("was not signed by"), std::string::npos)
      << start.error().message;
}

}  // namespace
}  // namespace atrium
