#include "runtime/platform.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>

namespace atrium {

Platform::Platform(Config config) : config_(std::move(config)) {}

Platform::~Platform() { Stop(); }

Result<std::string> Platform::Start() {
  ATRIUM_ASSIGN_OR_RETURN(store_, Store::Open(config_.store_url, config_.store_pool_size));
  IdentityOptions id_opts;
  id_opts.access_token_ttl_s = config_.access_token_ttl_s;
  identity_ = std::make_unique<IdentityService>(*store_, SystemClock::Instance(), id_opts);
  ATRIUM_RETURN_IF_ERROR(identity_->Init());
  tenants_ = std::make_unique<TenantService>(*store_, *identity_, SystemClock::Instance());
  scheduling::SchedulingOptions sched_opts;
  sched_opts.fleet_spec = config_.scheduler_fleet;
  sched_opts.grace_ms = config_.scheduler_grace_s * 1000;
  sched_opts.policy = config_.scheduler_policy;
  sched_opts.tick_ms = config_.scheduler_tick_ms;
  scheduling_ =
      std::make_unique<scheduling::SchedulingService>(*store_, SystemClock::Instance(), sched_opts);
  ATRIUM_RETURN_IF_ERROR(scheduling_->Start());
  tenants_->SetObserver(scheduling_.get());
  api_ = std::make_unique<api::ControlPlaneApi>(api::Services{
      store_.get(), identity_.get(), tenants_.get(), &SystemClock::Instance(), scheduling_.get()});

  ATRIUM_ASSIGN_OR_RETURN(auto listen, ParseListenAddress(config_.api_listen));
  http::ServerOptions opts;
  opts.host = listen.first;
  opts.port = listen.second;
  opts.threads = config_.api_threads;
  opts.max_body_bytes = static_cast<size_t>(config_.api_max_body_bytes);
  opts.read_timeout_ms = static_cast<int>(config_.api_read_timeout_ms);
  opts.idle_timeout_ms = static_cast<int>(config_.api_idle_timeout_ms);
  opts.max_connections = static_cast<int>(config_.api_max_connections);
  server_ = std::make_unique<http::Server>(
      opts, [api = api_.get()](http::Request& req) { return api->Handle(req); });
  ATRIUM_ASSIGN_OR_RETURN(int port, server_->Start());
  std::string host =
      listen.first.find(':') != std::string::npos ? "[" + listen.first + "]" : listen.first;
  return "http://" + host + ":" + std::to_string(port);
}

void Platform::Stop() {
  if (server_) {
    server_->Stop();
    server_.reset();
  }
  api_.reset();
  // The scheduler's timer writes to the store: stop it before the store closes.
  if (scheduling_) scheduling_->Stop();
  if (tenants_) tenants_->SetObserver(nullptr);
  scheduling_.reset();
  tenants_.reset();
  identity_.reset();
  store_.reset();  // closes every pooled connection
}

Result<std::string> CreateBootstrapAdminKey(const Config& config) {
  ATRIUM_ASSIGN_OR_RETURN(auto store, Store::Open(config.store_url, 1));
  IdentityService identity(*store, SystemClock::Instance());
  ATRIUM_RETURN_IF_ERROR(identity.Init());
  return identity.BootstrapAdminKey("bootstrap-admin");
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
