// Internal to src/http: the one conversion from a request parsed by Beast to
// an atrium::http::Request, shared by the server and by ParseRequest so that
// the fuzzer drives exactly the code the server runs. Nothing outside
// src/http includes this header (it pulls in Beast).
#pragma once

#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <string>

#include "common/result.h"
#include "http/message.h"
#include "http/server.h"

namespace atrium::http::internal {

using BeastRequest = boost::beast::http::request<boost::beast::http::string_body>;
using BeastRequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;

// Sets the header and body limits of a fresh parser from the server options.
void ApplyLimits(const ServerOptions& limits, BeastRequestParser& parser);

// Converts a completely parsed request. `remote_address` is copied into the
// result; request_id and path_params are left empty. Errors:
// kInvalidArgument for a target that is not origin-form ("/...") or holds a
// bad percent-escape.
Result<Request> ConvertRequest(const BeastRequest& beast_request, std::string remote_address);

// True for errors of Beast's HTTP parser (bad syntax, limits); false for
// transport errors such as a reset connection.
bool IsParseError(const boost::beast::error_code& ec);

}  // namespace atrium::http::internal
