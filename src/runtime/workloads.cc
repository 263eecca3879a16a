#include "runtime/workloads.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include "exec_local/local_backend.h"
#include "slurm/slurm_backend.h"
#include "threads/thread_name.h"

namespace atrium {
namespace {

// NVIDIA's character-device major: fake GPUs are real character devices of
// it (a regular file is not a GPU to Slurm's GRES or the devices cgroup).
constexpr unsigned kNvidiaMajor = 195;
// The most GPUs a node of the catalog has.
constexpr int kMostGpusPerNode = 8;
// Where workloads live when the data dir is out of their users' reach.
constexpr char kHostWorkloadRoot[] = "/var/lib/atrium/workloads";

constexpr char kSandboxBinDir[] = "/opt/atrium/bin";
// Where a replica's sandbox shows its deployment's adapter folder.
constexpr char kSandboxAdapterDir[] = "/opt/atrium/adapters";

std::string DirOfThisProgram() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

// The simulated fleet's GPUs as `mknod c 195 N` fakes in `dir`, so a
// workload on a simulated GPU sees one device file, as on a real node.
Status MakeSimulatedGpuDevices(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Error::Unavailable("cannot create " + dir + ": " + ec.message());
  ::chmod(dir.c_str(), 0755);
  for (int i = 0; i < kMostGpusPerNode; ++i) {
    const std::string path = dir + "/nvidia" + std::to_string(i);
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) {
      if (S_ISCHR(st.st_mode) && major(st.st_rdev) == kNvidiaMajor) continue;
      return Error::FailedPrecondition(path + " exists and is not a GPU device file");
    }
    if (::mknod(path.c_str(), S_IFCHR | 0666, makedev(kNvidiaMajor, i)) != 0) {
      return Error::FailedPrecondition("cannot make the simulated GPU " + path +
                                       " (mknod needs root): " + std::strerror(errno));
    }
    ::chmod(path.c_str(), 0666);  // as the driver's own /dev/nvidiaN
  }
  return OkStatus();
}

// FNV-1a: stable across builds and runs.
uint64_t StableHash(std::string_view text) {
  uint64_t hash = 1469598103934665603ULL;
  for (unsigned char ch : text) hash = (hash ^ ch) * 1099511628211ULL;
  return hash;
}

// Each control plane's workloads get uids of their own, [base, base +
// kUidsPerControlPlane), the slot chosen by its state dir: two control
// planes on one host (a server beside `atrium dev`, tests side by side)
// never run workloads as one uid, which matters because releasing an
// ended workload kills every process of its uid. 100,000 slots between
// 200,000 and 2^31: two state dirs share a slot with odds 1 in 100,000.
constexpr uint32_t kUidsPerControlPlane = 20'000;
uint32_t UidBaseOf(const std::string& state_dir) {
  return 200'000 + static_cast<uint32_t>(StableHash(state_dir) % 100'000) * kUidsPerControlPlane;
}

Result<std::unique_ptr<exec::ExecutionBackend>> MakeLocalBackend(const Config& config,
                                                                 bool simulated) {
  exec_local::LocalBackendOptions options;
  options.state_dir =
      config.jobs_state_dir.empty() ? DefaultWorkloadStateDir(config) : config.jobs_state_dir;
  if (options.state_dir.rfind(kHostWorkloadRoot, 0) == 0) {
    std::error_code ec;
    std::filesystem::create_directories(kHostWorkloadRoot, ec);
    for (const char* dir : {"/var/lib/atrium", kHostWorkloadRoot}) ::chmod(dir, 0711);
  }
  options.WithHelpersIn(DirOfThisProgram());
  options.uid_base = UidBaseOf(options.state_dir);
  options.uid_count = kUidsPerControlPlane;
  options.require_full_confinement = config.jobs_require_full_confinement;
  options.default_memory_mib = config.jobs_default_memory_mib;
  options.tmpfs_mib = config.jobs_tmpfs_mib;
  options.max_file_mib = config.jobs_max_file_mib;
  options.log_retention_s = config.jobs_log_retention_days * 24 * 3600;
  if (!config.jobs_device_dir.empty()) {
    options.device_dir = config.jobs_device_dir;
  } else if (simulated) {
    options.device_dir = options.state_dir + ".gpus";
    if (auto made = MakeSimulatedGpuDevices(options.device_dir); !made) {
      // Jobs without GPUs still run; one asking for a GPU fails to start
      // with the backend's words about the missing device file.
      spdlog::warn("jobs: {}; jobs that ask for GPUs will not start", made.error().message);
    }
    // MIG instances of the simulated fleet: fake capability files beside
    // the fake GPUs, and the simulator's layout (instance = start slot).
    options.mig_caps_dir = options.device_dir + "/nvidia-caps";
    options.mig_minors_path = options.device_dir + "/mig-minors";
    options.resolve_mig = exec_local::SimulatedMigInstance;
    if (auto made = exec_local::MakeSimulatedMigDevices(options.mig_caps_dir,
                                                        options.mig_minors_path, kMostGpusPerNode);
        !made) {
      spdlog::warn("jobs: {}; jobs that ask for a MIG instance will not start",
                   made.error().message);
    }
  }
  ATRIUM_ASSIGN_OR_RETURN(auto backend, exec_local::LocalBackend::Create(std::move(options)));
  return std::unique_ptr<exec::ExecutionBackend>(std::move(backend));
}

bool SameAccount(const exec::TenantAccount& a, const exec::TenantAccount& b) {
  return a.state == b.state && a.gpu_limits == b.gpu_limits;
}

}  // namespace

// Runs a sync soon after every tenant change, behind the job service's
// observer (which stops a tenant's jobs first).
class Workloads::TenantSyncObserver final : public TenantObserver {
 public:
  TenantSyncObserver(Workloads& owner, TenantObserver& next) : owner_(owner), next_(next) {}
  void TenantChanged(const Tenant& tenant) override {
    next_.TenantChanged(tenant);
    owner_.SyncSoon();
  }
  Result<Tenant> ApplyTenantChange(const Tenant& next,
                                   const std::function<Result<Tenant>()>& write) override {
    auto result = next_.ApplyTenantChange(next, write);
    owner_.SyncSoon();
    return result;
  }
  Status TenantEvicting(const std::string& tenant_id, const RequestOrigin& by) override {
    auto result = next_.TenantEvicting(tenant_id, by);
    owner_.SyncSoon();
    return result;
  }

 private:
  Workloads& owner_;
  TenantObserver& next_;
};

std::string DefaultWorkloadStateDir(const Config& config) {
  // A PostgreSQL store names no folder of this host: one folder for the
  // control planes on it (they share the store, so also its workloads).
  const auto sqlite_dir = SqliteDirOf(config.store_url);
  if (!sqlite_dir) return std::string(kHostWorkloadRoot) + "/server";
  const std::filesystem::path db_dir = std::filesystem::absolute(*sqlite_dir);
  // Workloads run as their own unprivileged users, who must be able to
  // reach their directories: beside the database when every folder above
  // it lets others search it, else in a folder of the host's named after
  // the database's (a data dir under a private home or a 0700 temp dir).
  bool reachable = true;
  for (std::filesystem::path dir = db_dir; dir != dir.parent_path(); dir = dir.parent_path()) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0 || (st.st_mode & S_IXOTH) == 0) {
      // The data dir itself is made searchable at start (atrium dev).
      if (dir != db_dir) reachable = false;
    }
  }
  if (reachable) return (db_dir / "workloads").string();
  char name[17];
  std::snprintf(name, sizeof name, "%016llx",
                static_cast<unsigned long long>(StableHash(db_dir.string())));
  return std::string(kHostWorkloadRoot) + "/" + name;
}

Result<std::unique_ptr<Workloads>> Workloads::Create(const Config& config, Store& store,
                                                     scheduling::SchedulingService& scheduling,
                                                     templates::TemplateService& templates,
                                                     const Clock& clock, bool simulated) {
  std::unique_ptr<Workloads> w(new Workloads());
  w->scheduling_ = &scheduling;
  w->store_ = &store;
  if (config.jobs_backend == "local") {
    ATRIUM_ASSIGN_OR_RETURN(w->backend_, MakeLocalBackend(config, simulated));
  } else if (config.jobs_backend == "slurm") {
    w->runner_ = std::make_unique<slurm::ProcessCommandRunner>(
        std::vector<std::pair<std::string, std::string>>{
            {"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
            {"SLURM_CONF", config.slurm_conf},
            {"SLURM_TIME_FORMAT", "%s"}},
        config.slurm_command_timeout_ms);
    slurm::SlurmBackendOptions options;
    options.workload_root = config.slurm_workload_root;
    options.log_retention_s = config.jobs_log_retention_days * 24 * 3600;
    options.unix_user_prefix = config.slurm_unix_user_prefix;
    options.create_unix_users = config.slurm_create_unix_users;
    options.partition = config.slurm_partition;
    options.log_max_bytes = config.slurm_log_max_bytes;
    options.ended_dir = config.slurm_ended_dir;
    options.preempt_grace_s = config.scheduler_grace_s;
    // Jobs with an environment template run in bubblewrap on their node,
    // under the init installed beside atrium (the same path on every node).
    options.sandbox.init_path = DirOfThisProgram() + "/atrium-sandbox-init";
    if (!config.jobs_device_dir.empty()) options.sandbox.device_dir = config.jobs_device_dir;
    std::error_code ec;
    std::filesystem::create_directories(options.workload_root, ec);
    if (ec) {
      return Error::Unavailable("cannot create 'slurm.workload_root' " + options.workload_root +
                                ": " + ec.message());
    }
    ::chmod(options.workload_root.c_str(), 0711);
    w->backend_ = std::make_unique<slurm::SlurmBackend>(options, *w->runner_, clock);
    w->tenant_sync_ms_ = config.slurm_tenant_sync_ms;
  } else {
    return Error::InvalidArgument("'jobs.backend' must be local or slurm");
  }
  w->adapter_root_ = config.serving_adapter_dir;
  if (w->backend_->name() == "local") {
    if (w->adapter_root_.empty()) {
      w->adapter_root_ = (config.jobs_state_dir.empty() ? DefaultWorkloadStateDir(config)
                                                        : config.jobs_state_dir) +
                         "/adapters";
    }
    w->adapter_dir_inside_ = kSandboxAdapterDir;
  }
  jobs::ArchiveServiceOptions archive_options;
  archive_options.root_dir =
      (config.jobs_state_dir.empty() ? DefaultWorkloadStateDir(config) : config.jobs_state_dir) +
      "/archives";
  archive_options.max_archive_bytes = config.jobs_max_archive_bytes;
  archive_options.limits.max_unpacked_bytes = config.jobs_max_archive_unpacked_bytes;
  archive_options.limits.max_entries = config.jobs_max_archive_entries;
  archive_options.max_archives_per_tenant = config.jobs_max_archives_per_tenant;
  ATRIUM_ASSIGN_OR_RETURN(w->archives_,
                          jobs::ArchiveService::Create(store, clock, std::move(archive_options)));
  jobs::JobServiceOptions options;
  options.tick_ms = config.jobs_tick_ms;
  options.resolve_archive = [archives = w->archives_.get()](const std::string& tenant_id,
                                                            const std::string& id,
                                                            int64_t declared_bytes) {
    return archives->Resolve(tenant_id, id, declared_bytes);
  };
  options.cancel_grace_ms = config.jobs_cancel_grace_s * 1000;
  options.time_limit_grace_ms = config.jobs_cancel_grace_s * 1000;
  // Log follows wait on API threads: at most half of them.
  options.max_log_waiters = std::max(1, config.api_threads / 2);
  options.full_confinement_tiers.insert(config.jobs_full_confinement_tiers.begin(),
                                        config.jobs_full_confinement_tiers.end());
  options.resolve_environment =
      [&templates](const std::string& tenant_id,
                   const std::string& reference) -> Result<jobs::ResolvedEnvironment> {
    ATRIUM_ASSIGN_OR_RETURN(templates::ResolvedTemplate resolved,
                            templates.Resolve(tenant_id, reference));
    return jobs::ResolvedEnvironment{
        .pinned = resolved.record.name + "@" + std::to_string(resolved.record.version),
        .root_fs = std::move(resolved.root_fs),
        .env = std::move(resolved.env),
        .requirements = std::move(resolved.requirements)};
  };
  w->jobs_ = std::make_unique<jobs::JobService>(store, scheduling, *w->backend_, clock,
                                                std::move(options));
  return w;
}

Workloads::~Workloads() {
  {
    std::lock_guard lock(loop_mu_);
    stopping_ = true;
  }
  loop_cv_.notify_all();
  if (sync_thread_.joinable()) sync_thread_.join();
}

Status Workloads::Start(TenantService& tenants) {
  if (tenant_sync_ms_ > 0) {
    // Tenants first: a backend with accounts (Slurm) refuses a workload
    // of a tenant it does not know yet.
    if (auto synced = SyncTenants(); !synced) {
      spdlog::warn("jobs: the {} backend's tenants are not in sync yet: {}", backend_->name(),
                   synced.error().message);
    }
  }
  // A GPU is scrubbed only once no process of the allocation that held it
  // is left (the scrub runner asks on its own threads).
  scheduling_->SetWorkloadProbe([jobs = jobs_.get()](const std::string& allocation_id) {
    return jobs->WorkloadsGone(allocation_id);
  });
  ATRIUM_RETURN_IF_ERROR(jobs_->Start());
  observer_ = std::make_unique<jobs::JobsTenantObserver>(*jobs_, *scheduling_);
  archives_observer_ = std::make_unique<jobs::ArchivesTenantObserver>(*archives_, *observer_);
  if (tenant_sync_ms_ > 0) {
    sync_observer_ = std::make_unique<TenantSyncObserver>(*this, *archives_observer_);
    tenants.SetObserver(sync_observer_.get());
    sync_thread_ = std::thread([this] { SyncLoop(); });
  } else {
    tenants.SetObserver(archives_observer_.get());
  }
  spdlog::info("jobs run on the {} backend", backend_->name());
  return OkStatus();
}

void Workloads::Stop(TenantService& tenants) {
  if (observer_) tenants.SetObserver(scheduling_);
  scheduling_->SetWorkloadProbe(nullptr);
  {
    std::lock_guard lock(loop_mu_);
    stopping_ = true;
  }
  loop_cv_.notify_all();
  if (sync_thread_.joinable()) sync_thread_.join();
  jobs_->Stop();
}

void Workloads::SyncSoon() {
  {
    std::lock_guard lock(loop_mu_);
    sync_soon_ = true;
  }
  loop_cv_.notify_all();
}

void Workloads::SyncLoop() {
  NameThisThread("tenant-sync");
  std::unique_lock lock(loop_mu_);
  while (!stopping_) {
    loop_cv_.wait_for(lock, std::chrono::milliseconds(tenant_sync_ms_),
                      [this] { return stopping_ || sync_soon_; });
    if (stopping_) break;
    sync_soon_ = false;
    lock.unlock();
    if (auto synced = SyncTenants(); !synced) {
      spdlog::warn("jobs: tenant sync with the {} backend: {}", backend_->name(),
                   synced.error().message);
    }
    lock.lock();
  }
}

Status Workloads::SyncTenants() {
  std::lock_guard lock(sync_mu_);
  // Every tenant's whole-GPU limits by model, from one query.
  std::map<std::string, std::map<std::string, int64_t>> whole_gpus;
  ATRIUM_ASSIGN_OR_RETURN(auto quotas, store_->ListAllQuotasForScheduler());
  for (const QuotaRecord& quota : quotas) {
    if (!quota.project.empty() || (quota.kind != "gpu" && quota.kind != "node")) continue;
    whole_gpus[quota.tenant_id][quota.model] += quota.limit_milli / 1000;
  }
  std::map<std::string, exec::TenantAccount> now;
  ListOptions page{.after = "", .limit = 500};
  do {
    ATRIUM_ASSIGN_OR_RETURN(auto tenants, store_->ListTenants(TenantFilter{}, page));
    for (const Tenant& tenant : tenants.items) {
      exec::TenantAccount account{.tenant_id = tenant.id, .state = tenant.state};
      const auto& limits = whole_gpus[tenant.id];
      account.gpu_limits.assign(limits.begin(), limits.end());
      now.emplace(tenant.id, std::move(account));
    }
    page.after = tenants.next_cursor;
  } while (!page.after.empty());
  for (const auto& [id, previous] : synced_) {
    if (!now.contains(id) && previous.state != "deleted") {
      now.emplace(id, exec::TenantAccount{.tenant_id = id, .state = "deleted"});
    }
  }
  Status first = OkStatus();
  for (auto& [id, account] : now) {
    auto known = synced_.find(id);
    if (known != synced_.end() && SameAccount(known->second, account)) continue;
    if (auto synced = backend_->SyncTenant(account); !synced) {
      if (first) first = std::move(synced);
      continue;  // retried at the next sync
    }
    synced_[id] = account;
  }
  return first;
}

std::vector<serving::ServingTemplate> Workloads::ServingTemplates(
    const std::vector<serving::ServingTemplate>& operators) const {
  std::vector<serving::ServingTemplate> templates = serving::BuiltinTemplates();
  for (const serving::ServingTemplate& mine : operators) {
    auto same = std::find_if(templates.begin(), templates.end(),
                             [&](const auto& t) { return t.name == mine.name; });
    if (same == templates.end()) {
      templates.push_back(mine);
    } else {
      *same = mine;
    }
  }
  const std::string dir = DirOfThisProgram();
  for (serving::ServingTemplate& t : templates) {
    if (t.engine != "engine-sim" || t.command.empty() || t.command.front() != "atrium") continue;
    if (backend_->name() == "local") {
      t.command.front() = std::string(kSandboxBinDir) + "/atrium";
      t.read_only_binds.emplace_back(kSandboxBinDir, dir);
    } else {
      t.command.front() = dir + "/atrium";
    }
  }
  return templates;
}

}  // namespace atrium
