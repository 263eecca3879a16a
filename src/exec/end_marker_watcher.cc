#include "exec/end_marker_watcher.h"

#include <dirent.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "exec/sandbox.h"

namespace atrium::exec {

EndMarkerWatcher::EndMarkerWatcher(std::string dir, int64_t scan_ms, Claims claims,
                                   int64_t unclaimed_ttl_ms)
    : dir_(std::move(dir)),
      scan_ms_(scan_ms > 0 ? scan_ms : 1000),
      claims_(std::move(claims)),
      unclaimed_ttl_ms_(unclaimed_ttl_ms) {}

EndMarkerWatcher::~EndMarkerWatcher() { Stop(); }

Status EndMarkerWatcher::Start(EndHint hint) {
  Stop();
  if (DIR* d = ::opendir(dir_.c_str()); d != nullptr) {
    ::closedir(d);
  } else {
    return Error::Unavailable("cannot read the end markers' folder " + dir_ + ": " +
                              std::strerror(errno));
  }
  stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd_ < 0) return Error::Unavailable(std::string("eventfd: ") + std::strerror(errno));
  // Without inotify (a file system or kernel that refuses it) the scan
  // alone finds the markers.
  int inotify_fd = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (inotify_fd >= 0 &&
      ::inotify_add_watch(inotify_fd, dir_.c_str(), IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE) < 0) {
    ::close(inotify_fd);
    inotify_fd = -1;
  }
  hint_ = std::move(hint);
  thread_ = std::thread([this, inotify_fd] { Loop(inotify_fd); });
  return OkStatus();
}

void EndMarkerWatcher::Stop() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    (void)!::write(stop_fd_, &one, sizeof one);
    thread_.join();
  }
  if (stop_fd_ >= 0) {
    ::close(stop_fd_);
    stop_fd_ = -1;
  }
}

void EndMarkerWatcher::Loop(int inotify_fd) {
  Drain();
  while (true) {
    pollfd fds[2] = {{stop_fd_, POLLIN, 0}, {inotify_fd, POLLIN, 0}};
    const int n = ::poll(fds, inotify_fd >= 0 ? 2 : 1, static_cast<int>(scan_ms_));
    if (n < 0 && errno != EINTR) break;
    if (fds[0].revents != 0) break;
    if (inotify_fd >= 0 && fds[1].revents != 0) {
      // What changed is read back from the folder itself: the events are
      // only a wake-up (and an overflowed queue loses nothing).
      alignas(inotify_event) char buf[4096];
      while (::read(inotify_fd, buf, sizeof buf) > 0) {
      }
    }
    Drain();
  }
  if (inotify_fd >= 0) ::close(inotify_fd);
}

void EndMarkerWatcher::Drain() {
  DIR* d = ::opendir(dir_.c_str());
  if (d == nullptr) return;
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      names.emplace_back(e->d_name);
    }
  }
  ::closedir(d);
  const auto now = std::chrono::system_clock::now();
  for (const std::string& name : names) {
    const std::string path = dir_ + "/" + name;
    if (IsValidWorkloadId(name) && claims_ && !claims_(name)) {
      // Another watcher's, or nobody's: left alone until it is old.
      struct stat st {};
      if (::lstat(path.c_str(), &st) != 0) continue;
      const auto made = std::chrono::system_clock::from_time_t(st.st_mtim.tv_sec);
      if (now - made > std::chrono::milliseconds(unclaimed_ttl_ms_)) ::unlink(path.c_str());
      continue;
    }
    // Removed before the hint: a marker made again meanwhile is a new one.
    if (::unlink(path.c_str()) != 0) continue;
    if (IsValidWorkloadId(name)) hint_(name);
  }
}

}  // namespace atrium::exec
