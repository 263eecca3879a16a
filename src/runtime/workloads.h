// Start-up of what runs tenants' jobs: the execution backend the
// configuration names ([jobs] backend = local | slurm | off) and the job
// service over it. Platform owns one Workloads and stops it before the
// scheduling service.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/result.h"
#include "exec/backend.h"
#include "jobs/archive_service.h"
#include "jobs/job_service.h"
#include "runtime/config.h"
#include "scheduling/scheduling_service.h"
#include "serving/serving_spec.h"
#include "slurm/command_runner.h"
#include "store/store.h"
#include "templates/template_service.h"
#include "tenancy/tenant_service.h"

namespace atrium {

class Workloads {
 public:
  // Builds the backend and the job service; nothing runs until Start.
  // InvalidArgument for a configuration the backend refuses; `simulated`:
  // the fleet is the simulator's, so the local backend runs workloads
  // beside fake GPU device files it makes itself (needs root: mknod).
  // Jobs name their environment through `templates`, which must outlive
  // the result.
  static Result<std::unique_ptr<Workloads>> Create(const Config& config, Store& store,
                                                   scheduling::SchedulingService& scheduling,
                                                   templates::TemplateService& templates,
                                                   const Clock& clock, bool simulated);
  ~Workloads();
  Workloads(const Workloads&) = delete;
  Workloads& operator=(const Workloads&) = delete;

  // Reconciles with the backend, starts the job service's thread and puts
  // the job service in front of the scheduling service as the tenant
  // observer (a tenant's jobs stop before its allocations are released).
  Status Start(TenantService& tenants);
  // Stops the thread and gives the observer back to the scheduling service.
  void Stop(TenantService& tenants);

  jobs::JobService& jobs() { return *jobs_; }
  // Tenants' uploaded archives, which jobs name (kept in
  // "<jobs state dir>/archives"; a tenant's go when it is evicted).
  jobs::ArchiveService& archives() { return *archives_; }
  exec::ExecutionBackend& backend() { return *backend_; }
  // What a managed deployment's replicas need from this backend: the
  // templates with the engine simulator's command pointing at this binary
  // (on the local backend bound read-only into the sandbox at
  // /opt/atrium/bin; on Slurm its path on the nodes, the same as here).
  // `operators` (the configuration's) replace built-ins of their name or
  // join them.
  std::vector<serving::ServingTemplate> ServingTemplates(
      const std::vector<serving::ServingTemplate>& operators = {}) const;
  // Where tenants' adapters are unpacked ([serving] adapter_dir; on the
  // local backend by default "<jobs state dir>/adapters", on Slurm none
  // unless configured) and where a local sandbox shows a deployment's
  // folder ("" on Slurm: the engine reads it where it is).
  const std::string& adapter_root() const { return adapter_root_; }
  const std::string& adapter_dir_inside() const { return adapter_dir_inside_; }

  // Makes the backend's tenants match the store's: every tenant with its
  // state and its whole-GPU limits by model (its quota's gpu and node
  // classes), and a tenant gone from the store as deleted. Only what
  // changed since the last sync reaches the backend. The sync thread runs
  // it every `tenant_sync_ms`; a tenant change runs it at once.
  Status SyncTenants();

 private:
  Workloads() = default;
  void SyncLoop();
  void SyncSoon();

  Store* store_ = nullptr;
  std::string adapter_root_;
  std::string adapter_dir_inside_;
  int64_t tenant_sync_ms_ = 0;
  std::mutex sync_mu_;                                 // one sync at a time
  std::map<std::string, exec::TenantAccount> synced_;  // GUARDED_BY(sync_mu_)
  std::mutex loop_mu_;
  std::condition_variable loop_cv_;
  bool stopping_ = false;   // GUARDED_BY(loop_mu_)
  bool sync_soon_ = false;  // GUARDED_BY(loop_mu_)
  std::thread sync_thread_;
  class TenantSyncObserver;
  std::unique_ptr<jobs::ArchivesTenantObserver> archives_observer_;
  std::unique_ptr<TenantSyncObserver> sync_observer_;
  scheduling::SchedulingService* scheduling_ = nullptr;
  std::unique_ptr<slurm::CommandRunner> runner_;  // slurm only
  std::unique_ptr<exec::ExecutionBackend> backend_;
  std::unique_ptr<jobs::ArchiveService> archives_;
  std::unique_ptr<jobs::JobService> jobs_;
  std::unique_ptr<jobs::JobsTenantObserver> observer_;
};

// Where the local backend keeps workloads by default: "workloads" beside a
// SQLite database when the workloads' users can reach it, else a folder
// under /var/lib/atrium/workloads (named after the database's folder; "server"
// with PostgreSQL).
std::string DefaultWorkloadStateDir(const Config& config);

}  // namespace atrium
