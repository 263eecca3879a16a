// Plain records as the store keeps them and the services pass around. Logic
// about them lives in the subsystems (tenancy/, identity/, audit/); these are
// only data, and this folder depends on nothing (what a store call is asked,
// its scope, paging and filters, is in store/queries.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace atrium {

struct Tenant {
  std::string id;
  std::string name;  // unique among live tenants; a slug
  std::string display_name;
  std::string tier;  // shared | dedicated-gpu | dedicated-node | dedicated-pool
  std::vector<std::string> regions;
  int64_t weight = 1;  // fair-share weight, 1..10000
  std::map<std::string, std::string> labels;
  // active | suspended | evicting; "evicted" only from
  // Store::GetEvictedTenantForPlatform (the tenant row is gone).
  std::string state;
  int64_t created_at = 0;  // ms since epoch
  int64_t updated_at = 0;
  // Bumped by every Store::UpdateTenant, which writes only over the version
  // it was read at: concurrent changes never overwrite each other.
  int64_t version = 0;
};

struct User {
  std::string id;
  std::string tenant_id;  // "" for platform staff
  std::string username;   // unique within the tenant
  std::string display_name;
  std::string email;
  std::string role;           // see identity/roles.h
  std::string kind;           // human | service
  std::string password_hash;  // argon2id; empty for service accounts
  std::string state;          // active | disabled
  int64_t created_at = 0;
  int64_t updated_at = 0;
};

struct ApiKey {
  std::string id;  // key id, globally unique, part of the key text
  std::string tenant_id;
  std::string owner_user_id;
  std::string name;
  std::string role;
  std::vector<std::string> scopes;  // e.g. models the key may call; empty = all
  std::string secret_hash;          // hex SHA-256 of the secret part
  int64_t created_at = 0;
  int64_t expires_at = 0;  // 0: never
  int64_t revoked_at = 0;  // 0: not revoked
};

struct Session {
  std::string id;
  std::string tenant_id;
  std::string user_id;
  int64_t created_at = 0;
  int64_t expires_at = 0;
};

struct SigningKey {
  std::string id;      // "kid" in tokens
  std::string secret;  // hex, 32 bytes
  int64_t created_at = 0;
};

struct AuditRecord {
  int64_t seq = 0;        // global order, assigned by the store
  std::string chain;      // tenant id, or "platform"
  int64_t chain_seq = 0;  // 1, 2, ... within the chain
  int64_t time = 0;       // ms since epoch
  std::string actor;      // "user:<id>", "key:<id>", "anonymous", "system"
  std::string actor_role;
  std::string tenant_id;  // tenant acted on or acting; "" for platform
  std::string action;     // e.g. "tenant.create"
  std::string target;     // e.g. "tenant/tn_..."
  std::string outcome;    // allowed | denied | failed
  int64_t status = 0;     // HTTP status answered
  std::string request_id;
  std::string source;     // client address
  std::string prev_hash;  // hex; 64 zeros for a chain's first record
  std::string hash;       // hex SHA-256 over prev_hash and the fields above
  // What drove a decision the platform took by itself (an autoscaler's
  // numbers); "" for most records. Hashed after prev_hash when not empty,
  // so records without one hash as they always did.
  std::string detail;
};

// Who asked for a change that a service audits itself (the scheduler's
// decisions): copied from the API request into each audit record it causes.
struct RequestOrigin {
  std::string actor = "system";  // "user:<id>", "key:<id>", "system:scheduler"
  std::string actor_role;
  std::string request_id;
  std::string source;
};

// --- The GPU fleet (platform-owned). Plain rows; capacity::Fleet is built
// from them by src/scheduling. Lists keep the fleet's insertion order, which
// the scheduler's determinism relies on.
struct FleetSiteRecord {
  std::string name;
  std::string region;
  int64_t power_budget_watts = 0;

  bool operator==(const FleetSiteRecord&) const = default;
};

struct FleetRackRecord {
  std::string name;
  std::string site;
  int64_t power_budget_watts = 0;

  bool operator==(const FleetRackRecord&) const = default;
};

struct FleetPoolRecord {
  std::string name;
  std::string region;
  std::string site;
  std::vector<std::string> labels;
  std::string dedicated_tenant;  // "" = none
  std::vector<std::string> allowed_tenants;

  bool operator==(const FleetPoolRecord&) const = default;
};

struct FleetGpuRecord {
  int64_t index = 0;
  std::string model;
  int64_t memory_mib = 0;
  bool mig_enabled = false;
  bool healthy = true;
  bool cordoned = false;

  bool operator==(const FleetGpuRecord&) const = default;
};

struct FleetNodeRecord {
  std::string name;
  std::string pool;
  std::string rack;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  std::string gpu_model;
  std::vector<FleetGpuRecord> gpus;
  std::vector<std::vector<int>> nvlink_groups;
  int64_t idle_power_watts = 0;
  bool cordoned = false;
  bool draining = false;
  // GPU software (capacity::Node): "" = unknown, which meets no template's minimum.
  std::string driver_version;
  std::string cuda_version;

  bool operator==(const FleetNodeRecord&) const = default;
};

struct FleetRecord {
  std::string spec;  // the fleet spec it was built from ("" = not from a spec)
  std::vector<FleetSiteRecord> sites;
  std::vector<FleetRackRecord> racks;
  std::vector<FleetPoolRecord> pools;
  std::vector<FleetNodeRecord> nodes;
  int64_t updated_at = 0;

  bool operator==(const FleetRecord&) const = default;
};

// One quota row, tenant-owned: a tenant's (project "") or one project's
// guarantee and limit for a resource class, in milli-GPU of the model.
struct QuotaRecord {
  std::string tenant_id;
  std::string project;  // "" = the tenant's own quota
  std::string model;    // catalog name, e.g. "H100-80GB"
  std::string kind;     // gpu | mig | share | node
  int64_t guarantee_milli = 0;
  int64_t limit_milli = 0;
  int64_t updated_at = 0;

  bool operator==(const QuotaRecord&) const = default;
};

// A tenant's project: a name its allocations are charged to, with an
// optional split of the tenant's quota (QuotaRecord rows with project set).
struct ProjectRecord {
  std::string tenant_id;
  std::string name;  // a slug, unique within the tenant
  int64_t created_at = 0;

  bool operator==(const ProjectRecord&) const = default;
};

struct AllocationPlacementRecord {
  std::string node;
  std::vector<int> gpus;

  bool operator==(const AllocationPlacementRecord&) const = default;
};

// An allocation, tenant-owned: everything sched::Allocation carries (so a
// restart rebuilds the same placements) plus who asked and when it ended.
struct AllocationRecord {
  std::string id;
  std::string tenant_id;
  std::string project;
  std::string kind;      // gpu | mig | share | node (a gang is kind gpu with nodes > 1)
  std::string priority;  // interactive | batch | preemptible
  std::string model;
  int64_t gpus = 1;
  int64_t nodes = 1;
  std::string mig_profile;
  int64_t milli = 0;
  int64_t gpu_memory_mib = 0;  // share: GPU-memory cap
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  std::string pool;
  std::string region;
  // pending | running | preempting (held by the scheduler), or
  // released | preempted | rejected (ended; kept as history).
  std::string state;
  int64_t seq = 0;
  int64_t submitted_ms = 0;
  int64_t placed_ms = -1;
  std::vector<AllocationPlacementRecord> placement;
  int64_t mig_start = -1;
  int64_t charge_milli = 0;
  int64_t preempt_at_ms = -1;
  std::string preempted_for;
  std::string reason;      // the words of the latest decision about it
  int64_t ended_ms = -1;   // when it was released, preempted or rejected
  std::string created_by;  // user id of the requester
  int64_t updated_at = 0;
  // Held on a draining node or an unhealthy GPU: why it was asked to move
  // and when ("" / -1: not asked).
  std::string move_requested;
  int64_t move_requested_ms = -1;
  // The node requirements it was placed under (its environment template's),
  // kept so a restart places queued work on the same terms ("" / empty: none).
  std::string min_driver_version;
  std::string min_cuda_version;
  std::vector<std::string> required_gpu_models;

  bool Held() const { return state == "pending" || state == "running" || state == "preempting"; }

  bool operator==(const AllocationRecord&) const = default;
};

// A GPU (or the part of one) an ended allocation held, kept from new work
// until its scrub finished (sched::ScrubHold). Platform data: the tenant and
// allocation are never shown to another tenant.
struct GpuScrubRecord {
  std::string node;
  int64_t gpu = 0;
  std::string allocation_id;
  std::string tenant_id;
  std::string kind;  // gpu (whole; also a lease's GPUs) | mig | share
  std::string model;
  std::string mig_profile;
  int64_t mig_start = -1;
  int64_t milli = 0;           // share
  int64_t gpu_memory_mib = 0;  // share: its GPU-memory cap
  int64_t since_ms = 0;        // when the allocation ended
  std::string state;           // scrubbing | failed
  std::string reason;          // failed: "scrub failed: ..."

  bool operator==(const GpuScrubRecord&) const = default;
};

// One version of an environment template: what a workload's software
// environment is (a root filesystem pinned by digest, environment variables)
// and what a node must run for it. Immutable once published, but for its
// state; publishing the name again makes the next version.
struct EnvironmentTemplateRecord {
  std::string tenant_id;  // "" = the platform's, visible to every tenant
  std::string name;       // a slug, one namespace per tenant's view (templates/)
  int64_t version = 0;    // 1, 2, ... per (tenant_id, name); never reused
  std::string description;
  std::string rootfs_digest;               // "sha256:<64 lower-case hex>"
  std::map<std::string, std::string> env;  // variable name → value
  std::string min_driver_version;          // "" = none
  std::string min_cuda_version;            // "" = none
  std::vector<std::string> gpu_models;     // catalog names; empty = any
  std::string state;                       // active | retired
  std::string created_by;                  // user id
  int64_t created_at = 0;
  int64_t updated_at = 0;

  bool operator==(const EnvironmentTemplateRecord&) const = default;
};

}  // namespace atrium
