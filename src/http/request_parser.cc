#include "http/request_parser.h"

#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <cstdint>
#include <limits>

#include "common/strings.h"
#include "http/beast_request.h"

namespace atrium::http {
namespace internal {
namespace {

namespace beast_http = boost::beast::http;

char ToLowerAscii(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }
char ToUpperAscii(char c) { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c; }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Percent-decodes a path. Unlike a query component, '+' stays '+'. A decoded
// NUL is refused: paths end up in SQL parameters and log lines.
bool DecodePath(std::string_view in, std::string& out) {
  out.clear();
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out.push_back(in[i]);
      continue;
    }
    if (in.size() - i < 3) return false;
    int hi = HexValue(in[i + 1]);
    int lo = HexValue(in[i + 2]);
    if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) return false;
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return true;
}

Status ParseQuery(std::string_view query, Request& request) {
  for (std::string_view part : SplitString(query, '&')) {
    if (part.empty()) continue;  // "a=1&&b=2"
    size_t eq = part.find('=');
    std::string_view raw_name = part.substr(0, eq);
    std::string_view raw_value =
        eq == std::string_view::npos ? std::string_view() : part.substr(eq + 1);
    std::string name, value;
    if (!UrlDecode(raw_name, name) || !UrlDecode(raw_value, value)) {
      return Error::InvalidArgument("bad percent-encoding in query parameter");
    }
    request.query.emplace(name, value);  // keeps the first value of a repeated name
    request.query_all.emplace_back(std::move(name), std::move(value));
  }
  return OkStatus();
}

}  // namespace

void ApplyLimits(const ServerOptions& limits, BeastRequestParser& parser) {
  constexpr size_t kMaxHeaderLimit = std::numeric_limits<std::uint32_t>::max();
  parser.header_limit(
      static_cast<std::uint32_t>(std::min(limits.max_header_bytes, kMaxHeaderLimit)));
  parser.body_limit(static_cast<std::uint64_t>(limits.max_body_bytes));
}

Result<Request> ConvertRequest(const BeastRequest& beast_request, std::string remote_address) {
  Request request;
  auto method = beast_request.method_string();
  request.method.reserve(method.size());
  for (char c : method) request.method.push_back(ToUpperAscii(c));

  auto target = beast_request.target();
  request.target.assign(target.data(), target.size());
  if (request.target.empty() || request.target[0] != '/') {
    return Error::InvalidArgument("request target must be a path starting with '/'");
  }
  std::string_view target_view = request.target;
  size_t question = target_view.find('?');
  if (!DecodePath(target_view.substr(0, question), request.path)) {
    return Error::InvalidArgument("bad percent-encoding in request path");
  }
  if (question != std::string_view::npos) {
    ATRIUM_RETURN_IF_ERROR(ParseQuery(target_view.substr(question + 1), request));
  }

  for (const auto& field : beast_request) {
    auto raw_name = field.name_string();
    std::string name;
    name.reserve(raw_name.size());
    for (char c : raw_name) name.push_back(ToLowerAscii(c));
    auto raw_value = field.value();
    std::string value(raw_value.data(), raw_value.size());
    auto [it, inserted] = request.headers.try_emplace(std::move(name), value);
    if (!inserted) {
      // A repeated field is one comma-separated list (RFC 9110 5.3); cookies use "; ".
      it->second += it->first == "cookie" ? "; " : ", ";
      it->second += value;
    }
  }
  request.body = beast_request.body();
  request.remote_address = std::move(remote_address);
  return request;
}

bool IsParseError(const boost::beast::error_code& ec) {
  return ec && ec.category() == make_error_code(beast_http::error::bad_method).category();
}

}  // namespace internal

Result<Request> ParseRequest(std::string_view raw, const ServerOptions& limits) {
  namespace beast_http = boost::beast::http;
  internal::BeastRequestParser parser;
  internal::ApplyLimits(limits, parser);
  parser.eager(true);
  boost::beast::error_code ec;
  while (!parser.is_done()) {
    size_t used = parser.put(boost::asio::const_buffer(raw.data(), raw.size()), ec);
    if (ec == beast_http::error::need_more) return Error::InvalidArgument("incomplete request");
    if (ec == beast_http::error::body_limit) {
      return Error{
          ErrorCode::kPayloadTooLarge,
          "request body is larger than " + std::to_string(limits.max_body_bytes) + " bytes"};
    }
    if (ec == beast_http::error::header_limit) {
      return Error::InvalidArgument("request header fields too large");
    }
    if (ec) return Error::InvalidArgument("malformed request: " + ec.message());
    if (used == 0 && !parser.is_done()) return Error::InvalidArgument("incomplete request");
    raw.remove_prefix(used);
  }
  // Bytes after the first complete request (a pipelined second one) are ignored.
  return internal::ConvertRequest(parser.get(), "");
}

}  // namespace atrium::http
