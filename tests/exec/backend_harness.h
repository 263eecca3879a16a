// What a backend's test folder provides to the conformance suite
// (backend_conformance.h), and small host helpers the suites share. Kept
// apart from the suite so that a backend's own tests can use its harness
// without instantiating the suite.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "exec/backend.h"

namespace atrium::exec::conformance {

// One backend's world for one test. Every method may be called from the
// test thread only.
class BackendHarness {
 public:
  virtual ~BackendHarness() = default;

  // A new backend instance over this harness's durable state (the same
  // state dir, the same Slurm): called more than once in a test to show that
  // a restarted control plane finds its workloads again. Never null.
  virtual std::unique_ptr<ExecutionBackend> NewBackend() = 0;
  // The node workloads are placed on.
  virtual std::string Node() = 0;
  // At least two GPU indices on Node() that tests may grant.
  virtual std::vector<int> GpuIndices() = 0;
  // The host path of a started workload's working directory (what it sees
  // as its current directory): the test plants and reads files there, and
  // another tenant's workload tries to reach it.
  virtual std::string WorkDirOnHost(const std::string& workload_id) = 0;
  // Host pids of a running workload's processes (its command and any
  // helper the backend runs for it), for another workload to try to signal.
  virtual std::vector<int> HostPids(const std::string& workload_id) = 0;
  // A directory of the control plane's (its state) that no workload may
  // write into.
  virtual std::string ControlPlaneDir() = 0;
  // The folder where the backend's end markers are made (WatchEnds), as
  // the host sees it.
  virtual std::string EndedDir() = 0;
  // The log bound the backend was made with (bytes kept per workload).
  virtual int64_t LogMaxBytes() = 0;
  // How a workload names GPU `index`.
  virtual std::string DevicePathInWorkload(int index) {
    return "/dev/nvidia" + std::to_string(index);
  }
  // Whether the backend runs MIG grants (else it must refuse them, starting
  // nothing), and the capability device files, as the workload sees them,
  // of the MIG instance at memory slot `start` of GPU `index`.
  virtual bool RunsMig() { return false; }
  virtual std::vector<std::string> MigCapsInWorkload(int index, int start) {
    (void)index;
    (void)start;
    return {};
  }
  virtual std::chrono::milliseconds WaitTimeout() { return std::chrono::seconds(60); }
  virtual std::chrono::milliseconds PollInterval() { return std::chrono::milliseconds(10); }
};

struct BackendUnderTest {
  std::string name;  // gtest's parameter name: letters and digits
  std::function<std::unique_ptr<BackendHarness>()> make_harness;
};

inline std::string BackendName(const ::testing::TestParamInfo<BackendUnderTest>& info) {
  return info.param.name;
}
inline void PrintTo(const BackendUnderTest& backend, std::ostream* os) { *os << backend.name; }

inline int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

inline bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

inline size_t CountOf(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos;
       at = haystack.find(needle, at + needle.size())) {
    ++n;
  }
  return n;
}

inline bool PathExists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

inline std::string ReadHostFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace atrium::exec::conformance
