// Job archives: the rows of tenants' uploaded working files. See store.h
// for the contracts and src/jobs/archive_service.h for the files.
#include "store/store.h"
#include "store/store_internal.h"

namespace atrium {
namespace {

using sql::Row;
using store_internal::ExpectOneRowOn;
using store_internal::StatusOf;

constexpr char kArchiveColumns[] =
    "id, tenant_id, name, sha256, size_bytes, unpacked_bytes, entries, created_by, created_at";

JobArchiveRecord ArchiveFromRow(const Row& r) {
  JobArchiveRecord a;
  a.id = r.Text(0);
  a.tenant_id = r.Text(1);
  a.name = r.Text(2);
  a.sha256 = r.Text(3);
  a.size_bytes = r.Int(4);
  a.unpacked_bytes = r.Int(5);
  a.entries = r.Int(6);
  a.created_by = r.Text(7);
  a.created_at = r.Int(8);
  return a;
}

}  // namespace

Result<JobArchiveRecord> Store::CreateJobArchive(const TenantScope& scope, JobArchiveRecord a,
                                                 int64_t max_per_tenant) {
  a.tenant_id = scope.tenant_id;
  return db_->Transact<JobArchiveRecord>([&](sql::Connection& c) -> Result<JobArchiveRecord> {
    ATRIUM_ASSIGN_OR_RETURN(
        auto held,
        c.Exec("SELECT COUNT(*) FROM job_archives WHERE tenant_id = $1", {scope.tenant_id}));
    if (held.rows.at(0).Int(0) >= max_per_tenant) {
      return Error::FailedPrecondition("the tenant holds " + std::to_string(max_per_tenant) +
                                       " archives already, the most it may; delete one first");
    }
    ATRIUM_RETURN_IF_ERROR(c.Exec(std::string("INSERT INTO job_archives (") + kArchiveColumns +
                                      ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                                  {a.id, a.tenant_id, a.name, a.sha256, a.size_bytes,
                                   a.unpacked_bytes, a.entries, a.created_by, a.created_at}));
    return a;
  });
}

Result<JobArchiveRecord> Store::GetJobArchive(const TenantScope& scope, const std::string& id) {
  ATRIUM_ASSIGN_OR_RETURN(auto rows,
                          db_->Exec(std::string("SELECT ") + kArchiveColumns +
                                        " FROM job_archives WHERE tenant_id = $1 AND id = $2",
                                    {scope.tenant_id, id}));
  if (rows.rows.empty()) return Error::NotFound("archive not found");
  return ArchiveFromRow(rows.rows[0]);
}

Result<std::vector<JobArchiveRecord>> Store::ListJobArchives(const TenantScope& scope) {
  ATRIUM_ASSIGN_OR_RETURN(auto rows, db_->Exec(std::string("SELECT ") + kArchiveColumns +
                                                   " FROM job_archives WHERE tenant_id = $1 "
                                                   "ORDER BY id",
                                               {scope.tenant_id}));
  std::vector<JobArchiveRecord> out;
  out.reserve(rows.rows.size());
  for (const auto& r : rows.rows) out.push_back(ArchiveFromRow(r));
  return out;
}

Status Store::DeleteJobArchive(const TenantScope& scope, const std::string& id) {
  return StatusOf(db_->Transact<bool>([&](sql::Connection& c) -> Result<bool> {
    ATRIUM_RETURN_IF_ERROR(
        ExpectOneRowOn(c, "DELETE FROM job_archives WHERE tenant_id = $1 AND id = $2",
                       {scope.tenant_id, id}, "archive"));
    return true;
  }));
}

}  // namespace atrium
