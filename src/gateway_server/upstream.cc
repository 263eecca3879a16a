#include "gateway_server/upstream.h"

namespace atrium::gateway_server {

Result<UpstreamAddress> ParseUpstreamUrl(const std::string& url) {
  constexpr std::string_view kHttp = "http://";
  if (url.rfind("https://", 0) == 0) {
    return Error::Unavailable("endpoint " + url + ": https upstreams are not supported yet");
  }
  if (url.rfind(kHttp, 0) != 0) return Error::InvalidArgument("endpoint " + url + ": not http://");
  std::string rest = url.substr(kHttp.size());
  size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  UpstreamAddress out;
  if (slash != std::string::npos) out.base_path = rest.substr(slash);
  while (!out.base_path.empty() && out.base_path.back() == '/') out.base_path.pop_back();
  if (authority.empty() || authority.find('@') != std::string::npos) {
    return Error::InvalidArgument("endpoint " + url + ": bad host");
  }
  out.host_header = authority;
  if (authority.front() == '[') {
    size_t close = authority.find(']');
    if (close == std::string::npos) return Error::InvalidArgument("endpoint " + url + ": bad host");
    out.host = authority.substr(1, close - 1);
    out.port = close + 1 < authority.size() && authority[close + 1] == ':'
                   ? authority.substr(close + 2)
                   : "80";
  } else {
    size_t colon = authority.rfind(':');
    out.host = authority.substr(0, colon);
    out.port = colon == std::string::npos ? "80" : authority.substr(colon + 1);
  }
  if (out.host.empty() || out.port.empty()) {
    return Error::InvalidArgument("endpoint " + url + ": bad host or port");
  }
  return out;
}

std::unique_ptr<UpstreamConnection> UpstreamPool::TakeIdle(const std::string& url) {
  std::lock_guard lock(mu_);
  auto it = idle_.find(url);
  if (it == idle_.end() || it->second.empty()) return nullptr;
  auto connection = std::move(it->second.back());
  it->second.pop_back();
  connection->reused = true;
  return connection;
}

void UpstreamPool::GiveBack(const std::string& url,
                            std::unique_ptr<UpstreamConnection> connection) {
  std::lock_guard lock(mu_);
  auto& idle = idle_[url];
  if (idle.size() < max_idle_per_endpoint_) idle.push_back(std::move(connection));
}

std::vector<boost::asio::ip::tcp::endpoint> UpstreamPool::Cached(const std::string& url) {
  std::lock_guard lock(mu_);
  auto it = resolved_.find(url);
  return it == resolved_.end() ? std::vector<boost::asio::ip::tcp::endpoint>{} : it->second;
}

void UpstreamPool::Remember(const std::string& url,
                            std::vector<boost::asio::ip::tcp::endpoint> endpoints) {
  std::lock_guard lock(mu_);
  resolved_[url] = std::move(endpoints);
}

void UpstreamPool::Forget(const std::string& url) {
  std::lock_guard lock(mu_);
  resolved_.erase(url);
  idle_.erase(url);
}

void UpstreamPool::Clear() {
  std::lock_guard lock(mu_);
  idle_.clear();
  resolved_.clear();
}

}  // namespace atrium::gateway_server
