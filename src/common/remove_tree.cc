#include "common/remove_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace atrium {
namespace {

constexpr int kMaxDepth = 256;

struct Removal {
  std::string first_error;  // "" = none so far
  void Fail(const std::string& what, int err) {
    if (first_error.empty()) first_error = "cannot remove " + what + ": " + std::strerror(err);
  }
};

// Empties the folder open as `dir` (which it closes); `where` names it.
void EmptyFolder(int dir, const std::string& where, int depth, Removal& removal) {
  DIR* d = ::fdopendir(dir);
  if (d == nullptr) {
    removal.Fail(where, errno);
    ::close(dir);
    return;
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    names.emplace_back(e->d_name);
  }
  for (const std::string& name : names) {
    std::string what = where;
    what += '/';
    what += name;
    if (::unlinkat(dir, name.c_str(), 0) == 0 || errno == ENOENT) continue;
    if (errno != EISDIR && errno != EPERM) {
      removal.Fail(what, errno);
      continue;
    }
    // A folder (or what claims to be): opened without following a link.
    if (depth >= kMaxDepth) {
      removal.Fail(what, ELOOP);
      continue;
    }
    const int child = ::openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (child < 0) {
      if (errno != ENOENT) removal.Fail(what, errno);
      continue;
    }
    EmptyFolder(child, what, depth + 1, removal);
    if (::unlinkat(dir, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
      removal.Fail(what, errno);
    }
  }
  ::closedir(d);
}

}  // namespace

Status RemoveTreeNoFollow(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return OkStatus();
    return Error::Unavailable("cannot remove " + path + ": " + std::strerror(errno));
  }
  Removal removal;
  if (!S_ISDIR(st.st_mode)) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) removal.Fail(path, errno);
  } else {
    const int dir = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dir < 0) {
      if (errno != ENOENT) removal.Fail(path, errno);
    } else {
      EmptyFolder(dir, path, 1, removal);
      if (::rmdir(path.c_str()) != 0 && errno != ENOENT) removal.Fail(path, errno);
    }
  }
  if (!removal.first_error.empty()) return Error::Unavailable(removal.first_error);
  return OkStatus();
}

}  // namespace atrium
