// SQLite driver for sql::Connection.
//
// Placeholders: SQLite reads "$1" as a *named* parameter called "$1" and
// numbers named parameters in order of first appearance, so "SELECT $2, $1"
// would bind params[0] to "$2" if bound by position. Each parameter is
// therefore bound by its name: "$N" takes params[N-1]. Any other placeholder
// style ("?", ":x", "@x") is rejected so that the same SQL runs on PostgreSQL.
//
// Values come back as text like libpq's: integers in decimal, reals in the
// shortest form that round-trips (SQLite's own real-to-text keeps only 15
// digits, which would lose precision), NULL as nullopt.
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <utility>

#include "store/sql.h"

namespace atrium::sql {
namespace {

// Prepared statements kept per connection. The store issues a fixed set of
// queries, so this only bounds the damage if a caller builds SQL dynamically.
constexpr size_t kMaxCachedStatements = 256;
constexpr int kBusyTimeoutMs = 10000;

Error ErrorFromSqlite(sqlite3* db, int rc, std::string_view what) {
  std::string message = std::string(what) + ": " + sqlite3_errmsg(db);
  switch (rc) {
    case SQLITE_CONSTRAINT_UNIQUE:
    case SQLITE_CONSTRAINT_PRIMARYKEY:
      // sqlite3_errmsg names the columns: "UNIQUE constraint failed: t.name".
      return Error::AlreadyExists(std::move(message));
    default:
      break;
  }
  switch (rc & 0xff) {  // primary result code
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      // Another connection held the lock for longer than busy_timeout.
      return Error::Unavailable(std::move(message));
    default:
      return Error::Internal(std::move(message));
  }
}

std::string RealToText(double v) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  if (ec != std::errc()) return std::to_string(v);
  return std::string(buf, end);
}

// Resets a statement on scope exit so that a cached SELECT never keeps its
// read snapshot (and, in WAL mode, the WAL from being checkpointed) open.
class StatementReset {
 public:
  explicit StatementReset(sqlite3_stmt* stmt) : stmt_(stmt) {}
  ~StatementReset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  StatementReset(const StatementReset&) = delete;
  StatementReset& operator=(const StatementReset&) = delete;

 private:
  sqlite3_stmt* stmt_;
};

class SqliteConnection final : public Connection {
 public:
  explicit SqliteConnection(sqlite3* db) : db_(db) {}
  ~SqliteConnection() override {
    for (auto& [sql, stmt] : statements_) sqlite3_finalize(stmt);
    sqlite3_close_v2(db_);
  }
  SqliteConnection(const SqliteConnection&) = delete;
  SqliteConnection& operator=(const SqliteConnection&) = delete;

  Dialect dialect() const override { return Dialect::kSqlite; }

  Result<Rows> Exec(std::string_view sql, const std::vector<Value>& params) override {
    ATRIUM_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, Prepare(sql));
    Rows out;
    if (stmt == nullptr) return out;  // only whitespace or comments
    StatementReset reset(stmt);
    ATRIUM_RETURN_IF_ERROR(Bind(stmt, params));

    const int64_t changes_before = sqlite3_total_changes64(db_);
    const int ncols = sqlite3_column_count(stmt);
    for (;;) {
      int rc = sqlite3_step(stmt);
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) return ErrorFromSqlite(db_, rc, "sqlite step");
      Row row;
      row.columns.reserve(ncols);
      for (int i = 0; i < ncols; ++i) row.columns.push_back(ColumnText(stmt, i));
      out.rows.push_back(std::move(row));
    }
    // sqlite3_changes() keeps the count of the last INSERT/UPDATE/DELETE, so
    // it would be stale after a SELECT or DDL; only trust it when this
    // statement changed something.
    if (sqlite3_total_changes64(db_) != changes_before) out.affected = sqlite3_changes64(db_);
    return out;
  }

  Status ExecScript(std::string_view sql) override {
    std::string script(sql);  // sqlite3_exec wants a NUL-terminated string
    char* err = nullptr;
    int rc = sqlite3_exec(db_, script.c_str(), nullptr, nullptr, &err);
    if (rc != SQLITE_OK) {
      Error e = ErrorFromSqlite(db_, sqlite3_extended_errcode(db_), "sqlite script");
      sqlite3_free(err);
      return e;
    }
    return OkStatus();
  }

  Status BeginWrite() override {
    // IMMEDIATE takes the write lock now (waiting up to busy_timeout) rather
    // than at the first write, where an upgrade from a read lock fails with
    // SQLITE_BUSY at once and cannot be waited out.
    auto r = Exec("BEGIN IMMEDIATE", {});
    if (!r.has_value()) return std::move(r).error();
    return OkStatus();
  }

  // Applies the per-connection settings; called once after open.
  Status Configure() {
    sqlite3_extended_result_codes(db_, 1);
    sqlite3_busy_timeout(db_, kBusyTimeoutMs);  // same as PRAGMA busy_timeout
    return ExecScript(
        "PRAGMA journal_mode=WAL;"
        "PRAGMA synchronous=NORMAL;"
        "PRAGMA foreign_keys=ON;"
        // 64 MiB page cache per connection (the default is 2 MB): keeps
        // point lookups flat in stores with 100,000s of rows.
        "PRAGMA cache_size=-65536;");
  }

 private:
  // Returns the cached statement for sql, preparing it on first use; nullptr
  // when sql holds no statement.
  Result<sqlite3_stmt*> Prepare(std::string_view sql) {
    std::string key(sql);
    if (auto it = statements_.find(key); it != statements_.end()) return it->second;

    sqlite3_stmt* stmt = nullptr;
    const char* tail = nullptr;
    int rc = sqlite3_prepare_v2(db_, key.data(), static_cast<int>(key.size()), &stmt, &tail);
    if (rc != SQLITE_OK) return ErrorFromSqlite(db_, rc, "sqlite prepare");
    if (stmt == nullptr) return stmt;

    // sqlite3_prepare_v2 silently ignores everything after the first
    // statement; libpq refuses such SQL, so refuse it here too.
    const char* end = key.data() + key.size();
    if (tail != nullptr && tail < end) {
      sqlite3_stmt* extra = nullptr;
      rc = sqlite3_prepare_v2(db_, tail, static_cast<int>(end - tail), &extra, nullptr);
      bool has_extra = rc != SQLITE_OK || extra != nullptr;
      sqlite3_finalize(extra);
      if (has_extra) {
        sqlite3_finalize(stmt);
        return Error::Internal("Exec takes one SQL statement (use ExecScript for several): " + key);
      }
    }

    Status placeholders = CheckPlaceholders(stmt, key);
    if (!placeholders.has_value()) {
      sqlite3_finalize(stmt);
      return std::move(placeholders).error();
    }

    if (statements_.size() >= kMaxCachedStatements) {
      for (auto& [cached_sql, cached] : statements_) sqlite3_finalize(cached);
      statements_.clear();
      param_numbers_.clear();
    }
    statements_.emplace(std::move(key), stmt);
    return stmt;
  }

  // Every placeholder must be "$N" with N >= 1.
  static Status CheckPlaceholders(sqlite3_stmt* stmt, const std::string& sql) {
    const int count = sqlite3_bind_parameter_count(stmt);
    for (int i = 1; i <= count; ++i) {
      const char* name = sqlite3_bind_parameter_name(stmt, i);
      if (ParamNumber(name) <= 0) {
        return Error::Internal(std::string("placeholder must be $1, $2, ... but found '") +
                               (name ? name : "?") + "' in: " + sql);
      }
    }
    return OkStatus();
  }

  // "$12" -> 12; anything else -> 0.
  static long ParamNumber(const char* name) {
    if (name == nullptr || name[0] != '$' || name[1] < '1' || name[1] > '9') return 0;
    char* end = nullptr;
    long n = std::strtol(name + 1, &end, 10);
    return *end == '\0' ? n : 0;
  }

  // The "$N" number of each parameter slot, computed once per statement:
  // sqlite3_bind_parameter_name walks a list, so naming every slot on every
  // bind costs O(slots^2) for a multi-row INSERT.
  const std::vector<long>& ParamNumbers(sqlite3_stmt* stmt) {
    auto [it, inserted] = param_numbers_.try_emplace(stmt);
    if (inserted) {
      const int count = sqlite3_bind_parameter_count(stmt);
      it->second.reserve(static_cast<size_t>(count));
      for (int i = 1; i <= count; ++i) {
        it->second.push_back(ParamNumber(sqlite3_bind_parameter_name(stmt, i)));
      }
    }
    return it->second;
  }

  Status Bind(sqlite3_stmt* stmt, const std::vector<Value>& params) {
    const std::vector<long>& numbers = ParamNumbers(stmt);
    const int count = static_cast<int>(numbers.size());
    for (int i = 1; i <= count; ++i) {
      const long n = numbers[static_cast<size_t>(i - 1)];
      if (n < 1 || static_cast<size_t>(n) > params.size()) {
        return Error::Internal("statement uses $" + std::to_string(n) + " but only " +
                               std::to_string(params.size()) +
                               " parameters were given: " + sqlite3_sql(stmt));
      }
      const Value& v = params[n - 1];
      int rc = SQLITE_OK;
      if (std::holds_alternative<std::monostate>(v)) {
        rc = sqlite3_bind_null(stmt, i);
      } else if (const auto* iv = std::get_if<int64_t>(&v)) {
        rc = sqlite3_bind_int64(stmt, i, *iv);
      } else if (const auto* dv = std::get_if<double>(&v)) {
        rc = sqlite3_bind_double(stmt, i, *dv);
      } else {
        const auto* ref = std::get_if<TextRef>(&v);
        const std::string_view s = ref ? ref->text : std::string_view(std::get<std::string>(v));
        // Refused as on PostgreSQL, whose text type cannot hold NUL, so that
        // a value the SQLite store accepts is never lost on PostgreSQL.
        if (s.find('\0') != std::string::npos) {
          return Error::InvalidArgument("text parameter $" + std::to_string(n) +
                                        " contains a NUL byte");
        }
        // Not copied: `params` outlives the statement's run, and
        // StatementReset clears the bindings before Exec returns.
        rc = sqlite3_bind_text64(stmt, i, s.data(), s.size(), SQLITE_STATIC, SQLITE_UTF8);
      }
      if (rc != SQLITE_OK) return ErrorFromSqlite(db_, rc, "sqlite bind");
    }
    return OkStatus();
  }

  static std::optional<std::string> ColumnText(sqlite3_stmt* stmt, int i) {
    switch (sqlite3_column_type(stmt, i)) {
      case SQLITE_NULL:
        return std::nullopt;
      case SQLITE_FLOAT:
        return RealToText(sqlite3_column_double(stmt, i));
      default: {
        // Integers convert to decimal; text and blobs come back byte for byte.
        const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt, i));
        const int n = sqlite3_column_bytes(stmt, i);
        return p ? std::string(p, n) : std::string();
      }
    }
  }

  sqlite3* db_;
  // SQL text -> prepared statement owned by this connection.
  std::unordered_map<std::string, sqlite3_stmt*> statements_;
  std::unordered_map<sqlite3_stmt*, std::vector<long>> param_numbers_;  // of statements_
};

}  // namespace

Result<std::unique_ptr<Connection>> OpenSqlite(const std::string& path) {
  // The database holds password hashes, key hashes and the audit trail: only
  // its owner reads it. Created 0600 (SQLite gives its -wal and -shm files
  // the database's mode); an older file made 0644 is narrowed here.
  if (!path.empty() && path != ":memory:" && path.rfind("file:", 0) != 0) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
      return Error::Unavailable("cannot open sqlite database " + path + ": " +
                                std::strerror(errno));
    }
    ::fchmod(fd, 0600);
    ::close(fd);
  }
  sqlite3* db = nullptr;
  // NOMUTEX: a pooled connection is used by one thread at a time.
  int rc = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = "cannot open sqlite database " + path + ": " +
                          (db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
    sqlite3_close_v2(db);
    return Error::Unavailable(std::move(message));
  }
  auto conn = std::make_unique<SqliteConnection>(db);
  ATRIUM_RETURN_IF_ERROR(conn->Configure());
  return std::unique_ptr<Connection>(std::move(conn));
}

}  // namespace atrium::sql
