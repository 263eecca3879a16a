// Opening the store, and the row codecs and write helpers its files share
// (store_internal.h). Each aggregate's methods are in a file of their own:
// store_tenants.cc, store_identity.cc, store_scheduling.cc, store_audit.cc,
// gateway_store.cc.
#include "store/store.h"

#include <charconv>
#include <nlohmann/json.hpp>

#include "store/migrations.h"
#include "store/store_internal.h"

namespace atrium {

using sql::Row;
using sql::Value;
using Json = nlohmann::json;

using namespace store_internal;  // NOLINT(google-build-using-namespace): the store's own helpers

namespace store_internal {

std::string AppendInList(const std::vector<std::string>& ids, size_t begin, size_t end,
                         std::vector<sql::Value>& params) {
  std::string in;
  for (size_t i = begin; i < end; ++i) {
    params.push_back(ids[i]);
    in += (i == begin ? "$" : ", $") + std::to_string(params.size());
  }
  return in;
}

std::string EncodeList(const std::vector<std::string>& v) { return Json(v).dump(); }

std::string EncodeMap(const std::map<std::string, std::string>& m) { return Json(m).dump(); }

std::vector<std::string> DecodeList(const std::string& text) {
  Json j = Json::parse(text, nullptr, false);
  std::vector<std::string> out;
  if (j.is_array()) {
    for (const auto& item : j) {
      if (item.is_string()) out.push_back(item.get<std::string>());
    }
  }
  return out;
}

std::map<std::string, std::string> DecodeMap(const std::string& text) {
  Json j = Json::parse(text, nullptr, false);
  std::map<std::string, std::string> out;
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.value().is_string()) out[it.key()] = it.value().get<std::string>();
    }
  }
  return out;
}

Tenant TenantFromRow(const Row& r) {
  Tenant t;
  t.id = r.Text(0);
  t.name = r.Text(1);
  t.display_name = r.Text(2);
  t.tier = r.Text(3);
  t.regions = DecodeList(r.Text(4));
  t.weight = r.Int(5);
  t.labels = DecodeMap(r.Text(6));
  t.state = r.Text(7);
  t.created_at = r.Int(8);
  t.updated_at = r.Int(9);
  t.version = r.Int(10);
  return t;
}

ApiKey KeyFromRow(const Row& r, size_t first) {
  ApiKey k;
  k.id = r.Text(first + 0);
  k.tenant_id = r.Text(first + 1);
  k.owner_user_id = r.Text(first + 2);
  k.name = r.Text(first + 3);
  k.role = r.Text(first + 4);
  k.scopes = DecodeList(r.Text(first + 5));
  k.secret_hash = r.Text(first + 6);
  k.created_at = r.Int(first + 7);
  k.expires_at = r.Int(first + 8);
  k.revoked_at = r.Int(first + 9);
  return k;
}

Value Flag(bool b) { return int64_t{b ? 1 : 0}; }

Status BumpGatewayPolicyMarker(sql::Connection& c) {
  ATRIUM_RETURN_IF_ERROR(
      c.Exec("UPDATE gateway_policy_version SET version = version + 1 WHERE id = 1", {}));
  return OkStatus();
}

Status ExpectOneRowOn(sql::Connection& c, std::string_view statement,
                      const std::vector<Value>& params, const char* what) {
  ATRIUM_ASSIGN_OR_RETURN(auto r, c.Exec(statement, params));
  if (r.affected == 0) return Error::NotFound(std::string(what) + " not found");
  return OkStatus();
}

Status StatusOf(Result<bool> r) {
  if (!r.has_value()) return std::move(r).error();
  return OkStatus();
}

Result<sql::Rows> ExecNewestFirstPage(sql::Database& db, std::string query,
                                      std::vector<Value> params, std::string_view time_column,
                                      const ListOptions& opts, std::string_view what) {
  auto placeholder = [&params](Value v) {
    params.push_back(std::move(v));
    return "$" + std::to_string(params.size());
  };
  if (!opts.after.empty()) {
    // "<time>.<id>": the id is everything after the first dot.
    const std::string& cursor = opts.after;
    const size_t dot = cursor.find('.');
    int64_t at = 0;
    const char* end = cursor.data() + (dot == std::string::npos ? 0 : dot);
    auto [ptr, ec] = std::from_chars(cursor.data(), end, at);
    if (dot == std::string::npos || dot == 0 || dot + 1 == cursor.size() || ec != std::errc() ||
        ptr != end) {
      return Error::InvalidArgument("malformed " + std::string(what) + " cursor");
    }
    const std::string t = placeholder(at);
    const std::string id = placeholder(cursor.substr(dot + 1));
    const std::string column(time_column);
    query +=
        " AND (" + column + " < " + t + " OR (" + column + " = " + t + " AND id < " + id + "))";
  }
  const std::string limit = placeholder(int64_t{ClampLimit(opts.limit) + 1});
  query += " ORDER BY " + std::string(time_column) + " DESC, id DESC LIMIT " + limit;
  return db.Exec(query, params);
}

}  // namespace store_internal

Result<std::unique_ptr<Store>> Store::Open(const std::string& url, int pool_size) {
  ATRIUM_ASSIGN_OR_RETURN(auto db, sql::Database::Open(url, pool_size));
  ATRIUM_RETURN_IF_ERROR(ApplyMigrations(*db));
  return std::make_unique<Store>(std::move(db));
}

Store::Store(std::unique_ptr<sql::Database> db) : db_(std::move(db)) {}

}  // namespace atrium
