#include "common/atomic_file.h"

#include <filesystem>

namespace atrium {

Status ReplaceFileAtomically(const std::string& path, std::string_view contents, unsigned mode) {
  return ReplaceFileAtomically(FileSystem::Default(), path, contents, mode);
}

Status ReplaceFileAtomically(FileSystem& files, const std::string& path, std::string_view contents,
                             unsigned mode) {
  const std::string tmp = path + ".tmp";
  OpenOptions options;
  options.append = false;
  options.truncate = true;
  options.no_follow = true;
  options.mode = mode;
  ATRIUM_ASSIGN_OR_RETURN(std::unique_ptr<File> file, files.Open(tmp, options));
  Status written = file->SetMode(mode);
  if (written.has_value()) written = file->Append(contents);
  if (written.has_value()) written = file->Sync();
  if (Status closed = file->Close(); written.has_value()) written = std::move(closed);
  if (written.has_value()) written = files.Rename(tmp, path);
  if (!written.has_value()) {
    (void)files.Remove(tmp);
    return written;
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  return files.SyncDirectory(dir);
}

}  // namespace atrium
