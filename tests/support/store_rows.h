// Rows the tests of services over a real store begin with: a tenant in
// good standing, and a job as submitted with its event and audit record.
#pragma once

#include <cstdint>
#include <string>

#include "model/job_records.h"
#include "model/records.h"

namespace atrium::testing_rows {

// An active tenant of the shared tier with weight 1.
inline Tenant ActiveTenant(const std::string& id, const std::string& name, int64_t now_ms = 0) {
  Tenant t;
  t.id = id;
  t.name = name;
  t.display_name = name;
  t.tier = "shared";
  t.weight = 1;
  t.state = "active";
  t.created_at = t.updated_at = now_ms;
  return t;
}

// A pending job of `tenant` whose allocation is "alloc_<id>"; its spec
// names it and nothing else.
inline JobRecord PendingJob(const std::string& id, const std::string& tenant) {
  JobRecord j;
  j.id = id;
  j.tenant_id = tenant;
  j.project = "vision";
  j.name = "train";
  j.created_by = "us_1";
  j.state = "pending";
  j.allocation_id = "alloc_" + id;
  j.spec = R"({"name":"train"})";
  j.created_at = 100;
  j.updated_at = 100;
  return j;
}

// The event of `j` moving from `from` to `to` ("" → "pending": submitted).
inline JobEventRecord JobEvent(const JobRecord& j, const std::string& from = "",
                               const std::string& to = "pending") {
  return {j.id, j.tenant_id, 0, 100, j.attempt, from, to, "because", "system:jobs"};
}

inline AuditRecord JobAudit(const JobRecord& j, const std::string& action = "jobs.submitted") {
  AuditRecord a;
  a.time = 100;
  a.actor = "system:jobs";
  a.tenant_id = j.tenant_id;
  a.action = action;
  a.target = "tenant/" + j.tenant_id + "/job/" + j.id;
  a.outcome = "allowed";
  return a;
}

}  // namespace atrium::testing_rows
