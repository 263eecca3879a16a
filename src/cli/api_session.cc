#include "cli/api_session.h"

#include "cli/args.h"

namespace atrium::cli {

ErrorCode ErrorCodeOfWireName(std::string_view name) {
  for (int i = static_cast<int>(ErrorCode::kInvalidArgument);
       i <= static_cast<int>(ErrorCode::kUnavailable); ++i) {
    auto code = static_cast<ErrorCode>(i);
    if (WireNameOf(code) == name) return code;
  }
  return ErrorCode::kInternal;
}

std::string StringAt(const Json& object, const std::string& key) {
  if (!object.is_object()) return "";
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

Error ApiErrorOf(int status, const std::string& body, const std::string& request_id_header) {
  std::string code;
  std::string message;
  std::string request_id = request_id_header;
  if (auto json = ParseJson(body); json.has_value() && json->is_object()) {
    auto it = json->find("error");
    if (it != json->end() && it->is_object()) {
      code = StringAt(*it, "code");
      message = StringAt(*it, "message");
      if (std::string id = StringAt(*it, "request_id"); !id.empty()) request_id = id;
    }
  }
  ErrorCode error_code = ErrorCode::kInternal;
  if (!code.empty()) {
    error_code = ErrorCodeOfWireName(code);
  } else {
    // No API error body (a proxy, or a bug): the status is all we know.
    for (int i = static_cast<int>(ErrorCode::kInvalidArgument);
         i <= static_cast<int>(ErrorCode::kUnavailable); ++i) {
      if (HttpStatusOf(static_cast<ErrorCode>(i)) == status) {
        error_code = static_cast<ErrorCode>(i);
        break;
      }
    }
    code = std::string(WireNameOf(error_code));
  }
  if (message.empty()) message = "the server answered HTTP " + std::to_string(status);
  std::string text = message + " (" + code + ", HTTP " + std::to_string(status);
  if (!request_id.empty()) text += ", request " + request_id;
  text += ")";
  return Error{error_code, std::move(text)};
}

Result<std::unique_ptr<ApiSession>> ApiSession::Open(const std::string& server,
                                                     const std::string& token, int timeout_ms) {
  auto client = http::Client::Create(server, timeout_ms);
  if (!client.has_value()) {
    return Error::InvalidArgument("bad server URL: " + client.error().message);
  }
  return std::unique_ptr<ApiSession>(new ApiSession(server, token, std::move(client).value()));
}

ApiSession::ApiSession(std::string server, std::string token, std::unique_ptr<http::Client> client)
    : server_(std::move(server)), token_(std::move(token)), client_(std::move(client)) {}

Result<Json> ApiSession::Call(const std::string& method, const std::string& target,
                              const std::optional<Json>& body,
                              const std::map<std::string, std::string>& extra_headers) {
  std::string text =
      body ? body->dump(-1, ' ', false, Json::error_handler_t::replace) : std::string();
  return Exchange(method, target, text, extra_headers);
}

Result<Json> ApiSession::Upload(const std::string& target, const std::string& bytes,
                                const std::string& content_type) {
  return Exchange("POST", target, bytes, {{"Content-Type", content_type}});
}

Result<std::string> ApiSession::Send(const std::string& method, const std::string& target,
                                     const std::string& text,
                                     std::map<std::string, std::string> headers) {
  if (!token_.empty()) headers["Authorization"] = "Bearer " + token_;
  auto response = client_->Send(method, target, text, headers);
  if (!response.has_value()) {
    return Error::Unavailable("cannot reach " + server_ + ": " + response.error().message);
  }
  auto it = response->headers.find("x-request-id");
  last_request_id_ = it == response->headers.end() ? std::string() : it->second;
  if (response->status < 200 || response->status >= 300) {
    return ApiErrorOf(response->status, response->body, last_request_id_);
  }
  return std::move(response->body);
}

Result<Json> ApiSession::Exchange(const std::string& method, const std::string& target,
                                  const std::string& text,
                                  std::map<std::string, std::string> headers) {
  headers["Accept"] = "application/json";
  ATRIUM_ASSIGN_OR_RETURN(std::string body, Send(method, target, text, std::move(headers)));
  if (body.empty()) return Json(nullptr);
  auto json = ParseJson(body);
  if (!json.has_value()) {
    return Error::Internal("the server's answer to " + method + " " + target +
                           " is not JSON (request " + last_request_id_ + ")");
  }
  return std::move(json).value();
}

Result<std::string> ApiSession::GetBytes(const std::string& target) {
  return Send("GET", target, "", {{"Accept", "*/*"}});
}

Result<std::vector<Json>> ApiSession::ListAll(const std::string& target, int page_limit) {
  std::vector<Json> items;
  std::string cursor;
  while (true) {
    std::string page_target = WithQuery(
        target, {{"limit", page_limit > 0 ? std::to_string(page_limit) : ""}, {"cursor", cursor}});
    ATRIUM_ASSIGN_OR_RETURN(Json page, Get(page_target));
    auto it = page.is_object() ? page.find("items") : page.end();
    if (it == page.end() || !it->is_array()) {
      return Error::Internal("the answer to GET " + page_target + " is not a list page");
    }
    for (auto& item : *it) items.push_back(std::move(item));
    std::string next = StringAt(page, "next_cursor");
    if (next.empty()) return items;
    if (next == cursor) return Error::Internal("the server repeated cursor " + next);
    cursor = std::move(next);
  }
}

Result<Json> ApiSession::WhoAmI() {
  if (!whoami_) {
    ATRIUM_ASSIGN_OR_RETURN(Json me, Get("/api/v1/whoami"));
    whoami_ = std::move(me);
  }
  return *whoami_;
}

}  // namespace atrium::cli
