// Archives for the archive tests, written with libarchive exactly as a
// hostile tenant could write them (the writer checks nothing).
#pragma once

#include <archive.h>
#include <archive_entry.h>

#include <cstdint>
#include <string>
#include <vector>

namespace atrium::jobs::testing {

struct Member {
  enum Kind { kFile, kDir, kSymlink, kHardlink, kCharDevice, kBlockDevice, kFifo };
  Kind kind = kFile;
  std::string path;
  std::string data;    // kFile
  std::string target;  // kSymlink, kHardlink
  int mode = 0644;
  int64_t zero_bytes = 0;  // kFile: this many zero bytes instead of `data`
};

inline Member File(std::string path, std::string data, int mode = 0644) {
  return {Member::kFile, std::move(path), std::move(data), "", mode};
}
inline Member Dir(std::string path) { return {Member::kDir, std::move(path), "", "", 0755}; }
inline Member Symlink(std::string path, std::string target) {
  return {Member::kSymlink, std::move(path), "", std::move(target), 0777};
}
inline Member Hardlink(std::string path, std::string target) {
  return {Member::kHardlink, std::move(path), "", std::move(target), 0644};
}

// A tar (gzip-compressed when `gzip`) of `members`, in order.
inline std::string MakeTar(const std::vector<Member>& members, bool gzip = false) {
  std::string out;
  archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  if (gzip) archive_write_add_filter_gzip(a);
  archive_write_open(
      a, &out, nullptr,
      [](archive*, void* client, const void* buffer, size_t length) -> la_ssize_t {
        static_cast<std::string*>(client)->append(static_cast<const char*>(buffer), length);
        return static_cast<la_ssize_t>(length);
      },
      nullptr);
  const std::string zeros(64 * 1024, '\0');
  for (const Member& m : members) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, m.path.c_str());
    archive_entry_set_perm(e, m.mode);
    switch (m.kind) {
      case Member::kFile:
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_size(
            e, m.zero_bytes > 0 ? m.zero_bytes : static_cast<int64_t>(m.data.size()));
        break;
      case Member::kDir:
        archive_entry_set_filetype(e, AE_IFDIR);
        break;
      case Member::kSymlink:
        archive_entry_set_filetype(e, AE_IFLNK);
        archive_entry_set_symlink(e, m.target.c_str());
        break;
      case Member::kHardlink:
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_hardlink(e, m.target.c_str());
        archive_entry_set_size(e, 0);
        break;
      case Member::kCharDevice:
        archive_entry_set_filetype(e, AE_IFCHR);
        archive_entry_set_rdevmajor(e, 1);
        archive_entry_set_rdevminor(e, 3);
        break;
      case Member::kBlockDevice:
        archive_entry_set_filetype(e, AE_IFBLK);
        archive_entry_set_rdevmajor(e, 8);
        archive_entry_set_rdevminor(e, 0);
        break;
      case Member::kFifo:
        archive_entry_set_filetype(e, AE_IFIFO);
        break;
    }
    archive_write_header(a, e);
    if (m.kind == Member::kFile) {
      if (m.zero_bytes > 0) {
        for (int64_t left = m.zero_bytes; left > 0;) {
          const size_t n = static_cast<size_t>(std::min<int64_t>(left, zeros.size()));
          archive_write_data(a, zeros.data(), n);
          left -= static_cast<int64_t>(n);
        }
      } else if (!m.data.empty()) {
        archive_write_data(a, m.data.data(), m.data.size());
      }
    }
    archive_entry_free(e);
  }
  archive_write_close(a);
  archive_write_free(a);
  return out;
}

// One ustar header block declaring a regular file of `size` bytes (in
// octal, up to 8 GiB - 1) with no data after it: what a bomb's first
// block looks like.
inline std::string UstarHeaderOnly(const std::string& name, int64_t size) {
  std::string h(512, '\0');
  auto put_octal = [&](size_t offset, size_t width, int64_t value) {
    std::string digits(width - 1, '0');
    for (size_t i = width - 1; i-- > 0 && value > 0; value /= 8) {
      digits[i] = static_cast<char>('0' + value % 8);
    }
    h.replace(offset, width - 1, digits);
  };
  h.replace(0, name.size(), name);
  put_octal(100, 8, 0644);
  put_octal(108, 8, 0);
  put_octal(116, 8, 0);
  put_octal(124, 12, size);
  put_octal(136, 12, 0);
  h[156] = '0';
  h.replace(257, 6, std::string("ustar\0", 6));
  h.replace(263, 2, "00");
  h.replace(148, 8, "        ");
  int64_t sum = 0;
  for (unsigned char c : h) sum += c;
  put_octal(148, 7, sum);
  h[155] = ' ';
  return h;
}

}  // namespace atrium::jobs::testing
