// The gateway's policy: an immutable snapshot of who may call which model
// where, with which limits, built from the control plane's rows
// (GatewayPolicyRows). A new snapshot replaces the old one whole; a request
// keeps the snapshot it started with (shared_ptr), so pointers into it stay
// valid for the request's life.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/result.h"
#include "gateway/fair_queue.h"
#include "gateway/limiter.h"
#include "model/gateway_records.h"

namespace atrium::gateway {

// An authenticated caller: a tenant's API key.
struct Caller {
  std::string tenant_id;
  std::string key_id;
  std::string role;
  std::vector<std::string> scopes;  // models the key may call; empty = all the tenant may
  double weight = 1;                // the tenant's fair-share weight
  Priority priority = Priority::kInteractive;  // the key's default class
  std::vector<LimitSubject> subjects;          // "tenant:<id>" then "key:<id>", with their limits
  std::vector<std::string> regions;            // the tenant's; empty = any
};

struct ModelRoute {
  std::string model;
  // Candidates in order: the tenant's dedicated deployments first, then shared
  // ones in the tenant's regions; each in id order. Owned by the snapshot.
  std::vector<const DeploymentRecord*> deployments;
  // What the engine is sent as "model"; "": what the client sent. A
  // tenant's adapter ("<model>:<name>") is sent as its id, which is what
  // the engine loaded it as (src/serving/adapters.h).
  std::string upstream_model;
};

// Where the operator requires entitlement for dedicated deployments
// (`[gateway] dedicated_requires_entitlement`): `rows` less every dedicated
// deployment of a model its tenant is not entitled to, so the gateway stops
// routing to one whose entitlement was revoked after it was created (the API
// refuses to create or change such a deployment; this covers what was made
// before, or revoked since).
GatewayPolicyRows WithoutUnentitledDedicated(GatewayPolicyRows rows);

class PolicySnapshot {
 public:
  static std::shared_ptr<const PolicySnapshot> Build(GatewayPolicyRows rows, int64_t version);

  int64_t version() const { return version_; }

  // "Bearer <api key>" → the caller. kUnauthenticated for a missing or
  // malformed header or key, an unknown key, a wrong secret, a revoked or
  // expired key, a disabled owner, a key whose role exceeds its owner's (as
  // IdentityService rules), and a tenant that is unknown or not active —
  // suspended included, with "tenant is suspended", as the control plane
  // answers. kPermissionDenied for a platform key (no tenant) and a role
  // without Permission::kModelInvoke (tenant-viewer). Cost: one SHA-256, a
  // hash lookup and a constant-time compare — or, with a memo that this
  // snapshot filled for the same header, the lookup alone.
  // The caller returned is the snapshot's own: valid while the snapshot lives.
  struct KeyMemo;
  Result<const Caller*> Authenticate(std::string_view authorization_header, int64_t now_ms,
                                     KeyMemo* memo = nullptr) const;

  // One client connection's memo of the key it presented last and that
  // verified against a snapshot: a client sends the same key with every
  // request of a keep-alive connection, so its secret is hashed once per
  // connection and snapshot. Revocation, expiry and the owner's and tenant's
  // state are still checked on every request (a new snapshot voids the
  // memo). Never shared between connections: it holds the key as presented.
  struct KeyMemo {
    uint64_t snapshot = 0;  // serial() of the snapshot it verified against; 0: empty
    std::string header;     // the Authorization header, as presented
    std::string key_id;
  };
  // Distinct for every snapshot this process builds.
  uint64_t serial() const { return serial_; }

  // The deployments that may serve `model` for `caller`. A model is usable
  // when the tenant has a dedicated deployment of it, or is entitled to it and
  // has a shared one, in one of the tenant's regions (data residency binds
  // the tenant's own deployments too; a tenant without regions: any
  // region); a key with scopes is narrowed to the models
  // named there. kNotFound otherwise, with one message whether the model
  // exists or not: "The model `x` does not exist or you do not have access
  // to it."
  // A name no deployment serves may be one of the caller's tenant's ready
  // adapters, "<model>:<name>": routed to the one deployment it is on
  // while the tenant may use that deployment's model there (a key's scopes
  // must name the adapter or its model); another tenant's adapter is
  // kNotFound like any unknown model.
  Result<ModelRoute> Resolve(const Caller& caller, std::string_view model) const;
  // The models Resolve would accept for `caller`, sorted.
  std::vector<std::string> ModelsFor(const Caller& caller) const;
  // nullptr if unknown.
  const DeploymentRecord* Deployment(const std::string& id) const;
  // Every deployment, in id order.
  const std::vector<DeploymentRecord>& deployments() const { return deployments_; }

 private:
  struct KeyEntry {
    std::string secret_hash;
    int64_t expires_at = 0;
    bool revoked = false;
    // The verdict on everything that does not depend on the secret or the time.
    Result<Caller> verdict;
  };
  using Deployments = std::vector<const DeploymentRecord*>;

  PolicySnapshot() = default;
  // The tenant's dedicated deployments of `model` in its regions.
  void AppendDedicated(const Caller& caller, const std::string& model, Deployments& out) const;
  // Shared deployments of `model` in `regions` (empty = any), if entitled.
  void AppendShared(const Caller& caller, const std::string& model, Deployments& out) const;
  // The caller's tenant's adapter named `model`, if it may call it.
  std::optional<ModelRoute> ResolveAdapter(const Caller& caller, const std::string& model) const;

  struct AdapterRoute {
    const DeploymentRecord* deployment = nullptr;
    std::string id;  // the engine's name for it
  };

  int64_t version_ = 0;
  uint64_t serial_ = 0;
  std::vector<DeploymentRecord> deployments_;  // id order; everything below points here
  std::unordered_map<std::string, const DeploymentRecord*> by_id_;
  std::unordered_map<std::string, Deployments> shared_;  // model → shared deployments
  std::unordered_map<std::string, std::unordered_map<std::string, Deployments>>
      dedicated_;  // tenant → model → its dedicated deployments
  std::unordered_map<std::string, std::unordered_set<std::string>> entitled_;  // tenant → models
  std::unordered_map<std::string, std::unordered_map<std::string, AdapterRoute>>
      adapters_;  // tenant → "<model>:<name>" → its ready adapter
  std::unordered_map<std::string, KeyEntry> keys_;  // key id → entry
};

}  // namespace atrium::gateway
