// The files a durable path writes, behind a small interface (LevelDB's Env
// idea): production code takes a FileSystem& and gets FileSystem::Default(),
// plain POSIX calls, one virtual call each and no other cost; a test passes
// one that fails the Nth write, writes only part of it, or fails a sync, to
// show what a full disk or a crash mid-write leaves behind
// (tests/support/fault_injecting_file_system.h).
//
// Every error is kUnavailable (but Remove of nothing: kNotFound), naming the
// step, the path and the OS error
// ("cannot write /data/usage.journal: No space left on device").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/result.h"

namespace atrium {

// An open file. Append, ReadAt and Sync may be called from several threads
// at once (write(2) with O_APPEND, pread, fdatasync on one descriptor); Truncate,
// SetMode and Close are the owner's.
class File {
 public:
  virtual ~File() = default;  // closes, if Close() has not
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  // Writes all of `data` (a short write or EINTR is retried). On an error
  // part of `data` may have landed: the caller decides what to keep.
  virtual Status Append(std::string_view data) = 0;
  // Up to `n` bytes at `offset` into `buffer`; 0 at the end of the file.
  virtual Result<size_t> ReadAt(int64_t offset, char* buffer, size_t n) = 0;
  // fdatasync: the data written so far survives a machine crash.
  virtual Status Sync() = 0;
  virtual Status Truncate(int64_t size) = 0;
  virtual Result<int64_t> Size() = 0;
  // fchmod: permission bits, set explicitly (an old file keeps wider ones).
  virtual Status SetMode(unsigned mode) = 0;
  // The descriptor is released even when this reports an error.
  virtual Status Close() = 0;

 protected:
  File() = default;
};

struct OpenOptions {
  bool read = false;       // readable as well as writable (O_RDWR)
  bool append = true;      // every write goes to the end (O_APPEND)
  bool truncate = false;   // emptied on open (O_TRUNC)
  bool no_follow = false;  // never opened through a symbolic link (O_NOFOLLOW)
  unsigned mode = 0600;    // permission bits when created
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // The POSIX one, for the life of the process.
  static FileSystem& Default();

  // Opens `path` for writing, creating it. The File is the caller's.
  virtual Result<std::unique_ptr<File>> Open(const std::string& path,
                                             const OpenOptions& options) = 0;
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  // Unlinks `path`; kNotFound when there is nothing there.
  virtual Status Remove(const std::string& path) = 0;
  // fsync of a folder: makes a rename or a new name in it durable.
  virtual Status SyncDirectory(const std::string& path) = 0;
};

}  // namespace atrium
