// GatewayServer: the OpenAI-compatible front door (POST /v1/chat/completions,
// /v1/completions, /v1/embeddings; GET /v1/models) on a listener of its own.
// Each request runs the chain authenticate -> parse -> entitle -> limit ->
// fair queue -> route -> relay -> meter (session.h, exchange.h); the pieces
// are the pure cores in src/gateway and the Dispatcher; the shell is the
// asynchronous I/O around them (Boost.Beast/Asio coroutines on one
// single-threaded event loop per thread, connections spread over the loops,
// keep-alive connection pools to the upstream endpoints per loop). Streams are relayed
// chunk by chunk as the upstream produces them; a client that disconnects
// leaves the queue or has its upstream request aborted at once. Every
// authenticated request yields exactly one usage record, written to the
// UsageJournal before the response's last bytes are sent.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/clock.h"
#include "common/result.h"
#include "gateway/body_budget.h"
#include "gateway/egress_policy.h"
#include "gateway_server/budget_keeper.h"
#include "gateway_server/dispatcher.h"
#include "gateway_server/policy_loader.h"
#include "gateway_server/usage_journal.h"

namespace atrium::gateway_server {

struct GatewayOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  int threads = 2;
  size_t max_header_bytes = size_t{16} * 1024;
  size_t max_body_bytes = size_t{4} * 1024 * 1024;  // larger: 413
  // Request bodies held in memory at once, all connections together (a
  // chunked body counts as max_body_bytes until it is read); a request
  // beyond it is refused with a 503 before its body is read.
  size_t body_memory_bytes = size_t{256} * 1024 * 1024;
  // The bodies of one tenant's requests waiting in the fair queue; a request
  // that would wait beyond it is refused with a 429.
  size_t queued_body_bytes_per_tenant = size_t{64} * 1024 * 1024;
  int read_timeout_ms = 30'000;          // a whole request must arrive within this
  int idle_timeout_ms = 120'000;         // keep-alive connection without a request
  int max_connections = 20'000;          // beyond: accepted and closed at once
  int64_t default_deadline_ms = 60'000;  // longest wait in the fair queue (504 after)
  int64_t max_deadline_ms = 600'000;     // X-Atrium-Deadline-Ms above this: 400
  int connect_timeout_ms = 2'000;
  int first_byte_timeout_ms = 120'000;   // upstream headers must arrive within this (504)
  int stream_idle_timeout_ms = 120'000;  // longest silence inside a response body
  // A response that is not a stream must arrive whole within this, counted
  // from its head (504 after): a body dripped a byte at a time never ends.
  int upstream_body_timeout_ms = 300'000;
  int max_retries = 1;             // other endpoints tried before the first byte
  int health_interval_ms = 2'000;  // active checks: GET <endpoint>/v1/models
  size_t max_upstream_body_bytes = size_t{64} * 1024 * 1024;
  // https endpoints: certificates are checked against the system's CAs and,
  // when set, the CAs in this PEM file (e.g. the private CA of in-cluster
  // model servers).
  std::string upstream_ca_file;
  // Where a tenant's dedicated deployment may send requests (checked on
  // the URL and on every address it resolves to, before connecting and
  // health-checking); shared deployments are not restricted. nullptr: the
  // default rules (public addresses only). The gateway adds its own
  // listener to it when it binds.
  std::shared_ptr<gateway::EgressPolicy> egress;
  // The key each tenant's prefix-cache salt is derived from
  // (gateway::CacheSalt, set as `cache_salt` on every chat, completions and
  // Responses request): the same on every gateway of a platform, so a tenant's cache
  // is one whichever gateway relays it. Empty: a random key for this
  // process (tenants still never share a cache).
  std::string cache_salt_key;
  // false: requests go upstream without a cache_salt of the gateway's
  // (for engines that refuse the field; tenants may then share a cache).
  bool set_cache_salt = true;
  DispatcherOptions dispatcher;
  // Budgets: every request holds its worst case against its tenant's and
  // key's budgets (BudgetKeeper, started and stopped by its owner).
  // nullptr: no budgets are enforced.
  std::shared_ptr<BudgetKeeper> budgets;
};

class GatewayServer {
 public:
  GatewayServer(GatewayOptions options, PolicyLoader& policy, UsageJournal& journal,
                const Clock& clock);
  ~GatewayServer();  // Stop()s
  GatewayServer(const GatewayServer&) = delete;
  GatewayServer& operator=(const GatewayServer&) = delete;

  // Binds, starts the I/O threads and health checks; returns the bound port.
  Result<int> Start();
  // Stops accepting, lets requests in flight finish (up to drain_ms), then
  // cuts what still runs or waits (each answered 503, a stream broken off,
  // and recorded; up to 2 s more) and joins the threads.
  void Stop(int drain_ms = 10'000);

  Dispatcher& dispatcher();
  // The request bodies held in memory (in all, and queued per tenant).
  const gateway::BodyBudget& body_budget() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace atrium::gateway_server
