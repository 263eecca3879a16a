// Unpacks a kept archive (one ArchiveService rewrote: archive_check.h) on
// the control plane's side, for files the platform itself serves from —
// a tenant's LoRA adapter, which engines load from a folder
// (src/serving/adapters.h). Only directories and regular files are
// written (hard links to earlier files become copies); a symbolic link is
// refused, so nothing written can lead outside `dest_dir`. Every folder is
// 0755 and every file 0644: readable by the engine's unprivileged user.
//
// `dest_dir` must not exist: the archive is unpacked into a sibling folder
// "<dest_dir>.part-<random>" that is renamed into place once complete, so
// `dest_dir` either holds the whole archive or is absent (a crash leaves a
// ".part-" folder, which the caller removes).
#pragma once

#include <string>

#include "common/result.h"
#include "jobs/archive_check.h"

namespace atrium::jobs {

// InvalidArgument naming the entry for a symbolic link or a bad name, or
// when the archive exceeds `limits`; AlreadyExists when dest_dir exists;
// Internal/Unavailable for what the file system refused.
Status UnpackFilesAndFolders(const std::string& tar_path, const std::string& dest_dir,
                             const ArchiveLimits& limits);

}  // namespace atrium::jobs
