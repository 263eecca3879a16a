#include "common/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace atrium {
namespace {

Error Failed(const std::string& what, const std::string& path) {
  return Error::Unavailable("cannot " + what + " " + path + ": " + std::strerror(errno));
}

}  // namespace

Status ReplaceFileAtomically(const std::string& path, std::string_view contents, unsigned mode) {
  const std::string tmp = path + ".tmp";
  const int fd =
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode_t(mode));
  if (fd < 0) return Failed("write", tmp);
  auto fail = [&](const std::string& what, const std::string& name) {
    Error e = Failed(what, name);
    ::close(fd);
    ::unlink(tmp.c_str());
    return e;
  };
  if (::fchmod(fd, mode_t(mode)) != 0) return fail("set the mode of", tmp);
  std::string_view left = contents;
  while (!left.empty()) {
    const ssize_t n = ::write(fd, left.data(), left.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail("write", tmp);
    left.remove_prefix(size_t(n));
  }
  if (::fdatasync(fd) != 0) return fail("sync", tmp);
  if (::close(fd) != 0) {
    Error e = Failed("close", tmp);
    ::unlink(tmp.c_str());
    return e;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Error e = Failed("replace", path);
    ::unlink(tmp.c_str());
    return e;
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return Failed("open the folder", dir);
  const bool synced = ::fsync(dfd) == 0;
  ::close(dfd);
  if (!synced) return Failed("sync the folder", dir);
  return OkStatus();
}

}  // namespace atrium
