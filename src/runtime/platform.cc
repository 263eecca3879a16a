#include "runtime/platform.h"

#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <set>

#include "crypto/ids.h"
#include "gateway/cache_salt.h"
#include "identity/signing_key_box.h"
#include "jobs/archive_unpack.h"
#include "runtime/gateway_budgets.h"

namespace atrium {

Platform::Platform(Config config) : config_(std::move(config)) {}

Platform::~Platform() { Stop(); }

namespace {

std::string UrlOf(const std::string& host, int port) {
  std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return "http://" + h + ":" + std::to_string(port);
}

// The listen address `text` (HOST:PORT) is on 0.0.0.0 or ::.
bool IsWildcardListener(const std::string& text) {
  auto listen = ParseListenAddress(text);
  if (!listen.has_value()) return false;
  auto address = gateway::ParseIpAddress(listen->first);
  return address && (address->bytes == gateway::IpAddress{}.bytes ||
                     *address == *gateway::ParseIpAddress("0.0.0.0"));
}

// This machine's addresses: a listener on 0.0.0.0 or :: is reached on each.
std::vector<gateway::IpAddress> LocalAddresses() {
  std::vector<gateway::IpAddress> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    gateway::IpAddress address;
    if (i->ifa_addr->sa_family == AF_INET) {
      const auto* v4 = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
      address.bytes[10] = address.bytes[11] = 0xff;
      std::memcpy(address.bytes.data() + 12, &v4->sin_addr, 4);
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      const auto* v6 = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      std::memcpy(address.bytes.data(), &v6->sin6_addr, 16);
    } else {
      continue;
    }
    out.push_back(address);
  }
  freeifaddrs(list);
  return out;
}

}  // namespace

Result<PlatformUrls> Platform::Start() {
  ATRIUM_ASSIGN_OR_RETURN(gateway::EgressRules rules, EgressRulesOf(config_));
  egress_ = std::make_shared<gateway::EgressPolicy>(std::move(rules));
  if (IsWildcardListener(config_.api_listen) || IsWildcardListener(config_.gateway_listen)) {
    egress_->SetLocalAddresses(LocalAddresses());
  }
  if (!config_.run_control_plane) {
    // The API runs elsewhere; its configured address is the best we know.
    if (auto api = ParseListenAddress(config_.api_listen); api.has_value() && api->second != 0) {
      egress_->AddPlatformListener({api->first, static_cast<uint16_t>(api->second)});
    }
  }
  ATRIUM_ASSIGN_OR_RETURN(store_, Store::Open(config_.store_url, config_.store_pool_size));
  PlatformUrls urls;
  if (config_.run_control_plane) {
    ATRIUM_ASSIGN_OR_RETURN(urls.api, StartControlPlane());
  }
  if (config_.run_gateway) {
    ATRIUM_ASSIGN_OR_RETURN(urls.gateway, StartGateway());
  }
  // Managed deployments start once the gateway (if this process runs one)
  // can hear of their endpoints.
  if (serving_) ATRIUM_RETURN_IF_ERROR(serving_->Start());
  return urls;
}

Result<std::string> Platform::StartGateway() {
  Store* store = store_.get();
  const std::string gateway_id = NewId("gw", SystemClock::Instance());
  // Budgets: this gateway's holds against them, shared through the store.
  budgets_ = std::make_shared<gateway_server::BudgetKeeper>(
      [source = std::make_shared<GatewayBudgetSource>(*store, gateway_id)](
          const std::vector<BudgetHold>& holds) { return (*source)(holds); },
      SystemClock::Instance(), static_cast<int>(config_.gateway_budget_sync_ms));
  gateway_server::UsageJournalOptions journal_opts;
  journal_opts.directory = config_.gateway_journal_dir;
  journal_ = std::make_unique<gateway_server::UsageJournal>(
      journal_opts,
      [store, budgets = budgets_.get()](const std::vector<UsageRecord>& records) -> Status {
        // Records timed far from now are refused (and set aside): billing
        // takes usage up to 35 days late and 5 minutes early.
        ATRIUM_RETURN_IF_ERROR(store->InsertUsageRecords(
            records, Store::UsageWindow{SystemClock::Instance().NowMillis()}));
        // Stored: billing's next count of the budgets has them.
        budgets->Shipped(records);
        return OkStatus();
      });
  journal_->SetRefusalSink([store](const std::vector<RefusalCount>& counts) {
    return store->AddGatewayRefusals(counts);
  });
  ATRIUM_RETURN_IF_ERROR(journal_->Start());
  budgets_->Start();
  policy_ = std::make_unique<gateway_server::PolicyLoader>(
      gateway_server::PolicySource{
          [store] { return store->GatewayPolicyMarkerForGateway(); },
          [store, entitled_only = config_.gateway_dedicated_requires_entitlement]()
              -> Result<GatewayPolicyRows> {
            ATRIUM_ASSIGN_OR_RETURN(auto rows, store->LoadGatewayPolicyForGateway());
            if (entitled_only) {
              return gateway::WithoutUnentitledDedicated(std::move(rows));
            }
            return rows;
          }},
      static_cast<int>(config_.gateway_policy_poll_ms),
      (std::filesystem::path(config_.gateway_journal_dir) / "policy.snapshot").string());
  ATRIUM_RETURN_IF_ERROR(policy_->Start());
  ATRIUM_ASSIGN_OR_RETURN(auto listen, ParseListenAddress(config_.gateway_listen));
  gateway_server::GatewayOptions opts;
  opts.host = listen.first;
  opts.port = listen.second;
  opts.threads = config_.gateway_threads;
  opts.max_body_bytes = static_cast<size_t>(config_.gateway_max_body_bytes);
  opts.default_deadline_ms = config_.gateway_default_deadline_ms;
  opts.max_connections = static_cast<int>(config_.gateway_max_connections);
  opts.first_byte_timeout_ms = static_cast<int>(config_.gateway_first_byte_timeout_ms);
  opts.upstream_body_timeout_ms = static_cast<int>(config_.gateway_upstream_body_timeout_ms);
  opts.body_memory_bytes = static_cast<size_t>(config_.gateway_body_memory_bytes);
  opts.queued_body_bytes_per_tenant =
      static_cast<size_t>(config_.gateway_queued_body_bytes_per_tenant);
  opts.upstream_ca_file = config_.gateway_upstream_ca_file;
  opts.egress = egress_;
  opts.budgets = budgets_;
  // Every server of a platform shares the signing-key file, so every
  // gateway derives the same salts from it.
  ATRIUM_ASSIGN_OR_RETURN(std::string platform_key, LoadOrCreateKeyFile(config_.signing_key_file));
  opts.cache_salt_key = gateway::CacheSaltKey(platform_key);
  opts.set_cache_salt = config_.gateway_cache_salt;
  opts.dispatcher.discipline = config_.gateway_queue == "fifo"
                                   ? gateway_server::QueueDiscipline::kFifo
                                   : gateway_server::QueueDiscipline::kFair;
  gateway_ = std::make_unique<gateway_server::GatewayServer>(opts, *policy_, *journal_,
                                                             SystemClock::Instance());
  ATRIUM_ASSIGN_OR_RETURN(int port, gateway_->Start());
  // What this gateway sees of each managed deployment, for the autoscaler
  // wherever the serving controller runs; reports a gateway stopped
  // sending are forgotten after an hour.
  gateway_server::LoadReporterOptions load_opts;
  load_opts.gateway_id = gateway_id;
  load_opts.interval_ms = config_.gateway_load_report_ms;
  load_reporter_ = std::make_unique<gateway_server::LoadReporter>(
      gateway_->dispatcher(), *policy_, SystemClock::Instance(), load_opts,
      [store](const std::vector<DeploymentLoadReport>& reports) -> Status {
        const int64_t forget_before = SystemClock::Instance().NowMillis() - 3'600'000;
        for (size_t i = 0; i < reports.size(); i += Store::kMaxLoadReports) {
          const size_t n = std::min(Store::kMaxLoadReports, reports.size() - i);
          ATRIUM_RETURN_IF_ERROR(
              store->ReportDeploymentLoad({reports.begin() + static_cast<std::ptrdiff_t>(i),
                                           reports.begin() + static_cast<std::ptrdiff_t>(i + n)},
                                          forget_before));
        }
        return OkStatus();
      });
  load_reporter_->Start();
  return UrlOf(listen.first, port);
}

Status Platform::RefreshGatewayPolicy() {
  if (!policy_) return Error::FailedPrecondition("this process runs no gateway");
  return policy_->Refresh();
}

Result<std::string> Platform::StartControlPlane() {
  IdentityOptions id_opts;
  id_opts.access_token_ttl_s = config_.access_token_ttl_s;
  ATRIUM_ASSIGN_OR_RETURN(id_opts.signing_key_kek, LoadOrCreateKeyFile(config_.signing_key_file));
  identity_ = std::make_unique<IdentityService>(*store_, SystemClock::Instance(), id_opts);
  ATRIUM_RETURN_IF_ERROR(identity_->Init());
  tenants_ = std::make_unique<TenantService>(*store_, *identity_, SystemClock::Instance());
  ATRIUM_ASSIGN_OR_RETURN(fleet_discovery_, DiscoverFleet(config_));
  scheduling::SchedulingOptions sched_opts;
  sched_opts.fleet_spec = config_.scheduler_fleet;
  sched_opts.fleet = fleet_discovery_.fleet;
  sched_opts.grace_ms = config_.scheduler_grace_s * 1000;
  sched_opts.policy = config_.scheduler_policy;
  sched_opts.tick_ms = config_.scheduler_tick_ms;
  sched_opts.max_pending_per_tenant = config_.scheduler_max_pending_per_tenant;
  sched_opts.max_pending_per_project = config_.scheduler_max_pending_per_project;
  sched_opts.scrub = config_.scrub;
  scheduling_ =
      std::make_unique<scheduling::SchedulingService>(*store_, SystemClock::Instance(), sched_opts);
  ATRIUM_RETURN_IF_ERROR(scheduling_->Start());
  if (fleet_discovery_.library && fleet_discovery_.fleet && config_.fleet_health_check_s > 0) {
    std::set<int> unhealthy;
    for (const nvml::MappedGpu& gpu : fleet_discovery_.gpus) {
      if (!gpu.verdict.healthy) unhealthy.insert(static_cast<int>(gpu.index));
    }
    gpu_health_ = std::make_unique<GpuHealthWatcher>(
        *fleet_discovery_.library, *scheduling_, fleet_discovery_.fleet->nodes[0].name,
        std::move(unhealthy), config_.fleet_health_check_s * 1000);
    gpu_health_->Start();
  }
  tenants_->SetObserver(scheduling_.get());
  templates::TemplateServiceOptions template_opts;
  template_opts.images_dir = config_.templates_images_dir;
  // A version that live jobs pin stays until they end: their next start or
  // requeue resolves it again.
  template_opts.uses_in_flight = templates::LiveJobsPinning(*store_);
  templates_ = std::make_unique<templates::TemplateService>(*store_, SystemClock::Instance(),
                                                            std::move(template_opts));
  auto workloads =
      Workloads::Create(config_, *store_, *scheduling_, *templates_, SystemClock::Instance(),
                        /*simulated=*/!fleet_discovery_.fleet.has_value());
  if (workloads.has_value()) {
    workloads_ = std::move(*workloads);
    ATRIUM_RETURN_IF_ERROR(workloads_->Start(*tenants_));
  } else if (workloads.error().code == ErrorCode::kInvalidArgument) {
    return std::move(workloads).error();  // the configuration is wrong: say so and stop
  } else {
    // The host cannot run this backend (not root, no bubblewrap, Slurm
    // down at start): everything else serves; the job routes answer 503.
    spdlog::error("jobs are not available on this server: {}", workloads.error().message);
  }
  if (workloads_ && config_.serving_enabled) {
    serving::ServingOptions serving_opts;
    serving_opts.tick_ms = config_.serving_tick_ms;
    serving_opts.templates = workloads_->ServingTemplates(config_.serving_templates);
    serving_opts.platform_tenant = config_.serving_platform_tenant;
    serving_opts.port_min = config_.serving_port_min;
    serving_opts.port_max = config_.serving_port_max;
    serving_opts.bind_host = config_.serving_bind_host;
    serving_opts.default_node_address = config_.serving_node_address;
    serving_opts.node_addresses = config_.serving_node_addresses;
    serving_opts.autoscale.allow_zero = config_.serving_allow_scale_to_zero;
    serving_opts.autoscale.scale_up_wait_ms = config_.serving_scale_up_wait_ms;
    serving_opts.autoscale.up_cooldown_ms = config_.serving_scale_up_cooldown_ms;
    serving_opts.autoscale.down_cooldown_ms = config_.serving_scale_down_cooldown_ms;
    serving_opts.autoscale.idle_to_zero_ms = config_.serving_idle_to_zero_ms;
    serving_opts.load_fresh_ms = config_.serving_load_fresh_ms;
    serving_opts.adapter_root = workloads_->adapter_root();
    serving_opts.adapter_dir_inside = workloads_->adapter_dir_inside();
    serving_opts.unpack_adapter = [archives = &workloads_->archives()](
                                      const std::string& tenant_id, const std::string& archive_id,
                                      const std::string& sha256,
                                      const std::string& dest) -> Status {
      ATRIUM_ASSIGN_OR_RETURN(std::string tar,
                              archives->ResolvePinned(tenant_id, archive_id, sha256));
      return jobs::UnpackFilesAndFolders(tar, dest, archives->limits());
    };
    // In one process the gateway hears of a replica leaving at once, not at
    // its next policy poll.
    serving_opts.endpoints_changed = [this] {
      if (policy_) (void)policy_->Refresh();
    };
    serving_ = std::make_unique<serving::DeploymentController>(
        *store_, workloads_->jobs(), SystemClock::Instance(), std::move(serving_opts));
  }
  metering::GpuMeterOptions meter_opts;
  meter_opts.interval_ms = config_.metering_interval_ms;
  meter_opts.open_lag_ms = config_.metering_open_lag_ms;
  meter_ = std::make_unique<metering::GpuMeter>(*store_, SystemClock::Instance(), meter_opts);
  meter_->AddSource(std::make_unique<metering::AllocationSubjectSource>(*store_));
  // Jobs' runs beside the allocations they ran on (recorded, not billed on
  // top). Added with or without a job service in this process: runs that
  // an earlier process ended still get their closing records.
  meter_->AddSource(std::make_unique<metering::JobSubjectSource>(*store_));
  ATRIUM_RETURN_IF_ERROR(meter_->Start());
  billing::BillingOptions billing_opts;
  billing_opts.interval_ms = config_.billing_interval_ms;
  billing_opts.rating_lag_ms = config_.billing_rating_lag_ms;
  billing_opts.finalize_after_ms = config_.billing_finalize_after_ms;
  billing_ =
      std::make_unique<billing::BillingService>(*store_, SystemClock::Instance(), billing_opts);
  ATRIUM_RETURN_IF_ERROR(billing_->Start());
  api::Services services{.store = store_.get(),
                         .identity = identity_.get(),
                         .tenants = tenants_.get(),
                         .clock = &SystemClock::Instance(),
                         .scheduling = scheduling_.get(),
                         .templates = templates_.get()};
  if (workloads_) {
    services.jobs = &workloads_->jobs();
    services.archives = &workloads_->archives();
  }
  services.serving = serving_.get();
  services.billing = billing_.get();
  services.max_adapters_per_tenant = config_.serving_max_adapters_per_tenant;
  if (!config_.audit_checkpoint_file.empty()) {
    checkpointer_ = std::make_unique<AuditCheckpointer>(
        *store_, SystemClock::Instance(),
        AuditCheckpointOptions{config_.audit_checkpoint_file, config_.audit_signing_key_file,
                               config_.audit_checkpoint_interval_s * 1000});
    ATRIUM_RETURN_IF_ERROR(checkpointer_->Start());
    services.audit_checkpoint = [c = checkpointer_.get()] { return c->Latest(); };
  } else {
    spdlog::warn(
        "audit checkpoints are off ([audit] checkpoint_file): a trail cut short or rewound by "
        "someone with write access to the database would not show");
  }
  services.egress = egress_.get();
  services.dedicated_requires_entitlement = config_.gateway_dedicated_requires_entitlement;
  api_ = std::make_unique<api::ControlPlaneApi>(services);

  ATRIUM_ASSIGN_OR_RETURN(auto listen, ParseListenAddress(config_.api_listen));
  http::ServerOptions opts;
  opts.host = listen.first;
  opts.port = listen.second;
  opts.threads = config_.api_threads;
  opts.max_body_bytes = static_cast<size_t>(config_.api_max_body_bytes);
  opts.read_timeout_ms = static_cast<int>(config_.api_read_timeout_ms);
  opts.idle_timeout_ms = static_cast<int>(config_.api_idle_timeout_ms);
  opts.max_connections = static_cast<int>(config_.api_max_connections);
  // Archive uploads may be larger than a JSON body ([jobs] max_archive_bytes).
  opts.body_limit_for = [api = api_.get()](std::string_view method, std::string_view path) {
    return api->BodyLimitFor(method, path);
  };
  server_ = std::make_unique<http::Server>(
      opts, [api = api_.get()](http::Request& req) { return api->Handle(req); });
  ATRIUM_ASSIGN_OR_RETURN(int port, server_->Start());
  egress_->AddPlatformListener({listen.first, static_cast<uint16_t>(port)});
  return UrlOf(listen.first, port);
}

void Platform::Stop() {
  // The serving controller first: it refreshes the gateway's policy and
  // stops jobs. Its replicas run on (a model server is a job like any).
  if (serving_) serving_->Stop();
  // The gateway next: requests in flight finish and are journaled, then the
  // journal ships what it holds while the store is still open.
  load_reporter_.reset();
  if (gateway_) {
    gateway_->Stop();
    gateway_.reset();
  }
  if (policy_) policy_->Stop();
  policy_.reset();
  if (journal_) journal_->Stop();
  journal_.reset();
  if (budgets_) budgets_->Stop();
  budgets_.reset();
  if (server_) {
    server_->Stop();
    server_.reset();
  }
  api_.reset();
  // The GPU health watcher calls the scheduler: stop it first.
  if (gpu_health_) gpu_health_->Stop();
  gpu_health_.reset();
  // The job service calls the scheduler: stop it first.
  if (workloads_) workloads_->Stop(*tenants_);
  // The scheduler's timer writes to the store: stop it before the store closes.
  if (scheduling_) scheduling_->Stop();
  // The meter writes to the store too; what it did not write, the next
  // start's meter does (it keeps nothing of its own).
  if (meter_) meter_->Stop();
  meter_.reset();
  if (billing_) billing_->Stop();
  billing_.reset();
  // After every writer of audit records, before the store closes.
  if (checkpointer_) checkpointer_->Stop();
  checkpointer_.reset();
  if (tenants_) tenants_->SetObserver(nullptr);
  serving_.reset();
  workloads_.reset();
  templates_.reset();
  scheduling_.reset();
  fleet_discovery_ = FleetDiscovery{};  // closes NVML
  tenants_.reset();
  identity_.reset();
  store_.reset();  // closes every pooled connection
}

Result<BootstrapAdminResult> CreateBootstrapAdminKey(const Config& config, bool rotate) {
  ATRIUM_ASSIGN_OR_RETURN(auto store, Store::Open(config.store_url, 1));
  IdentityOptions id_opts;
  ATRIUM_ASSIGN_OR_RETURN(id_opts.signing_key_kek, LoadOrCreateKeyFile(config.signing_key_file));
  IdentityService identity(*store, SystemClock::Instance(), id_opts);
  ATRIUM_RETURN_IF_ERROR(identity.Init());
  return BootstrapPlatformAdmin(*store, identity, SystemClock::Instance(),
                                {rotate, "cli:bootstrap-admin"});
}

Status WriteSecretFile(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Error::Unavailable("cannot write " + path);
  ::fchmod(fd, 0600);
  std::string line = text + "\n";
  bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  ok = ::fsync(fd) == 0 && ok;
  ::close(fd);
  if (!ok) return Error::Unavailable("cannot write " + path);
  return OkStatus();
}

void BlockStopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForStopSignal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

}  // namespace atrium
