// Replacing a small file so that a crash leaves either the old contents or
// the new, never a mix: write `path`.tmp (created with `mode`, never through
// a symbolic link), fdatasync it, rename it over `path`, fsync the folder so
// the rename itself survives. One writer for every such file (the gateway's
// policy cache, the usage journal's offset and recovered checkpoints, the
// CLI's credentials), so each gets every step and each failure is reported.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"

namespace atrium {

// Unavailable naming the step and the OS error when any step fails; the
// temporary file is removed then and `path` is unchanged. An existing
// `path` gets `mode` too (the temporary file's, set explicitly so an old
// file with wider bits does not keep them).
Status ReplaceFileAtomically(const std::string& path, std::string_view contents,
                             unsigned mode = 0600);

}  // namespace atrium
