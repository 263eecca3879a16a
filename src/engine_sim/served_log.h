// What the engine simulator has served, for tests that compare a gateway's
// metering with what its upstream says it served (GET /sim/served).
// Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>

namespace atrium::engine_sim {

struct ServedRecord {
  std::string request_id;  // the client's X-Request-Id, else the simulator's own id
  std::string model;
  std::string endpoint;  // "chat.completions", "completions" or "embeddings"
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;      // of the prompt, served by the prefix cache
  std::string cache_salt;         // as the request carried it ("" = none)
  int64_t completion_tokens = 0;  // 0 until the request ends
  bool stream = false;
  bool finished = false;   // completed and fully written to the client
  bool cancelled = false;  // the client went away first; completion_tokens = tokens sent
};

struct ServedTotals {
  int64_t requests = 0;  // every request recorded, including those dropped from the list
  int64_t finished = 0;
  int64_t cancelled = 0;
  int64_t in_flight = 0;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;  // of ended requests
  int64_t dropped = 0;            // records evicted from the bounded list
};

// The list keeps the newest `capacity` records (1,000,000 by default: about
// 100-150 bytes each, so ~150 MB at most); older ones are dropped from the
// list but stay counted in the totals.
class ServedLog {
 public:
  static constexpr size_t kDefaultCapacity = 1'000'000;
  explicit ServedLog(size_t capacity = kDefaultCapacity);

  // Records a request that started; returns its handle for End().
  uint64_t Begin(ServedRecord record);
  // Ends a request: finished, or cancelled with the tokens actually sent.
  // Ending twice, or ending a dropped record, only updates what it can.
  void End(uint64_t handle, int64_t completion_tokens, bool cancelled);

  ServedTotals Totals() const;
  // {"requests":[{"request_id":..,"model":..,"endpoint":..,"prompt_tokens":..,
  //   "completion_tokens":..,"stream":..,"finished":..,"cancelled":..}, ...],
  //  "totals":{...}} oldest first.
  std::string ToJson() const;

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::deque<ServedRecord> records_;  // GUARDED_BY(mu_)
  uint64_t first_handle_ = 0;         // GUARDED_BY(mu_): handle of records_.front()
  ServedTotals totals_;               // GUARDED_BY(mu_)
};

}  // namespace atrium::engine_sim
