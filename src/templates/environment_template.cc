#include "templates/environment_template.h"

#include <algorithm>
#include <charconv>
#include <set>

#include "capacity/gpu_catalog.h"
#include "capacity/software_version.h"
#include "common/strings.h"

namespace atrium::templates {
namespace {

bool IsLowerHex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

constexpr std::string_view kDigestPrefix = "sha256:";
constexpr size_t kDigestHexLength = 64;

Status ValidateDigest(std::string_view digest) {
  const std::string_view hex = digest.substr(std::min(digest.size(), kDigestPrefix.size()));
  if (!digest.starts_with(kDigestPrefix) || hex.size() != kDigestHexLength || !IsLowerHex(hex)) {
    return Error::InvalidArgument(
        "rootfs_digest must be \"sha256:\" followed by 64 lower-case hex digits (an image in the "
        "operator's image store), not a path or another form");
  }
  return OkStatus();
}

bool IsEnvName(std::string_view name) {
  if (name.empty() || name.size() > kMaxEnvNameLength) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
    if (!letter && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

Status ValidateEnv(const std::map<std::string, std::string>& env) {
  if (env.size() > kMaxEnvVariables) {
    return Error::InvalidArgument("env: at most " + std::to_string(kMaxEnvVariables) +
                                  " variables, not " + std::to_string(env.size()));
  }
  size_t total = 0;
  for (const auto& [name, value] : env) {
    const std::string shown = name.substr(0, 40);
    if (!IsEnvName(name)) {
      return Error::InvalidArgument("env: \"" + shown +
                                    "\" is not a variable name ([A-Za-z_][A-Za-z0-9_]*, at most " +
                                    std::to_string(kMaxEnvNameLength) + " characters)");
    }
    if (ReservedEnvName(name)) {
      return Error::InvalidArgument("env: " + name +
                                    " is set by the platform for every workload; a template may "
                                    "not set it");
    }
    if (value.size() > kMaxEnvValueLength) {
      return Error::InvalidArgument("env: " + name + " is longer than " +
                                    std::to_string(kMaxEnvValueLength) + " bytes");
    }
    if (value.find('\0') != std::string::npos) {
      return Error::InvalidArgument("env: " + name + " holds a NUL byte");
    }
    total += name.size() + value.size();
  }
  if (total > kMaxEnvTotalBytes) {
    return Error::InvalidArgument("env: " + std::to_string(total) + " bytes in all; at most " +
                                  std::to_string(kMaxEnvTotalBytes));
  }
  return OkStatus();
}

Status ValidateRequirements(sched::NodeRequirements& r) {
  if (!r.min_driver_version.empty()) {
    ATRIUM_RETURN_IF_ERROR(
        capacity::SoftwareVersion::Parse(r.min_driver_version, "requirements.min_driver_version"));
  }
  if (!r.min_cuda_version.empty()) {
    ATRIUM_RETURN_IF_ERROR(
        capacity::SoftwareVersion::Parse(r.min_cuda_version, "requirements.min_cuda_version"));
  }
  if (r.gpu_models.size() > capacity::AllGpuModels().size()) {
    return Error::InvalidArgument("requirements.gpu_models: at most " +
                                  std::to_string(capacity::AllGpuModels().size()) + " models");
  }
  std::set<std::string> seen;
  for (std::string& name : r.gpu_models) {
    const capacity::GpuModel* m = capacity::FindGpuModel(name);
    if (m == nullptr) {
      return Error::InvalidArgument("requirements.gpu_models: unknown GPU model \"" +
                                    name.substr(0, 40) +
                                    "\" (known: " + capacity::KnownGpuModelNames() + ")");
    }
    name = m->name;
    if (!seen.insert(name).second) {
      return Error::InvalidArgument("requirements.gpu_models: " + name + " is named twice");
    }
  }
  return OkStatus();
}

bool IsPlainName(std::string_view s) {
  if (s.empty() || s.size() > 128) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

}  // namespace

bool ReservedEnvName(std::string_view name) {
  return name == "CUDA_VISIBLE_DEVICES" || name == "NVIDIA_VISIBLE_DEVICES" ||
         name.starts_with("ATRIUM_");
}

Status ValidateDraft(TemplateDraft& draft) {
  if (!IsValidSlug(draft.name, kMaxNameLength)) {
    return Error::InvalidArgument(
        "name must be a slug: lower-case letters, digits, '-', '_' or '.', at most " +
        std::to_string(kMaxNameLength) + " characters, starting with a letter or digit");
  }
  if (draft.description.size() > kMaxDescriptionLength) {
    return Error::InvalidArgument("description: at most " + std::to_string(kMaxDescriptionLength) +
                                  " bytes");
  }
  if (std::any_of(draft.description.begin(), draft.description.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; })) {
    return Error::InvalidArgument("description: no control characters");
  }
  ATRIUM_RETURN_IF_ERROR(ValidateDigest(draft.rootfs_digest));
  ATRIUM_RETURN_IF_ERROR(ValidateEnv(draft.env));
  return ValidateRequirements(draft.requirements);
}

EnvironmentTemplateRecord RecordOf(const TemplateDraft& draft, std::string created_by,
                                   int64_t now_ms) {
  EnvironmentTemplateRecord t;
  t.name = draft.name;
  t.description = draft.description;
  t.rootfs_digest = draft.rootfs_digest;
  t.env = draft.env;
  t.min_driver_version = draft.requirements.min_driver_version;
  t.min_cuda_version = draft.requirements.min_cuda_version;
  t.gpu_models = draft.requirements.gpu_models;
  t.state = std::string(kStateActive);
  t.created_by = std::move(created_by);
  t.created_at = now_ms;
  t.updated_at = now_ms;
  return t;
}

std::string TemplateReference::ToString() const {
  return version == 0 ? name : name + "@" + std::to_string(version);
}

Result<TemplateReference> ParseReference(std::string_view text) {
  auto bad = [&] {
    return Error::InvalidArgument("environment template reference \"" +
                                  std::string(text.substr(0, 80)) +
                                  "\": expected NAME or NAME@VERSION (VERSION 1, 2, ...)");
  };
  TemplateReference ref;
  const size_t at = text.find('@');
  const std::string_view name = text.substr(0, at);
  if (!IsValidSlug(name, kMaxNameLength)) return bad();
  ref.name = std::string(name);
  if (at == std::string_view::npos) return ref;
  const std::string_view version = text.substr(at + 1);
  if (version.empty() || version.size() > 10 || version.front() == '0') return bad();
  const auto [end, ec] =
      std::from_chars(version.data(), version.data() + version.size(), ref.version);
  if (ec != std::errc() || end != version.data() + version.size() || ref.version < 1 ||
      ref.version > kMaxVersion) {
    return bad();
  }
  return ref;
}

Result<EnvironmentTemplateRecord> ChooseVersion(
    const std::vector<EnvironmentTemplateRecord>& versions, const TemplateReference& reference,
    RetiredVersions retired) {
  // The platform's family first: a tenant's template never shadows it.
  auto has_platform = std::any_of(versions.begin(), versions.end(), [&](const auto& t) {
    return t.tenant_id.empty() && t.name == reference.name;
  });
  const EnvironmentTemplateRecord* newest = nullptr;
  bool any = false;
  for (const EnvironmentTemplateRecord& t : versions) {
    if (t.name != reference.name || t.tenant_id.empty() != has_platform) continue;
    any = true;
    if (reference.version != 0) {
      if (t.version != reference.version) continue;
      if (t.state != kStateActive && retired == RetiredVersions::kRefused) {
        return Error::FailedPrecondition("environment template " + reference.ToString() +
                                         " is retired");
      }
      return t;
    }
    if (t.state == kStateActive && (newest == nullptr || t.version > newest->version)) newest = &t;
  }
  if (newest != nullptr) return *newest;
  if (any && reference.version == 0) {
    return Error::FailedPrecondition("every version of environment template " + reference.name +
                                     " is retired");
  }
  return Error::NotFound("environment template " + reference.ToString() + " not found");
}

sched::NodeRequirements RequirementsOf(const EnvironmentTemplateRecord& t) {
  return {t.min_driver_version, t.min_cuda_version, t.gpu_models};
}

std::string SharedImagePath(std::string_view digest) {
  return "sha256-" + std::string(digest.substr(kDigestPrefix.size())) + "/rootfs";
}

std::string TenantImagePath(std::string_view tenant_id, std::string_view digest) {
  return "tenants/" + std::string(tenant_id) + "/" + SharedImagePath(digest);
}

Result<std::vector<std::string>> RootFsCandidates(const EnvironmentTemplateRecord& t) {
  ATRIUM_RETURN_IF_ERROR(ValidateDigest(t.rootfs_digest));
  if (t.tenant_id.empty()) return std::vector<std::string>{SharedImagePath(t.rootfs_digest)};
  if (!IsPlainName(t.tenant_id)) {
    return Error::InvalidArgument("tenant id is not a plain name: " + t.tenant_id.substr(0, 40));
  }
  return std::vector<std::string>{TenantImagePath(t.tenant_id, t.rootfs_digest),
                                  SharedImagePath(t.rootfs_digest)};
}

}  // namespace atrium::templates
