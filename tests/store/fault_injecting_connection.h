// A SQL connection for tests that passes every statement to the real one
// except those it is told to fail: the Nth statement (from now) whose text
// starts with a given prefix ("COMMIT", "INSERT INTO usage_records") returns
// an error without reaching the database. Failing "COMMIT" shows what a
// transaction that could not commit leaves: Database::Transact rolls it back.
// All connections of one database share one SqlFaults, so the count does not
// depend on which pooled connection runs the statement.
#pragma once

#include <cctype>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "store/sql.h"

namespace atrium::testdb {

class SqlFaults {
 public:
  // The nth statement from now (1: the next) starting with `prefix` fails
  // with `code` (kUnavailable: as a lost connection or a failed disk would).
  void FailNth(std::string prefix, int nth = 1, ErrorCode code = ErrorCode::kUnavailable) {
    std::lock_guard lock(mu_);
    rules_.push_back({std::move(prefix), nth, code, 0});
  }
  // Statements seen starting with `prefix` (failed ones included), since
  // the database was opened. BeginWrite counts as "BEGIN".
  int Count(std::string_view prefix) {
    std::lock_guard lock(mu_);
    int n = 0;
    for (const std::string& s : seen_) n += s.starts_with(prefix) ? 1 : 0;
    return n;
  }
  // Injected failures so far.
  int failed() {
    std::lock_guard lock(mu_);
    return failed_;
  }

  // For sql::Database::Open: wraps each connection; `this` outlives them.
  sql::Database::ConnectionWrapper Wrapper() {
    return [this](std::unique_ptr<sql::Connection> c) -> std::unique_ptr<sql::Connection> {
      return std::make_unique<Connection>(*this, std::move(c));
    };
  }

 private:
  struct Rule {
    std::string prefix;
    int nth;
    ErrorCode code;
    int seen;
  };

  // Counts the statement; the error it is to fail with, if any.
  std::optional<Error> Decide(std::string_view sql) {
    while (!sql.empty() && std::isspace(static_cast<unsigned char>(sql.front()))) {
      sql.remove_prefix(1);
    }
    std::lock_guard lock(mu_);
    seen_.emplace_back(sql.substr(0, 64));
    for (Rule& rule : rules_) {
      if (!sql.starts_with(rule.prefix) || ++rule.seen != rule.nth) continue;
      ++failed_;
      return Error{rule.code, "injected failure of " + std::string(sql.substr(0, 40))};
    }
    return std::nullopt;
  }

  class Connection final : public sql::Connection {
   public:
    Connection(SqlFaults& faults, std::unique_ptr<sql::Connection> base)
        : faults_(faults), base_(std::move(base)) {}
    sql::Dialect dialect() const override { return base_->dialect(); }
    Result<sql::Rows> Exec(std::string_view sql, const std::vector<sql::Value>& params) override {
      if (auto e = faults_.Decide(sql)) return *e;
      return base_->Exec(sql, params);
    }
    Status ExecScript(std::string_view sql) override {
      if (auto e = faults_.Decide(sql)) return *e;
      return base_->ExecScript(sql);
    }
    Status BeginWrite() override {
      if (auto e = faults_.Decide("BEGIN")) return *e;
      return base_->BeginWrite();
    }

   private:
    SqlFaults& faults_;
    std::unique_ptr<sql::Connection> base_;
  };

  std::mutex mu_;
  std::vector<Rule> rules_;        // GUARDED_BY(mu_)
  std::vector<std::string> seen_;  // GUARDED_BY(mu_): each statement's first 64 characters
  int failed_ = 0;                 // GUARDED_BY(mu_)
};

}  // namespace atrium::testdb
