#include "gateway_server/gateway_server.h"

// clang-format off
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
// clang-format on
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <map>

#include "crypto/crypto.h"
#include "gateway_server/server_impl.h"
#include "gateway_server/session.h"
#include "threads/thread_name.h"

namespace atrium::gateway_server {
namespace {

// How long requests Stop() cut off get to answer and be recorded, beyond the
// connect timeout (a request still connecting notices the cut after it).
constexpr int64_t kCutGraceMs = 2000;

}  // namespace

void GatewayServer::Impl::DeferWatch(size_t loop, const std::shared_ptr<Interrupts>& interrupts) {
  DeferredWatches& watches = *deferred_watches[loop];
  watches.due.emplace_back(std::chrono::steady_clock::now() + kWatchAfter, interrupts);
  if (watches.armed) return;
  watches.armed = true;
  watches.timer.expires_after(kWatchAfter);
  watches.timer.async_wait([this, loop](beast::error_code) { ArmDueWatches(loop); });
}

void GatewayServer::Impl::ArmDueWatches(size_t loop) {
  DeferredWatches& watches = *deferred_watches[loop];
  watches.armed = false;
  const auto now = std::chrono::steady_clock::now();
  while (!watches.due.empty() && watches.due.front().first <= now) {
    std::shared_ptr<Interrupts> interrupts = watches.due.front().second.lock();
    watches.due.pop_front();
    if (!interrupts || interrupts->done || interrupts->watched) continue;
    if (auto session = interrupts->session.lock()) session->WatchClient(interrupts);
  }
  if (watches.due.empty() || stopping.load()) return;
  watches.armed = true;
  watches.timer.expires_at(watches.due.front().first);
  watches.timer.async_wait([this, loop](beast::error_code) { ArmDueWatches(loop); });
}

awaitable<void> GatewayServer::Impl::AcceptLoop() {
  for (;;) {
    beast::error_code ec;
    tcp::socket socket = co_await acceptor.async_accept(
        *loops[next_loop], net::redirect_error(net::use_awaitable, ec));
    if (stopping.load() || !acceptor.is_open()) co_return;
    if (ec) {  // e.g. out of file descriptors: back off instead of spinning
      net::steady_timer backoff(co_await net::this_coro::executor, Millis(50));
      co_await backoff.async_wait(net::redirect_error(net::use_awaitable, ec));
      continue;
    }
    {
      std::lock_guard lock(sessions_mu);
      if (sessions >= options.max_connections) continue;  // closes the socket
      ++sessions;
    }
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    const size_t loop = next_loop;
    next_loop = (next_loop + 1) % loops.size();  // connections round-robin over the loops
    std::make_shared<Session>(*this, loop, std::move(socket))->Start();
  }
}

awaitable<void> GatewayServer::Impl::CheckHealth(std::string url, bool dedicated,
                                                 std::vector<std::string> deployment_ids) {
  auto verdict = [&](bool ok) {
    for (const std::string& id : deployment_ids)
      dispatcher.HealthCheck(id, url, ok, clock.NowMillis());
  };
  auto address = ParseUpstreamUrl(url);
  if (!address.has_value()) {
    verdict(false);
    co_return;
  }
  beast::error_code ec;
  UpstreamPool probe_pool(0);
  std::string why;
  // A tenant's endpoint is probed only where it may be sent requests: a
  // probe is a request too.
  std::shared_ptr<const gateway::EgressFacts> facts =
      dedicated ? EgressFactsOf(*policy.Current()) : nullptr;
  std::unique_ptr<UpstreamConnection> connection;
  AddressCheck check;
  if (facts) {
    why = EgressRefusal(*facts, url);
    check = EgressCheck(facts, url);
  }
  if (why.empty()) {
    connection = co_await ConnectUpstream(probe_pool, url, *address, upstream_tls.get(),
                                          kHealthTimeoutMs, why, &check);
  }
  bool ok = false;
  if (connection) {
    std::string head = "GET " + address->base_path +
                       "/v1/models HTTP/1.1\r\nHost: " + address->host_header +
                       "\r\nConnection: close\r\n\r\n";
    connection->tcp().expires_after(Millis(kHealthTimeoutMs));
    auto write = connection->With([&](auto& stream) {
      return net::async_write(stream, net::buffer(head),
                              net::redirect_error(net::use_awaitable, ec));
    });
    co_await std::move(write);
    if (!ec) {
      bhttp::response_parser<bhttp::string_body> parser;
      auto read = connection->With([&](auto& stream) {
        return bhttp::async_read(stream, connection->buffer, parser,
                                 net::redirect_error(net::use_awaitable, ec));
      });
      co_await std::move(read);
      ok = !ec && parser.get().result_int() == 200;
      if (!ok) {
        why = ec ? "GET /v1/models: " + ec.message()
                 : "GET /v1/models answered " + std::to_string(parser.get().result_int());
      }
    } else {
      why = "GET /v1/models: " + ec.message();
    }
  }
  // Said once per change, not every check.
  auto last = health_verdicts.try_emplace((dedicated ? "dedicated " : "") + url, true).first;
  if (!ok && last->second) {
    spdlog::warn("gateway: endpoint {} fails its health check: {}", url, why);
  } else if (ok && !last->second) {
    spdlog::info("gateway: endpoint {} passes its health check again", url);
  }
  last->second = ok;
  verdict(ok);
}

std::shared_ptr<const gateway::EgressFacts> GatewayServer::Impl::EgressFactsOf(
    const gateway::PolicySnapshot& snapshot) {
  std::lock_guard lock(egress_mu);
  if (egress_facts && egress_serial == snapshot.serial()) return egress_facts;
  egress_facts = std::make_shared<const gateway::EgressFacts>(
      egress->Facts(gateway::SharedEndpointsOf(snapshot.deployments())));
  egress_serial = snapshot.serial();
  return egress_facts;
}

std::string GatewayServer::Impl::EgressRefusal(const gateway::EgressFacts& facts,
                                               const std::string& url) const {
  gateway::EgressVerdict verdict = gateway::CheckEndpointUrl(egress->rules(), facts, url);
  return verdict.allowed ? "" : "egress policy refuses " + url + ": " + verdict.rule;
}

AddressCheck GatewayServer::Impl::EgressCheck(std::shared_ptr<const gateway::EgressFacts> facts,
                                              const std::string& url) const {
  auto target = gateway::HostPortOfUrl(url);
  return [policy = egress, facts = std::move(facts), url,
          target = target.has_value() ? *target : gateway::HostPort{}](
             const tcp::endpoint& endpoint) -> std::string {
    gateway::IpAddress address;
    const net::ip::address& ip = endpoint.address();
    if (ip.is_v4()) {
      const auto bytes = ip.to_v4().to_bytes();
      address.bytes[10] = address.bytes[11] = 0xff;
      std::copy(bytes.begin(), bytes.end(), address.bytes.begin() + 12);
    } else {
      const auto bytes = ip.to_v6().to_bytes();
      std::copy(bytes.begin(), bytes.end(), address.bytes.begin());
    }
    gateway::EgressVerdict verdict =
        gateway::CheckResolvedAddress(policy->rules(), *facts, target, address);
    return verdict.allowed ? "" : "egress policy refuses " + url + ": " + verdict.rule;
  };
}

awaitable<void> GatewayServer::Impl::Maintenance() {
  int64_t last_health = 0;
  while (!stopping.load()) {
    maintenance_timer.expires_after(Millis(100));
    beast::error_code ec;
    co_await maintenance_timer.async_wait(net::redirect_error(net::use_awaitable, ec));
    if (stopping.load()) co_return;
    const int64_t now = clock.NowMillis();
    if (now - last_health >= options.health_interval_ms) {
      last_health = now;
      // One probe per URL (and per kind: a tenant's is under the egress
      // policy), its verdict for each deployment naming it.
      std::map<std::pair<std::string, bool>, std::vector<std::string>> probes;
      auto snapshot = policy.Current();
      for (const DeploymentRecord& d : snapshot->deployments()) {
        for (const DeploymentEndpoint& e : d.endpoints) {
          probes[{e.url, gateway::UnderEgressPolicy(d)}].push_back(d.id);
        }
      }
      for (auto& [probe, ids] : probes) {
        net::co_spawn(*loops[0], CheckHealth(probe.first, probe.second, std::move(ids)),
                      net::detached);
      }
    }
    // Waiting requests follow their deployment's newest endpoints (a
    // managed one's first replica ready), then whatever can start does.
    dispatcher.Refresh(policy.Current()->deployments(), now);
    dispatcher.Pump(now);
  }
}

GatewayServer::GatewayServer(GatewayOptions options, PolicyLoader& policy, UsageJournal& journal,
                             const Clock& clock) {
  if (options.cache_salt_key.empty()) options.cache_salt_key = crypto::RandomBytes(32);
  impl_ = std::make_unique<Impl>(std::move(options), policy, journal, clock);
}

GatewayServer::~GatewayServer() { Stop(); }

Dispatcher& GatewayServer::dispatcher() { return impl_->dispatcher; }
const gateway::BodyBudget& GatewayServer::body_budget() const { return impl_->body_budget; }

Result<int> GatewayServer::Start() {
  Impl& impl = *impl_;
  ATRIUM_ASSIGN_OR_RETURN(impl.upstream_tls, MakeUpstreamTlsContext(impl.options.upstream_ca_file));
  beast::error_code ec;
  auto address = net::ip::make_address(impl.options.host, ec);
  if (ec)
    return Error::InvalidArgument("gateway listen host must be an IP address: " +
                                  impl.options.host);
  if (impl.options.port < 0 || impl.options.port > 65535) {
    return Error::InvalidArgument("gateway port out of range");
  }
  tcp::endpoint endpoint(address, static_cast<unsigned short>(impl.options.port));
  impl.acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl.acceptor.bind(endpoint, ec);
  if (!ec) impl.acceptor.listen(net::socket_base::max_listen_connections, ec);
  tcp::endpoint bound;
  if (!ec) bound = impl.acceptor.local_endpoint(ec);
  if (ec) {
    return Error::Unavailable("gateway cannot listen on " + impl.options.host + ":" +
                              std::to_string(impl.options.port) + ": " + ec.message());
  }
  // A tenant's deployment may not aim the gateway at itself.
  impl.egress->AddPlatformListener({impl.options.host, bound.port()});
  crypto::InitCrypto();
  net::co_spawn(impl.acceptor.get_executor(), impl.AcceptLoop(), net::detached);
  net::co_spawn(*impl.loops[0], impl.Maintenance(), net::detached);
  for (size_t i = 0; i < impl.loops.size(); ++i) {
    net::io_context* loop = impl.loops[i].get();
    // A loop with nothing to do yet must keep running until Stop().
    impl.keep_running.push_back(net::make_work_guard(*loop));
    impl.threads.emplace_back([&impl, loop, i] {
      NameThisThread("gw-loop-" + std::to_string(i));
      for (;;) {
        try {
          loop->run();
          return;
        } catch (const std::exception& e) {  // a bug in one exchange must not stop the others
          spdlog::error("gateway: uncaught exception: {}", e.what());
        }
      }
    });
  }
  impl.running = true;
  return static_cast<int>(bound.port());
}

void GatewayServer::Stop(int drain_ms) {
  Impl& impl = *impl_;
  if (!impl.running) return;
  impl.running = false;
  impl.stopping = true;
  net::post(impl.acceptor.get_executor(), [&impl] {
    beast::error_code ignored;
    impl.acceptor.close(ignored);
  });
  net::post(*impl.loops[0], [&impl] { impl.maintenance_timer.cancel(); });
  auto close_all = [&impl](bool cut) {
    std::vector<std::function<void(bool)>> closers;
    {
      std::lock_guard lock(impl.sessions_mu);
      for (auto& [session, close] : impl.closers) closers.push_back(close);
    }
    for (auto& close : closers) close(cut);
  };
  auto drained = [&impl](int64_t ms) {
    std::unique_lock lock(impl.sessions_mu);
    return impl.sessions_done.wait_for(lock, Millis(ms), [&] { return impl.sessions == 0; });
  };
  close_all(false);
  // Requests in flight finish; keep-alive connections end after them. What
  // still runs when the drain time is up is cut: a queued request leaves
  // its queue, a running one its model server; each answers 503 (a stream
  // breaks off) and is recorded, before the loops stop.
  if (!drained(drain_ms)) {
    impl.dispatcher.StopGranting();
    close_all(true);
    drained(impl.options.connect_timeout_ms + kCutGraceMs);
  }
  impl.keep_running.clear();
  for (auto& loop : impl.loops) loop->stop();
  for (auto& t : impl.threads) t.join();
  impl.threads.clear();
  // Records staged in a turn that did not run to its end.
  for (size_t loop = 0; loop < impl.loops.size(); ++loop) impl.FlushJournal(loop);
  for (auto& pool : impl.pools) pool.Clear();
}

}  // namespace atrium::gateway_server
