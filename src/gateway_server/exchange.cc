// The gateway's chain of stages (see session.h and exchange.h): Proxy()
// runs them in order; each stage either passes the Exchange on or ends it
// with an Early (refused, failed, cancelled).
// clang-format off
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
// clang-format on
#include "gateway_server/exchange.h"

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/read.hpp>

namespace atrium::gateway_server {

using gateway::Refusal;

namespace {

// The server's Content-Encoding when it is not the identity: the body is
// compressed (the gateway asks for identity, a server may ignore that).
std::string CompressedEncoding(const bhttp::fields& head) {
  auto value = head[bhttp::field::content_encoding];
  std::string encoding(value.data(), value.size());
  if (encoding.empty() || beast::iequals(encoding, "identity") ||
      encoding.find_first_of("\r\n") != std::string::npos) {
    return {};
  }
  return encoding;
}

}  // namespace

awaitable<bool> Session::Proxy(HttpRequest& request, gateway::Api api, bool keep_alive,
                               const std::string& request_id, int64_t arrived) {
  auto snapshot = server_.policy.Current();
  // Authenticate. Without a tenant there is nobody to bill: no record.
  auto caller =
      snapshot->Authenticate(HeaderOf(request, bhttp::field::authorization), arrived, &key_memo_);
  if (!caller.has_value()) {
    const Refusal refusal = gateway::RefusalOf(caller.error());
    co_return co_await SendError(refusal, keep_alive, request_id);
  }
  // From here on the request has a tenant: it ends with exactly one record.
  Exchange x(request_id, **caller, api, arrived, keep_alive, std::move(snapshot));
  // Coroutine arguments are named lvalues, never temporaries: g++ 12
  // destroys some temporaries of a co_await expression twice.
  std::optional<Early> early = Prepare(x, request);
  if (!early) early = co_await Queue(x);
  if (!early) early = co_await Route(x);
  if (early) co_return co_await End(x, *early);
  ReadAnswerHead(x);
  if (x.answer.streaming) co_return co_await RelayStream(x);
  co_return co_await RelayWhole(x);
}

void Session::ReadAnswerHead(Exchange& x) {
  const auto& head = x.response->get();
  AnswerHead& answer = x.answer;
  answer.status = static_cast<int>(head.result_int());
  x.meter.Answered(answer.status);
  auto content_type = head[bhttp::field::content_type];
  answer.content_type.assign(content_type.data(), content_type.size());
  if (answer.content_type.empty()) answer.content_type = "application/json";
  // A compressed answer cannot be read as events or metered from its text:
  // it is relayed whole, with its Content-Encoding, and billed as reserved.
  answer.encoding = CompressedEncoding(head);
  answer.streaming = x.parsed.stream && answer.status == 200 && answer.encoding.empty() &&
                     answer.content_type.find("text/event-stream") != std::string::npos;
  if (piece_.empty()) piece_.resize(kPieceBytes);
  // A stream's first body bytes come: its prefill is over. An answer that is
  // not a stream (an error, say) is whole when its head comes.
  if (x.slot.stream && !answer.streaming) server_.dispatcher.FirstToken(x.slot, Now());
}

bool ParseBuffered(UpstreamConnection& connection, UpstreamResponse& response,
                   beast::error_code& ec) {
  if (connection.buffer.size() == 0 || response.is_done()) return false;
  const size_t room = response.get().body().size;
  const size_t used = response.put(connection.buffer.data(), ec);
  connection.buffer.consume(used);
  if (ec == bhttp::error::need_more) ec = {};
  if (ec) return true;
  return response.is_done() || response.get().body().size != room;
}

awaitable<size_t> ReadSomeOf(UpstreamConnection& connection, UpstreamResponse& response,
                             beast::error_code& ec) {
  return connection.With([&](auto& stream) {
    return bhttp::async_read_some(stream, connection.buffer, response,
                                  net::redirect_error(net::use_awaitable, ec));
  });
}

size_t TakePiece(UpstreamResponse& response, size_t piece_bytes, beast::error_code& ec) {
  const size_t n = piece_bytes - response.get().body().size;
  if (ec == bhttp::error::need_buffer) ec = {};
  // Over plain TCP that close is an eof, which the parser takes as the end.
  if (ec == net::ssl::error::stream_truncated && response.need_eof()) {
    ec = {};
    response.put_eof(ec);
  }
  return n;
}

}  // namespace atrium::gateway_server
