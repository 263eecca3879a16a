// An allocation request as JSON: the one reader the allocations API and the
// job spec (src/jobs, whose `resources` are an allocation request) share,
// and its inverse for what the job service stores.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/json_reader.h"
#include "common/result.h"
#include "scheduler/allocation.h"

namespace atrium::sched {

// The request fields of one JSON object, read but not checked together yet.
struct AllocationFields {
  std::optional<std::string> kind;
  std::optional<std::string> model;
  std::optional<std::string> priority;
  std::optional<std::string> project;
  std::optional<int64_t> gpus;
  std::optional<int64_t> nodes;
  std::optional<std::string> mig_profile;
  std::optional<int64_t> milli;
  std::optional<int64_t> gpu_memory_mib;
  std::optional<int64_t> cpu_milli;
  std::optional<int64_t> memory_mib;
  std::optional<std::string> pool;
  std::optional<std::string> region;
};

// Reads the fields from `r` ("kind" and "model" required); the caller reads
// its own fields too and then calls r.Finish(), which reports the first bad
// field or an unknown one. `with_project_and_priority` false: those two are
// not request fields here (a job names them at its top level), so they are
// left unread and Finish refuses them as unknown.
AllocationFields ReadAllocationFields(JsonObjectReader& r, bool with_project_and_priority = true);

// The request the fields describe: InvalidArgument naming what is wrong (an
// unknown model or MIG profile, a field the kind does not take, a gang of
// one node). Call only after r.Finish() succeeded.
Result<AllocationRequest> AllocationRequestOf(const AllocationFields& fields);

// The request's fields as the reader takes them (without id and tenant;
// project and priority only when `with_project_and_priority`).
Json AllocationRequestJson(const AllocationRequest& request, bool with_project_and_priority = true);

}  // namespace atrium::sched
