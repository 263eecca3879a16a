// Threads and ownership. Core owns the io_context (declared first, so it is
// destroyed last), the acceptor, the pump timer and the engine. A Session
// (one connection) runs on its own strand and holds a raw Core*: sessions
// only run while the io_context's threads run, and their destructors touch
// nothing of the Core but the session registry, which outlives the
// io_context (whose destructor destroys the sessions its pending handlers
// still hold).
//
// The engine and the map from engine request to session are guarded by
// Core::mu. The pump timer lives on its own strand: whenever the engine's
// next event time moves earlier, the submitter posts ArmPump there; the timer
// fires Pump(), which advances the engine to now, posts each event to its
// session's strand and re-arms for the next event.
//
// A session writes its response as plain bytes: a head it formats itself,
// then either a Content-Length body or (streams) HTTP chunks, one per SSE
// event, written as soon as they are produced; events produced while a write
// is in flight go out together in the next write. While its request is in the
// engine the session waits for the socket to become readable: either the
// client pipelined its next request (kept in the buffer), or it went away
// (the request is cancelled in the engine).

#include "engine_sim/server.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <ctime>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "crypto/crypto.h"
#include "engine_sim/json_text.h"
#include "engine_sim/openai.h"
#include "engine_sim/session.h"
#include "http/network_shell.h"
#include "threads/thread_name.h"

namespace atrium::engine_sim {
namespace {

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::string Hex16(uint64_t v) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) out[static_cast<size_t>(i)] = kHex[v & 0xf];
  return out;
}

std::vector<std::string> SplitModels(const std::string& list) {
  std::vector<std::string> models;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    std::string name = list.substr(start, comma - start);
    name.erase(0, name.find_first_not_of(" \t"));
    name.erase(name.find_last_not_of(" \t") + 1);
    if (!name.empty() && std::find(models.begin(), models.end(), name) == models.end()) {
      models.push_back(std::move(name));
    }
    start = comma + 1;
  }
  return models;
}

}  // namespace

std::vector<std::string> Server::Core::Served() const {
  std::vector<std::string> out = models;
  std::lock_guard<std::mutex> lock(adapters_mu);
  for (const auto& [name, folder] : adapters) out.push_back(name);
  return out;
}

std::string Server::Core::NextId() { return Hex16(Mix(id_nonce + next_id.fetch_add(1))); }

Result<RequestId> Server::Core::Submit(const EngineRequest& request,
                                       std::shared_ptr<Session> session, bool wants_tokens) {
  bool arm = false;
  RequestId id = 0;
  {
    std::lock_guard lock(mu);
    auto submitted = engine.Submit(request, Now());
    if (!submitted.has_value()) return std::move(submitted).error();
    id = *submitted;
    active.emplace(id, Active{std::move(session), wants_tokens});
    const std::optional<Micros> next = engine.NextEventTime();
    if (next && (!pump_at || *next < *pump_at)) {
      pump_at = next;
      arm = true;
    }
  }
  if (arm) net::post(pump_strand, [this] { ArmPump(); });
  return id;
}

void Server::Core::Cancel(RequestId id) {
  std::shared_ptr<Session> released;  // dropped after the lock
  std::lock_guard lock(mu);
  engine.Cancel(id);
  if (auto it = active.find(id); it != active.end()) {
    released = std::move(it->second.session);
    active.erase(it);
  }
}

void Server::Core::ArmPump() {
  std::optional<Micros> at;
  {
    std::lock_guard lock(mu);
    at = pump_at;
  }
  if (!at) {
    pump_timer.cancel();
    return;
  }
  pump_timer.expires_at(epoch + std::chrono::microseconds(*at));
  pump_timer.async_wait([this](beast::error_code ec) {
    if (!ec) Pump();
  });
}

void Server::Core::Pump() {
  struct Delivery {
    std::shared_ptr<Session> session;
    EngineEvent event;
  };
  std::vector<Delivery> deliveries;
  {
    std::lock_guard lock(mu);
    const std::vector<EngineEvent> events = engine.Advance(Now());
    deliveries.reserve(events.size());
    for (const EngineEvent& event : events) {
      auto it = active.find(event.id);
      if (it == active.end()) continue;
      if (event.kind == EngineEvent::Kind::kFinished) {
        deliveries.push_back({std::move(it->second.session), event});
        active.erase(it);
      } else if (it->second.wants_tokens) {
        deliveries.push_back({it->second.session, event});
      }
    }
    pump_at = engine.NextEventTime();
  }
  for (const Delivery& d : deliveries) d.session->Deliver(d.event);
  ArmPump();
}

void Server::Core::DoAccept() {
  acceptor.async_accept(
      net::make_strand(io_context),
      [this](beast::error_code ec, tcp::socket socket) { OnAccept(ec, std::move(socket)); });
}

void Server::Core::OnAccept(beast::error_code ec, tcp::socket socket) {
  if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
  if (ec) {  // e.g. out of file descriptors: back off instead of spinning
    accept_retry_timer.expires_after(std::chrono::milliseconds(50));
    accept_retry_timer.async_wait([this](beast::error_code ec) {
      if (!ec && acceptor.is_open()) DoAccept();
    });
    return;
  }
  std::make_shared<Session>(std::move(socket), this)->Start();
  DoAccept();
}

void Server::Core::RunLoop() {
  for (;;) {
    try {
      io_context.run();
      return;
    } catch (...) {  // keep serving; a throwing completion handler is a bug
    }
  }
}

Server::Server(ServerOptions options) : options_(std::move(options)) {}

Server::~Server() { Stop(); }

Result<int> Server::Start() {
  if (lifecycle_ != Lifecycle::kNew) return Error::FailedPrecondition("server was already started");
  Profile profile;
  if (options_.custom_profile) {
    profile = *options_.custom_profile;
  } else {
    ATRIUM_ASSIGN_OR_RETURN(profile, FindProfile(options_.profile));
  }
  if (options_.max_batch > 0) profile.max_batch = options_.max_batch;
  profile.max_batch = std::max(1, profile.max_batch);
  if (options_.threads < 1) return Error::InvalidArgument("threads must be at least 1");
  if (options_.default_max_tokens < 1) {
    return Error::InvalidArgument("default max tokens must be at least 1");
  }
  std::vector<std::string> models = SplitModels(options_.model);
  if (models.empty()) return Error::InvalidArgument("a model name is required");
  ATRIUM_ASSIGN_OR_RETURN(tcp::endpoint endpoint,
                          http::ListenEndpoint(options_.host, options_.port));

  auto core = std::make_unique<Core>(options_, std::move(profile), std::move(models));
  beast::error_code ec;
  core->acceptor.open(endpoint.protocol(), ec);
  if (!ec) core->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) core->acceptor.bind(endpoint, ec);
  if (!ec) core->acceptor.listen(net::socket_base::max_listen_connections, ec);
  tcp::endpoint bound;
  if (!ec) bound = core->acceptor.local_endpoint(ec);
  if (ec) {
    return Error::Unavailable("cannot listen on " + options_.host + ":" +
                              std::to_string(options_.port) + ": " + ec.message());
  }
  crypto::InitCrypto();
  const std::string nonce = crypto::RandomBytes(8);
  for (char c : nonce) core->id_nonce = (core->id_nonce << 8) | static_cast<unsigned char>(c);
  core->DoAccept();  // no thread runs the loop yet
  for (int i = 0; i < options_.threads; ++i) {
    core->threads.emplace_back([c = core.get(), i] {
      NameThisThread("engine-sim-" + std::to_string(i));
      c->RunLoop();
    });
  }
  core_ = std::move(core);
  lifecycle_ = Lifecycle::kRunning;
  return static_cast<int>(bound.port());
}

void Server::Stop() {
  if (lifecycle_ != Lifecycle::kRunning) {
    lifecycle_ = Lifecycle::kStopped;
    return;
  }
  lifecycle_ = Lifecycle::kStopped;
  core_->io_context.stop();
  for (auto& thread : core_->threads) thread.join();
  core_->threads.clear();
  beast::error_code ignored;
  core_->acceptor.close(ignored);
  // Close every connection now (a request in flight is recorded as
  // cancelled); the Session objects themselves go with the io_context's
  // pending handlers when the Core is destroyed.
  std::vector<std::shared_ptr<Session>> open;
  {
    std::lock_guard lock(core_->sessions_mu);
    for (auto& [ptr, weak] : core_->sessions) {
      if (auto session = weak.lock()) open.push_back(std::move(session));
    }
  }
  for (const auto& session : open) session->CloseWhileLoopStopped();
  open.clear();
  std::unordered_map<RequestId, Core::Active> active;
  {
    std::lock_guard lock(core_->mu);
    active.swap(core_->active);
  }
}

const Profile& Server::profile() const { return core_->profile; }

const std::vector<std::string>& Server::models() const { return core_->models; }

EngineStatus Server::Status() const {
  if (!core_) return {};
  std::lock_guard lock(core_->mu);
  return {.profile = core_->profile.name,
          .max_batch = core_->engine.profile().max_batch,
          .running = core_->engine.running(),
          .waiting = core_->engine.waiting(),
          .stats = core_->engine.stats()};
}

ServedTotals Server::Served() const { return core_ ? core_->served.Totals() : ServedTotals(); }

}  // namespace atrium::engine_sim
