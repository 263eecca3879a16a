#include "templates/template_service.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "common/strings.h"

namespace atrium::templates {
namespace {

enum class PathState { kDirectory, kMissing, kRefused };

// Walks `relative` below `root` one component at a time with lstat: every
// component must be a real directory. A symbolic link anywhere (an image
// store entry pointing at /etc, or at another tenant's area) is refused,
// not followed.
PathState WalkDirectories(const std::string& root, const std::string& relative, std::string* why) {
  std::string path = root;
  for (std::string_view part : SplitString(relative, '/')) {
    path += "/" + std::string(part);
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) return PathState::kMissing;
      *why = path + ": " + std::strerror(errno);
      return PathState::kRefused;
    }
    if (S_ISLNK(st.st_mode)) {
      *why = path + " is a symbolic link";
      return PathState::kRefused;
    }
    if (!S_ISDIR(st.st_mode)) {
      *why = path + " is not a directory";
      return PathState::kRefused;
    }
  }
  return PathState::kDirectory;
}

}  // namespace

std::function<Result<int64_t>(const EnvironmentTemplateRecord& t)> LiveJobsPinning(Store& store) {
  return [&store](const EnvironmentTemplateRecord& t) {
    return store.CountLiveJobsPinningForTemplates(t.tenant_id,
                                                  t.name + "@" + std::to_string(t.version));
  };
}

TemplateService::TemplateService(Store& store, const Clock& clock, TemplateServiceOptions options)
    : store_(store), clock_(clock), options_(std::move(options)) {}

Result<EnvironmentTemplateRecord> TemplateService::Publish(const TenantScope& owner,
                                                           TemplateDraft draft,
                                                           const std::string& created_by) {
  ATRIUM_RETURN_IF_ERROR(ValidateDraft(draft));
  return store_.PublishEnvironmentTemplate(owner, RecordOf(draft, created_by, clock_.NowMillis()));
}

Result<std::vector<EnvironmentTemplateRecord>> TemplateService::List(const TenantScope& scope) {
  return store_.ListEnvironmentTemplates(scope, /*include_platform=*/true);
}

Result<EnvironmentTemplateRecord> TemplateService::Get(const TenantScope& scope,
                                                       std::string_view reference) {
  ATRIUM_ASSIGN_OR_RETURN(TemplateReference ref, ParseReference(reference));
  ATRIUM_ASSIGN_OR_RETURN(auto versions, store_.EnvironmentTemplateVersions(scope, ref.name));
  // An exact version reads even when retired: history stays readable.
  return ChooseVersion(versions, ref, RetiredVersions::kReadable);
}

Result<EnvironmentTemplateRecord> TemplateService::Retire(const TenantScope& owner,
                                                          std::string_view reference) {
  ATRIUM_ASSIGN_OR_RETURN(TemplateReference ref, ParseReference(reference));
  if (ref.version == 0) {
    return Error::InvalidArgument("retire names one version: " + ref.name + "@VERSION");
  }
  ATRIUM_ASSIGN_OR_RETURN(auto versions, store_.EnvironmentTemplateVersions(owner, ref.name));
  const EnvironmentTemplateRecord* found = nullptr;
  for (const auto& t : versions) {
    if (t.tenant_id == owner.tenant_id && t.version == ref.version) found = &t;
  }
  if (found == nullptr) {
    return Error::NotFound("environment template " + ref.ToString() + " not found");
  }
  if (found->state != kStateActive) {
    return Error::FailedPrecondition("environment template " + ref.ToString() +
                                     " is retired already");
  }
  if (options_.uses_in_flight) {
    ATRIUM_ASSIGN_OR_RETURN(int64_t uses, options_.uses_in_flight(*found));
    if (uses > 0) {
      return Error::FailedPrecondition(
          "environment template " + ref.ToString() + " is pinned by " + std::to_string(uses) +
          " job(s) pending or running (a requeue starts them on it again); retire it when they "
          "end or cancel them");
    }
  }
  const int64_t now = clock_.NowMillis();
  ATRIUM_RETURN_IF_ERROR(store_.RetireEnvironmentTemplate(owner, ref.name, ref.version, now));
  EnvironmentTemplateRecord retired = *found;
  retired.state = std::string(kStateRetired);
  retired.updated_at = now;
  return retired;
}

Result<std::string> TemplateService::FindRootFs(const EnvironmentTemplateRecord& t) const {
  if (options_.images_dir.empty()) return std::string();
  if (options_.images_dir.front() != '/') {
    return Error::FailedPrecondition("the image store must be an absolute directory");
  }
  ATRIUM_ASSIGN_OR_RETURN(auto candidates, RootFsCandidates(t));
  for (const std::string& relative : candidates) {
    std::string why;
    switch (WalkDirectories(options_.images_dir, relative, &why)) {
      case PathState::kDirectory:
        return options_.images_dir + "/" + relative;
      case PathState::kMissing:
        continue;
      case PathState::kRefused:
        return Error::FailedPrecondition("the image store refuses the image of " + t.name + "@" +
                                         std::to_string(t.version) + ": " + why);
    }
  }
  return Error::FailedPrecondition("the image store holds no image " + t.rootfs_digest + " for " +
                                   t.name + "@" + std::to_string(t.version) +
                                   " (the operator imports it as " + candidates.back() + ")");
}

Result<ResolvedTemplate> TemplateService::Resolve(const std::string& tenant_id,
                                                  std::string_view reference) {
  ATRIUM_ASSIGN_OR_RETURN(TemplateReference ref, ParseReference(reference));
  ATRIUM_ASSIGN_OR_RETURN(auto versions,
                          store_.EnvironmentTemplateVersions(TenantScope::Of(tenant_id), ref.name));
  ATRIUM_ASSIGN_OR_RETURN(EnvironmentTemplateRecord chosen, ChooseVersion(versions, ref));
  ResolvedTemplate out;
  ATRIUM_ASSIGN_OR_RETURN(out.root_fs, FindRootFs(chosen));
  out.env.assign(chosen.env.begin(), chosen.env.end());
  out.requirements = RequirementsOf(chosen);
  out.record = std::move(chosen);
  return out;
}

}  // namespace atrium::templates
