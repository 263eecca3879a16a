// The gateway's shell, inside: the server's state (GatewayServer::Impl: the
// event loops, their keep-alive pools and journal batches, the dispatcher,
// the sessions) and what a client-disconnect watch may interrupt. Shared by
// gateway_server.cc (listener, health checks, start and stop), session.cc (a
// client connection) and the stage files (one request through the chain,
// exchange.h); not for use outside src/gateway_server.
#pragma once

// clang-format off
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
// clang-format on
#include <spdlog/spdlog.h>

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/error.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "gateway/body_budget.h"
#include "gateway_server/dispatcher.h"
#include "gateway_server/gateway_server.h"
#include "gateway_server/policy_loader.h"
#include "gateway_server/upstream.h"
#include "gateway_server/usage_journal.h"

namespace atrium::gateway_server {

namespace net = boost::asio;
namespace beast = boost::beast;
using tcp = net::ip::tcp;
using Millis = std::chrono::milliseconds;
template <class T>
using awaitable = net::awaitable<T>;
using Executor = net::io_context::executor_type;

// Upstream bodies are read this much at a time: SSE events are small, and a
// whole body is appended piece by piece as it arrives.
constexpr size_t kPieceBytes = 4096;
// A request that started at once has its client watched for a disconnect
// from this long after it started: most exchanges are over sooner, and arming
// the watch costs a system call (epoll_ctl) per request.
constexpr auto kWatchAfter = std::chrono::milliseconds(10);
// Output tokens are charged to the fair queue every this many streamed chunks.
constexpr int64_t kChargeEveryChunks = 16;
// A running stream's checkpoint (UsageJournal::Checkpoint) is refreshed this often.
constexpr int64_t kCheckpointEveryMs = 1000;
// An active health check must be answered within this.
constexpr int kHealthTimeoutMs = 2000;
// Tokens-per-minute reserved for the answer of a request without max_tokens.
constexpr int64_t kDefaultOutputReserve = 1024;

class Session;

// What a client-disconnect watch may interrupt; lives as long as the exchange.
struct Interrupts {
  bool done = false;
  bool client_gone = false;
  bool shutting_down = false;      // cut by Stop() once its drain time ran out
  bool watched = false;            // the client's socket is being watched
  std::weak_ptr<Session> session;  // whose client it is
  net::steady_timer* queue_timer = nullptr;
  UpstreamConnection* upstream = nullptr;
  void Interrupt() {
    if (queue_timer) queue_timer->cancel();
    if (upstream) {
      beast::error_code ignored;
      upstream->tcp().socket().close(ignored);
    }
  }
};

struct GatewayServer::Impl {
  Impl(GatewayOptions o, PolicyLoader& p, UsageJournal& j, const Clock& c)
      : options(std::move(o)),
        policy(p),
        journal(j),
        clock(c),
        dispatcher(options.dispatcher),
        body_budget({static_cast<int64_t>(options.body_memory_bytes),
                     static_cast<int64_t>(options.queued_body_bytes_per_tenant)}),
        loops(MakeLoops(std::max(1, options.threads))),
        pools(loops.size()),
        journal_batches(loops.size()),
        acceptor(*loops[0]),
        maintenance_timer(*loops[0]),
        egress(options.egress ? options.egress : std::make_shared<gateway::EgressPolicy>()) {
    for (auto& loop : loops) deferred_watches.push_back(std::make_unique<DeferredWatches>(*loop));
  }

  // One event loop per thread, each single-threaded: a connection, its
  // upstream connections and its timers live on one loop, so nothing on the
  // hot path needs a strand or contends for a lock across threads.
  static std::vector<std::unique_ptr<net::io_context>> MakeLoops(int n) {
    std::vector<std::unique_ptr<net::io_context>> out;
    for (int i = 0; i < n; ++i) out.push_back(std::make_unique<net::io_context>(1));
    return out;
  }

  awaitable<void> AcceptLoop();
  awaitable<void> Maintenance();
  // Checks `url` and gives the verdict to each of `deployment_ids`;
  // `dedicated`: theirs is a tenant's endpoint, under the egress policy.
  awaitable<void> CheckHealth(std::string url, bool dedicated,
                              std::vector<std::string> deployment_ids);

  // The egress policy's facts as of `snapshot` (its shared deployments'
  // endpoints, the platform's listeners), computed once per snapshot.
  std::shared_ptr<const gateway::EgressFacts> EgressFactsOf(
      const gateway::PolicySnapshot& snapshot);
  // For a dedicated deployment's endpoint `url`: "" when its URL passes the
  // egress policy, else the rule that refuses it (for the logs, never the
  // tenant: it may name the operator's addresses).
  std::string EgressRefusal(const gateway::EgressFacts& facts, const std::string& url) const;
  // What ConnectUpstream checks on each address `url` resolves to.
  AddressCheck EgressCheck(std::shared_ptr<const gateway::EgressFacts> facts,
                           const std::string& url) const;

  // Watches armed late (kWatchAfter), per loop, in the order they are due.
  struct DeferredWatches {
    explicit DeferredWatches(net::io_context& loop) : timer(loop) {}
    std::deque<std::pair<std::chrono::steady_clock::time_point, std::weak_ptr<Interrupts>>> due;
    net::steady_timer timer;
    bool armed = false;
  };
  void DeferWatch(size_t loop, const std::shared_ptr<Interrupts>& interrupts);
  void ArmDueWatches(size_t loop);

  // Group commit of usage records, per loop: records finished during one
  // turn of a loop go to the journal with one write(2) at the end of that
  // turn, and a request's last bytes wait for the write that holds its record.
  struct JournalBatch {
    std::vector<UsageRecord> records;
    uint64_t filling = 1;  // the generation `records` belong to
    uint64_t written = 0;  // every generation up to this one is in the journal
    uint64_t failed = 0;   // the last generation whose write failed (its records are lost)
    bool flush_posted = false;
  };
  // Queues `record` on `loop`'s batch; returns its generation.
  uint64_t StageRecord(size_t loop, UsageRecord record) {
    JournalBatch& batch = journal_batches[loop];
    batch.records.push_back(std::move(record));
    if (!batch.flush_posted) {
      batch.flush_posted = true;
      net::post(*loops[loop], [this, loop] { FlushJournal(loop); });
    }
    return batch.filling;
  }
  void FlushJournal(size_t loop) {
    JournalBatch& batch = journal_batches[loop];
    batch.flush_posted = false;
    if (!batch.records.empty()) {
      Status s = journal.AppendBatch(batch.records);
      if (!s.has_value()) {
        spdlog::error("gateway: {} usage records not journaled: {}", batch.records.size(),
                      s.error().message);
        batch.failed = batch.filling;  // their responses are withheld (Session::WriteAll)
      }
      batch.records.clear();
    }
    batch.written = batch.filling++;
  }

  const GatewayOptions options;
  PolicyLoader& policy;
  UsageJournal& journal;
  const Clock& clock;
  Dispatcher dispatcher;
  gateway::BodyBudget body_budget;  // request bodies in memory, across all loops
  std::atomic<uint64_t> next_slot_id{1};

  // Sessions still queued in a loop when it is destroyed unregister here:
  // declared before the loops, so destroyed after them.
  std::atomic<bool> stopping{false};
  std::mutex sessions_mu;
  std::condition_variable sessions_done;
  int sessions = 0;  // GUARDED_BY(sessions_mu)
  // Per live session: ends it if it is waiting for a request; with `cut`,
  // also interrupts the exchange it is running (Stop()).
  std::unordered_map<const void*, std::function<void(bool cut)>>
      closers;  // GUARDED_BY(sessions_mu)

  // The I/O objects below are destroyed before the loops they live on.
  std::vector<std::unique_ptr<net::io_context>> loops;
  std::vector<UpstreamPool> pools;                  // per loop: a connection stays on its loop
  std::shared_ptr<net::ssl::context> upstream_tls;  // for https endpoints; set by Start()
  // The last health check's verdict per endpoint URL (loop 0 only: checks run there).
  std::unordered_map<std::string, bool> health_verdicts;
  std::vector<JournalBatch> journal_batches;  // per loop, used on that loop only
  std::vector<std::unique_ptr<DeferredWatches>> deferred_watches;  // per loop
  size_t next_loop = 0;                                            // accept loop only
  std::vector<net::executor_work_guard<net::io_context::executor_type>> keep_running;
  tcp::acceptor acceptor;
  net::steady_timer maintenance_timer;
  const std::shared_ptr<gateway::EgressPolicy> egress;
  std::mutex egress_mu;
  uint64_t egress_serial = 0;                                // GUARDED_BY(egress_mu)
  std::shared_ptr<const gateway::EgressFacts> egress_facts;  // GUARDED_BY(egress_mu)
  std::vector<std::thread> threads;

  bool running = false;
};

}  // namespace atrium::gateway_server
