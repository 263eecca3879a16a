// Environment templates: named, versioned, immutable software environments
// for tenants' workloads — a root filesystem pinned by digest, environment
// variables, and what a node's GPU software must be (minimum driver and CUDA
// versions, GPU models). The pure rules: what a publish may contain, how a
// reference ("name" or "name@version") is read and resolved, and where a
// digest's root filesystem lives in the operator's image store. No I/O.
//
// Owners and names. The platform's templates (tenant_id "") are visible to
// every tenant; a tenant's only to it. A name means one template family in
// a tenant's view: a tenant cannot publish a name the platform holds, nor
// the platform one a tenant holds (the store refuses both), and resolution
// looks at the platform's first, so a tenant's template can never shadow a
// platform one even if the two were published at the same instant.
//
// Versions are integers 1, 2, ... per (owner, name), assigned by the store,
// never reused: "name" means the newest active version, "name@3" exactly
// version 3. Integers rather than semver because the store assigns them and
// "newest" is then unambiguous; what changed is the description's business.
//
// Retiring (DELETE) keeps the row as history and stops the version from
// resolving for new work; work already resolved keeps what it resolved.
// It is refused while pending or running work uses the version (the caller
// supplies that count; see TemplateService).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"
#include "model/records.h"
#include "scheduler/allocation.h"

namespace atrium::templates {

// Bounds on what one template may hold: a hostile tenant cannot make the
// store, the API or a workload's environment block grow without limit.
inline constexpr size_t kMaxNameLength = 63;  // a slug
inline constexpr size_t kMaxDescriptionLength = 256;
inline constexpr size_t kMaxEnvVariables = 64;
inline constexpr size_t kMaxEnvNameLength = 128;
inline constexpr size_t kMaxEnvValueLength = 4096;
inline constexpr size_t kMaxEnvTotalBytes = size_t{32} * 1024;  // names + values
inline constexpr int64_t kMaxVersion = 1'000'000'000;

inline constexpr std::string_view kStateActive = "active";
inline constexpr std::string_view kStateRetired = "retired";

// What a publish asks for; the owner, version and times are not the
// caller's to choose.
struct TemplateDraft {
  std::string name;
  std::string description;
  std::string rootfs_digest;  // "sha256:<64 lower-case hex>"
  std::map<std::string, std::string> env;
  sched::NodeRequirements requirements;
};

// OK, or InvalidArgument naming the first problem: a name that is not a
// slug; a description too long or with control characters; a digest not
// "sha256:" + 64 lower-case hex digits (a path, "..", a symlink name or an
// upper-case spelling never passes: the image store's directory is derived
// from the digest, never taken from the caller); more than kMaxEnvVariables
// variables, a name not [A-Za-z_][A-Za-z0-9_]* or longer than
// kMaxEnvNameLength, a value with a NUL or longer than kMaxEnvValueLength,
// more than kMaxEnvTotalBytes in all, or a name the platform sets for every
// workload (ReservedEnvName); a version that is not one
// (capacity::SoftwareVersion); an unknown or repeated GPU model. Model names
// are rewritten to the catalog's spelling.
Status ValidateDraft(TemplateDraft& draft);

// CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES and anything starting with
// ATRIUM_: the backend sets them from the allocation, so a template may not.
bool ReservedEnvName(std::string_view name);

// The record a publish stores (version 0: the store assigns it).
EnvironmentTemplateRecord RecordOf(const TemplateDraft& draft, std::string created_by,
                                   int64_t now_ms);

// "name" (the newest active version) or "name@version" (1..kMaxVersion).
struct TemplateReference {
  std::string name;
  int64_t version = 0;  // 0 = the newest active one

  std::string ToString() const;  // "name" or "name@3"
};
// InvalidArgument for anything else ("", "a@", "a@0", "a@-1", "a@1x",
// "A", "a/b", "a@1@2", "../x").
Result<TemplateReference> ParseReference(std::string_view text);

// Whether an exactly named retired version is found (reading history) or
// refused (resolving for new work).
enum class RetiredVersions { kRefused, kReadable };

// The version `reference` names among `versions` (what the store returns
// for the name in a tenant's view: the platform's rows, then the tenant's).
// The platform's family wins when both exist. NotFound when there is none
// (or the named version does not exist); FailedPrecondition when the named
// version is retired (unless kReadable) or, for "name", every version is.
Result<EnvironmentTemplateRecord> ChooseVersion(
    const std::vector<EnvironmentTemplateRecord>& versions, const TemplateReference& reference,
    RetiredVersions retired = RetiredVersions::kRefused);

// The requirements a template puts on the node its work runs on.
sched::NodeRequirements RequirementsOf(const EnvironmentTemplateRecord& t);

// Where an image lives in the operator's image store, relative to it:
// "sha256-<hex>/rootfs" for the shared area (images the operator imported
// for everyone), "tenants/<tenant id>/sha256-<hex>/rootfs" for one
// tenant's own. The owner of the template decides which areas are looked
// in (RootFsCandidates), so a template of tenant A can never name an image
// that only tenant B holds. Precondition: the digest passed ValidateDraft.
std::string SharedImagePath(std::string_view digest);
std::string TenantImagePath(std::string_view tenant_id, std::string_view digest);
// The relative paths to try, in order: a tenant's template its tenant's
// area first, then the shared one; a platform template only the shared
// one. InvalidArgument for a digest that is not valid or a tenant id that
// is not a plain name (letters, digits, '_' and '-').
Result<std::vector<std::string>> RootFsCandidates(const EnvironmentTemplateRecord& t);

}  // namespace atrium::templates
