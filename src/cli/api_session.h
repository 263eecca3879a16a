// One connection to the control-plane REST API with a bearer credential.
// Every answer is decoded to JSON; an error answer becomes an Error whose
// message already reads "<message> (<code>, HTTP <status>, request <id>)"
// and whose code is the server's.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/json_reader.h"
#include "common/result.h"
#include "http/client.h"

namespace atrium::cli {

// The ErrorCode whose wire name is `name`; kInternal for an unknown name.
ErrorCode ErrorCodeOfWireName(std::string_view name);

// Decodes an error answer: the API's {"error":{"code","message","request_id"}}
// body when present, else the HTTP status alone. `request_id_header` is the
// X-Request-Id header, used when the body does not name the request.
Error ApiErrorOf(int status, const std::string& body, const std::string& request_id_header);

class ApiSession {
 public:
  // server: "http://host:port"; token "" sends no Authorization header.
  // Connects lazily (on the first call).
  static Result<std::unique_ptr<ApiSession>> Open(const std::string& server,
                                                  const std::string& token,
                                                  int timeout_ms = 30'000);

  const std::string& server() const { return server_; }

  // One call; returns the JSON body (null for an empty body, as with 204).
  // Errors: the server's (see above); kUnavailable when it cannot be
  // reached; kInternal for an answer that is not JSON.
  // `headers`: extra request headers (Idempotency-Key).
  Result<Json> Call(const std::string& method, const std::string& target,
                    const std::optional<Json>& body = std::nullopt,
                    const std::map<std::string, std::string>& headers = {});
  Result<Json> Get(const std::string& target) { return Call("GET", target); }
  Result<Json> Post(const std::string& target, const Json& body = Json::object()) {
    return Call("POST", target, body);
  }
  Result<Json> Patch(const std::string& target, const Json& body) {
    return Call("PATCH", target, body);
  }
  Result<Json> Put(const std::string& target, const Json& body) {
    return Call("PUT", target, body);
  }
  Result<Json> Delete(const std::string& target) { return Call("DELETE", target); }
  // POSTs `bytes` as the body, of media type `content_type` (a file upload).
  Result<Json> Upload(const std::string& target, const std::string& bytes,
                      const std::string& content_type);

  // GETs a list route page after page (each of `page_limit` items, 0 = the
  // server's default) until next_cursor is null; returns every item.
  Result<std::vector<Json>> ListAll(const std::string& target, int page_limit);

  // GETs a document that is not JSON (an invoice's CSV): its bytes.
  // Errors as Call's.
  Result<std::string> GetBytes(const std::string& target);

  // GET /api/v1/whoami, fetched once per session.
  Result<Json> WhoAmI();

 private:
  ApiSession(std::string server, std::string token, std::unique_ptr<http::Client> client);
  Result<Json> Exchange(const std::string& method, const std::string& target,
                        const std::string& body, std::map<std::string, std::string> headers);
  // One exchange; the body of a 2xx answer, the server's error otherwise.
  Result<std::string> Send(const std::string& method, const std::string& target,
                           const std::string& body, std::map<std::string, std::string> headers);

  std::string server_;
  std::string token_;
  std::unique_ptr<http::Client> client_;
  std::optional<Json> whoami_;
  std::string last_request_id_;  // of the last answer
};

// Helpers over API objects that never throw on a missing or mistyped field.
std::string StringAt(const Json& object, const std::string& key);

}  // namespace atrium::cli
