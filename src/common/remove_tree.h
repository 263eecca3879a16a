// Removing a folder a tenant could write to while it is removed. Every step
// goes through the file descriptor of the folder above it (openat with
// O_NOFOLLOW, unlinkat), never through a path: a folder swapped for a
// symbolic link mid-walk has the link removed, never what it points to
// (the race std::filesystem::remove_all and nftw leave open). Used where
// root removes what a tenant's uid owned: a workload's folders on the
// local and Slurm backends.
#pragma once

#include <string>

#include "common/result.h"

namespace atrium {

// Removes `path` and everything under it; a symbolic link is removed as a
// link. A missing `path` is not an error. Unavailable naming the first
// entry that could not be removed (the rest is still tried), or a tree
// deeper than 256 folders.
Status RemoveTreeNoFollow(const std::string& path);

}  // namespace atrium
