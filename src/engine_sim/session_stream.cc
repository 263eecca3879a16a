// Session: responses — heads, bodies, OpenAI errors, SSE chunks as the
// engine produces tokens — and the writes, at most one in flight.
#include <boost/asio/write.hpp>

#include "engine_sim/session.h"
#include "http/network_shell.h"

namespace atrium::engine_sim {
namespace {

// Buffers larger than this are released after their response.
constexpr size_t kKeepBufferBytes = size_t{64} * 1024;

void AppendHex(size_t v, std::string& out) {
  char buffer[2 * sizeof(size_t)];
  int n = 0;
  do {
    buffer[n++] = "0123456789abcdef"[v & 0xf];
    v >>= 4;
  } while (v != 0);
  while (n > 0) out.push_back(buffer[--n]);
}
}  // namespace

void Session::AppendHead(int status, std::string_view content_type,
                         std::optional<size_t> content_length, std::string_view extra_headers) {
  pending_ += "HTTP/1.1 ";
  pending_ += std::to_string(status);
  pending_ += ' ';
  pending_ += http::ReasonPhrase(status);
  pending_ += "\r\nServer: atrium-engine-sim\r\nContent-Type: ";
  pending_ += content_type;
  pending_ += "\r\n";
  if (content_length) {
    pending_ += "Content-Length: ";
    pending_ += std::to_string(*content_length);
    pending_ += "\r\n";
  } else if (chunked_) {
    pending_ += "Transfer-Encoding: chunked\r\n";
  }
  pending_ += extra_headers;
  if (!keep_alive_) {
    pending_ += "Connection: close\r\n";
  } else if (version_ < 11) {
    pending_ += "Connection: keep-alive\r\n";
  }
  pending_ += "\r\n";
}

void Session::Respond(int status, std::string_view content_type, const std::string& body,
                      AfterWrite after, std::string_view extra_headers) {
  if (after != AfterWrite::kNextRequest) keep_alive_ = false;
  after_write_ = after != AfterWrite::kNextRequest ? after
                 : keep_alive_                     ? AfterWrite::kNextRequest
                                                   : AfterWrite::kClose;
  AppendHead(status, content_type, body.size(), extra_headers);
  pending_ += body;
  Flush();
}

void Session::RespondError(int status, const std::string& message, std::string_view type,
                           std::string_view param, std::string_view code, AfterWrite after,
                           std::string_view allow) {
  std::string extra;
  if (!allow.empty()) extra = "Allow: " + std::string(allow) + "\r\n";
  Respond(status, "application/json", ErrorJson(message, type, param, code), after, extra);
}

void Session::RespondError(const Error& error) {
  if (error.code == ErrorCode::kNotFound) {
    return RespondError(404, error.message, "invalid_request_error", "model", "model_not_found");
  }
  RespondError(HttpStatusOf(error.code), error.message, "invalid_request_error", "", "");
}

void Session::OnEngineEvent(const EngineEvent& event) {
  if (closed_ || !completion_ || completion_->engine_id != event.id) return;
  if (event.kind == EngineEvent::Kind::kToken) return OnToken(event.token_index);
  OnFinished(event.completion_tokens, event.reason);
}

void Session::AppendChunk(std::string_view data) {
  if (chunked_) {
    AppendHex(data.size(), pending_);
    pending_ += "\r\n";
    pending_ += data;
    pending_ += "\r\n";
  } else {
    pending_ += data;
  }
}

void Session::OnToken(int index) {
  Completion& c = *completion_;
  if (!c.events && !c.responses_events) return;  // non-streaming: the text is built at the end
  if (!c.head_written) {
    AppendHead(200, "text/event-stream", std::nullopt,
               request_id_header_ + "Cache-Control: no-cache\r\n");
    c.head_written = true;
    scratch_.clear();
    if (c.events) {
      c.events->AppendStart(scratch_);
      if (c.request.tool_call) c.events->AppendToolCallStart(*c.request.tool_call, scratch_);
    } else {
      c.responses_events->AppendStart(scratch_);
    }
    if (!scratch_.empty()) AppendChunk(scratch_);
  }
  scratch_.clear();
  const std::string_view piece = c.request.tool_call ? ArgumentsPiece(*c.request.tool_call, index)
                                                     : TokenText(c.request.text_hash, index);
  if (c.events && c.request.tool_call) {
    c.events->AppendToolCallArguments(piece, scratch_);
  } else if (c.events) {
    c.events->AppendToken(piece, scratch_);
  } else {
    c.responses_events->AppendToken(piece, scratch_);
  }
  AppendChunk(scratch_);
  ++c.pending;
  Flush();
}

void Session::OnFinished(int completion_tokens, FinishReason reason) {
  Completion& c = *completion_;
  c.engine_done = true;
  c.completion_tokens = completion_tokens;
  c.reason = reason;
  if (c.responses_events) {
    if (!c.head_written) {  // unreachable: a request produces at least one token
      AppendHead(200, "text/event-stream", std::nullopt,
                 request_id_header_ + "Cache-Control: no-cache\r\n");
      c.head_written = true;
    }
    scratch_.clear();
    c.responses_events->AppendEnd(reason, c.request.prompt_tokens, c.request.cached_tokens,
                                  completion_tokens, scratch_);
    AppendChunk(scratch_);
    if (chunked_) pending_ += "0\r\n\r\n";
  } else if (c.events) {
    if (!c.head_written) {  // unreachable: a request produces at least one token
      AppendHead(200, "text/event-stream", std::nullopt,
                 request_id_header_ + "Cache-Control: no-cache\r\n");
      c.head_written = true;
    }
    scratch_.clear();
    c.events->AppendFinish(reason, scratch_, c.request.tool_call.has_value());
    AppendChunk(scratch_);
    scratch_.clear();
    c.events->AppendUsage(c.request.prompt_tokens, c.request.cached_tokens, completion_tokens,
                          scratch_);
    if (!scratch_.empty()) AppendChunk(scratch_);
    scratch_.clear();
    StreamEvents::AppendDone(scratch_);
    AppendChunk(scratch_);
    if (chunked_) pending_ += "0\r\n\r\n";
  } else {
    const std::string text = CompletionText(c.request.text_hash, completion_tokens);
    const ToolCall* call = c.request.tool_call ? &*c.request.tool_call : nullptr;
    const std::string body =
        c.meta.endpoint == Endpoint::kResponses
            ? ResponsesResponseJson(c.meta, text, c.request.prompt_tokens, c.request.cached_tokens,
                                    completion_tokens, reason, call)
            : CompletionResponseJson(c.meta, text, c.request.prompt_tokens, c.request.cached_tokens,
                                     completion_tokens, reason, call);
    AppendHead(200, "application/json", body.size(), request_id_header_);
    pending_ += body;
    c.pending = completion_tokens;
  }
  Flush();
}

void Session::Flush() {
  if (writing_ || holding_writes_ || closed_ || pending_.empty()) return;
  out_.swap(pending_);
  pending_.clear();
  if (completion_) {
    completion_->in_write = completion_->pending;
    completion_->pending = 0;
  }
  writing_ = true;
  net::async_write(
      socket_, net::buffer(out_),
      [self = shared_from_this()](beast::error_code ec, size_t) { self->OnWritten(ec); });
}

void Session::OnWritten(beast::error_code ec) {
  writing_ = false;
  if (completion_ && !ec) {
    completion_->sent += completion_->in_write;
    completion_->in_write = 0;
  }
  if (closed_) return EndCancelled();  // Close() waited for this write's outcome
  if (ec) return Close();
  out_.clear();
  if (out_.capacity() > kKeepBufferBytes) std::string().swap(out_);
  if (!pending_.empty()) return Flush();
  if (completion_ && !completion_->engine_done) return;  // more tokens to come
  EndResponse();
}

void Session::EndResponse() {
  if (completion_) {
    core_->served.End(completion_->record, completion_->completion_tokens, /*cancelled=*/false);
    completion_.reset();
  }
  StopWatching();
  if (pending_.capacity() > kKeepBufferBytes) std::string().swap(pending_);
  switch (after_write_) {
    case AfterWrite::kNextRequest:
      return ReadRequest();
    case AfterWrite::kClose: {
      beast::error_code ignored;
      socket_.shutdown(tcp::socket::shutdown_send, ignored);
      return Close();
    }
    case AfterWrite::kLinger:
      return Linger();
  }
}

}  // namespace atrium::engine_sim
