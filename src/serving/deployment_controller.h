// The serving controller: runs managed deployments. Each replica is a job
// (src/jobs) that the scheduler places and the execution backend starts,
// like any workload; the controller adds what makes it a model server of a
// deployment:
//  - it submits a replica's job with the serving template's command, the
//    port it chose for it and the node's network, as the deployment's tenant
//    (dedicated: counted against that tenant's quota) or, for a shared
//    deployment, as the platform's serving tenant;
//  - it checks each running replica's health (GET the template's health
//    path) and only then adds it to the deployment's endpoints, which the
//    gateway routes to (the store bumps the gateway's policy marker; in one
//    process `endpoints_changed` refreshes the gateway at once);
//  - a replica that exits, fails its checks or never becomes ready leaves
//    the endpoints first, then its job is stopped and a new one started,
//    after a backoff that grows with failures in a row;
//  - scaling down or replacing a replica (a new generation of the spec)
//    drains it: out of the endpoints, then stopped once its engine runs no
//    request (its metrics) or the drain timeout has passed;
//  - a deployment that autoscales has its replicas set from the gateways'
//    reports (autoscale.h), each change stored with a compare-and-set on
//    the spec and audited with the numbers that drove it.
// Every decision is in replica_plan.h (pure); this shell reads the rows,
// probes, and writes. A replica's row is written before its job is
// submitted (with the replica's id as the idempotency key), so a crash
// between the two submits nothing twice, and no job runs without a row.
//
// One controller per platform (several control planes elect one: the
// scale-out issue). Thread-safe: Tick runs under one mutex.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "jobs/job_service.h"
#include "serving/adapters.h"
#include "serving/autoscale.h"
#include "serving/replica_plan.h"
#include "serving/serving_spec.h"
#include "store/store.h"
#include "threads/periodic_thread.h"

namespace atrium::serving {

inline constexpr char kServingActor[] = "system:serving";

struct ServingOptions {
  // How often the controller's thread runs Tick; 0: no thread (tests).
  int64_t tick_ms = 1000;
  // Every template a deployment may name (built-ins and the operator's).
  std::vector<ServingTemplate> templates = BuiltinTemplates();
  // The name of the tenant whose jobs a shared deployment's replicas are:
  // the platform's own (its GPU time is the platform's cost), looked up
  // when needed, so the operator may create it after start. "" (or no
  // such tenant): shared managed deployments are refused.
  std::string platform_tenant;
  // Ports given to replicas, one per live replica, on any node.
  int64_t port_min = 20'000;
  int64_t port_max = 20'999;
  // Whether a port is free where the replicas run, asked before one is
  // given (a port another program holds is skipped). Unset: every node
  // is this host (every node address a loopback one) and a port is free
  // when bind_host:port can be bound here; else not asked.
  std::function<bool(int64_t port)> port_free;
  // What a replica binds ({host}) and the address the gateway reaches a
  // node at; by default every node is this host.
  std::string bind_host = "127.0.0.1";
  std::map<std::string, std::string> node_addresses;
  std::string default_node_address = "127.0.0.1";
  int64_t probe_timeout_ms = 2'000;
  ReplicaTiming timing;
  // Autoscaling: the rule's settings, and how recent a gateway's report
  // must be to count (older ones are a gateway gone).
  AutoscaleRules autoscale;
  int64_t load_fresh_ms = 5'000;
  // Called after a deployment's endpoints changed (in one process: the
  // gateway's policy refresh, so a replica leaving is routed to no more at
  // once); may be empty.
  std::function<void()> endpoints_changed;
  // How ended replicas' rows are kept. Default 7 days.
  int64_t ended_retention_ms = int64_t{7} * 24 * 3600 * 1000;
  // The probes, replaceable by tests: GET url+path answered 200, and the
  // gauge `metric` read from url+path (-1 unknown).
  std::function<Health(const std::string& url, const std::string& path)> probe_health;
  std::function<int64_t(const std::string& url, const std::string& path, const std::string& metric)>
      probe_running;

  // Tenants' LoRA adapters (adapters.h). `adapter_root`: where the
  // controller unpacks them, a folder per deployment, which its replicas
  // see read-only at `adapter_dir_inside` ("": no bind; the engine reads
  // the folder where it is, as on Slurm, so the root must be on a file
  // system the nodes share). "" root: no deployment may allow adapters.
  std::string adapter_root;
  std::string adapter_dir_inside;
  // Unpacks the tenant's archive, when `sha256` is its digest, into
  // `dest`, which does not exist yet (jobs::UnpackFilesAndFolders).
  std::function<Status(const std::string& tenant_id, const std::string& archive_id,
                       const std::string& sha256, const std::string& dest)>
      unpack_adapter;
  // The engine's calls, replaceable by tests: the model ids its
  // GET /v1/models lists, and a POST of a JSON body answered 2xx (else the
  // engine's words).
  std::function<Result<std::set<std::string>>(const std::string& url)> list_models;
  std::function<Status(const std::string& url, const std::string& path, const std::string& body)>
      post_json;
};

// Whether a listener could bind host:port on this host now, as an engine
// does (address reuse on, so a port in TIME_WAIT counts as free); true for
// a host that is not a numeric IPv4 address (not this check's to judge).
bool CanBindHere(const std::string& host, int64_t port);

class DeploymentController {
 public:
  DeploymentController(Store& store, jobs::JobService& jobs, const Clock& clock,
                       ServingOptions options);
  ~DeploymentController();
  DeploymentController(const DeploymentController&) = delete;
  DeploymentController& operator=(const DeploymentController&) = delete;

  // Runs one Tick and starts the thread.
  Status Start();
  void Stop();  // idempotent
  // One round over every managed deployment and live replica at the
  // clock's time. Returns the first error; the rest are handled regardless.
  Status Tick();

  // Whether `spec` can run here for `tenant_id` ("" = shared): its template
  // exists, and a shared one has a serving tenant. The API's check.
  Status CheckSpec(const ManagedSpec& spec, const std::string& tenant_id) const;
  const std::vector<ServingTemplate>& templates() const { return options_.templates; }

 private:
  struct Backoff {
    int64_t failures = 0;  // of any replica, in a row
    int64_t next_start_ms = 0;
    // Failed replicas of `generation` (the spec's current one) in a row,
    // with none of it ready between: what a roll back counts.
    int64_t generation = 0;
    int64_t generation_failures = 0;
  };
  // The deployment's backoff, its generation count reset when `generation`
  // is new.
  Backoff& BackoffOf(const std::string& deployment_id, int64_t generation);
  // A failure of `replica`: spaces the next start, and counts against its
  // generation when it is `current_generation`.
  void CountFailure(const DeploymentReplicaRecord& replica, int64_t current_generation,
                    int64_t now);
  // Gives up d's current generation for `rollback` (its spec stored if d's
  // is still `d.serving`, audited), and relabels the revived generation's
  // live replicas as the new one.
  Status RollBack(const DeploymentRecord& d, const Rollback& rollback,
                  std::vector<DeploymentReplicaRecord>& replicas, int64_t now);
  // One round's view of a deployment's adapters.
  struct AdapterRound {
    std::vector<AdapterRecord> adapters;
    std::set<std::string> on_disk;                // unpacked
    std::map<std::string, std::string> failures;  // id → why it cannot be used
    std::string engine_dir;                       // the folder, as the engine sees it
    int64_t ready_replicas = 0;                   // ready, and listed their models
    std::map<std::string, int64_t> ready_with;    // id → of those, listing it
  };
  // The deployment's adapters, unpacked where missing; its folder holds
  // nothing else afterwards.
  Result<AdapterRound> PrepareAdapters(const DeploymentRecord& d);
  // Unloads what `replica`'s engine should not list and loads what it
  // should; what it lists afterwards, nullopt when it could not be asked.
  std::optional<std::set<std::string>> SyncAdapters(const DeploymentReplicaRecord& replica,
                                                    const ServingTemplate& t, AdapterRound& round);
  // Stores each adapter's status after the round (AdapterStatusAfter).
  Status SettleAdapters(const AdapterRound& round, int64_t now);
  // Removes the adapter folders of deployments that hold none any more
  // and have no live replica.
  void RemoveUnusedAdapterFolders(const std::set<std::string>& in_use);
  std::string AdapterFolderOf(const std::string& deployment_id) const;
  // Whether `spec` on `t` allows adapters here.
  bool AllowsAdapters(const ManagedSpec& spec, const ServingTemplate& t) const;
  // One round over a deployment's replicas (`replicas`: its live rows,
  // changed in place); cancels are collected in `to_cancel`. With
  // `adapters`, each healthy replica's adapters are synced, and a starting
  // one becomes ready only once it lists them all.
  Status StepReplicas(const DeploymentRecord* deployment,
                      std::vector<DeploymentReplicaRecord>& replicas,
                      std::vector<DeploymentReplicaRecord>& to_cancel, int64_t now,
                      AdapterRound* adapters);
  // For an autoscaling `d`: the replicas the rule wants, stored (with its
  // audit record) into d.serving and `spec` when they change.
  Status Autoscale(DeploymentRecord& d, ManagedSpec& spec, const ServingTemplate& t,
                   const std::vector<DeploymentReplicaRecord>& live, int64_t now);
  Status PlanAndApply(const DeploymentRecord& d, std::vector<DeploymentReplicaRecord>& replicas,
                      std::vector<DeploymentReplicaRecord>& to_cancel, int64_t now);
  Status StartReplica(const DeploymentRecord& d, const ManagedSpec& spec, const ServingTemplate& t,
                      int64_t now);
  // Submits (again: idempotent by the replica's id) a replica's job.
  Status SubmitJob(const DeploymentRecord& d, const ManagedSpec& spec, const ServingTemplate& t,
                   DeploymentReplicaRecord& replica);
  void CancelJob(const DeploymentReplicaRecord& replica);
  std::string ReplicaUrl(const DeploymentReplicaRecord& replica, const JobRecord& job);
  Result<int64_t> FreePort();
  Result<std::string> OwnerOf(const DeploymentRecord& d) const;

  Store& store_;
  jobs::JobService& jobs_;
  const Clock& clock_;
  ServingOptions options_;

  std::mutex tick_mu_;
  std::map<std::string, Backoff> backoff_;            // by deployment id; GUARDED_BY(tick_mu_)
  std::map<std::string, AutoscaleMemory> autoscale_;  // by deployment id; GUARDED_BY(tick_mu_)
  std::vector<int64_t> ports_in_use_;                 // this round's; GUARDED_BY(tick_mu_)
  int64_t next_port_ = 0;                             // GUARDED_BY(tick_mu_)
  int64_t last_cleanup_ms_ = 0;                       // GUARDED_BY(tick_mu_)

  PeriodicThread timer_;  // Tick every options_.tick_ms
};

}  // namespace atrium::serving
