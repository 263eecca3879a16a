#include "store/sql.h"

#include <cstdlib>

#include "common/strings.h"

namespace atrium::sql {

const std::string& Row::Text(size_t i) const {
  static const std::string kEmpty;
  const auto& c = columns.at(i);
  return c ? *c : kEmpty;
}

int64_t Row::Int(size_t i) const {
  const auto& c = columns.at(i);
  return c ? std::strtoll(c->c_str(), nullptr, 10) : 0;
}

double Row::Real(size_t i) const {
  const auto& c = columns.at(i);
  return c ? std::strtod(c->c_str(), nullptr) : 0.0;
}

Result<std::unique_ptr<Database>> Database::Open(const std::string& url, int pool_size) {
  return Open(url, pool_size, nullptr);
}

Result<std::unique_ptr<Database>> Database::Open(const std::string& url, int pool_size,
                                                 const ConnectionWrapper& wrap) {
  if (pool_size < 1) pool_size = 1;
  std::vector<std::unique_ptr<Connection>> conns;
  Dialect dialect;
  if (StartsWith(url, "sqlite://")) {
    dialect = Dialect::kSqlite;
    std::string path = url.substr(std::string_view("sqlite://").size());
    if (path.empty() || path == ":memory:") {
      return Error::InvalidArgument("sqlite store needs a file path: sqlite:///path/to/atrium.db");
    }
    for (int i = 0; i < pool_size; ++i) {
      ATRIUM_ASSIGN_OR_RETURN(auto c, OpenSqlite(path));
      conns.push_back(std::move(c));
    }
  } else if (StartsWith(url, "postgresql://") || StartsWith(url, "postgres://")) {
    dialect = Dialect::kPostgres;
    for (int i = 0; i < pool_size; ++i) {
      ATRIUM_ASSIGN_OR_RETURN(auto c, OpenPostgres(url));
      conns.push_back(std::move(c));
    }
  } else {
    return Error::InvalidArgument(
        "unsupported store URL (want sqlite:///path or postgresql://...)");
  }
  if (wrap) {
    for (auto& c : conns) c = wrap(std::move(c));
  }
  return std::unique_ptr<Database>(new Database(dialect, std::move(conns)));
}

Database::Lease::~Lease() {
  if (conn_) db_->Release(std::move(conn_));
}

Database::Lease Database::Acquire() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !idle_.empty(); });
  auto c = std::move(idle_.back());
  idle_.pop_back();
  return Lease(this, std::move(c));
}

void Database::Release(std::unique_ptr<Connection> c) {
  {
    std::lock_guard lock(mu_);
    idle_.push_back(std::move(c));
  }
  cv_.notify_one();
}

Result<Rows> Database::Exec(std::string_view sql, const std::vector<Value>& params) {
  Lease conn = Acquire();
  return conn->Exec(sql, params);
}

}  // namespace atrium::sql
