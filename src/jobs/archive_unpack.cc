#include "jobs/archive_unpack.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <random>

#include "common/remove_tree.h"

namespace atrium::jobs {
namespace {

struct ReadCloser {
  void operator()(archive* a) const { archive_read_free(a); }
};

std::string ArchiveError(archive* a) {
  const char* words = archive_error_string(a);
  return words == nullptr ? "unknown error" : words;
}

// `rel` (canonical, relative) under `root`.
std::string Under(const std::string& root, const std::string& rel) {
  std::string path = root;
  path += '/';
  path += rel;
  return path;
}

Error FsError(const std::string& what, const std::string& path) {
  return Error::Internal(what + " " + path + ": " + std::strerror(errno));
}

// Makes every missing folder of `rel` (a canonical relative path) under
// `root`, 0755.
Status MakeFolders(const std::string& root, const std::string& rel) {
  size_t at = 0;
  while (at <= rel.size()) {
    size_t slash = rel.find('/', at);
    if (slash == std::string::npos) slash = rel.size();
    const std::string path = root + "/" + rel.substr(0, slash);
    if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return FsError("mkdir", path);
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return Error::InvalidArgument("archive entry '" + rel + "' lies beneath a file");
    }
    at = slash + 1;
  }
  return OkStatus();
}

Status WriteAll(int fd, const char* data, size_t size, const std::string& path) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return FsError("write", path);
    data += n;
    size -= static_cast<size_t>(n);
  }
  return OkStatus();
}

Status CopyFile(const std::string& from, const std::string& to) {
  const int in = ::open(from.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (in < 0) return FsError("open", from);
  const int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (out < 0) {
    ::close(in);
    return FsError("create", to);
  }
  std::array<char, 65536> buffer{};
  Status status = OkStatus();
  for (;;) {
    const ssize_t n = ::read(in, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) status = FsError("read", from);
    if (n <= 0) break;
    status = WriteAll(out, buffer.data(), static_cast<size_t>(n), to);
    if (!status.has_value()) break;
  }
  ::close(in);
  if (::close(out) != 0 && status.has_value()) status = FsError("close", to);
  return status;
}

Status Unpack(archive* in, const std::string& root, const ArchiveLimits& limits) {
  int64_t entries = 0;
  int64_t bytes = 0;
  for (;;) {
    archive_entry* entry = nullptr;
    const int r = archive_read_next_header(in, &entry);
    if (r == ARCHIVE_EOF) return OkStatus();
    if (r != ARCHIVE_OK) {
      return Error::InvalidArgument("unreadable archive: " + ArchiveError(in));
    }
    if (++entries > limits.max_entries) {
      return Error::InvalidArgument("the archive holds more than " +
                                    std::to_string(limits.max_entries) + " entries");
    }
    const char* raw = archive_entry_pathname(entry);
    ATRIUM_ASSIGN_OR_RETURN(std::string rel, CanonicalMemberPath(raw == nullptr ? "" : raw));
    const std::string path = Under(root, rel);
    const mode_t type = archive_entry_filetype(entry);
    if (const char* hardlink = archive_entry_hardlink(entry); hardlink != nullptr) {
      ATRIUM_ASSIGN_OR_RETURN(std::string target, CanonicalMemberPath(hardlink));
      const size_t slash = rel.rfind('/');
      if (slash != std::string::npos) {
        ATRIUM_RETURN_IF_ERROR(MakeFolders(root, rel.substr(0, slash)));
      }
      ATRIUM_RETURN_IF_ERROR(CopyFile(Under(root, target), path));
      continue;
    }
    if (type == AE_IFDIR) {
      ATRIUM_RETURN_IF_ERROR(MakeFolders(root, rel));
      continue;
    }
    if (type != AE_IFREG) {
      return Error::InvalidArgument("archive entry '" + rel +
                                    "' is not a file or a folder: an adapter's archive holds "
                                    "files and folders only");
    }
    const int64_t size = archive_entry_size_is_set(entry) != 0 ? archive_entry_size(entry) : 0;
    bytes += size;
    if (size < 0 || bytes > limits.max_unpacked_bytes) {
      return Error::InvalidArgument("the archive unpacks to more than " +
                                    std::to_string(limits.max_unpacked_bytes) + " bytes");
    }
    const size_t slash = rel.rfind('/');
    if (slash != std::string::npos) ATRIUM_RETURN_IF_ERROR(MakeFolders(root, rel.substr(0, slash)));
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return FsError("create", path);
    Status written = OkStatus();
    std::array<char, 65536> buffer{};
    int64_t left = size;
    while (written.has_value()) {
      const la_ssize_t n = archive_read_data(in, buffer.data(), buffer.size());
      if (n < 0) {
        written = Error::InvalidArgument("unreadable archive: " + ArchiveError(in));
      } else if (n == 0) {
        break;
      } else if ((left -= n) < 0) {
        written = Error::InvalidArgument("archive entry '" + rel + "' is longer than it says");
      } else {
        written = WriteAll(fd, buffer.data(), static_cast<size_t>(n), path);
      }
    }
    if (::close(fd) != 0 && written.has_value()) written = FsError("close", path);
    ATRIUM_RETURN_IF_ERROR(written);
  }
}

}  // namespace

Status UnpackFilesAndFolders(const std::string& tar_path, const std::string& dest_dir,
                             const ArchiveLimits& limits) {
  struct stat st {};
  if (::lstat(dest_dir.c_str(), &st) == 0) return Error::AlreadyExists(dest_dir + " exists");
  std::random_device random;
  const std::string part = dest_dir + ".part-" + std::to_string(random());
  if (::mkdir(part.c_str(), 0755) != 0) return FsError("mkdir", part);
  std::unique_ptr<archive, ReadCloser> in(archive_read_new());
  Status status = OkStatus();
  if (!in || archive_read_support_format_tar(in.get()) != ARCHIVE_OK ||
      archive_read_open_filename(in.get(), tar_path.c_str(), 65536) != ARCHIVE_OK) {
    status = Error::Internal("cannot read archive " + tar_path +
                             (in ? ": " + ArchiveError(in.get()) : ""));
  } else {
    status = Unpack(in.get(), part, limits);
  }
  if (status.has_value() && ::rename(part.c_str(), dest_dir.c_str()) != 0) {
    status = FsError("rename to", dest_dir);
  }
  if (!status.has_value()) (void)RemoveTreeNoFollow(part);
  return status;
}

}  // namespace atrium::jobs
