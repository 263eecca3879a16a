// Test helpers for the engine simulator's server: a raw TCP connection (so a
// test can pipeline, read a stream chunk by chunk with arrival times, or
// disconnect mid-stream) and an incremental HTTP/1.1 response reader.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace atrium::engine_sim::testing {

using SteadyClock = std::chrono::steady_clock;

class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~RawConnection() { Close(); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool connected() const { return connected_; }
  int fd() const { return fd_; }
  bool eof() const { return eof_; }

  bool Send(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Appends what arrives within timeout_ms to `into`; false on timeout, EOF or error.
  bool ReadSome(std::string& into, int timeout_ms) {
    pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return false;
    char buffer[16384];
    const ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    into.append(buffer, static_cast<size_t>(n));
    return true;
  }

  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool eof_ = false;
};

// Parses one HTTP/1.1 response fed in pieces: head, then a Content-Length or
// chunked body. Each chunk keeps the time the read that completed it returned.
class ResponseReader {
 public:
  struct Chunk {
    std::string data;
    SteadyClock::time_point at;
  };

  // Feeds bytes; bytes past the end of this response stay in rest().
  void Feed(std::string_view bytes, SteadyClock::time_point at = SteadyClock::now()) {
    buffer_.append(bytes);
    if (!head_done_) {
      const size_t end = buffer_.find("\r\n\r\n");
      if (end == std::string::npos) return;
      ParseHead(buffer_.substr(0, end));
      buffer_.erase(0, end + 4);
      head_done_ = true;
    }
    if (complete_) return;
    if (!chunked_) {
      const size_t take = std::min(buffer_.size(), content_length_ - body_.size());
      body_.append(buffer_, 0, take);
      buffer_.erase(0, take);
      if (body_.size() == content_length_) complete_ = true;
      return;
    }
    for (;;) {
      const size_t line = buffer_.find("\r\n");
      if (line == std::string::npos) return;
      const size_t size = std::stoul(buffer_.substr(0, line), nullptr, 16);
      if (buffer_.size() < line + 2 + size + 2) return;
      if (size == 0) {
        buffer_.erase(0, line + 4);
        complete_ = true;
        return;
      }
      chunks_.push_back({buffer_.substr(line + 2, size), at});
      body_ += chunks_.back().data;
      buffer_.erase(0, line + 2 + size + 2);
    }
  }

  bool head_done() const { return head_done_; }
  bool complete() const { return complete_; }
  int status() const { return status_; }
  // Lower-case names.
  const std::map<std::string, std::string>& headers() const { return headers_; }
  std::string Header(const std::string& name) const {
    auto it = headers_.find(name);
    return it == headers_.end() ? "" : it->second;
  }
  const std::vector<Chunk>& chunks() const { return chunks_; }
  const std::string& body() const { return body_; }
  const std::string& rest() const { return buffer_; }

  // The payloads of the SSE events in the body ("data: X\n\n" -> X), with
  // the arrival time of the chunk that ended each.
  std::vector<std::pair<std::string, SteadyClock::time_point>> Events() const {
    std::vector<std::pair<std::string, SteadyClock::time_point>> events;
    std::string pending;
    for (const Chunk& chunk : chunks_) {
      pending += chunk.data;
      size_t end;
      while ((end = pending.find("\n\n")) != std::string::npos) {
        std::string event = pending.substr(0, end);
        if (event.rfind("data: ", 0) == 0) event.erase(0, 6);
        events.emplace_back(std::move(event), chunk.at);
        pending.erase(0, end + 2);
      }
    }
    return events;
  }

 private:
  void ParseHead(const std::string& head) {
    const size_t first_line = head.find("\r\n");
    const std::string status_line = head.substr(0, first_line);
    status_ = std::stoi(status_line.substr(status_line.find(' ') + 1, 3));
    size_t at = first_line == std::string::npos ? head.size() : first_line + 2;
    while (at < head.size()) {
      size_t end = head.find("\r\n", at);
      if (end == std::string::npos) end = head.size();
      const std::string line = head.substr(at, end - at);
      const size_t colon = line.find(':');
      std::string name = line.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      std::string value = line.substr(colon + 1);
      value.erase(0, value.find_first_not_of(' '));
      headers_[name] = value;
      at = end + 2;
    }
    chunked_ = Header("transfer-encoding") == "chunked";
    content_length_ =
        chunked_ ? 0
                 : std::stoul(Header("content-length").empty() ? "0" : Header("content-length"));
    if (!chunked_ && content_length_ == 0) complete_ = true;
  }

  std::string buffer_;
  bool head_done_ = false;
  bool complete_ = false;
  bool chunked_ = false;
  size_t content_length_ = 0;
  int status_ = 0;
  std::map<std::string, std::string> headers_;
  std::vector<Chunk> chunks_;
  std::string body_;
};

// Reads from each connection into its reader until every reader is complete
// (or `until` says so) or the deadline passes; polls all at once so that
// arrival times are right. True if all completed.
template <typename Until>
bool ReadAll(std::vector<std::pair<RawConnection*, ResponseReader*>> streams, int timeout_ms,
             Until until) {
  const auto deadline = SteadyClock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<size_t> which;
    bool all_done = true;
    for (size_t i = 0; i < streams.size(); ++i) {
      if (until(*streams[i].second) || streams[i].first->eof()) continue;
      all_done = false;
      fds.push_back({.fd = streams[i].first->fd(), .events = POLLIN, .revents = 0});
      which.push_back(i);
    }
    if (all_done) return true;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
    if (left.count() <= 0) return false;
    if (::poll(fds.data(), fds.size(), static_cast<int>(left.count())) <= 0) return false;
    const auto now = SteadyClock::now();
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      std::string bytes;
      if (streams[which[k]].first->ReadSome(bytes, 0)) streams[which[k]].second->Feed(bytes, now);
    }
  }
}

inline bool ReadAll(std::vector<std::pair<RawConnection*, ResponseReader*>> streams,
                    int timeout_ms) {
  return ReadAll(std::move(streams), timeout_ms,
                 [](const ResponseReader& reader) { return reader.complete(); });
}

inline std::string PostRequest(std::string_view path, std::string_view body,
                               std::string_view extra_headers = "") {
  std::string request = "POST ";
  request += path;
  request += " HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: ";
  request += std::to_string(body.size());
  request += "\r\n";
  request += extra_headers;
  request += "\r\n";
  request += body;
  return request;
}

}  // namespace atrium::engine_sim::testing
