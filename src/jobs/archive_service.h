// Tenants' uploaded archives: the working files a job names by id
// (JobSpec::archive) and the backend unpacks into its directory before it
// starts.
//
// An upload is checked and rewritten (archive_check.h) into
// <root>/<tenant id>/<archive id>.tar: the root and every tenant's folder
// are 0700 and the control plane's, so no workload (of any tenant) can
// read them; the backends copy an archive into a job's own directory for
// its user when it starts. The store keeps a row per archive (its tenant,
// the upload's size and SHA-256); every read is scoped by tenant, so
// another tenant's id answers like a missing one.
//
// A job names the archive and its size as uploaded (archive_bytes); the
// resolver (Resolve, the job service's ArchiveResolver) gives the path
// only when both match the tenant's archive. Deleting an archive that a
// pending job names makes that job fail at start ("archive not found").
//
// A crash between writing the file and its row leaves a file without a
// row (never the reverse): it is unreachable, and goes with its tenant's
// folder. Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "jobs/archive_check.h"
#include "model/job_records.h"
#include "store/store.h"
#include "tenancy/tenant_service.h"

namespace atrium::jobs {

struct ArchiveServiceOptions {
  // Where archives are kept; created 0700 (config: "<jobs state dir>/archives").
  std::string root_dir;
  // The largest upload: a larger one is PayloadTooLarge (413). Default 64 MiB.
  int64_t max_archive_bytes = int64_t{64} << 20;
  ArchiveLimits limits;
  // Archives one tenant may hold at once. Default 100.
  int64_t max_archives_per_tenant = 100;
};

class ArchiveService {
 public:
  // Unavailable when root_dir cannot be made; InvalidArgument for a
  // relative root_dir or a non-positive limit.
  static Result<std::unique_ptr<ArchiveService>> Create(Store& store, const Clock& clock,
                                                        ArchiveServiceOptions options);

  // Checks `bytes`, keeps the rewritten archive and its row. `name` is a
  // label ("" or [A-Za-z0-9._-], at most 128, not starting with '.').
  // PayloadTooLarge beyond max_archive_bytes; InvalidArgument for an empty
  // upload, a bad name, or an archive the check refuses (its words);
  // FailedPrecondition when the tenant holds max_archives_per_tenant.
  Result<JobArchiveRecord> Upload(const std::string& tenant_id, const std::string& user_id,
                                  const std::string& name, std::string_view bytes);
  Result<JobArchiveRecord> Get(const std::string& tenant_id, const std::string& id);
  Result<std::vector<JobArchiveRecord>> List(const std::string& tenant_id);
  // The row, then the file. NotFound for an id the tenant does not hold.
  Status Delete(const std::string& tenant_id, const std::string& id);
  // The path of the tenant's archive `id` when `declared_bytes` is its
  // uploaded size. NotFound for an id the tenant does not hold;
  // InvalidArgument for another size; FailedPrecondition when its file is
  // gone.
  Result<std::string> Resolve(const std::string& tenant_id, const std::string& id,
                              int64_t declared_bytes);
  // The path of the tenant's archive `id` when `sha256` (lowercase hex) is
  // its upload's digest: what an adapter pinned (src/serving/adapters.h).
  // NotFound for an id the tenant does not hold; InvalidArgument for
  // another digest; FailedPrecondition when its file is gone.
  Result<std::string> ResolvePinned(const std::string& tenant_id, const std::string& id,
                                    const std::string& sha256);
  // Removes every archive file of the tenant (its rows go with the
  // tenant's other rows in Store::DeleteTenantAndData).
  Status DeleteTenantFiles(const std::string& tenant_id);

  int64_t max_archive_bytes() const { return options_.max_archive_bytes; }
  const ArchiveLimits& limits() const { return options_.limits; }
  const std::string& root_dir() const { return options_.root_dir; }

 private:
  ArchiveService(Store& store, const Clock& clock, ArchiveServiceOptions options)
      : store_(store), clock_(clock), options_(std::move(options)) {}
  Result<std::string> TenantDir(const std::string& tenant_id, bool create) const;
  // The archive's file; FailedPrecondition when it is gone.
  Result<std::string> FileOf(const JobArchiveRecord& archive) const;
  // The tenant's archive `id`; NotFound telling how to upload one.
  Result<JobArchiveRecord> Find(const std::string& tenant_id, const std::string& id);

  Store& store_;
  const Clock& clock_;
  ArchiveServiceOptions options_;
};

// Removes an evicted tenant's archive files once `next` (the job service's
// observer, which stops its jobs first) agreed; everything else is next's.
class ArchivesTenantObserver final : public TenantObserver {
 public:
  ArchivesTenantObserver(ArchiveService& archives, TenantObserver& next)
      : archives_(archives), next_(next) {}
  void TenantChanged(const Tenant& tenant) override { next_.TenantChanged(tenant); }
  Result<Tenant> ApplyTenantChange(const Tenant& next,
                                   const std::function<Result<Tenant>()>& write) override {
    return next_.ApplyTenantChange(next, write);
  }
  Status TenantEvicting(const std::string& tenant_id, const RequestOrigin& by) override {
    ATRIUM_RETURN_IF_ERROR(next_.TenantEvicting(tenant_id, by));
    return archives_.DeleteTenantFiles(tenant_id);
  }

 private:
  ArchiveService& archives_;
  TenantObserver& next_;
};

}  // namespace atrium::jobs
