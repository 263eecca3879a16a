// The archive service over a real store (SQLite and PostgreSQL): uploads
// are kept per tenant in private folders, another tenant's id is a missing
// one everywhere, the resolver checks the declared size, a refused upload
// leaves nothing behind, and an evicted tenant's archives go with it.
#include "jobs/archive_service.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "../store/test_databases.h"
#include "archive_test_util.h"
#include "common/clock.h"
#include "crypto/crypto.h"
#include "support/test_directory.h"

namespace atrium::jobs {
namespace {

using testdb::Backend;
using testing::File;
using testing::MakeTar;
using testing::Symlink;

class ArchiveServiceTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    database_.Create(GetParam());
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_NO_FATAL_FAILURE(testdb::OpenStore(database_, &store_));
    for (const auto& [id, name] : {std::pair{"tn_a", "acme"}, std::pair{"tn_b", "bolt"}}) {
      Tenant t;
      t.id = id;
      t.name = name;
      t.display_name = name;
      t.tier = "shared";
      t.weight = 1;
      t.state = "active";
      ASSERT_TRUE(store_->CreateTenant(t).has_value());
    }
    dir_ = TestDirectory("archives");
    ArchiveServiceOptions o;
    o.root_dir = (dir_ / "archives").string();
    o.max_archive_bytes = 64 * 1024;
    o.limits.max_unpacked_bytes = 1 << 20;
    o.max_archives_per_tenant = 3;
    auto created = ArchiveService::Create(*store_, clock_, o);
    ASSERT_TRUE(created.has_value()) << created.error().message;
    archives_ = std::move(*created);
  }
  void TearDown() override {
    archives_.reset();
    store_.reset();
    database_.Drop();
    std::filesystem::remove_all(dir_);
  }

  // Every file under the archives' root, relative to it.
  std::vector<std::string> FilesKept() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir_ / "archives")) {
      if (!e.is_directory()) out.push_back(std::filesystem::relative(e.path(), dir_ / "archives"));
    }
    return out;
  }

  testdb::TestDatabase database_;
  std::unique_ptr<Store> store_;
  ManualClock clock_{1'700'000'000'000};
  std::filesystem::path dir_;
  std::unique_ptr<ArchiveService> archives_;
};

TEST_P(ArchiveServiceTest, UploadKeepsTheCheckedArchiveInTheTenantsPrivateFolder) {
  const std::string upload = MakeTar({File("run.sh", "echo from the archive\n", 0755)}, true);
  auto a = archives_->Upload("tn_a", "u_1", "work.tgz", upload);
  ASSERT_TRUE(a.has_value()) << a.error().message;
  EXPECT_EQ(a->tenant_id, "tn_a");
  EXPECT_EQ(a->name, "work.tgz");
  EXPECT_EQ(a->size_bytes, static_cast<int64_t>(upload.size()));
  EXPECT_EQ(a->sha256, crypto::Sha256Hex(upload));
  EXPECT_EQ(a->entries, 1);
  EXPECT_EQ(a->unpacked_bytes, 22);
  EXPECT_EQ(archives_->Get("tn_a", a->id).value(), *a);
  ASSERT_EQ(archives_->List("tn_a").value().size(), 1U);

  for (const auto& dir : {dir_ / "archives", dir_ / "archives" / "tn_a"}) {
    struct stat st {};
    ASSERT_EQ(::stat(dir.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0700U) << dir << " is the control plane's alone";
  }
  auto path = archives_->Resolve("tn_a", a->id, a->size_bytes);
  ASSERT_TRUE(path.has_value()) << path.error().message;
  EXPECT_EQ(*path, (dir_ / "archives" / "tn_a" / (a->id + ".tar")).string());
  EXPECT_EQ(FilesKept(), std::vector<std::string>{"tn_a/" + a->id + ".tar"});
}

TEST_P(ArchiveServiceTest, AnotherTenantsArchiveIsAMissingOne) {
  auto a = archives_->Upload("tn_a", "u_1", "", MakeTar({File("f", "x")}));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(archives_->Get("tn_b", a->id).error().code, ErrorCode::kNotFound);
  EXPECT_TRUE(archives_->List("tn_b").value().empty());
  EXPECT_EQ(archives_->Resolve("tn_b", a->id, a->size_bytes).error().code, ErrorCode::kNotFound);
  EXPECT_EQ(archives_->Delete("tn_b", a->id).error().code, ErrorCode::kNotFound);
  EXPECT_TRUE(archives_->Get("tn_a", a->id).has_value()) << "still there for its tenant";
}

TEST_P(ArchiveServiceTest, ResolveChecksTheDeclaredSize) {
  auto a = archives_->Upload("tn_a", "u_1", "", MakeTar({File("f", "x")}));
  ASSERT_TRUE(a.has_value());
  auto wrong = archives_->Resolve("tn_a", a->id, a->size_bytes + 1);
  ASSERT_FALSE(wrong.has_value());
  EXPECT_EQ(wrong.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(wrong.error().message.find("archive_bytes"), std::string::npos);
  EXPECT_EQ(archives_->Resolve("tn_a", "arc_nope", 1).error().code, ErrorCode::kNotFound);
}

TEST_P(ArchiveServiceTest, RefusedUploadsLeaveNothingBehind) {
  EXPECT_EQ(archives_->Upload("tn_a", "u_1", "", std::string(64 * 1024 + 1, 'x')).error().code,
            ErrorCode::kPayloadTooLarge);
  EXPECT_EQ(archives_->Upload("tn_a", "u_1", "", "").error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(archives_->Upload("tn_a", "u_1", "../x", MakeTar({File("f", "x")})).error().code,
            ErrorCode::kInvalidArgument);
  for (const std::string& hostile :
       {MakeTar({File("../escape", "x")}), MakeTar({Symlink("s", "/etc/shadow")}),
        MakeTar({testing::Hardlink("h", "/etc/shadow")}), std::string("garbage, not a tar")}) {
    auto refused = archives_->Upload("tn_a", "u_1", "", hostile);
    ASSERT_FALSE(refused.has_value());
    EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument) << refused.error().message;
  }
  EXPECT_TRUE(FilesKept().empty()) << "no partial file is left";
  EXPECT_TRUE(archives_->List("tn_a").value().empty());
}

TEST_P(ArchiveServiceTest, ATenantHoldsAtMostItsShare) {
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(archives_->Upload("tn_a", "u_1", "", MakeTar({File("f", "x")})).has_value());
  }
  auto fourth = archives_->Upload("tn_a", "u_1", "", MakeTar({File("f", "x")}));
  ASSERT_FALSE(fourth.has_value());
  EXPECT_EQ(fourth.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_EQ(FilesKept().size(), 3U) << "the refused one's file is removed";
  EXPECT_TRUE(archives_->Upload("tn_b", "u_2", "", MakeTar({File("f", "x")})).has_value());
}

TEST_P(ArchiveServiceTest, DeleteRemovesRowAndFile) {
  auto a = archives_->Upload("tn_a", "u_1", "", MakeTar({File("f", "x")}));
  ASSERT_TRUE(a.has_value());
  ASSERT_TRUE(archives_->Delete("tn_a", a->id).has_value());
  EXPECT_TRUE(FilesKept().empty());
  EXPECT_EQ(archives_->Resolve("tn_a", a->id, a->size_bytes).error().code, ErrorCode::kNotFound);
  EXPECT_EQ(archives_->Delete("tn_a", a->id).error().code, ErrorCode::kNotFound);
}

TEST_P(ArchiveServiceTest, EvictionTakesTheTenantsArchives) {
  auto a = archives_->Upload("tn_a", "u_1", "", MakeTar({File("f", "x")}));
  auto b = archives_->Upload("tn_b", "u_2", "", MakeTar({File("f", "x")}));
  ASSERT_TRUE(a.has_value() && b.has_value());
  ASSERT_TRUE(archives_->DeleteTenantFiles("tn_a").has_value());
  auto summary = store_->DeleteTenantAndData("tn_a", clock_.NowMillis());
  ASSERT_TRUE(summary.has_value()) << summary.error().message;
  EXPECT_EQ(summary->job_archives, 1);
  EXPECT_EQ(FilesKept(), std::vector<std::string>{"tn_b/" + b->id + ".tar"});
  EXPECT_EQ(archives_->List("tn_b").value().size(), 1U);
}

INSTANTIATE_TEST_SUITE_P(Drivers, ArchiveServiceTest,
                         ::testing::Values(Backend::kSqlite, Backend::kPostgres),
                         testdb::BackendName);

}  // namespace
}  // namespace atrium::jobs
