// PostgreSQL driver for sql::Connection, on libpq.
//
// Parameters travel in text format with no declared type, so the server
// infers each from its use ("WHERE id = $1" on a BIGINT column reads "42" as
// a bigint); results come back as text. Integers are sent in decimal, reals in
// the shortest form that round-trips, NULL as a null pointer.
#include <libpq-fe.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "store/sql.h"

namespace atrium::sql {
namespace {

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgResult = std::unique_ptr<PGresult, ResultDeleter>;

// Settings every session needs; applied after connect and after a reset.
// client_min_messages keeps NOTICEs ("table already exists, skipping") off
// the wire; the notice processor below drops what still arrives.
constexpr const char* kSessionSetup = "SET client_min_messages = warning";

void IgnoreNotice(void* /*arg*/, const char* /*message*/) {}

std::string TrimmedMessage(const char* m) {
  std::string s = m ? m : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string DoubleToText(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  if (ec != std::errc()) return std::to_string(v);
  return std::string(buf, end);
}

// True when sql, ignoring leading blanks and case, starts with the keyword.
bool StartsWithKeyword(std::string_view sql, std::string_view keyword) {
  size_t i = sql.find_first_not_of(" \t\r\n");
  if (i == std::string_view::npos || sql.size() - i < keyword.size()) return false;
  for (size_t k = 0; k < keyword.size(); ++k) {
    char c = sql[i + k];
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    if (c != keyword[k]) return false;
  }
  size_t after = i + keyword.size();
  return after == sql.size() ||
         !(std::isalnum(static_cast<unsigned char>(sql[after])) || sql[after] == '_');
}

class PostgresConnection final : public Connection {
 public:
  explicit PostgresConnection(PGconn* conn) : conn_(conn) {}
  ~PostgresConnection() override { PQfinish(conn_); }
  PostgresConnection(const PostgresConnection&) = delete;
  PostgresConnection& operator=(const PostgresConnection&) = delete;

  Dialect dialect() const override { return Dialect::kPostgres; }

  Result<Rows> Exec(std::string_view sql, const std::vector<Value>& params) override {
    if (lost_in_transaction_) return FinishLostTransaction(sql);
    ATRIUM_RETURN_IF_ERROR(EnsureConnected());

    std::vector<std::string> text(params.size());  // numbers formatted for the wire
    std::vector<const char*> values(params.size(), nullptr);
    for (size_t i = 0; i < params.size(); ++i) {
      const Value& v = params[i];
      if (std::holds_alternative<std::monostate>(v)) continue;  // NULL
      if (const auto* iv = std::get_if<int64_t>(&v)) {
        text[i] = std::to_string(*iv);
      } else if (const auto* dv = std::get_if<double>(&v)) {
        text[i] = DoubleToText(*dv);
      } else {
        const auto* ref = std::get_if<TextRef>(&v);
        const std::string_view s = ref ? ref->text : std::string_view(std::get<std::string>(v));
        // A text-format parameter ends at its first NUL, which would store a
        // silently truncated value; PostgreSQL text cannot hold NUL anyway.
        if (s.find('\0') != std::string_view::npos) {
          return Error::InvalidArgument("text parameter $" + std::to_string(i + 1) +
                                        " contains a NUL byte");
        }
        if (!ref) {
          values[i] = std::get<std::string>(v).c_str();  // params outlive the call
          continue;
        }
        text[i] = std::string(s);  // the wire wants it NUL-terminated
      }
      values[i] = text[i].c_str();
    }

    const bool in_transaction = InTransaction();
    std::string statement(sql);
    PgResult res(PQexecParams(conn_, statement.c_str(), static_cast<int>(params.size()),
                              /*paramTypes=*/nullptr, values.data(), /*paramLengths=*/nullptr,
                              /*paramFormats=*/nullptr, /*resultFormat=*/0));
    ATRIUM_RETURN_IF_ERROR(CheckResult(res.get(), in_transaction));

    Rows out;
    const int nrows = PQntuples(res.get());
    const int ncols = PQnfields(res.get());
    out.rows.reserve(nrows);
    for (int r = 0; r < nrows; ++r) {
      Row row;
      row.columns.reserve(ncols);
      for (int c = 0; c < ncols; ++c) {
        if (PQgetisnull(res.get(), r, c)) {
          row.columns.emplace_back(std::nullopt);
        } else {
          row.columns.emplace_back(
              std::string(PQgetvalue(res.get(), r, c), PQgetlength(res.get(), r, c)));
        }
      }
      out.rows.push_back(std::move(row));
    }
    // PQcmdTuples is "" for DDL but also counts the rows a SELECT returned;
    // affected means rows changed, as on SQLite.
    const char* tag = PQcmdStatus(res.get());
    if (tag == nullptr || std::strncmp(tag, "SELECT ", 7) != 0) {
      out.affected = std::strtoll(PQcmdTuples(res.get()), nullptr, 10);
    }
    return out;
  }

  Status ExecScript(std::string_view sql) override {
    if (lost_in_transaction_) {
      return Error::Unavailable("postgres connection was lost inside a transaction; roll it back");
    }
    ATRIUM_RETURN_IF_ERROR(EnsureConnected());
    const bool in_transaction = InTransaction();
    std::string script(sql);
    // The simple-query protocol runs the statements in order and stops at the
    // first error; without explicit BEGIN/COMMIT they form one transaction.
    PgResult res(PQexec(conn_, script.c_str()));
    return CheckResult(res.get(), in_transaction);
  }

  Status BeginWrite() override {
    // A new transaction: whatever was lost with the old one is moot.
    lost_in_transaction_ = false;
    auto r = Exec("BEGIN", {});
    if (!r.has_value()) return std::move(r).error();
    return OkStatus();
  }

  // Applies the session settings; called once after connect.
  Status Configure() {
    PQsetNoticeProcessor(conn_, IgnoreNotice, nullptr);  // survives PQreset
    PgResult res(PQexec(conn_, kSessionSetup));
    return CheckResult(res.get(), /*in_transaction=*/false);
  }

 private:
  bool InTransaction() const {
    PGTransactionStatusType t = PQtransactionStatus(conn_);
    return t == PQTRANS_INTRANS || t == PQTRANS_INERROR;
  }

  // Reconnects a connection that broke during an earlier call.
  Status EnsureConnected() {
    if (PQstatus(conn_) == CONNECTION_OK) return OkStatus();
    return Reset();
  }

  Status Reset() {
    PQreset(conn_);
    if (PQstatus(conn_) != CONNECTION_OK) {
      return Error::Unavailable("postgres connection lost: " +
                                TrimmedMessage(PQerrorMessage(conn_)));
    }
    PgResult res(PQexec(conn_, kSessionSetup));
    if (PQresultStatus(res.get()) != PGRES_COMMAND_OK) {
      return Error::Unavailable("postgres session setup failed after reconnect: " +
                                TrimmedMessage(PQerrorMessage(conn_)));
    }
    return OkStatus();
  }

  // After the connection dropped inside a transaction the server rolled it
  // back. Running the caller's next statements on the fresh connection would
  // commit them one by one, so everything fails until the caller ends the
  // transaction: ROLLBACK succeeds (there is nothing left to undo), COMMIT
  // reports that the transaction was lost.
  Result<Rows> FinishLostTransaction(std::string_view sql) {
    if (StartsWithKeyword(sql, "ROLLBACK")) {
      lost_in_transaction_ = false;
      return Rows{};
    }
    if (StartsWithKeyword(sql, "COMMIT") || StartsWithKeyword(sql, "END")) {
      lost_in_transaction_ = false;
      return Error::Unavailable("postgres connection was lost; the transaction was rolled back");
    }
    return Error::Unavailable("postgres connection was lost inside a transaction; roll it back");
  }

  // Maps a libpq result to OK or an Error. in_transaction: whether the
  // statement ran inside an explicit transaction.
  Status CheckResult(PGresult* res, bool in_transaction) {
    ExecStatusType status = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
    if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK || status == PGRES_EMPTY_QUERY) {
      return OkStatus();
    }
    if (PQstatus(conn_) == CONNECTION_BAD) {
      std::string message = "postgres connection lost: " + TrimmedMessage(PQerrorMessage(conn_));
      if (in_transaction) lost_in_transaction_ = true;
      // Reconnect now so the pooled connection is usable by the next caller;
      // the statement itself is not retried, since it may have been applied.
      (void)Reset();
      return Error::Unavailable(std::move(message));
    }
    const char* state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : nullptr;
    const char* primary = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : nullptr;
    std::string sqlstate = state ? state : "";
    std::string message = "postgres: " + TrimmedMessage(primary ? primary : PQerrorMessage(conn_));
    if (!sqlstate.empty()) message += " (SQLSTATE " + sqlstate + ")";
    // The primary message of 23505 names the constraint:
    // duplicate key value violates unique constraint "tenants_name_key".
    if (sqlstate == "23505") return Error::AlreadyExists(std::move(message));
    // Connection-class errors, shutdown, and the transient conflicts a retry
    // resolves (serialization failure, deadlock) mean "try again later".
    // 08P01 (protocol violation, e.g. too few parameters) is a bug instead.
    const bool connection_class = sqlstate.rfind("08", 0) == 0 && sqlstate != "08P01";
    if (connection_class || sqlstate.rfind("57P0", 0) == 0 || sqlstate == "40001" ||
        sqlstate == "40P01") {
      return Error::Unavailable(std::move(message));
    }
    return Error::Internal(std::move(message));
  }

  PGconn* conn_;
  bool lost_in_transaction_ = false;
};

}  // namespace

Result<std::unique_ptr<Connection>> OpenPostgres(const std::string& conninfo) {
  PGconn* conn = PQconnectdb(conninfo.c_str());
  if (conn == nullptr) return Error::Unavailable("postgres: out of memory opening a connection");
  if (PQstatus(conn) != CONNECTION_OK) {
    std::string message = "cannot connect to postgres: " + TrimmedMessage(PQerrorMessage(conn));
    PQfinish(conn);
    return Error::Unavailable(std::move(message));
  }
  auto pg = std::make_unique<PostgresConnection>(conn);
  ATRIUM_RETURN_IF_ERROR(pg->Configure());
  return std::unique_ptr<Connection>(std::move(pg));
}

}  // namespace atrium::sql
