#include "serving/adapters.h"

#include <algorithm>

#include "common/json_reader.h"

namespace atrium::serving {
namespace {

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

}  // namespace

Status ValidateAdapterName(std::string_view name) {
  if (name.empty() || name.size() > kMaxAdapterNameChars || !IsNameChar(name.front()) ||
      name.front() == '.' || name.front() == '_' || name.front() == '-' ||
      !std::all_of(name.begin(), name.end(), IsNameChar)) {
    return Error::InvalidArgument(
        "field 'name' must be 1-64 of [a-z0-9._-], starting with a letter or digit");
  }
  return OkStatus();
}

Result<std::string> NormalizeSha256(std::string_view hex) {
  std::string out(hex);
  const bool ok =
      out.size() == 64 && std::all_of(out.begin(), out.end(), [](char c) {
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
      });
  if (!ok) return Error::InvalidArgument("field 'sha256' must be 64 hex digits");
  std::transform(out.begin(), out.end(), out.begin(), [](char c) {
    return c >= 'A' && c <= 'F' ? static_cast<char>(c - 'A' + 'a') : c;
  });
  return out;
}

Result<std::string> ArchiveOfArtifact(std::string_view artifact) {
  const std::string_view scheme = kArchiveArtifactScheme;
  if (artifact.substr(0, scheme.size()) != scheme || artifact.size() == scheme.size() ||
      artifact.size() > 200) {
    return Error::InvalidArgument(
        "field 'artifact' must be 'archive:<id>', an archive the tenant uploaded "
        "(POST /api/v1/jobs/archives)");
  }
  return std::string(artifact.substr(scheme.size()));
}

std::string AdapterModelName(std::string_view model, std::string_view name) {
  return std::string(model) + ":" + std::string(name);
}

std::set<std::string> ListedModels(std::string_view body) {
  std::set<std::string> out;
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return out;
  auto data = j.find("data");
  if (data == j.end() || !data->is_array()) return out;
  for (const Json& m : *data) {
    if (!m.is_object()) continue;
    auto id = m.find("id");
    if (id != m.end() && id->is_string()) out.insert(id->get<std::string>());
  }
  return out;
}

AdapterSync PlanAdapterSync(const std::vector<AdapterRecord>& adapters,
                            const std::set<std::string>& on_disk,
                            const std::set<std::string>& listed) {
  AdapterSync sync;
  std::set<std::string> registered;
  for (const AdapterRecord& a : adapters) {
    registered.insert(a.id);
    if (a.status == "failed" || on_disk.count(a.id) == 0 || listed.count(a.id) != 0) continue;
    sync.load.push_back(a.id);
  }
  const std::string_view prefix = kAdapterIdPrefix;
  for (const std::string& name : listed) {
    if (name.compare(0, prefix.size(), prefix) == 0 && registered.count(name) == 0) {
      sync.unload.push_back(name);
    }
  }
  return sync;
}

AdapterStatus AdapterStatusAfter(bool on_disk, const std::string& disk_error,
                                 int64_t ready_replicas, int64_t ready_with_it) {
  if (!disk_error.empty()) return {"failed", disk_error};
  if (!on_disk) return {"loading", "its files are being prepared"};
  if (ready_with_it < ready_replicas) {
    return {"loading", "loaded on " + std::to_string(ready_with_it) + " of " +
                           std::to_string(ready_replicas) + " ready replicas"};
  }
  return {"ready", ""};
}

}  // namespace atrium::serving
