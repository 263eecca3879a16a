// Replacing a small file so that a crash leaves either the old contents or
// the new, never a mix: write `path`.tmp (created with `mode`, never through
// a symbolic link), fdatasync it, rename it over `path`, fsync the folder so
// the rename itself survives. One writer for every such file (the gateway's
// policy cache, the usage journal's offset and recovered checkpoints, the
// CLI's credentials), so each gets every step and each failure is reported.
#pragma once

#include <string>
#include <string_view>

#include "common/file_system.h"
#include "common/result.h"

namespace atrium {

// Unavailable naming the step and the OS error when any step fails; the
// temporary file is removed then and `path` is unchanged, except when only
// the folder's sync fails: the rename has happened, `path` holds the new
// contents, and only their surviving a machine crash is in doubt. An existing
// `path` gets `mode` too (the temporary file's, set explicitly so an old
// file with wider bits does not keep them).
Status ReplaceFileAtomically(const std::string& path, std::string_view contents,
                             unsigned mode = 0600);
// The same through `files` (a test's, to fail a step).
Status ReplaceFileAtomically(FileSystem& files, const std::string& path, std::string_view contents,
                             unsigned mode = 0600);

}  // namespace atrium
