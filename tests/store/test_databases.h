// Fresh, empty databases for the suites that run on both store drivers
// (sql_test, store_test): SQLite on a file in a new temp directory, and
// PostgreSQL in a new schema of the database named by ATRIUM_TEST_PG_URL (a
// libpq URI, e.g. from scripts/pg-test-server.sh). Without that variable the
// PostgreSQL cases skip, or fail when ATRIUM_TEST_REQUIRE_PG=1, so CI cannot
// pass without them. Each PostgreSQL case gets its own schema, so ctest may
// run cases in parallel against one server.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>

#include "store/sql.h"
#include "store/store.h"

namespace atrium::testdb {

enum class Backend { kSqlite, kPostgres };

void PrintTo(Backend b, std::ostream* os);
// Test-name suffix for INSTANTIATE_TEST_SUITE_P: "Sqlite" or "Postgres".
std::string BackendName(const ::testing::TestParamInfo<Backend>& info);

// One empty database, removed again by Drop() (or the destructor).
class TestDatabase {
 public:
  TestDatabase() = default;
  ~TestDatabase() { Drop(); }
  TestDatabase(const TestDatabase&) = delete;
  TestDatabase& operator=(const TestDatabase&) = delete;

  // Creates the database. Reports through gtest: it skips or fails the
  // running test when PostgreSQL is not configured, and fails it on any
  // error, so the caller must return at once when
  // `IsSkipped() || HasFatalFailure()` afterwards.
  void Create(Backend backend);

  // Removes the database (drops the schema, or deletes the temp directory).
  // Close every connection to it first. Idempotent.
  void Drop();

  // The URL to open: "sqlite:///tmp/.../test.db", or the PostgreSQL URL with
  // "options=-csearch_path%3D<schema>" appended so that every connection
  // opened from it (libpq sends options at start-up) lands in the schema.
  const std::string& url() const { return url_; }

  // PostgreSQL only (nullptr on SQLite): a connection outside the test's
  // pool, for statements a test must run beside it (pg_terminate_backend).
  sql::Connection* admin() { return admin_.get(); }

 private:
  std::string url_;
  std::filesystem::path dir_;               // SQLite only
  std::unique_ptr<sql::Connection> admin_;  // PostgreSQL only
  std::string schema_;                      // PostgreSQL only
};

// Opens a Store on db (applying migrations) into *out, failing the running
// test if it cannot: wrap the call in ASSERT_NO_FATAL_FAILURE.
void OpenStore(const TestDatabase& db, std::unique_ptr<Store>* out);
// The same with every connection passed through `wrap` (SqlFaults::Wrapper(),
// tests/store/fault_injecting_connection.h); the migrations run through it.
void OpenStore(const TestDatabase& db, std::unique_ptr<Store>* out,
               const sql::Database::ConnectionWrapper& wrap);

}  // namespace atrium::testdb
