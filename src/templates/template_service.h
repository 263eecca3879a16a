// The environment-template service: publish, list, read and retire
// templates over the store, and resolve a tenant's reference to what a
// workload runs in (the root filesystem directory in the operator's image
// store, the environment, the node requirements). The rules are in
// environment_template.h; this adds the store and the image store.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "store/store.h"
#include "templates/environment_template.h"

namespace atrium::templates {

// A template resolved for one workload.
struct ResolvedTemplate {
  EnvironmentTemplateRecord record;  // the version chosen
  // The root filesystem: an absolute path under the image store, a real
  // directory (no symbolic link on the way from the store's root). Empty
  // when the service has no image store configured.
  std::string root_fs;
  std::vector<std::pair<std::string, std::string>> env;  // sorted by name
  sched::NodeRequirements requirements;
};

struct TemplateServiceOptions {
  // The operator's image store: an absolute directory holding
  // sha256-<hex>/rootfs (everyone's images) and
  // tenants/<tenant id>/sha256-<hex>/rootfs (one tenant's). "" = none: a
  // template resolves for placement but not to a root filesystem.
  std::string images_dir;
  // How many live workloads use a template version (the runtime gives
  // LiveJobsPinning). Unset: nothing uses templates (no job service).
  std::function<Result<int64_t>(const EnvironmentTemplateRecord&)> uses_in_flight;
};

// The live jobs (pending, starting, running) that pin `t` in their spec:
// the owner's, or every tenant's for a platform template. What the runtime
// gives TemplateServiceOptions::uses_in_flight.
std::function<Result<int64_t>(const EnvironmentTemplateRecord& t)> LiveJobsPinning(Store& store);

class TemplateService {
 public:
  TemplateService(Store& store, const Clock& clock, TemplateServiceOptions options);

  // Publishes the next version of `owner`'s template (TenantScope::Platform()
  // for the platform's). InvalidArgument from ValidateDraft (nothing is
  // stored); AlreadyExists when the name belongs to the other side (see
  // Store::PublishEnvironmentTemplate).
  Result<EnvironmentTemplateRecord> Publish(const TenantScope& owner, TemplateDraft draft,
                                            const std::string& created_by);

  // Every version `scope` may see: for a tenant the platform's and its own,
  // for the platform its own.
  Result<std::vector<EnvironmentTemplateRecord>> List(const TenantScope& scope);

  // The version `reference` names in `scope`'s view (ChooseVersion), retired
  // ones included when named exactly (so history stays readable).
  Result<EnvironmentTemplateRecord> Get(const TenantScope& scope, std::string_view reference);

  // Retires `owner`'s version `reference` (which must name a version):
  // FailedPrecondition while live work uses it (uses_in_flight), or when it
  // is retired already; NotFound when the owner has no such version (a
  // platform template named from a tenant scope is not the tenant's).
  Result<EnvironmentTemplateRecord> Retire(const TenantScope& owner, std::string_view reference);

  // What the job service starts a workload of `tenant_id` with. Errors:
  // InvalidArgument (bad reference), NotFound, FailedPrecondition (retired),
  // and FailedPrecondition when the image store lacks the image, or a
  // symbolic link or something not a directory stands in its way.
  Result<ResolvedTemplate> Resolve(const std::string& tenant_id, std::string_view reference);

 private:
  Result<std::string> FindRootFs(const EnvironmentTemplateRecord& t) const;

  Store& store_;
  const Clock& clock_;
  TemplateServiceOptions options_;
};

}  // namespace atrium::templates
