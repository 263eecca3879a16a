#include "jobs/archive_service.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "crypto/crypto.h"
#include "crypto/ids.h"

namespace atrium::jobs {
namespace {

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

// One safe path component: [A-Za-z0-9._-], 1..max, not starting with '.'.
bool IsPlainName(std::string_view s, size_t max) {
  return !s.empty() && s.size() <= max && s.front() != '.' &&
         std::all_of(s.begin(), s.end(), IsNameChar);
}

Status MakePrivateDir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Error::Unavailable("cannot create " + dir + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Error::Unavailable(dir + " is not a directory");
  }
  if (st.st_uid != ::geteuid()) return Error::Unavailable(dir + " is not this server's own");
  if ((st.st_mode & 07777) != 0700 && ::chmod(dir.c_str(), 0700) != 0) {
    return Error::Unavailable("cannot make " + dir + " private: " + std::strerror(errno));
  }
  return OkStatus();
}

// The kept archive is written whole before it gets its final name.
Result<ArchiveSummary> WriteRewritten(const std::string& path, std::string_view bytes,
                                      const ArchiveLimits& limits) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return Error::Unavailable("cannot create " + path + ": " + std::strerror(errno));
  Result<ArchiveSummary> summary = RewriteArchive(bytes, limits, fd);
  if (summary.has_value() && ::fsync(fd) != 0) {
    summary = Error::Unavailable("cannot write " + path + ": " + std::strerror(errno));
  }
  ::close(fd);
  if (!summary.has_value()) ::unlink(path.c_str());
  return summary;
}

}  // namespace

Result<std::unique_ptr<ArchiveService>> ArchiveService::Create(Store& store, const Clock& clock,
                                                               ArchiveServiceOptions options) {
  if (options.root_dir.empty() || options.root_dir.front() != '/') {
    return Error::InvalidArgument("the archives' folder must be an absolute path");
  }
  if (options.max_archive_bytes <= 0 || options.limits.max_unpacked_bytes <= 0 ||
      options.limits.max_entries <= 0 || options.max_archives_per_tenant <= 0) {
    return Error::InvalidArgument("archive limits must be positive");
  }
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(options.root_dir).parent_path(), ec);
  ATRIUM_RETURN_IF_ERROR(MakePrivateDir(options.root_dir));
  return std::unique_ptr<ArchiveService>(new ArchiveService(store, clock, std::move(options)));
}

Result<std::string> ArchiveService::TenantDir(const std::string& tenant_id, bool create) const {
  if (!IsPlainName(tenant_id, 128)) return Error::InvalidArgument("bad tenant id");
  std::string dir = options_.root_dir + "/" + tenant_id;
  if (create) ATRIUM_RETURN_IF_ERROR(MakePrivateDir(dir));
  return dir;
}

Result<JobArchiveRecord> ArchiveService::Upload(const std::string& tenant_id,
                                                const std::string& user_id, const std::string& name,
                                                std::string_view bytes) {
  if (static_cast<int64_t>(bytes.size()) > options_.max_archive_bytes) {
    return Error{
        ErrorCode::kPayloadTooLarge,
        "an archive may be at most " + std::to_string(options_.max_archive_bytes) + " bytes"};
  }
  if (bytes.empty()) {
    return Error::InvalidArgument("the upload is empty: send a tar or tar.gz archive as the body");
  }
  if (!name.empty() && !IsPlainName(name, 128)) {
    return Error::InvalidArgument("name must be 1 to 128 of [A-Za-z0-9._-], not starting with '.'");
  }
  ATRIUM_ASSIGN_OR_RETURN(std::string dir, TenantDir(tenant_id, true));
  JobArchiveRecord a;
  a.id = NewId("arc", clock_);
  a.name = name;
  a.sha256 = crypto::Sha256Hex(bytes);
  a.size_bytes = static_cast<int64_t>(bytes.size());
  a.created_by = user_id;
  a.created_at = clock_.NowMillis();
  const std::string final_path = dir + "/" + a.id + ".tar";
  const std::string part_path = final_path + ".part";
  ATRIUM_ASSIGN_OR_RETURN(ArchiveSummary summary,
                          WriteRewritten(part_path, bytes, options_.limits));
  a.entries = summary.entries;
  a.unpacked_bytes = summary.unpacked_bytes;
  if (::rename(part_path.c_str(), final_path.c_str()) != 0) {
    ::unlink(part_path.c_str());
    return Error::Unavailable("cannot keep the archive: " + std::string(std::strerror(errno)));
  }
  auto created =
      store_.CreateJobArchive(TenantScope::Of(tenant_id), a, options_.max_archives_per_tenant);
  if (!created.has_value()) ::unlink(final_path.c_str());
  return created;
}

Result<JobArchiveRecord> ArchiveService::Get(const std::string& tenant_id, const std::string& id) {
  return store_.GetJobArchive(TenantScope::Of(tenant_id), id);
}

Result<std::vector<JobArchiveRecord>> ArchiveService::List(const std::string& tenant_id) {
  return store_.ListJobArchives(TenantScope::Of(tenant_id));
}

Status ArchiveService::Delete(const std::string& tenant_id, const std::string& id) {
  ATRIUM_RETURN_IF_ERROR(store_.DeleteJobArchive(TenantScope::Of(tenant_id), id));
  // The row named it, so the id is one NewId made: a safe file name.
  ATRIUM_ASSIGN_OR_RETURN(std::string dir, TenantDir(tenant_id, false));
  ::unlink((dir + "/" + id + ".tar").c_str());
  return OkStatus();
}

Result<JobArchiveRecord> ArchiveService::Find(const std::string& tenant_id, const std::string& id) {
  auto archive = store_.GetJobArchive(TenantScope::Of(tenant_id), id);
  if (!archive.has_value() && archive.error().code == ErrorCode::kNotFound) {
    return Error::NotFound("archive " + id + " not found (upload it first: atrium job upload)");
  }
  return archive;
}

Result<std::string> ArchiveService::FileOf(const JobArchiveRecord& archive) const {
  ATRIUM_ASSIGN_OR_RETURN(std::string dir, TenantDir(archive.tenant_id, false));
  std::string path = dir + "/" + archive.id + ".tar";
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return Error::FailedPrecondition("archive " + archive.id + " has lost its file on this server");
  }
  return path;
}

Result<std::string> ArchiveService::Resolve(const std::string& tenant_id, const std::string& id,
                                            int64_t declared_bytes) {
  ATRIUM_ASSIGN_OR_RETURN(JobArchiveRecord archive, Find(tenant_id, id));
  if (archive.size_bytes != declared_bytes) {
    return Error::InvalidArgument("archive_bytes is " + std::to_string(declared_bytes) +
                                  " but archive " + id + " is " +
                                  std::to_string(archive.size_bytes) + " bytes");
  }
  return FileOf(archive);
}

Result<std::string> ArchiveService::ResolvePinned(const std::string& tenant_id,
                                                  const std::string& id,
                                                  const std::string& sha256) {
  ATRIUM_ASSIGN_OR_RETURN(JobArchiveRecord archive, Find(tenant_id, id));
  if (archive.sha256 != sha256) {
    return Error::InvalidArgument("sha256 " + sha256 + " is not the digest of archive " + id +
                                  " (" + archive.sha256 + ")");
  }
  return FileOf(archive);
}

Status ArchiveService::DeleteTenantFiles(const std::string& tenant_id) {
  ATRIUM_ASSIGN_OR_RETURN(std::string dir, TenantDir(tenant_id, false));
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);  // never follows links
  if (ec) return Error::Unavailable("cannot remove " + dir + ": " + ec.message());
  return OkStatus();
}

}  // namespace atrium::jobs
