// The same cases run on both drivers, on the databases of
// store/test_databases.h: SQLite on a temp file, PostgreSQL in a schema of its
// own when ATRIUM_TEST_PG_URL is set (and a failure, not a skip, without it
// under ATRIUM_TEST_REQUIRE_PG=1).
#include "store/sql.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "store/test_databases.h"
#include "support/result_matchers.h"

namespace atrium::sql {
namespace {

using testdb::Backend;
using testdb::BackendName;

class SqlTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    database_.Create(GetParam());
    if (IsSkipped() || HasFatalFailure()) return;
    auto db = Database::Open(database_.url(), 4);
    ASSERT_TRUE(db.has_value()) << db.error().message;
    db_ = std::move(db).value();
  }

  void TearDown() override {
    db_.reset();
    database_.Drop();
  }

  Connection* admin() { return database_.admin(); }

  // Runs sql and fails the test on error.
  Rows MustExec(std::string_view sql, const std::vector<Value>& params = {}) {
    auto r = db_->Exec(sql, params);
    EXPECT_TRUE(r.has_value()) << sql << ": " << r.error().message;
    return r.has_value() ? std::move(r).value() : Rows{};
  }

  void CreateItems() {
    ASSERT_OK(
        db_->Exec("CREATE TABLE items (id BIGINT PRIMARY KEY, name TEXT NOT NULL UNIQUE, "
                  "score DOUBLE PRECISION, note TEXT)",
                  {}));
  }

  int64_t CountItems(Connection& c) {
    auto r = c.Exec("SELECT COUNT(*) FROM items", {});
    EXPECT_TRUE(r.has_value()) << r.error().message;
    return r.has_value() ? r->rows.at(0).Int(0) : -1;
  }

  testdb::TestDatabase database_;
  std::unique_ptr<Database> db_;
};

TEST_P(SqlTest, DialectMatchesBackend) {
  EXPECT_EQ(db_->dialect(), GetParam() == Backend::kSqlite ? Dialect::kSqlite : Dialect::kPostgres);
  EXPECT_EQ(db_->Acquire()->dialect(), db_->dialect());
}

TEST_P(SqlTest, InsertsEveryParameterTypeAndSelectsBack) {
  CreateItems();
  Rows ins = MustExec("INSERT INTO items (id, name, score, note) VALUES ($1, $2, $3, $4)",
                      {int64_t{1}, std::string("alpha"), 2.5, Null()});
  EXPECT_EQ(ins.affected, 1);
  MustExec("INSERT INTO items (id, name, score, note) VALUES ($1, $2, $3, $4)",
           {int64_t{2}, std::string("beta"), Null(), std::string("")});

  Rows rows = MustExec("SELECT id, name, score, note FROM items ORDER BY id");
  ASSERT_EQ(rows.rows.size(), 2u);
  EXPECT_EQ(rows.affected, 0);
  const Row& a = rows.rows[0];
  ASSERT_EQ(a.columns.size(), 4u);
  EXPECT_EQ(a.Int(0), 1);
  EXPECT_EQ(a.Text(1), "alpha");
  EXPECT_EQ(a.Real(2), 2.5);
  EXPECT_TRUE(a.IsNull(3));
  const Row& b = rows.rows[1];
  EXPECT_EQ(b.Text(0), "2");
  EXPECT_TRUE(b.IsNull(2));
  EXPECT_EQ(b.Real(2), 0.0);
  EXPECT_FALSE(b.IsNull(3)) << "an empty string is not NULL";
  EXPECT_EQ(b.Text(3), "");

  Rows one = MustExec("SELECT name FROM items WHERE id = $1", {int64_t{2}});
  ASSERT_EQ(one.rows.size(), 1u);
  EXPECT_EQ(one.rows[0].Text(0), "beta");
}

TEST_P(SqlTest, ReportsAffectedRows) {
  CreateItems();
  EXPECT_EQ(MustExec("INSERT INTO items (id, name) VALUES (1, 'a'), (2, 'b'), (3, 'c')").affected,
            3);
  EXPECT_EQ(MustExec("UPDATE items SET note = $1 WHERE id <= $2", {std::string("n"), int64_t{2}})
                .affected,
            2);
  EXPECT_EQ(MustExec("UPDATE items SET note = 'x' WHERE id > 100").affected, 0);
  EXPECT_EQ(MustExec("DELETE FROM items WHERE id = 3").affected, 1);
  // Statements that change no rows report 0, not the count of the last DML.
  EXPECT_EQ(MustExec("SELECT * FROM items").affected, 0);
  EXPECT_EQ(MustExec("CREATE TABLE other (x BIGINT)").affected, 0);
  EXPECT_EQ(MustExec("INSERT INTO items (id, name) VALUES (4, 'd') RETURNING id").affected, 1);
}

TEST_P(SqlTest, UniqueViolationIsAlreadyExists) {
  CreateItems();
  MustExec("INSERT INTO items (id, name) VALUES ($1, $2)", {int64_t{1}, std::string("dup")});

  auto by_name =
      db_->Exec("INSERT INTO items (id, name) VALUES ($1, $2)", {int64_t{2}, std::string("dup")});
  ASSERT_FALSE(by_name.has_value());
  EXPECT_EQ(by_name.error().code, ErrorCode::kAlreadyExists) << by_name.error().message;
  EXPECT_NE(by_name.error().message.find("name"), std::string::npos)
      << "message should name the constraint: " << by_name.error().message;

  auto by_key =
      db_->Exec("INSERT INTO items (id, name) VALUES ($1, $2)", {int64_t{1}, std::string("other")});
  ASSERT_FALSE(by_key.has_value());
  EXPECT_EQ(by_key.error().code, ErrorCode::kAlreadyExists) << by_key.error().message;

  // The connections stay usable.
  EXPECT_EQ(CountItems(*db_->Acquire()), 1);
}

TEST_P(SqlTest, TransactCommits) {
  CreateItems();
  auto r = db_->Transact<int64_t>([](Connection& c) -> Result<int64_t> {
    ATRIUM_RETURN_IF_ERROR(
        c.Exec("INSERT INTO items (id, name) VALUES ($1, $2)", {int64_t{1}, std::string("a")}));
    ATRIUM_ASSIGN_OR_RETURN(Rows rows, c.Exec("INSERT INTO items (id, name) VALUES ($1, $2)",
                                              {int64_t{2}, std::string("b")}));
    return rows.affected;
  });
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(*r, 1);
  EXPECT_EQ(CountItems(*db_->Acquire()), 2);
}

TEST_P(SqlTest, TransactRollsBackWhenFnFails) {
  CreateItems();
  auto r = db_->Transact<int>([](Connection& c) -> Result<int> {
    ATRIUM_RETURN_IF_ERROR(
        c.Exec("INSERT INTO items (id, name) VALUES ($1, $2)", {int64_t{1}, std::string("a")}));
    return Error::FailedPrecondition("changed my mind");
  });
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_EQ(CountItems(*db_->Acquire()), 0);
}

TEST_P(SqlTest, TransactRollsBackWhenAStatementFails) {
  CreateItems();
  MustExec("INSERT INTO items (id, name) VALUES (1, 'taken')");
  auto r = db_->Transact<int>([](Connection& c) -> Result<int> {
    ATRIUM_RETURN_IF_ERROR(
        c.Exec("INSERT INTO items (id, name) VALUES ($1, $2)", {int64_t{2}, std::string("new")}));
    ATRIUM_RETURN_IF_ERROR(
        c.Exec("INSERT INTO items (id, name) VALUES ($1, $2)", {int64_t{3}, std::string("taken")}));
    return 0;
  });
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kAlreadyExists);
  EXPECT_EQ(CountItems(*db_->Acquire()), 1);
  // Every pooled connection is back in autocommit: a write lands at once.
  for (int i = 0; i < 4; ++i) MustExec("UPDATE items SET note = 'ok' WHERE id = 1");
}

TEST_P(SqlTest, TwoPooledConnectionsSeeOnlyCommittedWrites) {
  CreateItems();
  Database::Lease writer = db_->Acquire();
  Database::Lease reader = db_->Acquire();
  ASSERT_OK(writer->BeginWrite());
  ASSERT_OK(
      writer->Exec("INSERT INTO items (id, name) VALUES ($1, $2)", {int64_t{1}, std::string("a")}));
  EXPECT_EQ(CountItems(*writer), 1);
  EXPECT_EQ(CountItems(*reader), 0) << "uncommitted write visible to another connection";
  ASSERT_OK(writer->Exec("COMMIT", {}));
  EXPECT_EQ(CountItems(*reader), 1);
}

TEST_P(SqlTest, ConcurrentReadModifyWriteTransactionsSerialize) {
  ASSERT_OK(
      db_->Acquire()->ExecScript("CREATE TABLE counter (id BIGINT PRIMARY KEY, n BIGINT NOT NULL);"
                                 "INSERT INTO counter (id, n) VALUES (1, 0);"));
  // SQLite has no FOR UPDATE; BEGIN IMMEDIATE already holds the write lock.
  const std::string read = db_->dialect() == Dialect::kPostgres
                               ? "SELECT n FROM counter WHERE id = 1 FOR UPDATE"
                               : "SELECT n FROM counter WHERE id = 1";
  constexpr int kThreads = 4;
  constexpr int kIncrements = 20;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kIncrements; ++i) {
        auto r = db_->Transact<int64_t>([&](Connection& c) -> Result<int64_t> {
          ATRIUM_ASSIGN_OR_RETURN(Rows rows, c.Exec(read, {}));
          int64_t next = rows.rows.at(0).Int(0) + 1;
          ATRIUM_RETURN_IF_ERROR(c.Exec("UPDATE counter SET n = $1 WHERE id = 1", {next}));
          return next;
        });
        EXPECT_TRUE(r.has_value()) << r.error().message;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(MustExec("SELECT n FROM counter").rows.at(0).Int(0), kThreads * kIncrements);
}

TEST_P(SqlTest, SyntaxErrorIsInternalAndConnectionSurvives) {
  for (int i = 0; i < 6; ++i) {  // more than the pool size: every connection sees one
    auto r = db_->Exec("SELEC 1", {});
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.error().code, ErrorCode::kInternal);
    EXPECT_FALSE(r.error().message.empty());
  }
  auto missing = db_->Exec("SELECT * FROM no_such_table", {});
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, ErrorCode::kInternal);
  EXPECT_EQ(MustExec("SELECT 1").rows.at(0).Int(0), 1);
}

TEST_P(SqlTest, PlaceholdersBindByNumberNotByPosition) {
  Rows r = MustExec("SELECT $2, $1, $2", {std::string("one"), std::string("two")});
  ASSERT_EQ(r.rows.size(), 1u);
  EXPECT_EQ(r.rows[0].Text(0), "two");
  EXPECT_EQ(r.rows[0].Text(1), "one");
  EXPECT_EQ(r.rows[0].Text(2), "two");
}

TEST_P(SqlTest, MissingParameterIsAnError) {
  auto r = db_->Exec("SELECT $1, $2", {std::string("only one")});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kInternal) << r.error().message;
}

TEST_P(SqlTest, SeveralStatementsInExecAreAnError) {
  auto r = db_->Exec("SELECT 1; SELECT 2", {});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kInternal) << r.error().message;
  // A trailing semicolon or comment is still one statement.
  EXPECT_EQ(MustExec("SELECT 1; -- done").rows.size(), 1u);
}

TEST_P(SqlTest, QuotesAndUnicodeRoundTrip) {
  CreateItems();
  const std::vector<std::string> samples = {
      "O'Brien said \"hi\"",
      "back\\slash; DROP TABLE items; --",
      "日本語 Ελληνικά עברית 🚀 ñ",
      "tab\tnew\nline",
      "$1 $2 ? :name",
      std::string(10000, 'x'),
  };
  for (size_t i = 0; i < samples.size(); ++i) {
    MustExec("INSERT INTO items (id, name) VALUES ($1, $2)", {static_cast<int64_t>(i), samples[i]});
  }
  Rows rows = MustExec("SELECT name FROM items ORDER BY id");
  ASSERT_EQ(rows.rows.size(), samples.size());
  for (size_t i = 0; i < samples.size(); ++i) EXPECT_EQ(rows.rows[i].Text(0), samples[i]);
  // And as a parameter in a WHERE clause.
  EXPECT_EQ(MustExec("SELECT id FROM items WHERE name = $1", {samples[0]}).rows.size(), 1u);
}

TEST_P(SqlTest, NulInTextIsInvalidArgument) {
  auto r = db_->Exec("SELECT $1", {std::string("a\0b", 3)});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  const std::string held("a\0b", 3);
  auto by_ref = db_->Exec("SELECT $1", {sql::TextRef{held}});
  ASSERT_FALSE(by_ref.has_value());
  EXPECT_EQ(by_ref.error().code, ErrorCode::kInvalidArgument);
}

TEST_P(SqlTest, TextByReferenceIsStoredLikeText) {
  CreateItems();
  // Views that do not end where their string ends: only `size` bytes count.
  const std::string held = "first-name|second-name";
  const std::string_view first(held.data(), 10);
  const std::string_view second(held.data() + 11, 11);
  MustExec("INSERT INTO items (id, name) VALUES ($1, $2), ($3, $4)",
           {int64_t{1}, sql::TextRef{first}, int64_t{2}, sql::TextRef{second}});
  Rows rows = MustExec("SELECT name FROM items ORDER BY id");
  ASSERT_EQ(rows.rows.size(), 2u);
  EXPECT_EQ(rows.rows[0].Text(0), "first-name");
  EXPECT_EQ(rows.rows[1].Text(0), "second-name");
  EXPECT_EQ(MustExec("SELECT id FROM items WHERE name = $1", {sql::TextRef{second}}).rows.size(),
            1u);
}

TEST_P(SqlTest, Int64ExtremesRoundTrip) {
  ASSERT_OK(db_->Exec("CREATE TABLE ints (k BIGINT PRIMARY KEY, v BIGINT)", {}));
  const std::vector<int64_t> values = {std::numeric_limits<int64_t>::min(),
                                       std::numeric_limits<int64_t>::max(),
                                       0,
                                       -1,
                                       1,
                                       int64_t{1} << 53};
  for (size_t i = 0; i < values.size(); ++i) {
    MustExec("INSERT INTO ints (k, v) VALUES ($1, $2)", {static_cast<int64_t>(i), values[i]});
  }
  Rows rows = MustExec("SELECT v FROM ints ORDER BY k");
  ASSERT_EQ(rows.rows.size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(rows.rows[i].Int(0), values[i]);
    EXPECT_EQ(rows.rows[i].Text(0), std::to_string(values[i]));
  }
  // Compared as integers, not as text.
  Rows max = MustExec("SELECT k FROM ints WHERE v = $1", {std::numeric_limits<int64_t>::max()});
  ASSERT_EQ(max.rows.size(), 1u);
  EXPECT_EQ(max.rows[0].Int(0), 1);
}

TEST_P(SqlTest, DoublesRoundTripExactly) {
  ASSERT_OK(db_->Exec("CREATE TABLE reals (k BIGINT PRIMARY KEY, v DOUBLE PRECISION)", {}));
  const std::vector<double> values = {
      0.1, 1.0 / 3.0, -2.5, 1e300, 2.2250738585072014e-308, 123456789.123456789, 0.0};
  for (size_t i = 0; i < values.size(); ++i) {
    MustExec("INSERT INTO reals (k, v) VALUES ($1, $2)", {static_cast<int64_t>(i), values[i]});
  }
  Rows rows = MustExec("SELECT v FROM reals ORDER BY k");
  ASSERT_EQ(rows.rows.size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(rows.rows[i].Real(0), values[i]) << rows.rows[i].Text(0);
  }
}

TEST_P(SqlTest, ExecScriptRunsSeveralStatements) {
  ASSERT_OK(
      db_->Acquire()->ExecScript("CREATE TABLE a (x BIGINT);\n"
                                 "CREATE TABLE b (y TEXT);\n"
                                 "-- a comment\n"
                                 "INSERT INTO a (x) VALUES (1), (2);\n"
                                 "INSERT INTO b (y) VALUES ('semi;colon');\n"));
  EXPECT_EQ(MustExec("SELECT COUNT(*) FROM a").rows.at(0).Int(0), 2);
  EXPECT_EQ(MustExec("SELECT y FROM b").rows.at(0).Text(0), "semi;colon");

  auto bad = db_->Acquire()->ExecScript("CREATE TABLE c (z BIGINT); SELEC 1;");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, ErrorCode::kInternal);
}

// Cases that only make sense on PostgreSQL, with the same set-up.
class PostgresSqlTest : public SqlTest {};

// A server-side disconnect (here pg_terminate_backend) is kUnavailable, and
// the pooled connection reconnects for its next user.
TEST_P(PostgresSqlTest, LostConnectionIsUnavailableAndReconnects) {
  CreateItems();
  Database::Lease conn = db_->Acquire();
  auto pid = conn->Exec("SELECT pg_backend_pid()", {});
  ASSERT_TRUE(pid.has_value()) << pid.error().message;
  ASSERT_OK(admin()->Exec("SELECT pg_terminate_backend($1)", {pid->rows.at(0).Int(0)}));

  auto lost = conn->Exec("SELECT 1", {});
  ASSERT_FALSE(lost.has_value());
  EXPECT_EQ(lost.error().code, ErrorCode::kUnavailable) << lost.error().message;
  auto again = conn->Exec("SELECT 1", {});
  ASSERT_TRUE(again.has_value()) << again.error().message;
  // The reconnected session keeps its settings (search_path from the URL).
  EXPECT_EQ(CountItems(*conn), 0);
}

// Regression guard: after the connection drops inside a transaction, the
// caller's remaining statements must not run in autocommit on the new one.
TEST_P(PostgresSqlTest, LostConnectionInsideTransactionRefusesWritesUntilRollback) {
  CreateItems();
  Database::Lease conn = db_->Acquire();
  auto pid = conn->Exec("SELECT pg_backend_pid()", {});
  ASSERT_TRUE(pid.has_value()) << pid.error().message;
  ASSERT_OK(conn->BeginWrite());
  ASSERT_OK(conn->Exec("INSERT INTO items (id, name) VALUES (1, 'a')", {}));
  ASSERT_OK(admin()->Exec("SELECT pg_terminate_backend($1)", {pid->rows.at(0).Int(0)}));

  auto lost = conn->Exec("INSERT INTO items (id, name) VALUES (2, 'b')", {});
  ASSERT_FALSE(lost.has_value());
  EXPECT_EQ(lost.error().code, ErrorCode::kUnavailable);
  auto refused = conn->Exec("INSERT INTO items (id, name) VALUES (3, 'c')", {});
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kUnavailable);
  auto commit = conn->Exec("COMMIT", {});
  ASSERT_FALSE(commit.has_value()) << "a lost transaction must not report a commit";
  EXPECT_EQ(commit.error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(CountItems(*conn), 0);
}

INSTANTIATE_TEST_SUITE_P(Drivers, SqlTest, ::testing::Values(Backend::kSqlite, Backend::kPostgres),
                         BackendName);
INSTANTIATE_TEST_SUITE_P(Drivers, PostgresSqlTest, ::testing::Values(Backend::kPostgres),
                         BackendName);

TEST(SqlOpenTest, UnreachablePostgresIsUnavailable) {
  auto r = OpenPostgres("postgresql://nobody@127.0.0.1:1/none?connect_timeout=5");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable) << r.error().message;
}

TEST(SqlOpenTest, UnsupportedUrlsAreInvalidArguments) {
  for (const char* url : {"sqlite://:memory:", "sqlite://", "mysql://x"}) {
    auto r = Database::Open(url);
    ASSERT_FALSE(r.has_value()) << url;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument) << url;
  }
}

TEST(SqlOpenTest, UnopenableSqlitePathIsUnavailable) {
  auto r = OpenSqlite("/nonexistent-dir-for-atrium-test/x.db");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable) << r.error().message;
}

}  // namespace
}  // namespace atrium::sql
