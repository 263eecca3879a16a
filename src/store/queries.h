// What a store call is asked: the tenant scope every tenant-owned read and
// write is confined to, list paging, the filters of the store's listings and
// the rows one scheduling call writes in one transaction. The rows
// themselves are plain data in model/.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/gateway_records.h"
#include "model/job_records.h"
#include "model/records.h"

namespace atrium {

// The tenant whose rows a store call may read or write. Every tenant-owned
// row carries tenant_id, and every store method for such rows takes a scope
// and puts it in the WHERE clause. The empty id is the platform itself (its
// own staff users and their keys) — never "all tenants".
struct TenantScope {
  std::string tenant_id;
  static TenantScope Platform() { return {""}; }
  static TenantScope Of(std::string id) { return {std::move(id)}; }
  bool is_platform() const { return tenant_id.empty(); }
};

template <typename T>
struct Page {
  std::vector<T> items;
  std::string next_cursor;  // "" when there are no more
};

struct ListOptions {
  std::string after;  // cursor from a previous page ("" = from the start)
  int limit = 100;
};

struct AllocationFilter {
  std::string tenant_id;  // platform listings only: "" = every tenant
  std::string state;      // "" = any
};

struct JobFilter {
  std::string tenant_id;  // platform listings only: "" = every tenant
  std::string state;      // "" = any
  std::string project;    // "" = any
};

struct UsageFilter {
  int64_t from = 0;  // created_at >= from (ms); 0 = no bound
  int64_t to = 0;    // created_at <  to (ms);   0 = no bound
  std::string model;
  std::string key_id;
  std::string deployment_id;  // the deployment that served; "" = any
};

struct GpuUsageFilter {
  int64_t from = 0;  // from_ms >= from; 0 = no bound
  int64_t to = 0;    // from_ms <  to;   0 = no bound
  std::string model;
  std::string project;
  std::string subject_kind;  // allocation | job; "" = both
  // A job id: only the records of its runs (subject kind job, subject ids
  // "<job_id>.<attempt>"); "" = any.
  std::string job_id;
  std::string deployment_id;  // only this managed deployment's; "" = any
};

// One allocation to meter, with the managed deployment whose replica's job
// holds it ("" none).
struct AllocationToMeter {
  AllocationRecord allocation;
  std::string deployment_id;
};

// One job run to meter, with what its allocation holds (src/metering).
struct JobRunToMeter {
  JobRunRecord run;
  std::string model;
  std::string kind;  // the allocation's: gpu | mig | share | node
  std::string mig_profile;
  int64_t charge_milli = 0;
  std::string deployment_id;  // the managed deployment whose replica it runs; "" none
};

// Everything one scheduling call changes, written in one transaction.
struct SchedulingCommit {
  // Upserted by id: an existing row (same tenant) is updated in its
  // scheduler fields; a new one is inserted whole.
  std::vector<AllocationRecord> allocations;
  // Upserted by (tenant, project, model, kind). A tenant row (project "")
  // of guarantee = limit = 0 is deleted (for a tenant an absent class is
  // 0/0); a project row of 0/0 is stored: it denies the class to the
  // project, where an absent row limits it by the tenant's quota only.
  std::vector<QuotaRecord> quotas;
  // Deleted by (tenant, project, model, kind), before `quotas` are written.
  std::vector<QuotaRecord> removed_quotas;
  std::vector<ProjectRecord> new_projects;
  // (tenant id, project name): removed with their quota rows.
  std::vector<std::pair<std::string, std::string>> deleted_projects;
  // Node and GPU flags (cordoned, draining, GPU health/cordon/MIG) by name.
  std::vector<FleetNodeRecord> node_flags;
  // GPU scrub holds: upserted by (node, gpu, allocation_id), then those
  // finished deleted by the same key.
  std::vector<GpuScrubRecord> scrubs;
  std::vector<GpuScrubRecord> finished_scrubs;
  // Appended after everything above, in order, in the same transaction.
  std::vector<AuditRecord> audit;
};

}  // namespace atrium
