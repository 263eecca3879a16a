// Rows behind the inference gateway: model deployments, tenants' model
// entitlements, request/token limits, and usage records. Plain data; the
// gateway's logic lives in src/gateway, its server in src/gateway_server.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/records.h"

namespace atrium {

struct DeploymentEndpoint {
  std::string url;       // base URL of an OpenAI-compatible server, e.g. http://10.0.0.5:8000
  int64_t capacity = 8;  // requests the endpoint serves at once
  // Streamed requests awaiting their first token (in the engine's prefill)
  // at once, for tenants asking for at least their share of the deployment
  // (not a light tenant's burst); 0: no limit (nor is there one at or above
  // capacity).
  // Spreads the prefills that stall a batch (see Balancer::Pick).
  int64_t max_prefill = 0;
  // Slots above capacity that only a tenant asking for least and running
  // less than its weighted share of it, or served less than its weighted
  // share of the deployment lately, may use, while another tenant is active there (see
  // Balancer::Pick); 0: none.
  int64_t burst = 0;
  bool operator==(const DeploymentEndpoint&) const = default;
};

// A served model: what clients name in "model", and where it runs.
struct DeploymentRecord {
  std::string id;       // dep_...
  std::string model;    // the name clients send, e.g. "llama-3.1-8b-instruct"
  std::string version;  // free text, e.g. "2024-07"
  std::vector<DeploymentEndpoint> endpoints;
  std::string region;        // must be one of the tenant's regions to be used for it
  std::string latency_tier;  // interactive | standard | batch
  std::string visibility;    // shared (entitled tenants) | dedicated (one tenant)
  std::string tenant_id;     // dedicated: the tenant; shared: ""
  int64_t created_at = 0;    // ms since epoch
  int64_t updated_at = 0;
  // "": external (the endpoints are servers someone else runs). Otherwise
  // managed: the serving spec as canonical JSON (serving::ManagedSpecJson),
  // and the endpoints are its ready replicas, written by the serving
  // controller alone.
  std::string serving;
  bool managed() const { return !serving.empty(); }
};

// What one gateway saw of one deployment when it reported: requests
// waiting for a slot, how long the oldest has waited, requests holding a
// slot. The autoscaler's signals (src/serving/autoscale.h).
struct DeploymentLoadReport {
  std::string deployment_id;
  std::string gateway_id;
  int64_t queued = 0;
  int64_t oldest_wait_ms = 0;
  int64_t in_flight = 0;
  int64_t reported_at = 0;  // ms since epoch
};

// The reports of the gateways that reported lately, summed (the oldest
// wait is the largest).
struct DeploymentLoadTotals {
  int64_t gateways = 0;  // reports summed; 0: no signal
  int64_t queued = 0;
  int64_t oldest_wait_ms = 0;
  int64_t in_flight = 0;
};

// One model server of a managed deployment: a job the serving controller
// runs (src/serving), and, once it answers its health check, an endpoint
// of the deployment.
struct DeploymentReplicaRecord {
  std::string id;  // rep_...
  std::string deployment_id;
  // Whose job runs it: a dedicated deployment's tenant, or for a shared one
  // the platform's serving tenant (its GPU time is the platform's cost).
  std::string tenant_id;
  std::string job_id;
  int64_t port = 0;
  std::string url;  // http://<node address>:<port> once placed; "" before
  // starting | ready | draining | stopping | ended (serving::ReplicaState)
  std::string state;
  int64_t generation = 1;       // of the deployment's spec it runs
  int64_t health_failures = 0;  // failed checks in a row
  std::string reason;           // words of its latest change
  int64_t created_at = 0;
  int64_t ready_at = -1;
  int64_t drain_started_at = -1;
  int64_t ended_at = -1;
  int64_t updated_at = 0;
  // The deployment's serving spec (canonical JSON) it was started with:
  // what a roll back returns to. "" on rows from before it was kept.
  std::string spec;
  bool operator==(const DeploymentReplicaRecord&) const = default;
};

// A tenant's LoRA adapter on a managed deployment that allows adapters:
// clients of that tenant call it as "<model>:<name>"; the engine knows it
// by its id (src/serving/adapters.h). Its weights are an archive the
// tenant uploaded (JobArchiveRecord), named by `artifact` ("archive:<id>")
// and pinned by `sha256`, the upload's digest.
struct AdapterRecord {
  std::string id;  // ad_...; the engine's name for it
  std::string tenant_id;
  std::string deployment_id;
  std::string name;      // [a-z0-9][a-z0-9._-]*, at most 64
  std::string artifact;  // "archive:<archive id>"
  std::string sha256;    // 64 lowercase hex digits
  // loading (not yet on every ready replica) | ready (routed) | failed
  // (its files could not be made: see detail)
  std::string status;
  std::string detail;  // why it is not ready; "" when it is
  std::string created_by;
  int64_t created_at = 0;
  int64_t updated_at = 0;
  bool operator==(const AdapterRecord&) const = default;
};

// Tenant `tenant_id` may call `model` (on shared deployments; a tenant's
// dedicated deployment is always usable by that tenant).
struct EntitlementRecord {
  std::string tenant_id;
  std::string model;
  int64_t created_at = 0;
};

// 0 = no limit.
struct GatewayLimits {
  int64_t requests_per_minute = 0;
  int64_t tokens_per_minute = 0;
  int64_t max_concurrent = 0;
  int64_t max_queued = 0;
};

// Limits of a tenant (key_id "") or of one key of that tenant.
struct GatewayLimitRecord {
  std::string tenant_id;
  std::string key_id;  // "" = the tenant as a whole
  GatewayLimits limits;
  std::string priority;  // default class of the key's requests: "" | interactive | batch
  int64_t updated_at = 0;
};

// One request through the gateway, exactly once.
struct UsageRecord {
  std::string id;  // the gateway's request id: the idempotency key
  std::string tenant_id;
  std::string key_id;
  std::string model;
  std::string deployment_id;  // "" when refused before routing
  std::string endpoint;       // upstream base URL, "" when none was called
  std::string api;            // chat.completions | completions | embeddings
  bool stream = false;
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t queue_ms = 0;  // waiting in the fair queue
  int64_t ttft_ms = 0;   // arrival to first byte of the response body sent; 0 when none
  int64_t total_ms = 0;
  std::string status;  // completed | cancelled | failed | rejected
  int http_status = 0;
  int64_t created_at = 0;  // ms since epoch, arrival
  // "" or kUsageOverBound: the model server reported more tokens than the
  // request could have used; the counts above are the bound, not the claim.
  std::string flag;
};

inline constexpr const char* kUsageOverBound = "usage_over_bound";

// Token counts of one usage record are stored at most this large (2^32 - 1,
// thousands of times any context window): a sum over fewer than 2^31
// records then never overflows a signed 64-bit integer, in SQL or in C++.
inline constexpr int64_t kMaxRecordTokens = (int64_t{1} << 32) - 1;

// Requests the gateway refused before any model server saw them (a limit, an
// unknown model, an invalid body), counted per tenant, key, reason and
// minute instead of one usage record each: a refusal costs the platform
// nothing to serve and must cost it nothing unbounded to record.
struct RefusalCount {
  std::string tenant_id;
  std::string key_id;
  std::string reason;     // the refusal's code, e.g. rate_limit_exceeded, model_not_found
  int64_t minute_at = 0;  // ms since epoch, the start of the minute
  int64_t count = 0;
};

// A tenant's refusals over a time range, per key and reason.
struct RefusalTotals {
  std::string key_id;
  std::string reason;
  int64_t count = 0;
  int64_t first_minute_at = 0;  // ms since epoch, the first minute with one
  int64_t last_minute_at = 0;   // and the last
};

struct UsageTotals {
  std::string group;  // the model or key id grouped by; "" for the grand total
  int64_t requests = 0;
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  int64_t cached_tokens = 0;
};

// A key as the gateway needs it, with its owner's state and role.
struct GatewayKeyRow {
  ApiKey key;
  std::string owner_state;  // active | disabled
  std::string owner_role;
};

// Everything the gateway's policy snapshot is built from.
struct GatewayPolicyRows {
  std::vector<Tenant> tenants;      // every live tenant
  std::vector<GatewayKeyRow> keys;  // keys not revoked (expired ones included)
  std::vector<DeploymentRecord> deployments;
  std::vector<EntitlementRecord> entitlements;
  std::vector<GatewayLimitRecord> limits;
  std::vector<AdapterRecord> adapters;  // ready ones only
  // Store::GatewayPolicyMarkerForGateway() as of the same snapshot: when the
  // marker read later differs, reload.
  int64_t marker = 0;
};

}  // namespace atrium
