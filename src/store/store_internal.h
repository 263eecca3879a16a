// Helpers shared by the files that implement Store (store.cc, store_*.cc
// and gateway_store.cc): row codecs, paging and the gateway policy marker. Not
// part of the store's interface; nothing outside src/store includes this.
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "model/billing_records.h"
#include "model/gateway_records.h"
#include "model/metering_records.h"
#include "model/records.h"
#include "store/queries.h"
#include "store/sql.h"

namespace atrium::store_internal {

inline constexpr int kMaxPageSize = 1000;

inline int ClampLimit(int limit) { return std::clamp(limit, 1, kMaxPageSize); }

// Keyset pagination over rows ordered by a unique key: fetch limit+1 rows;
// if the extra one came, the page's last key is the next cursor.
template <typename T, typename KeyFn>
Page<T> MakePage(std::vector<T> items, int limit, KeyFn key) {
  Page<T> page;
  if (static_cast<int>(items.size()) > limit) {
    items.resize(limit);
    page.next_cursor = key(items.back());
  }
  page.items = std::move(items);
  return page;
}

// Keyset pagination newest first, over rows ordered by a time column, then
// id, both descending: `query` is "SELECT <columns> FROM <table> WHERE
// <condition>" with `params` bound to its placeholders in order. Runs the
// page after `opts.after` (the cursor "<time>.<id>" of the last row of the
// page before) and makes each row a T with `from_row`; the next cursor is
// made of the last item's `time` member and its id. InvalidArgument naming
// `what` for a malformed cursor.
Result<sql::Rows> ExecNewestFirstPage(sql::Database& db, std::string query,
                                      std::vector<sql::Value> params, std::string_view time_column,
                                      const ListOptions& opts, std::string_view what);

template <typename T, typename FromRow>
Result<Page<T>> NewestFirstPage(sql::Database& db, std::string query,
                                std::vector<sql::Value> params, std::string_view time_column,
                                int64_t T::*time, const ListOptions& opts, std::string_view what,
                                FromRow from_row) {
  ATRIUM_ASSIGN_OR_RETURN(auto rows, ExecNewestFirstPage(db, std::move(query), std::move(params),
                                                         time_column, opts, what));
  std::vector<T> items;
  items.reserve(rows.rows.size());
  for (const auto& r : rows.rows) items.push_back(from_row(r));
  return MakePage(std::move(items), ClampLimit(opts.limit),
                  [time](const T& item) { return std::to_string(item.*time) + "." + item.id; });
}

// String lists and maps as JSON text; an unreadable text decodes as empty.
std::string EncodeList(const std::vector<std::string>& v);
std::vector<std::string> DecodeList(const std::string& text);
std::string EncodeMap(const std::map<std::string, std::string>& m);
std::map<std::string, std::string> DecodeMap(const std::string& text);

inline constexpr char kTenantColumns[] =
    "id, name, display_name, tier, regions, weight, labels, state, created_at, updated_at, version";
Tenant TenantFromRow(const sql::Row& r);

inline constexpr char kKeyColumns[] =
    "id, tenant_id, owner_user_id, name, role, scopes, secret_hash, created_at, expires_at, "
    "revoked_at";
// Reads kKeyColumns from column `first` on.
ApiKey KeyFromRow(const sql::Row& r, size_t first = 0);

// Token usage records (gateway_store.cc) and GPU usage records
// (store_metering.cc), column lists and row readers.
inline constexpr char kUsageColumns[] =
    "id, tenant_id, key_id, model, deployment_id, endpoint, api, stream, input_tokens, "
    "output_tokens, cached_tokens, queue_ms, ttft_ms, total_ms, status, http_status, created_at, "
    "flag";
UsageRecord UsageFromRow(const sql::Row& r);
inline constexpr char kGpuUsageColumns[] =
    "id, tenant_id, project, subject_kind, subject_id, model, kind, mig_profile, milli, from_ms, "
    "to_ms, gpu_milli_ms, closes_subject, created_at, deployment_id";
GpuUsageRecord GpuUsageFromRow(const sql::Row& r);

// IN lists over many ids go in chunks of this many: SQLite's oldest limit
// is 999 parameters a statement.
inline constexpr size_t kInListChunk = 500;
// Appends ids[begin, end) to `params` and returns their placeholders,
// "$a, $b, …", for an IN list.
std::string AppendInList(const std::vector<std::string>& ids, size_t begin, size_t end,
                         std::vector<sql::Value>& params);

// Booleans as 0/1 integers (the columns are BIGINT in both dialects).
sql::Value Flag(bool b);

// Every write of a row the gateway's policy is built from (tenants, users,
// API keys, deployments, entitlements, gateway limits) calls this inside its
// own transaction, so the marker and the rows change together. See
// Store::GatewayPolicyMarkerForGateway.
Status BumpGatewayPolicyMarker(sql::Connection& c);

// The adapters the gateway routes (status ready), by id (store_adapters.cc).
Result<std::vector<AdapterRecord>> ReadyAdaptersOn(sql::Connection& c);

// A single-row update or delete inside a transaction: kNotFound naming
// `what` when it matched nothing.
Status ExpectOneRowOn(sql::Connection& c, std::string_view statement,
                      const std::vector<sql::Value>& params, const char* what);

// Credit grants' columns and their row codec (store_budgets.cc).
extern const char kCreditColumns[];
CreditGrant CreditFromRow(const sql::Row& r);

// A transaction's outcome as a Status.
Status StatusOf(Result<bool> r);

// Appends one audit record on an open write transaction: assigns the global
// seq and links the record into its chain (store_audit.cc).
Result<AuditRecord> AppendAuditOn(sql::Connection& c, AuditRecord record);

}  // namespace atrium::store_internal
