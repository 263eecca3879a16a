// A FileSystem for tests that passes everything to the real one except the
// operations it is told to fail: the Nth write to a file (with part of it
// landing first, as on a disk that fills up mid-write), a sync, a rename, ...
// and that can "crash" the process at a fault: from then on nothing it is
// asked to do reaches the disk, so what the disk holds is what a killed
// process would have left.
#pragma once

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/file_system.h"

namespace atrium {

enum class FileOp { kOpen, kWrite, kSync, kTruncate, kClose, kRename, kRemove, kSyncDirectory };

class FaultInjectingFileSystem final : public FileSystem {
 public:
  struct Fault {
    FileOp op = FileOp::kWrite;
    // Only paths that end so (a rename matches on either name); "" for any.
    std::string path_suffix{};
    // The nth matching operation from now fails (1: the next one) ...
    int nth = 1;
    // ... and, when set, every matching one after it (a full disk).
    bool and_after = false;
    // kWrite: this many bytes of the write land before it fails.
    size_t partial_bytes = 0;
    // The process dies at the fault: every later operation fails and
    // changes nothing on disk.
    bool crash = false;
    int error = EIO;
  };

  explicit FaultInjectingFileSystem(FileSystem& base = FileSystem::Default()) : base_(base) {}

  void Inject(Fault fault) {
    std::lock_guard lock(mu_);
    rules_.push_back({std::move(fault), 0});
  }

  // Matching operations seen so far, failed ones included.
  int Count(FileOp op, const std::string& path_suffix = "") {
    std::lock_guard lock(mu_);
    return CountLocked(op, path_suffix);
  }
  // Waits until Count(op, path_suffix) >= n; false after timeout_ms.
  bool WaitForCount(FileOp op, const std::string& path_suffix, int n, int timeout_ms) {
    std::unique_lock lock(mu_);
    return seen_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                             [&] { return CountLocked(op, path_suffix) >= n; });
  }
  bool crashed() {
    std::lock_guard lock(mu_);
    return crashed_;
  }

  Result<std::unique_ptr<File>> Open(const std::string& path, const OpenOptions& o) override {
    if (auto e = Decide(FileOp::kOpen, path)) return Injected("open", path, e->error);
    ATRIUM_ASSIGN_OR_RETURN(auto file, base_.Open(path, o));
    return std::unique_ptr<File>(new FaultyFile(*this, std::move(file), path));
  }
  Status Rename(const std::string& from, const std::string& to) override {
    if (auto e = Decide(FileOp::kRename, from, to)) return Injected("replace", to, e->error);
    return base_.Rename(from, to);
  }
  Status Remove(const std::string& path) override {
    if (auto e = Decide(FileOp::kRemove, path)) return Injected("remove", path, e->error);
    return base_.Remove(path);
  }
  Status SyncDirectory(const std::string& path) override {
    if (auto e = Decide(FileOp::kSyncDirectory, path)) {
      return Injected("sync the folder", path, e->error);
    }
    return base_.SyncDirectory(path);
  }

 private:
  struct Verdict {
    int error;
    size_t partial_bytes;
  };
  struct Rule {
    Fault fault;
    int seen;
  };

  static bool EndsWith(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() &&
           s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  }
  static Error Injected(const char* what, const std::string& path, int error) {
    return Error::Unavailable(std::string("cannot ") + what + " " + path + ": " +
                              std::strerror(error) + " (injected)");
  }

  int CountLocked(FileOp op, const std::string& suffix) {
    int n = 0;
    for (const auto& [key, count] : seen_) {
      if (key.first == op && (EndsWith(key.second, suffix))) n += count;
    }
    return n;
  }

  // Counts the operation and says whether it fails, and how.
  std::optional<Verdict> Decide(FileOp op, const std::string& path, const std::string& to = "") {
    std::lock_guard lock(mu_);
    ++seen_[{op, to.empty() ? path : to}];
    seen_cv_.notify_all();
    if (crashed_) return Verdict{EIO, 0};
    for (Rule& rule : rules_) {
      const Fault& f = rule.fault;
      if (f.op != op) continue;
      if (!EndsWith(path, f.path_suffix) && (to.empty() || !EndsWith(to, f.path_suffix))) {
        continue;
      }
      ++rule.seen;
      if (rule.seen == f.nth || (f.and_after && rule.seen > f.nth)) {
        if (f.crash) crashed_ = true;
        return Verdict{f.error, f.partial_bytes};
      }
    }
    return std::nullopt;
  }

  class FaultyFile final : public File {
   public:
    FaultyFile(FaultInjectingFileSystem& fs, std::unique_ptr<File> base, std::string path)
        : fs_(fs), base_(std::move(base)), path_(std::move(path)) {}

    Status Append(std::string_view data) override {
      if (auto e = fs_.Decide(FileOp::kWrite, path_)) {
        const size_t landed = std::min(e->partial_bytes, data.size());
        if (landed > 0) ATRIUM_RETURN_IF_ERROR(base_->Append(data.substr(0, landed)));
        return Injected("write", path_, e->error);
      }
      return base_->Append(data);
    }
    Result<size_t> ReadAt(int64_t offset, char* buffer, size_t n) override {
      return base_->ReadAt(offset, buffer, n);
    }
    Status Sync() override {
      if (auto e = fs_.Decide(FileOp::kSync, path_)) return Injected("sync", path_, e->error);
      return base_->Sync();
    }
    Status Truncate(int64_t size) override {
      if (auto e = fs_.Decide(FileOp::kTruncate, path_)) {
        return Injected("truncate", path_, e->error);
      }
      return base_->Truncate(size);
    }
    Result<int64_t> Size() override { return base_->Size(); }
    Status SetMode(unsigned mode) override { return base_->SetMode(mode); }
    Status Close() override {
      Status closed = base_->Close();  // the descriptor goes either way
      if (auto e = fs_.Decide(FileOp::kClose, path_)) return Injected("close", path_, e->error);
      return closed;
    }

   private:
    FaultInjectingFileSystem& fs_;
    std::unique_ptr<File> base_;
    const std::string path_;
  };

  FileSystem& base_;
  std::mutex mu_;
  std::condition_variable seen_cv_;
  std::vector<Rule> rules_;                             // GUARDED_BY(mu_)
  std::map<std::pair<FileOp, std::string>, int> seen_;  // GUARDED_BY(mu_)
  bool crashed_ = false;                                // GUARDED_BY(mu_)
};

}  // namespace atrium
