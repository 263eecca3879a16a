// EndMarkerWatcher: watches a folder of end markers (end_markers.h) on a
// thread of its own and hands each marker's workload id to a hint.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "common/result.h"
#include "exec/end_markers.h"

namespace atrium::exec {

class EndMarkerWatcher {
 public:
  // Whether a marker's workload is this watcher's. Unset: every one is.
  using Claims = std::function<bool(const std::string& workload_id)>;
  // `dir` must exist; `scan_ms` > 0.
  EndMarkerWatcher(std::string dir, int64_t scan_ms, Claims claims = nullptr,
                   int64_t unclaimed_ttl_ms = 60'000);
  ~EndMarkerWatcher();
  EndMarkerWatcher(const EndMarkerWatcher&) = delete;
  EndMarkerWatcher& operator=(const EndMarkerWatcher&) = delete;

  // Starts the thread; markers already there are handed over first.
  // Unavailable when the folder cannot be read. A second Start replaces the
  // hint (the thread is restarted).
  Status Start(EndHint hint);
  // Stops the thread; no hint is called once it returns. Idempotent.
  void Stop();

 private:
  void Loop(int inotify_fd);
  // Hands over and removes every marker now in the folder.
  void Drain();

  const std::string dir_;
  const int64_t scan_ms_;
  const Claims claims_;
  const int64_t unclaimed_ttl_ms_;
  EndHint hint_;
  int stop_fd_ = -1;  // an eventfd: written by Stop
  std::thread thread_;
};

}  // namespace atrium::exec
