#include "store/test_databases.h"

#include <stdlib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "store/migrations.h"

namespace atrium::testdb {
namespace {

std::string EnvOrEmpty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string RandomSuffix() {
  std::random_device rd;
  std::uniform_int_distribution<uint64_t> dist;
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(dist(rd)));
  return buf;
}

}  // namespace

void PrintTo(Backend b, std::ostream* os) {
  *os << (b == Backend::kSqlite ? "Sqlite" : "Postgres");
}

std::string BackendName(const ::testing::TestParamInfo<Backend>& info) {
  return info.param == Backend::kSqlite ? "Sqlite" : "Postgres";
}

void TestDatabase::Create(Backend backend) {
  if (backend == Backend::kSqlite) {
    std::string templ = (std::filesystem::temp_directory_path() / "atrium-db-XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
    url_ = "sqlite://" + (dir_ / "test.db").string();
    return;
  }
  std::string base = EnvOrEmpty("ATRIUM_TEST_PG_URL");
  if (base.empty()) {
    if (EnvOrEmpty("ATRIUM_TEST_REQUIRE_PG") == "1") {
      FAIL() << "ATRIUM_TEST_REQUIRE_PG=1 but ATRIUM_TEST_PG_URL is not set; start a server "
                "with scripts/pg-test-server.sh";
    }
    GTEST_SKIP() << "set ATRIUM_TEST_PG_URL to run the PostgreSQL cases";
  }
  auto admin = sql::OpenPostgres(base);
  ASSERT_TRUE(admin.has_value()) << admin.error().message;
  admin_ = std::move(admin).value();
  std::string schema = "t_" + RandomSuffix();
  auto created = admin_->ExecScript("CREATE SCHEMA " + schema);
  ASSERT_TRUE(created.has_value()) << created.error().message;
  schema_ = schema;
  url_ = base + (base.find('?') == std::string::npos ? "?" : "&") + "options=-csearch_path%3D" +
         schema_;
}

void TestDatabase::Drop() {
  if (admin_ && !schema_.empty()) {
    auto dropped = admin_->ExecScript("DROP SCHEMA IF EXISTS " + schema_ + " CASCADE");
    EXPECT_TRUE(dropped.has_value()) << dropped.error().message;
  }
  schema_.clear();
  admin_.reset();
  if (!dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
    dir_.clear();
  }
}

void OpenStore(const TestDatabase& db, std::unique_ptr<Store>* out) {
  auto store = Store::Open(db.url());
  ASSERT_TRUE(store.has_value()) << store.error().message;
  *out = std::move(store).value();
}

void OpenStore(const TestDatabase& db, std::unique_ptr<Store>* out,
               const sql::Database::ConnectionWrapper& wrap) {
  auto database = sql::Database::Open(db.url(), 4, wrap);
  ASSERT_TRUE(database.has_value()) << database.error().message;
  auto migrated = ApplyMigrations(**database);
  ASSERT_TRUE(migrated.has_value()) << migrated.error().message;
  *out = std::make_unique<Store>(std::move(database).value());
}

}  // namespace atrium::testdb
