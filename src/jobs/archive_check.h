// A tenant's uploaded archive, checked and rewritten before it is kept.
//
// An upload (tar, or tar compressed with gzip) is read entry by entry with
// libarchive and written again as a plain POSIX tar holding only what a
// job's working directory may receive: regular files, directories,
// symbolic links that stay inside the archive and hard links to earlier
// files of it. Each entry gets a clean relative name, no owner, and only
// its rwx bits (setuid, setgid and sticky are dropped; the owner may always
// read and write). Everything else is refused, naming the entry:
//  - names that are absolute, hold "..", or begin with ".atrium" at the top
//    (the platform's files in the working directory), or appear twice;
//  - an entry beneath a symbolic link of the archive (a write through it);
//  - symbolic links that leave the archive's root, directly or through
//    other links of the archive; hard links to anything but an earlier
//    regular file of the archive (/etc/shadow, say);
//  - device nodes, FIFOs and sockets;
//  - more than max_entries entries, or regular files whose sizes add up to
//    more than max_unpacked_bytes (refused at the header, before the data
//    is read: a gzip bomb costs nothing);
//  - anything libarchive cannot read as tar or tar.gz.
// What is kept is the rewritten tar, so the extractor on the node (GNU tar,
// run in the workload's sandbox as the workload's user) only ever sees
// entries this check accepted: no difference between two tar readers can
// smuggle anything past it, and unpacking writes at most the rewritten
// file's size.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace atrium::jobs {

struct ArchiveLimits {
  int64_t max_unpacked_bytes = int64_t{512} << 20;  // regular files' sizes, summed
  int64_t max_entries = 20'000;
};

struct ArchiveSummary {
  int64_t entries = 0;
  int64_t unpacked_bytes = 0;  // the regular files' sizes, summed
};

// A member's name made canonical: "./a//b/" → "a/b". InvalidArgument for
// an empty name, an absolute one, one with a ".." component or a NUL.
Result<std::string> CanonicalMemberPath(std::string_view name);

// Checks `upload` and writes its rewritten tar to `out_fd` (which the
// caller owns; written from its current offset). InvalidArgument naming
// the entry and the rule it broke (see the header comment); Internal when
// writing to `out_fd` failed. On error the output is incomplete and must
// be discarded.
Result<ArchiveSummary> RewriteArchive(std::string_view upload, const ArchiveLimits& limits,
                                      int out_fd);

}  // namespace atrium::jobs
