// One inference request on its way through the gateway's chain of stages
// (see session.h), and what the stage files share: the Exchange each stage
// passes on, and the reading of an upstream answer's body piece by piece.
// Not for use outside src/gateway_server.
//
//   exchange.cc            Proxy: the chain, in order; the answer's head
//   stage_prepare.cc       parse, entitle, limit (no waiting)
//   stage_queue.cc         the dispatcher: an immediate start or a wait
//   stage_route.cc         send upstream, read the head, retry before the first byte
//   stage_relay_stream.cc  a stream, event by event
//   stage_relay_whole.cc   a whole answer, at once
//   stage_settle.cc        the record, the dispatcher's verdict, the connection's return
#pragma once

// clang-format off
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
// clang-format on
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "gateway/budget_ledger.h"
#include "gateway/openai.h"
#include "gateway/policy.h"
#include "gateway/usage_meter.h"
#include "gateway_server/budget_keeper.h"
#include "gateway_server/session.h"

namespace atrium::gateway_server {

using UpstreamResponse = bhttp::response_parser<bhttp::buffer_body>;

// What the upstream answer's head says about relaying it.
struct AnswerHead {
  int status = 0;
  std::string content_type;  // application/json when the server names none
  std::string encoding;      // the server's Content-Encoding unless identity
  bool streaming = false;    // relayed event by event (stage_relay_stream.cc)
};

struct Session::Exchange {
  Exchange(const std::string& id, const gateway::Caller& who, gateway::Api kind, int64_t at,
           bool keep, std::shared_ptr<const gateway::PolicySnapshot> policy)
      : request_id(id),
        api(kind),
        arrived(at),
        keep_alive(keep),
        snapshot(std::move(policy)),
        caller(who),
        meter(id, caller, kind, at) {}
  ~Exchange() {
    if (interrupts) interrupts->done = true;  // a watch still armed ignores what follows
    if (budgets != nullptr) budgets->Release(budget_hold);  // ended without a record
  }
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;
  // Lets go of the upstream connection (its answer is not wanted): closed,
  // not pooled, and out of the disconnect watch's reach.
  void DropConnection() {
    interrupts->upstream = nullptr;
    connection.reset();
  }

  const std::string& request_id;
  const gateway::Api api;
  const int64_t arrived;
  const bool keep_alive;
  const std::shared_ptr<const gateway::PolicySnapshot> snapshot;  // owns the deployments
  const gateway::Caller& caller;                                  // the snapshot's
  gateway::UsageMeter meter;
  std::string_view body;     // the client's request body (owned by Session::Run)
  std::string content_type;  // a form request's Content-Type (boundary included)
  gateway::ParsedRequest parsed;
  std::string upstream_model;  // "" or the engine's name for the model (ModelRoute)
  SlotRequest slot;
  std::shared_ptr<Interrupts> interrupts;
  std::string endpoint;  // granted by the dispatcher; after Route() the one that answers
  std::unique_ptr<UpstreamConnection> connection;
  std::optional<UpstreamResponse> response;
  AnswerHead answer;  // after Route(): the answer's head, read
  // What the request holds against its tenant's budgets (Prepare): its
  // record settles it (Meter); an exchange that ends without one gives it
  // back.
  BudgetKeeper* budgets = nullptr;
  gateway::BudgetLedger::Hold budget_hold;
};

// Feeds `response` the bytes `connection` has buffered (after the head, or
// left over from an earlier read): true when that made progress (body bytes,
// the message's end, or a malformed message in `ec`), false when the next
// bytes must be read from the network.
bool ParseBuffered(UpstreamConnection& connection, UpstreamResponse& response,
                   beast::error_code& ec);

// Reads what has arrived of the answer's body into the parser's body buffer
// (read_some: what has arrived, not a full buffer). A plain function that
// returns the read for the stage to co_await: no coroutine frame of its own.
awaitable<size_t> ReadSomeOf(UpstreamConnection& connection, UpstreamResponse& response,
                             beast::error_code& ec);

// After a read into a body buffer of `piece_bytes`: the bytes it holds now,
// with `ec` cleared of what is no error (a full buffer; a TLS peer that ends
// a body delimited by the connection's close without a close_notify).
size_t TakePiece(UpstreamResponse& response, size_t piece_bytes, beast::error_code& ec);

}  // namespace atrium::gateway_server
