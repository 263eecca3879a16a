#include "jobs/archive_check.h"

#include <archive.h>
#include <archive_entry.h>

#include <array>
#include <map>
#include <memory>
#include <set>
#include <vector>

namespace atrium::jobs {
namespace {

constexpr size_t kMaxPathBytes = 4095;
constexpr size_t kMaxComponentBytes = 255;
// Links followed while resolving one symbolic link: the kernel's own bound.
constexpr int kMaxLinkHops = 40;

struct ReadCloser {
  void operator()(archive* a) const { archive_read_free(a); }
};
struct WriteCloser {
  void operator()(archive* a) const { archive_write_free(a); }
};
struct EntryFree {
  void operator()(archive_entry* e) const { archive_entry_free(e); }
};

std::string Quoted(std::string_view name) {
  // Names go into error messages: shortened, control bytes replaced.
  std::string out = "'";
  for (char c : name.substr(0, 200)) {
    out.push_back(static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? '?' : c);
  }
  if (name.size() > 200) out += "...";
  return out + "'";
}

std::vector<std::string> Split(std::string_view path) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(start, end - start);
    if (!part.empty() && part != ".") parts.emplace_back(part);
    start = end + 1;
  }
  return parts;
}

std::string Join(const std::vector<std::string>& parts, size_t count) {
  std::string out;
  for (size_t i = 0; i < count; ++i) {
    if (i > 0) out.push_back('/');
    out += parts[i];
  }
  return out;
}

// What the archive holds so far, by canonical path.
struct Tree {
  std::set<std::string> entries;  // every explicit entry
  std::set<std::string> files;    // regular files (hard-link targets)
  std::set<std::string> parents;  // directories some entry lies beneath
  std::map<std::string, std::string> links;
};

// Resolves `target` as the kernel would from directory `base`, following
// the archive's links, and returns where it leads. InvalidArgument when
// the walk leaves the root.
Result<std::vector<std::string>> ResolveInside(std::vector<std::string> base,
                                               std::string_view target, const Tree& tree, int& hops,
                                               const std::string& link) {
  if (!target.empty() && target.front() == '/') {
    return Error::InvalidArgument("symbolic link " + Quoted(link) +
                                  " points to the absolute path " + Quoted(target) +
                                  ", outside the archive");
  }
  for (const std::string& part : Split(target)) {
    if (part == "..") {
      if (base.empty()) {
        return Error::InvalidArgument("symbolic link " + Quoted(link) + " (to " + Quoted(target) +
                                      ") leads outside the archive");
      }
      base.pop_back();
      continue;
    }
    base.push_back(part);
    auto it = tree.links.find(Join(base, base.size()));
    if (it == tree.links.end()) continue;
    if (++hops > kMaxLinkHops) {
      return Error::InvalidArgument("symbolic link " + Quoted(link) +
                                    " goes through too many links (a loop?)");
    }
    base.pop_back();
    ATRIUM_ASSIGN_OR_RETURN(base, ResolveInside(std::move(base), it->second, tree, hops, link));
  }
  return base;
}

Status CheckPlacement(const std::string& path, bool is_dir, Tree& tree) {
  if (tree.entries.count(path) != 0) {
    return Error::InvalidArgument("entry " + Quoted(path) + " appears twice in the archive");
  }
  const std::vector<std::string> parts = Split(path);
  if (parts.front().rfind(".atrium", 0) == 0) {
    return Error::InvalidArgument("entry " + Quoted(path) +
                                  ": names starting with '.atrium' are the platform's");
  }
  for (size_t n = 1; n < parts.size(); ++n) {
    const std::string prefix = Join(parts, n);
    if (tree.links.count(prefix) != 0) {
      return Error::InvalidArgument("entry " + Quoted(path) + " lies beneath the symbolic link " +
                                    Quoted(prefix) + " of the archive");
    }
    if (tree.files.count(prefix) != 0) {
      return Error::InvalidArgument("entry " + Quoted(path) + " lies beneath the file " +
                                    Quoted(prefix));
    }
  }
  if (!is_dir && tree.parents.count(path) != 0) {
    return Error::InvalidArgument("entry " + Quoted(path) +
                                  " would replace a directory that earlier entries are in");
  }
  for (size_t n = 1; n < parts.size(); ++n) tree.parents.insert(Join(parts, n));
  tree.entries.insert(path);
  return OkStatus();
}

Error WriteFailed(archive* out) {
  const char* why = archive_error_string(out);
  return Error::Internal(std::string("writing the checked archive failed: ") +
                         (why != nullptr ? why : "unknown error"));
}

Error ReadFailed(archive* in, const std::string& where) {
  const char* why = archive_error_string(in);
  return Error::InvalidArgument("the upload is not a readable tar or tar.gz archive" + where +
                                ": " + (why != nullptr ? why : "unknown error"));
}

// Copies the current entry's data, at most `size` bytes.
Status CopyData(archive* in, archive* out, int64_t size, const std::string& path) {
  std::array<char, size_t{64} * 1024> buffer{};
  int64_t copied = 0;
  for (;;) {
    la_ssize_t n = archive_read_data(in, buffer.data(), buffer.size());
    if (n < 0) return ReadFailed(in, " (at " + Quoted(path) + ")");
    if (n == 0) break;
    copied += n;
    if (copied > size) {
      return Error::InvalidArgument("entry " + Quoted(path) + " holds more data than it declares");
    }
    if (archive_write_data(out, buffer.data(), static_cast<size_t>(n)) != n) {
      return WriteFailed(out);
    }
  }
  return OkStatus();
}

}  // namespace

Result<std::string> CanonicalMemberPath(std::string_view name) {
  if (name.find('\0') != std::string_view::npos) {
    return Error::InvalidArgument("entry name holds a NUL byte");
  }
  if (name.size() > kMaxPathBytes) {
    return Error::InvalidArgument("entry name is longer than " + std::to_string(kMaxPathBytes) +
                                  " bytes");
  }
  if (!name.empty() && name.front() == '/') {
    return Error::InvalidArgument("entry " + Quoted(name) +
                                  " has an absolute name; names must be relative");
  }
  std::vector<std::string> parts = Split(name);
  if (parts.empty()) return Error::InvalidArgument("entry " + Quoted(name) + " has no name");
  for (const std::string& part : parts) {
    if (part == "..") {
      return Error::InvalidArgument("entry " + Quoted(name) +
                                    " has a '..' component; names must stay inside the archive");
    }
    if (part.size() > kMaxComponentBytes) {
      return Error::InvalidArgument("entry " + Quoted(name) + " has a component longer than " +
                                    std::to_string(kMaxComponentBytes) + " bytes");
    }
  }
  return Join(parts, parts.size());
}

Result<ArchiveSummary> RewriteArchive(std::string_view upload, const ArchiveLimits& limits,
                                      int out_fd) {
  std::unique_ptr<archive, ReadCloser> in(archive_read_new());
  std::unique_ptr<archive, WriteCloser> out(archive_write_new());
  if (!in || !out) return Error::Internal("libarchive could not allocate");
  // Tar (ustar, pax, GNU) only, raw or gzip: nothing that runs a program.
  if (archive_read_support_format_tar(in.get()) != ARCHIVE_OK ||
      archive_read_support_filter_gzip(in.get()) != ARCHIVE_OK) {
    return Error::Internal("libarchive reads no tar.gz here (built without zlib?)");
  }
  if (archive_read_open_memory(in.get(), upload.data(), upload.size()) != ARCHIVE_OK) {
    return ReadFailed(in.get(), "");
  }
  if (archive_write_set_format_pax_restricted(out.get()) != ARCHIVE_OK ||
      archive_write_add_filter_none(out.get()) != ARCHIVE_OK ||
      archive_write_open_fd(out.get(), out_fd) != ARCHIVE_OK) {
    return WriteFailed(out.get());
  }

  Tree tree;
  ArchiveSummary summary;
  for (;;) {
    archive_entry* entry = nullptr;
    const int r = archive_read_next_header(in.get(), &entry);
    if (r == ARCHIVE_EOF) break;
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
      return ReadFailed(in.get(), summary.entries == 0
                                      ? std::string()
                                      : " (after " + std::to_string(summary.entries) + " entries)");
    }
    if (++summary.entries > limits.max_entries) {
      return Error::InvalidArgument("the archive holds more than " +
                                    std::to_string(limits.max_entries) + " entries");
    }
    const char* raw_name = archive_entry_pathname(entry);
    ATRIUM_ASSIGN_OR_RETURN(std::string path,
                            CanonicalMemberPath(raw_name != nullptr ? raw_name : ""));
    const int64_t size = archive_entry_size_is_set(entry) != 0 ? archive_entry_size(entry) : 0;
    if (size < 0) return Error::InvalidArgument("entry " + Quoted(path) + " has a negative size");
    const char* hardlink = archive_entry_hardlink(entry);
    const mode_t type = archive_entry_filetype(entry);

    std::unique_ptr<archive_entry, EntryFree> clean(archive_entry_new());
    archive_entry_set_pathname(clean.get(), path.c_str());
    archive_entry_set_mtime(clean.get(), archive_entry_mtime(entry), 0);
    const mode_t perm = archive_entry_perm(entry) & 0777;
    bool copy_data = false;
    if (hardlink != nullptr) {
      ATRIUM_ASSIGN_OR_RETURN(std::string target, CanonicalMemberPath(hardlink));
      if (tree.files.count(target) == 0) {
        return Error::InvalidArgument("hard link " + Quoted(path) + " points to " +
                                      Quoted(hardlink) +
                                      ", which is not an earlier file of the archive");
      }
      if (size > 0) {
        return Error::InvalidArgument("hard link " + Quoted(path) + " carries data");
      }
      ATRIUM_RETURN_IF_ERROR(CheckPlacement(path, false, tree));
      archive_entry_set_filetype(clean.get(), AE_IFREG);
      archive_entry_set_perm(clean.get(), perm | 0600);
      archive_entry_set_hardlink(clean.get(), target.c_str());
      archive_entry_set_size(clean.get(), 0);
    } else if (type == AE_IFREG) {
      if (size > limits.max_unpacked_bytes - summary.unpacked_bytes) {
        return Error::InvalidArgument("the archive unpacks to more than " +
                                      std::to_string(limits.max_unpacked_bytes) + " bytes (at " +
                                      Quoted(path) + ")");
      }
      ATRIUM_RETURN_IF_ERROR(CheckPlacement(path, false, tree));
      summary.unpacked_bytes += size;
      tree.files.insert(path);
      archive_entry_set_filetype(clean.get(), AE_IFREG);
      archive_entry_set_perm(clean.get(), perm | 0600);
      archive_entry_set_size(clean.get(), size);
      copy_data = true;
    } else if (type == AE_IFDIR) {
      if (size > 0) return Error::InvalidArgument("directory " + Quoted(path) + " carries data");
      ATRIUM_RETURN_IF_ERROR(CheckPlacement(path, true, tree));
      archive_entry_set_filetype(clean.get(), AE_IFDIR);
      archive_entry_set_perm(clean.get(), perm | 0700);
    } else if (type == AE_IFLNK) {
      const char* target = archive_entry_symlink(entry);
      const std::string_view target_view = target != nullptr ? target : "";
      if (target_view.empty() || target_view.size() > kMaxPathBytes) {
        return Error::InvalidArgument("symbolic link " + Quoted(path) +
                                      " has an empty or overlong target");
      }
      if (size > 0) {
        return Error::InvalidArgument("symbolic link " + Quoted(path) + " carries data");
      }
      ATRIUM_RETURN_IF_ERROR(CheckPlacement(path, false, tree));
      tree.links[path] = std::string(target_view);
      archive_entry_set_filetype(clean.get(), AE_IFLNK);
      archive_entry_set_perm(clean.get(), 0777);
      archive_entry_set_symlink(clean.get(), target);
    } else {
      const char* what = type == AE_IFCHR    ? "character device"
                         : type == AE_IFBLK  ? "block device"
                         : type == AE_IFIFO  ? "FIFO"
                         : type == AE_IFSOCK ? "socket"
                                             : "entry of unknown type";
      return Error::InvalidArgument(std::string(what) + " " + Quoted(path) +
                                    ": an archive may hold only files, directories and links");
    }
    if (archive_write_header(out.get(), clean.get()) != ARCHIVE_OK) return WriteFailed(out.get());
    if (copy_data) ATRIUM_RETURN_IF_ERROR(CopyData(in.get(), out.get(), size, path));
    if (archive_write_finish_entry(out.get()) != ARCHIVE_OK) return WriteFailed(out.get());
  }
  if (summary.entries == 0) return Error::InvalidArgument("the archive holds no entries");
  // Links are checked once all are known: a link may lead through one that
  // comes later in the archive.
  for (const auto& [path, target] : tree.links) {
    std::vector<std::string> dir = Split(path);
    dir.pop_back();
    int hops = 0;
    ATRIUM_RETURN_IF_ERROR(ResolveInside(std::move(dir), target, tree, hops, path));
  }
  if (archive_write_close(out.get()) != ARCHIVE_OK) return WriteFailed(out.get());
  return summary;
}

}  // namespace atrium::jobs
