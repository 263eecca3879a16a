// What a tenant asks to run: the job spec, its limits and its validation.
// Pure: no clock, no I/O. The API and the store read a spec with the same
// strict reader (ReadJobSpec), so what is stored is exactly what was
// accepted, and JobSpecJson writes the canonical form an idempotent
// resubmission is compared with.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/json_reader.h"
#include "common/result.h"
#include "scheduler/allocation.h"

namespace atrium::jobs {

// Bounds on a spec. Every field a tenant writes has one, so a job row, a
// launch and an audit trail stay small whatever a hostile tenant sends.
struct JobLimits {
  size_t max_args = 256;                      // command + args
  size_t max_arg_bytes = 4096;                // each
  size_t max_argv_bytes = size_t{64} * 1024;  // all together
  size_t max_env_vars = 128;
  size_t max_env_name_bytes = 128;
  size_t max_env_value_bytes = 4096;
  size_t max_env_bytes = size_t{64} * 1024;  // names and values together
  size_t max_script_bytes = size_t{64} * 1024;
  // The largest archive a job may name (an upload of at most this size).
  int64_t max_archive_bytes = int64_t{1} << 30;
  int64_t default_time_limit_s = int64_t{24} * 3600;
  int64_t max_time_limit_s = int64_t{7} * 24 * 3600;
  int64_t max_restarts = 100;
};

enum class RestartPolicyKind {
  kNever,                // no attempt after the first
  kOnFailure,            // requeue after failed or lost, up to max_restarts
  kRequeueOnPreemption,  // requeue after preempted, up to max_restarts
};
std::string_view RestartPolicyName(RestartPolicyKind kind);  // "never", "on-failure", ...
Result<RestartPolicyKind> ParseRestartPolicy(std::string_view name);

struct RestartPolicy {
  RestartPolicyKind kind = RestartPolicyKind::kNever;
  int64_t max_restarts = 0;  // 0 with kNever
  bool operator==(const RestartPolicy&) const = default;
};

// Environment variables a job may not set: the backend sets the device
// ones from the grant (a job that set them could name GPUs it was not
// given, however the backend confines devices), the loader's injection
// hooks could run code in the backend's supervisor before the sandbox is
// entered, ATRIUM_* is the platform's namespace (ATRIUM_JOB_ID ...), and
// CUDA_MPS_* carry a share's limits (or would point at another's MPS server).
bool IsReservedEnvName(std::string_view name);

// What only the platform's own workloads may ask (the serving controller's
// model servers, src/serving); a tenant's spec never carries it: ReadJobSpec
// with SpecOrigin::kTenant refuses the field.
struct PlatformFields {
  // Share the node's network (no network namespace of its own), so the
  // gateway reaches the model server's port.
  bool host_network = false;
  // Host folders shown read-only inside the sandbox: (where inside, the
  // host's path), sorted; the serving template's engine and model weights.
  // At most 16; exec/sandbox.h checks both sides.
  std::vector<std::pair<std::string, std::string>> read_only_binds;
  // Runs until stopped: no time limit (time_limit_s is 0).
  bool no_time_limit = false;
  bool operator==(const PlatformFields&) const = default;
};

struct JobSpec {
  std::string name;     // [A-Za-z0-9._-], 1..128
  std::string project;  // "" = the tenant's; else a project slug
  // argv: command[0] is the program. Empty when `script` is set; args then
  // follow the script (`/bin/sh script args...`).
  std::vector<std::string> command;
  std::vector<std::string> args;
  std::string script;                                    // inline shell script; "" = none
  std::vector<std::pair<std::string, std::string>> env;  // sorted by name
  // An uploaded archive's reference and declared size, extracted into the
  // working directory before start; "" / 0 = none. The service turns the
  // reference into a path through its archive resolver.
  std::string archive;
  int64_t archive_bytes = 0;
  // What to allocate, exactly as an allocation takes it (project and
  // priority are the job's own fields and copied in).
  sched::AllocationRequest resources;
  int64_t time_limit_s = 0;
  RestartPolicy restart;
  // An environment template: "name" or "name@version"; "" = the host's.
  std::string environment;
  PlatformFields platform;

  // The program the backend runs: command + args, or args after the script.
  std::vector<std::string> Argv() const;

  bool operator==(const JobSpec&) const = default;
};

// Reads and validates a spec from a JSON object: unknown fields, wrong
// types, values out of bounds, reserved or malformed env names, NUL bytes,
// a command and a script together (or neither) are InvalidArgument naming
// the field. Fields: name, project, command (string), args, script, env
// (object), archive, archive_bytes, resources (an allocation request
// without project and priority), priority, time_limit_s, restart_policy,
// max_restarts, environment; with SpecOrigin::kPlatform also platform
// (host_network, read_only_binds, no_time_limit).
// kTenant: what the API reads (a 'platform' field is refused); kPlatform:
// the job service reading its own canonical form back and the serving
// controller's replicas.
enum class SpecOrigin { kTenant, kPlatform };
Result<JobSpec> ReadJobSpec(const Json& body, const JobLimits& limits = {},
                            SpecOrigin origin = SpecOrigin::kTenant);

// The canonical JSON of a spec: ReadJobSpec(JobSpecJson(s)) == s, and two
// bodies that mean the same job give the same text.
Json JobSpecJson(const JobSpec& spec);

// "name" or "name@version" split; InvalidArgument when malformed.
struct EnvironmentRef {
  std::string name;
  std::string version;  // "" = the newest
};
Result<EnvironmentRef> ParseEnvironmentRef(std::string_view text);

}  // namespace atrium::jobs
