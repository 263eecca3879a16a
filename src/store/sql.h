// A small SQL access layer with two drivers, SQLite and PostgreSQL (libpq),
// so that the store's queries are written once. Placeholders are $1, $2, ...
// in both dialects. Only what the store needs: statements with bound text,
// integer, real or null parameters; rows of nullable text.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/result.h"

namespace atrium::sql {

enum class Dialect { kSqlite, kPostgres };

// Text that the caller keeps alive and unchanged until Exec returns: SQLite
// binds it without a copy (bulk inserts of records the caller holds anyway).
// Never made implicitly, so a string literal stays a std::string.
struct TextRef {
  std::string_view text;
};

using Value = std::variant<std::monostate, int64_t, double, std::string, TextRef>;
inline Value Null() { return std::monostate{}; }

// One result row; columns in SELECT order, NULL as nullopt.
struct Row {
  std::vector<std::optional<std::string>> columns;

  bool IsNull(size_t i) const { return !columns.at(i).has_value(); }
  const std::string& Text(size_t i) const;  // "" for NULL
  int64_t Int(size_t i) const;              // 0 for NULL
  double Real(size_t i) const;              // 0 for NULL
};

struct Rows {
  std::vector<Row> rows;
  int64_t affected = 0;  // rows changed by INSERT/UPDATE/DELETE
};

// One open connection. Not thread-safe: a Database hands each to one user at
// a time. Errors: a unique-constraint violation is kAlreadyExists; a lost
// connection is kUnavailable; anything else kInternal.
class Connection {
 public:
  virtual ~Connection() = default;
  virtual Dialect dialect() const = 0;
  virtual Result<Rows> Exec(std::string_view sql, const std::vector<Value>& params) = 0;
  // Runs a script of several statements without parameters (migrations).
  virtual Status ExecScript(std::string_view sql) = 0;
  // Starts a transaction that will write; on SQLite this takes the write lock
  // up front (BEGIN IMMEDIATE) so that two writers never deadlock.
  virtual Status BeginWrite() = 0;
};

Result<std::unique_ptr<Connection>> OpenSqlite(const std::string& path);
// conninfo: a libpq connection URI ("postgresql://...").
Result<std::unique_ptr<Connection>> OpenPostgres(const std::string& conninfo);

// A fixed pool of connections to one database.
class Database {
 public:
  // url: "sqlite:///abs/path.db", "sqlite://:memory:" is not supported
  // (each pooled connection would see its own database), or
  // "postgresql://user@host:port/db?...".
  static Result<std::unique_ptr<Database>> Open(const std::string& url, int pool_size = 4);
  // The same with every connection passed through `wrap` as it is opened:
  // the seam for a test's connection that makes a chosen statement fail
  // (tests/store/fault_injecting_connection.h). Not for production use.
  using ConnectionWrapper = std::function<std::unique_ptr<Connection>(std::unique_ptr<Connection>)>;
  static Result<std::unique_ptr<Database>> Open(const std::string& url, int pool_size,
                                                const ConnectionWrapper& wrap);

  Dialect dialect() const { return dialect_; }

  // One statement in autocommit mode.
  Result<Rows> Exec(std::string_view sql, const std::vector<Value>& params = {});

  // Runs fn inside a write transaction on one connection: commits when fn
  // returns a value, rolls back when it returns an error.
  template <typename T>
  Result<T> Transact(const std::function<Result<T>(Connection&)>& fn);

  // Connections are leased to one caller at a time.
  class Lease {
   public:
    Lease(Database* db, std::unique_ptr<Connection> c) : db_(db), conn_(std::move(c)) {}
    Lease(Lease&&) = default;
    ~Lease();
    Connection& operator*() { return *conn_; }
    Connection* operator->() { return conn_.get(); }

   private:
    Database* db_;
    std::unique_ptr<Connection> conn_;
  };
  Lease Acquire();

 private:
  Database(Dialect d, std::vector<std::unique_ptr<Connection>> conns)
      : dialect_(d), idle_(std::move(conns)) {}
  void Release(std::unique_ptr<Connection> c);

  Dialect dialect_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Connection>> idle_;  // GUARDED_BY(mu_)
};

template <typename T>
Result<T> Database::Transact(const std::function<Result<T>(Connection&)>& fn) {
  Lease conn = Acquire();
  ATRIUM_RETURN_IF_ERROR(conn->BeginWrite());
  Result<T> result = fn(*conn);
  if (!result.has_value()) {
    (void)conn->Exec("ROLLBACK", {});
    return result;
  }
  auto commit = conn->Exec("COMMIT", {});
  if (!commit.has_value()) {
    (void)conn->Exec("ROLLBACK", {});
    return std::move(commit).error();
  }
  return result;
}

}  // namespace atrium::sql
