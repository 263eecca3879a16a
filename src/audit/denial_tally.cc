#include "audit/denial_tally.h"

#include <algorithm>

namespace atrium::audit {

DenialTally::DenialTally(int64_t window_ms, size_t max_sources)
    : window_ms_(window_ms > 0 ? window_ms : 60'000), max_sources_(max_sources) {}

std::vector<AuditRecord> DenialTally::Add(const DenialKey& key, const std::string& source,
                                          const std::string& request_id, int64_t now_ms) {
  std::vector<AuditRecord> closed = Flush(now_ms);
  ++total_;
  Window& w = open_[key];
  if (w.count == 0) {
    w.start_ms = now_ms - now_ms % window_ms_;
    w.first_source = source;
    w.first_request_id = request_id;
  }
  ++w.count;
  w.last_ms = std::max(w.last_ms, now_ms);
  if (w.sources.size() < max_sources_) {
    w.sources.insert(source);
  } else if (!w.sources.count(source)) {
    w.more_sources = true;
  }
  return closed;
}

std::vector<AuditRecord> DenialTally::Flush(int64_t now_ms) {
  std::vector<AuditRecord> closed;
  for (auto it = open_.begin(); it != open_.end();) {
    if (it->second.start_ms + window_ms_ <= now_ms) {
      closed.push_back(Summarize(it->first, it->second));
      it = open_.erase(it);
    } else {
      ++it;
    }
  }
  std::sort(closed.begin(), closed.end(),
            [](const AuditRecord& a, const AuditRecord& b) { return a.time < b.time; });
  return closed;
}

std::vector<AuditRecord> DenialTally::FlushAll() {
  std::vector<AuditRecord> all;
  for (const auto& [key, w] : open_) all.push_back(Summarize(key, w));
  open_.clear();
  std::sort(all.begin(), all.end(),
            [](const AuditRecord& a, const AuditRecord& b) { return a.time < b.time; });
  return all;
}

int64_t DenialTally::pending() const {
  int64_t n = 0;
  for (const auto& [key, w] : open_) n += w.count;
  return n;
}

AuditRecord DenialTally::Summarize(const DenialKey& key, const Window& w) const {
  AuditRecord r;
  r.time = w.last_ms;
  r.actor = "anonymous";
  r.action = key.action;
  r.target = "unauthenticated: " + std::to_string(w.count) + " request" +
             (w.count == 1 ? "" : "s") + " from " + std::to_string(w.sources.size()) +
             (w.more_sources ? "+" : "") + " address" + (w.sources.size() == 1 ? "" : "es") + " (" +
             key.reason + ") in [" + std::to_string(w.start_ms) + ", " +
             std::to_string(w.start_ms + window_ms_) + ")";
  r.outcome = key.outcome;
  r.status = key.status;
  r.request_id = w.first_request_id;  // a sample, to find in the server's log
  r.source = w.first_source;
  return r;  // tenant_id "": the platform chain
}

}  // namespace atrium::audit
