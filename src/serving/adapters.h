// Tenants' LoRA adapters on managed deployments, the pure rules.
//
// A tenant registers an adapter (a name, an archive it uploaded and that
// archive's SHA-256) on a managed deployment whose spec allows adapters
// (ManagedSpec::max_adapters). Its clients call it as "<model>:<name>";
// the gateway routes that name for the adapter's tenant alone (any other
// tenant gets the 404 of a model that does not exist) and sends the engine
// the adapter's id, which is what the engine loaded it as: two tenants'
// adapters of one name never meet on a shared engine.
//
// The serving controller unpacks the archive into the deployment's adapter
// folder, which each replica sees read-only, and has every replica load it
// (the template's run-time LoRA API). A replica becomes ready only with
// every adapter loaded; an adapter is routed (ready) once every ready
// replica lists it, so no request for it reaches an engine without it.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "model/gateway_records.h"

namespace atrium::serving {

// Adapter ids begin with this; what an engine lists with it and no
// registered adapter has is unloaded.
inline constexpr char kAdapterIdPrefix[] = "ad_";
inline constexpr size_t kMaxAdapterNameChars = 64;
inline constexpr char kArchiveArtifactScheme[] = "archive:";

// [a-z0-9][a-z0-9._-]*, at most 64 characters: never ':', which separates
// a model from its adapter. InvalidArgument naming the field otherwise.
Status ValidateAdapterName(std::string_view name);
// 64 hex digits, returned lowercase; InvalidArgument otherwise.
Result<std::string> NormalizeSha256(std::string_view hex);
// The archive id of "archive:<id>"; InvalidArgument for anything else (the
// platform fetches nothing from a place a tenant names).
Result<std::string> ArchiveOfArtifact(std::string_view artifact);
// What clients call an adapter: "<model>:<name>".
std::string AdapterModelName(std::string_view model, std::string_view name);

// The model ids a /v1/models answer lists ({"data": [{"id": ...}]});
// empty when the body is not one.
std::set<std::string> ListedModels(std::string_view body);

// What one replica must do: load the adapters it does not list (failed ones
// and ones whose files are not ready, `on_disk`, excepted), and unload
// what it lists that looks like an adapter id and is registered no more.
struct AdapterSync {
  std::vector<std::string> load;    // adapter ids
  std::vector<std::string> unload;  // engine names
};
AdapterSync PlanAdapterSync(const std::vector<AdapterRecord>& adapters,
                            const std::set<std::string>& on_disk,
                            const std::set<std::string>& listed);

// An adapter's status after a round: failed when its files could not be
// made (`disk_error`), loading while they are not there or some ready
// replica does not list it (`ready_with_it` of `ready_replicas`), else
// ready — with no ready replica too: every replica loads it before it
// becomes ready.
struct AdapterStatus {
  std::string status;
  std::string detail;
  bool operator==(const AdapterStatus&) const = default;
};
AdapterStatus AdapterStatusAfter(bool on_disk, const std::string& disk_error,
                                 int64_t ready_replicas, int64_t ready_with_it);

}  // namespace atrium::serving
