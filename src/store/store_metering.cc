// The store's GPU usage records: what the GPU meter (src/metering) writes,
// and the tenant's listings and sums of them. See store.h for the contracts.
#include <map>
#include <utility>

#include "store/store.h"
#include "store/store_internal.h"

namespace atrium {
namespace {

using sql::Row;
using sql::Value;
using store_internal::ClampLimit;
using store_internal::Flag;
using store_internal::GpuUsageFromRow;
using store_internal::kGpuUsageColumns;
using store_internal::MakePage;
using store_internal::NewestFirstPage;
using store_internal::StatusOf;

std::string P(size_t n) { return "$" + std::to_string(n); }

// Why `g` can never be stored; "" when it can. Its text comes from the
// store's own allocation and job rows, so only the shape is checked.
std::string GpuUsageDefect(const GpuUsageRecord& g) {
  if (g.id.empty()) return "GPU usage record without id";
  if (g.tenant_id.empty()) return "GPU usage record " + g.id + " has no tenant";
  if (g.subject_kind.empty() || g.subject_id.empty()) {
    return "GPU usage record " + g.id + " has no subject";
  }
  if (g.to_ms < g.from_ms) return "GPU usage record " + g.id + " ends before it starts";
  if (g.gpu_milli_ms < 0 || g.milli < 0) {
    return "GPU usage record " + g.id + " has a negative amount";
  }
  return "";
}

std::string GpuUsageWhere(const TenantScope& scope, const GpuUsageFilter& filter,
                          std::vector<Value>& params) {
  params.push_back(scope.tenant_id);
  std::string where = "tenant_id = " + P(params.size());
  if (filter.from != 0) {
    params.push_back(filter.from);
    where += " AND from_ms >= " + P(params.size());
  }
  if (filter.to != 0) {
    params.push_back(filter.to);
    where += " AND from_ms < " + P(params.size());
  }
  if (!filter.model.empty()) {
    params.push_back(filter.model);
    where += " AND model = " + P(params.size());
  }
  if (!filter.project.empty()) {
    params.push_back(filter.project);
    where += " AND project = " + P(params.size());
  }
  if (!filter.subject_kind.empty()) {
    params.push_back(filter.subject_kind);
    where += " AND subject_kind = " + P(params.size());
  }
  if (!filter.deployment_id.empty()) {
    params.push_back(filter.deployment_id);
    where += " AND deployment_id = " + P(params.size());
  }
  if (!filter.job_id.empty()) {
    // The job's runs: subject ids "<job_id>.<attempt>". Compared by
    // prefix, not by range or LIKE: the order of text depends on the
    // collation, and SQLite's LIKE ignores case.
    const std::string prefix = filter.job_id + ".";
    params.push_back(prefix);
    where += " AND subject_kind = 'job' AND substr(subject_id, 1, " +
             std::to_string(prefix.size()) + ") = " + P(params.size());
  }
  return where;
}

}  // namespace

Status Store::InsertGpuUsageRecords(const std::vector<GpuUsageRecord>& records) {
  if (records.empty()) return OkStatus();
  for (const auto& g : records) {
    if (std::string defect = GpuUsageDefect(g); !defect.empty()) {
      return Error::InvalidArgument(defect);
    }
  }
  static const std::string insert = std::string("INSERT INTO gpu_usage_records (") +
                                    kGpuUsageColumns +
                                    ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, "
                                    "$13, $14, $15) ON CONFLICT (id) DO NOTHING";
  // One transaction, in the caller's order: a crash leaves none or all of
  // them, so each subject's stored records stay a prefix of its chain. The
  // chain is checked here too, under a lock that orders meter writes (on
  // SQLite BEGIN IMMEDIATE already does; the lock blocks no reader): two
  // meters on one database, one of them with a stale view, cannot extend a
  // closed subject or store a record that does not continue the chain.
  return StatusOf(db_->Transact<bool>([&](sql::Connection& c) -> Result<bool> {
    if (c.dialect() == sql::Dialect::kPostgres) {
      ATRIUM_RETURN_IF_ERROR(
          c.Exec("LOCK TABLE gpu_usage_records IN SHARE ROW EXCLUSIVE MODE", {}));
    }
    std::map<std::pair<std::string, std::string>, GpuMeteredPoint> chains;
    for (const auto& g : records) {
      auto key = std::make_pair(g.subject_kind, g.subject_id);
      auto it = chains.find(key);
      if (it == chains.end()) {
        ATRIUM_ASSIGN_OR_RETURN(
            auto rows, c.Exec("SELECT COUNT(*), MAX(to_ms), MAX(closes_subject) FROM "
                              "gpu_usage_records WHERE subject_kind = $1 AND subject_id = $2",
                              {g.subject_kind, g.subject_id}));
        GpuMeteredPoint point;
        if (!rows.rows.empty() && rows.rows[0].Int(0) > 0) {
          point = {rows.rows[0].Int(1), rows.rows[0].Int(2) != 0};
        }
        it = chains.emplace(key, point).first;
      }
      GpuMeteredPoint& chain = it->second;
      if (chain.closed || (chain.to_ms != -1 && chain.to_ms != g.from_ms)) continue;
      ATRIUM_ASSIGN_OR_RETURN(
          auto inserted,
          c.Exec(insert, {g.id, g.tenant_id, g.project, g.subject_kind, g.subject_id, g.model,
                          g.kind, g.mig_profile, g.milli, g.from_ms, g.to_ms, g.gpu_milli_ms,
                          Flag(g.closes_subject), g.created_at, g.deployment_id}));
      if (inserted.affected > 0) chain = {g.to_ms, g.closes_subject};
    }
    return true;
  }));
}

Result<Page<GpuUsageRecord>> Store::ListGpuUsage(const TenantScope& scope,
                                                 const GpuUsageFilter& filter,
                                                 const ListOptions& opts) {
  std::vector<Value> params;
  std::string q = std::string("SELECT ") + kGpuUsageColumns + " FROM gpu_usage_records WHERE " +
                  GpuUsageWhere(scope, filter, params);
  return NewestFirstPage(*db_, std::move(q), std::move(params), "from_ms", &GpuUsageRecord::from_ms,
                         opts, "GPU usage", GpuUsageFromRow);
}

Result<std::vector<GpuUsageTotals>> Store::SummarizeGpuUsage(const TenantScope& scope,
                                                             const GpuUsageFilter& filter,
                                                             const std::string& group_by) {
  std::string columns;
  if (group_by == "model") {
    columns = "model, kind, '', ''";
  } else if (group_by == "project") {
    columns = "'', '', project, ''";
  } else if (group_by == "deployment") {
    columns = "'', '', '', deployment_id";
  } else if (group_by.empty()) {
    columns = "'', '', '', ''";
  } else {
    return Error::InvalidArgument("group_by must be model, project or deployment");
  }
  std::vector<Value> params;
  // One record's amount is below 3.6e15 (src/metering/gpu_usage.h), so a
  // SUM overflows only past ~292,000 GPU-years in one row.
  std::string q = "SELECT " + columns + ", COUNT(*), SUM(gpu_milli_ms) FROM gpu_usage_records " +
                  "WHERE " + GpuUsageWhere(scope, filter, params);
  if (group_by == "model") q += " GROUP BY model, kind ORDER BY model, kind";
  if (group_by == "project") q += " GROUP BY project ORDER BY project";
  if (group_by == "deployment") q += " GROUP BY deployment_id ORDER BY deployment_id";
  ATRIUM_ASSIGN_OR_RETURN(auto rows, db_->Exec(q, params));
  std::vector<GpuUsageTotals> out;
  for (const auto& r : rows.rows) {
    // SUM over no rows is NULL, which reads as 0.
    out.push_back({r.Text(0), r.Text(1), r.Text(2), r.Text(3), r.Int(4), r.Int(5)});
  }
  return out;
}

Result<std::map<std::string, GpuMeteredPoint>> Store::GpuMeteredPointsForMetering(
    const std::string& subject_kind, const std::vector<std::string>& subject_ids) {
  std::map<std::string, GpuMeteredPoint> out;
  for (size_t start = 0; start < subject_ids.size(); start += store_internal::kInListChunk) {
    const size_t end = std::min(subject_ids.size(), start + store_internal::kInListChunk);
    std::vector<Value> params = {subject_kind};
    const std::string in = store_internal::AppendInList(subject_ids, start, end, params);
    ATRIUM_ASSIGN_OR_RETURN(
        auto rows, db_->Exec("SELECT subject_id, MAX(to_ms), MAX(closes_subject) FROM "
                             "gpu_usage_records WHERE subject_kind = $1 AND subject_id IN (" +
                                 in + ") GROUP BY subject_id",
                             params));
    for (const auto& r : rows.rows) out[r.Text(0)] = GpuMeteredPoint{r.Int(1), r.Int(2) != 0};
  }
  return out;
}

namespace store_internal {

GpuUsageRecord GpuUsageFromRow(const sql::Row& r) {
  GpuUsageRecord g;
  g.id = r.Text(0);
  g.tenant_id = r.Text(1);
  g.project = r.Text(2);
  g.subject_kind = r.Text(3);
  g.subject_id = r.Text(4);
  g.model = r.Text(5);
  g.kind = r.Text(6);
  g.mig_profile = r.Text(7);
  g.milli = r.Int(8);
  g.from_ms = r.Int(9);
  g.to_ms = r.Int(10);
  g.gpu_milli_ms = r.Int(11);
  g.closes_subject = r.Int(12) != 0;
  g.created_at = r.Int(13);
  g.deployment_id = r.Text(14);
  return g;
}

}  // namespace store_internal

}  // namespace atrium
