// The template service over a real store (SQLite and PostgreSQL) and a
// real image store directory: versions, visibility between tenants and the
// platform, retiring, and resolving a reference to a root filesystem that
// a hostile tenant cannot point anywhere else.
#include "templates/template_service.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "store/test_databases.h"
#include "support/result_matchers.h"
#include "support/store_rows.h"
#include "support/test_directory.h"

namespace atrium::templates {
namespace {

namespace fs = std::filesystem;
using testdb::Backend;
using testdb::BackendName;

const std::string kHexA(64, 'a');
const std::string kHexB(64, 'b');
const std::string kHexC(64, 'c');

class TemplateServiceTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    database_.Create(GetParam());
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_NO_FATAL_FAILURE(testdb::OpenStore(database_, &store_));
    ASSERT_OK(store_->CreateTenant(testing_rows::ActiveTenant("tn_a", "a")));
    ASSERT_OK(store_->CreateTenant(testing_rows::ActiveTenant("tn_b", "b")));
    images_ = TestDirectory("atrium-images");
    fs::create_directories(images_ / ("sha256-" + kHexA) / "rootfs");
    fs::create_directories(images_ / "tenants/tn_a" / ("sha256-" + kHexB) / "rootfs");
    fs::create_directories(images_ / "tenants/tn_b" / ("sha256-" + kHexC) / "rootfs");
    service_ = std::make_unique<TemplateService>(
        *store_, clock_,
        TemplateServiceOptions{
            .images_dir = images_.string(),
            .uses_in_flight = [this](const EnvironmentTemplateRecord& t) -> Result<int64_t> {
              return uses_[t.name + "@" + std::to_string(t.version)];
            }});
  }
  void TearDown() override {
    service_.reset();
    store_.reset();
    database_.Drop();
    if (!images_.empty()) fs::remove_all(images_);
  }

  static TemplateDraft Draft(std::string name, const std::string& hex) {
    TemplateDraft d;
    d.name = std::move(name);
    d.rootfs_digest = "sha256:" + hex;
    d.env = {{"OMP_NUM_THREADS", "8"}};
    d.requirements.min_driver_version = "535.104.05";
    return d;
  }

  size_t Count() {
    auto r = store_->database().Exec("SELECT COUNT(*) FROM environment_templates");
    EXPECT_TRUE(r.has_value());
    return r.has_value() ? size_t(r->rows.at(0).Int(0)) : 0;
  }

  testdb::TestDatabase database_;
  std::unique_ptr<Store> store_;
  ManualClock clock_;
  fs::path images_;
  std::map<std::string, int64_t> uses_;
  std::unique_ptr<TemplateService> service_;
  const TenantScope a_ = TenantScope::Of("tn_a");
  const TenantScope b_ = TenantScope::Of("tn_b");
  const TenantScope platform_ = TenantScope::Platform();
};

TEST_P(TemplateServiceTest, PublishingAgainMakesTheNextVersion) {
  auto v1 = service_->Publish(platform_, Draft("cuda-base", kHexA), "usr_op");
  ASSERT_OK(v1);
  EXPECT_EQ(v1->version, 1);
  EXPECT_EQ(v1->tenant_id, "");
  clock_.AdvanceMillis(1000);
  auto v2 = service_->Publish(platform_, Draft("cuda-base", kHexA), "usr_op");
  ASSERT_OK(v2);
  EXPECT_EQ(v2->version, 2);

  auto latest = service_->Resolve("tn_a", "cuda-base");
  ASSERT_OK(latest);
  EXPECT_EQ(latest->record.version, 2);
  EXPECT_EQ(latest->root_fs, (images_ / ("sha256-" + kHexA) / "rootfs").string());
  EXPECT_EQ(latest->env,
            (std::vector<std::pair<std::string, std::string>>{{"OMP_NUM_THREADS", "8"}}));
  EXPECT_EQ(latest->requirements.min_driver_version, "535.104.05");
  auto exact = service_->Resolve("tn_b", "cuda-base@1");
  ASSERT_OK(exact);
  EXPECT_EQ(exact->record.version, 1);
  auto stored = store_->EnvironmentTemplateVersions(platform_, "cuda-base");
  ASSERT_OK(stored);
  ASSERT_EQ(stored->size(), 2u);
  EXPECT_EQ((*stored)[0], *v1);  // everything round-trips
}

TEST_P(TemplateServiceTest, ATenantsTemplateIsItsOwnAlone) {
  ASSERT_OK(service_->Publish(a_, Draft("secret-env", kHexB), "usr_a"));
  ASSERT_OK(service_->Publish(platform_, Draft("cuda-base", kHexA), "usr_op"));
  // B sees the platform's, not A's; cannot read, resolve or retire A's.
  auto b_list = service_->List(b_);
  ASSERT_OK(b_list);
  ASSERT_EQ(b_list->size(), 1u);
  EXPECT_EQ((*b_list)[0].name, "cuda-base");
  EXPECT_ERROR(service_->Get(b_, "secret-env"), ErrorCode::kNotFound);
  EXPECT_ERROR(service_->Get(b_, "secret-env@1"), ErrorCode::kNotFound);
  EXPECT_ERROR(service_->Resolve("tn_b", "secret-env"), ErrorCode::kNotFound);
  EXPECT_ERROR(service_->Retire(b_, "secret-env@1"), ErrorCode::kNotFound);
  // A sees both; the platform sees only its own through List.
  auto a_list = service_->List(a_);
  ASSERT_OK(a_list);
  EXPECT_EQ(a_list->size(), 2u);
  auto p_list = service_->List(platform_);
  ASSERT_OK(p_list);
  EXPECT_EQ(p_list->size(), 1u);
  // A tenant may not retire the platform's template.
  EXPECT_ERROR(service_->Retire(a_, "cuda-base@1"), ErrorCode::kNotFound);
  // B may publish its own of the same name as A's: names are per tenant.
  ASSERT_OK(service_->Publish(b_, Draft("secret-env", kHexC), "usr_b"));
  auto b_own = service_->Resolve("tn_b", "secret-env");
  ASSERT_OK(b_own);
  EXPECT_EQ(b_own->record.tenant_id, "tn_b");
}

TEST_P(TemplateServiceTest, ANameIsThePlatformsOrATenantsNeverBoth) {
  ASSERT_OK(service_->Publish(platform_, Draft("cuda-base", kHexA), "usr_op"));
  ASSERT_OK(service_->Publish(a_, Draft("mine", kHexB), "usr_a"));
  EXPECT_ERROR(service_->Publish(a_, Draft("cuda-base", kHexB), "usr_a"),
               ErrorCode::kAlreadyExists);
  EXPECT_ERROR(service_->Publish(platform_, Draft("mine", kHexA), "usr_op"),
               ErrorCode::kAlreadyExists);
  EXPECT_EQ(Count(), 2u);
}

TEST_P(TemplateServiceTest, BadDraftsStoreNothing) {
  TemplateDraft traversal = Draft("x", kHexA);
  traversal.rootfs_digest = "../../../etc";
  EXPECT_ERROR(service_->Publish(a_, traversal, "usr_a"), ErrorCode::kInvalidArgument);
  TemplateDraft huge = Draft("x", kHexA);
  for (int i = 0; i < 100; ++i) huge.env["V" + std::to_string(i)] = "x";
  EXPECT_ERROR(service_->Publish(a_, huge, "usr_a"), ErrorCode::kInvalidArgument);
  TemplateDraft path_name = Draft("../x", kHexA);
  EXPECT_ERROR(service_->Publish(a_, path_name, "usr_a"), ErrorCode::kInvalidArgument);
  EXPECT_EQ(Count(), 0u);
}

TEST_P(TemplateServiceTest, RetiringWaitsForWorkAndNeverReusesTheVersion) {
  ASSERT_OK(service_->Publish(a_, Draft("train", kHexB), "usr_a"));
  ASSERT_OK(service_->Publish(a_, Draft("train", kHexB), "usr_a"));
  EXPECT_ERROR(service_->Retire(a_, "train"), ErrorCode::kInvalidArgument);
  uses_["train@2"] = 3;
  auto busy = service_->Retire(a_, "train@2");
  ASSERT_FALSE(busy.has_value());
  EXPECT_EQ(busy.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_NE(busy.error().message.find("pinned by 3 job(s)"), std::string::npos);
  uses_["train@2"] = 0;
  auto retired = service_->Retire(a_, "train@2");
  ASSERT_OK(retired);
  EXPECT_EQ(retired->state, "retired");
  EXPECT_ERROR(service_->Retire(a_, "train@2"), ErrorCode::kFailedPrecondition);
  // "train" is version 1 again; train@2 reads as history, never resolves.
  auto latest = service_->Resolve("tn_a", "train");
  ASSERT_OK(latest);
  EXPECT_EQ(latest->record.version, 1);
  EXPECT_ERROR(service_->Resolve("tn_a", "train@2"), ErrorCode::kFailedPrecondition);
  auto history = service_->Get(a_, "train@2");
  ASSERT_OK(history);
  EXPECT_EQ(history->state, "retired");
  auto v3 = service_->Publish(a_, Draft("train", kHexB), "usr_a");
  ASSERT_OK(v3);
  EXPECT_EQ(v3->version, 3);
}

// The runtime's count: the store's live jobs that pin the version.
TEST_P(TemplateServiceTest, RetiringWaitsForTheLiveJobsThatPinTheVersion) {
  TemplateService service(*store_, clock_, {.uses_in_flight = LiveJobsPinning(*store_)});
  ASSERT_OK(service.Publish(a_, Draft("train", kHexB), "usr_a"));
  ASSERT_OK(service.Publish(b_, Draft("train", kHexC), "usr_b"));
  ASSERT_OK(service.Publish(platform_, Draft("base", kHexA), "usr_op"));
  auto job = [&](const std::string& id, const std::string& tenant, const std::string& pinned) {
    JobRecord j = testing_rows::PendingJob(id, tenant);
    j.state = "running";
    j.spec = R"({"environment":")" + pinned + R"(","name":"train"})";
    EXPECT_OK(store_->CreateJob(j, testing_rows::JobEvent(j), testing_rows::JobAudit(j)));
    return j;
  };
  auto end = [&](JobRecord j) {
    j.state = "succeeded";
    EXPECT_OK(store_->CommitJob(j, {}, {}));
  };
  // B's job on B's own "train@1" does not hold A's.
  JobRecord b_train = job("job_b1", "tn_b", "train@1");
  JobRecord a_train = job("job_a1", "tn_a", "train@1");
  JobRecord b_base = job("job_b2", "tn_b", "base@1");
  auto busy = service.Retire(a_, "train@1");
  EXPECT_ERROR(busy, ErrorCode::kFailedPrecondition);
  if (!busy.has_value())
    EXPECT_NE(busy.error().message.find("pinned by 1 job(s)"), std::string::npos);
  // Any tenant's job holds a platform template.
  EXPECT_ERROR(service.Retire(platform_, "base@1"), ErrorCode::kFailedPrecondition);
  end(a_train);
  end(b_base);
  ASSERT_OK(service.Retire(a_, "train@1"));
  ASSERT_OK(service.Retire(platform_, "base@1"));
  EXPECT_ERROR(service.Retire(b_, "train@1"), ErrorCode::kFailedPrecondition);
  end(b_train);
  ASSERT_OK(service.Retire(b_, "train@1"));
}

TEST_P(TemplateServiceTest, RootFsComesOnlyFromTheOwnersAreasOfTheImageStore) {
  // A's own image is in A's area; the shared one is everyone's.
  ASSERT_OK(service_->Publish(a_, Draft("own", kHexB), "usr_a"));
  ASSERT_OK(service_->Publish(a_, Draft("shared", kHexA), "usr_a"));
  auto own = service_->Resolve("tn_a", "own");
  ASSERT_OK(own);
  EXPECT_EQ(own->root_fs, (images_ / "tenants/tn_a" / ("sha256-" + kHexB) / "rootfs").string());
  auto shared = service_->Resolve("tn_a", "shared");
  ASSERT_OK(shared);
  EXPECT_EQ(shared->root_fs, (images_ / ("sha256-" + kHexA) / "rootfs").string());

  // A names B's private image by its digest: it is not in A's areas.
  ASSERT_OK(service_->Publish(a_, Draft("steal", kHexC), "usr_a"));
  auto stolen = service_->Resolve("tn_a", "steal");
  ASSERT_FALSE(stolen.has_value());
  EXPECT_EQ(stolen.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_NE(stolen.error().message.find("holds no image"), std::string::npos);

  // A symbolic link in A's area to B's image (or to /) is refused, not followed.
  const std::string hex_d(64, 'd');
  fs::create_directories(images_ / "tenants/tn_a" / ("sha256-" + hex_d));
  fs::create_directory_symlink(images_ / "tenants/tn_b" / ("sha256-" + kHexC) / "rootfs",
                               images_ / "tenants/tn_a" / ("sha256-" + hex_d) / "rootfs");
  ASSERT_OK(service_->Publish(a_, Draft("linked", hex_d), "usr_a"));
  auto linked = service_->Resolve("tn_a", "linked");
  ASSERT_FALSE(linked.has_value());
  EXPECT_NE(linked.error().message.find("is a symbolic link"), std::string::npos);
}

TEST_P(TemplateServiceTest, EvictingATenantRemovesItsTemplatesOnly) {
  ASSERT_OK(service_->Publish(a_, Draft("mine", kHexB), "usr_a"));
  ASSERT_OK(service_->Publish(platform_, Draft("cuda-base", kHexA), "usr_op"));
  ASSERT_OK(store_->DeleteTenantAndData("tn_a", 5));
  EXPECT_EQ(Count(), 1u);
  EXPECT_OK(service_->Resolve("tn_b", "cuda-base"));
}

INSTANTIATE_TEST_SUITE_P(Drivers, TemplateServiceTest,
                         ::testing::Values(Backend::kSqlite, Backend::kPostgres), BackendName);

}  // namespace
}  // namespace atrium::templates
