// What the three network shells built on Boost.Asio/Beast (http::Server,
// the gateway's sessions and the engine simulator) share, so each is written
// once. Beast stays inside those three (src/http, src/gateway_server,
// src/engine_sim): only they include this header.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http/status.hpp>
#include <string>
#include <string_view>

#include "common/result.h"

namespace atrium::http {

// The standard phrase of a status code (Beast's table); "Unknown" for a code
// it does not know (e.g. a model server's own code, relayed). Inline: the
// gateway writes one per response.
inline std::string_view ReasonPhrase(int status) {
  namespace bhttp = boost::beast::http;
  if (bhttp::int_to_status(static_cast<unsigned>(status)) == bhttp::status::unknown) {
    return "Unknown";
  }
  auto phrase = bhttp::obsolete_reason(static_cast<bhttp::status>(status));
  return {phrase.data(), phrase.size()};
}

// The endpoint to listen on for `host` — an IP address, an IPv6 address in
// brackets, or a name resolved (blocking) to its first address — and `port`.
// InvalidArgument for a port outside 0..65535; Unavailable for a name that
// does not resolve.
Result<boost::asio::ip::tcp::endpoint> ListenEndpoint(const std::string& host, int port);

}  // namespace atrium::http
