// Blocking HTTP/1.1 client (Boost.Beast) for the CLI and for tests: one
// keep-alive connection to one host:port, reconnecting when it drops.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "common/result.h"
#include "http/message.h"

namespace atrium::http {

struct ClientResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
};

class Client {
 public:
  // base_url: "http://host:port" (https is not supported yet).
  static Result<std::unique_ptr<Client>> Create(const std::string& base_url,
                                                int timeout_ms = 30'000);
  ~Client();

  // target: path plus optional query, e.g. "/api/v1/tenants?limit=10".
  // headers: extra request headers. Transport failures are kUnavailable.
  Result<ClientResponse> Send(const std::string& method, const std::string& target,
                              const std::string& body = "",
                              const std::map<std::string, std::string>& headers = {});

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace atrium::http
