// Transport-neutral HTTP request and response, the only HTTP types that code
// outside src/http sees. Boost.Beast stays inside src/http.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace atrium::http {

struct Request {
  std::string method;  // upper case: "GET", "POST", ...
  std::string target;  // as received: path plus query
  std::string path;    // target without the query, percent-decoded
  // Query parameters, percent-decoded; a repeated name keeps its first value
  // in `query` and all values in order in `query_all`.
  std::map<std::string, std::string> query;
  std::vector<std::pair<std::string, std::string>> query_all;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::string remote_address;                      // peer IP, no port
  std::string request_id;                          // assigned by the server, unique per request
  std::map<std::string, std::string> path_params;  // filled in by the router

  // Header value or "" when absent; `name` must be lower case.
  const std::string& Header(const std::string& name) const {
    static const std::string kEmpty;
    auto it = headers.find(name);
    return it == headers.end() ? kEmpty : it->second;
  }
  const std::string& PathParam(const std::string& name) const {
    static const std::string kEmpty;
    auto it = path_params.find(name);
    return it == path_params.end() ? kEmpty : it->second;
  }
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers
  std::string body;
};

}  // namespace atrium::http
