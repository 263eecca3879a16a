#include "common/file_system.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace atrium {
namespace {

Error Failed(std::string_view what, const std::string& path) {
  return Error::Unavailable("cannot " + std::string(what) + " " + path + ": " +
                            std::strerror(errno));
}

class PosixFile final : public File {
 public:
  PosixFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~PosixFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  Status Append(std::string_view data) override {
    while (!data.empty()) {
      const ssize_t n = ::write(fd_, data.data(), data.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        return Failed("write", path_);
      }
      data.remove_prefix(static_cast<size_t>(n));
    }
    return OkStatus();
  }

  Result<size_t> ReadAt(int64_t offset, char* buffer, size_t n) override {
    for (;;) {
      const ssize_t got = ::pread(fd_, buffer, n, offset);
      if (got >= 0) return static_cast<size_t>(got);
      if (errno != EINTR) return Failed("read", path_);
    }
  }

  Status Sync() override {
    if (::fdatasync(fd_) != 0) return Failed("sync", path_);
    return OkStatus();
  }

  Status Truncate(int64_t size) override {
    if (::ftruncate(fd_, size) != 0) return Failed("truncate", path_);
    return OkStatus();
  }

  Result<int64_t> Size() override {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) return Failed("stat", path_);
    return static_cast<int64_t>(st.st_size);
  }

  Status SetMode(unsigned mode) override {
    if (::fchmod(fd_, static_cast<mode_t>(mode)) != 0) return Failed("set the mode of", path_);
    return OkStatus();
  }

  Status Close() override {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return Failed("close", path_);
    return OkStatus();
  }

 private:
  int fd_;
  const std::string path_;
};

class PosixFileSystem final : public FileSystem {
 public:
  Result<std::unique_ptr<File>> Open(const std::string& path, const OpenOptions& o) override {
    int flags = (o.read ? O_RDWR : O_WRONLY) | O_CREAT | O_CLOEXEC;
    if (o.append) flags |= O_APPEND;
    if (o.truncate) flags |= O_TRUNC;
    if (o.no_follow) flags |= O_NOFOLLOW;
    const int fd = ::open(path.c_str(), flags, static_cast<mode_t>(o.mode));
    if (fd < 0) return Failed("open", path);
    return std::unique_ptr<File>(new PosixFile(fd, path));
  }

  Status Rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) return Failed("replace", to);
    return OkStatus();
  }

  Status Remove(const std::string& path) override {
    if (::unlink(path.c_str()) == 0) return OkStatus();
    if (errno == ENOENT) return Error::NotFound(path + " does not exist");
    return Failed("remove", path);
  }

  Status SyncDirectory(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return Failed("open the folder", path);
    const bool synced = ::fsync(fd) == 0;
    const int saved = errno;
    ::close(fd);
    errno = saved;
    if (!synced) return Failed("sync the folder", path);
    return OkStatus();
  }
};

}  // namespace

FileSystem& FileSystem::Default() {
  static PosixFileSystem* const posix = new PosixFileSystem();  // never destroyed: used at exit
  return *posix;
}

}  // namespace atrium
