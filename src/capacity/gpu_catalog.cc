#include "capacity/gpu_catalog.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "common/json_reader.h"

namespace atrium::capacity {
namespace {

constexpr int kComputeSlices = 7;
constexpr int kMemorySlots = 8;
constexpr std::string_view kMediaSuffix = "+me";

// Everything about a model except its MIG profiles. Memory is nominal (the GB
// in the name); TDP is the board's maximum (SXM for A100/H100/H200/V100).
struct BuiltinModel {
  std::string_view name;
  int memory_gb;
  bool mig_capable;
  int tdp_watts;
  Interconnect interconnect;
};

constexpr BuiltinModel kBuiltinModels[] = {
    {"A100-40GB", 40, true, 400, Interconnect::kNvlink},
    {"A100-80GB", 80, true, 400, Interconnect::kNvlink},
    {"H100-80GB", 80, true, 700, Interconnect::kNvlink},
    {"H200-141GB", 141, true, 700, Interconnect::kNvlink},
    {"A10", 24, false, 150, Interconnect::kPcie},
    {"L4", 24, false, 72, Interconnect::kPcie},
    {"L40S", 48, false, 350, Interconnect::kPcie},
    {"T4", 16, false, 70, Interconnect::kPcie},
    {"V100-16GB", 16, false, 300, Interconnect::kNvlink},
    {"V100-32GB", 32, false, 300, Interconnect::kNvlink},
};

bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

// Reads integer field `key` of `obj` in [min, max]; `where` names the object.
Result<int64_t> IntField(const Json& obj, const char* key, int64_t min, int64_t max,
                         const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_integer()) {
    return Error::InvalidArgument(where + ": '" + key + "' must be an integer");
  }
  int64_t v = it->get<int64_t>();
  if (v < min || v > max) {
    return Error::InvalidArgument(where + ": '" + key + "' is " + std::to_string(v) + ", outside " +
                                  std::to_string(min) + ".." + std::to_string(max));
  }
  return v;
}

// Parses one profile; memory_mib stays 0 when the file gives no figure (the
// caller estimates it from the model's other profiles).
Result<MigProfile> ParseProfile(const Json& p, const std::string& model) {
  if (!p.is_object()) return Error::InvalidArgument(model + ": a profile must be an object");
  auto name_it = p.find("name");
  if (name_it == p.end() || !name_it->is_string() || name_it->get<std::string>().empty()) {
    return Error::InvalidArgument(model + ": a profile has no name");
  }
  MigProfile profile;
  profile.name = name_it->get<std::string>();
  const std::string where = model + " profile " + profile.name;
  ATRIUM_ASSIGN_OR_RETURN(int64_t id, IntField(p, "nvml_gi_profile_id", 0, 1000, where));
  ATRIUM_ASSIGN_OR_RETURN(int64_t compute, IntField(p, "compute_slices", 1, kComputeSlices, where));
  ATRIUM_ASSIGN_OR_RETURN(int64_t memory, IntField(p, "memory_slices", 1, kMemorySlots, where));
  ATRIUM_ASSIGN_OR_RETURN(int64_t max_instances,
                          IntField(p, "max_instances", 1, kComputeSlices, where));
  profile.nvml_gi_profile_id = static_cast<int>(id);
  profile.compute_slices = static_cast<int>(compute);
  profile.memory_slices = static_cast<int>(memory);
  profile.max_instances = static_cast<int>(max_instances);

  auto placement = p.find("placement");
  if (placement == p.end() || !placement->is_object()) {
    return Error::InvalidArgument(where + ": 'placement' must be an object");
  }
  ATRIUM_ASSIGN_OR_RETURN(int64_t size,
                          IntField(*placement, "size_in_memory_slots", 1, kMemorySlots, where));
  if (size != memory) {
    return Error::InvalidArgument(where + ": size_in_memory_slots " + std::to_string(size) +
                                  " differs from memory_slices " + std::to_string(memory));
  }
  auto starts = placement->find("valid_start_slots");
  if (starts == placement->end() || !starts->is_array() || starts->empty()) {
    return Error::InvalidArgument(where + ": 'valid_start_slots' must be a non-empty array");
  }
  for (const Json& s : *starts) {
    if (!s.is_number_integer() || s.get<int64_t>() < 0 ||
        s.get<int64_t>() > kMemorySlots - memory) {
      return Error::InvalidArgument(where + ": start slot " + s.dump() + " does not fit " +
                                    std::to_string(kMemorySlots) + " memory slots");
    }
    profile.valid_start_slots.push_back(s.get<int>());
  }
  std::sort(profile.valid_start_slots.begin(), profile.valid_start_slots.end());
  if (std::adjacent_find(profile.valid_start_slots.begin(), profile.valid_start_slots.end()) !=
      profile.valid_start_slots.end()) {
    return Error::InvalidArgument(where + ": a start slot is listed twice");
  }

  // Prefer NVML's MiB figure; else the GiB nvidia-smi prints; else unknown.
  if (auto mb = p.find("nvml_memory_size_mb"); mb != p.end()) {
    ATRIUM_ASSIGN_OR_RETURN(profile.memory_mib,
                            IntField(p, "nvml_memory_size_mb", 1, int64_t{1} << 30, where));
  } else if (auto gib = p.find("memory_gib_reported"); gib != p.end() && !gib->is_null()) {
    if (!gib->is_number() || gib->get<double>() <= 0 || gib->get<double>() > 1e6) {
      return Error::InvalidArgument(where + ": 'memory_gib_reported' must be a positive number");
    }
    profile.memory_mib = std::llround(gib->get<double>() * 1024);
  }

  const std::string_view name = profile.name;
  if (name.size() > kMediaSuffix.size() &&
      name.substr(name.size() - kMediaSuffix.size()) == kMediaSuffix) {
    profile.media_extensions = true;
    profile.base_profile = std::string(name.substr(0, name.size() - kMediaSuffix.size()));
  }
  return profile;
}

Result<std::vector<MigProfile>> ParseProfiles(const Json& gpu, const std::string& model,
                                              int64_t memory_mib) {
  if (!gpu.is_object()) return Error::InvalidArgument(model + " must be an object");
  auto total = gpu.find("total_memory_gb");
  if (total == gpu.end() || !total->is_number()) {
    return Error::InvalidArgument(model + ": 'total_memory_gb' must be a number");
  }
  if (std::llround(total->get<double>() * 1024) != memory_mib) {
    return Error::InvalidArgument(model + ": total_memory_gb " + total->dump() +
                                  " disagrees with the built-in table (" +
                                  std::to_string(memory_mib / 1024) + ")");
  }
  auto list = gpu.find("profiles");
  if (list == gpu.end() || !list->is_array() || list->empty()) {
    return Error::InvalidArgument(model + ": 'profiles' must be a non-empty array");
  }
  std::vector<MigProfile> profiles;
  std::set<std::string> names;
  for (const Json& p : *list) {
    ATRIUM_ASSIGN_OR_RETURN(MigProfile profile, ParseProfile(p, model));
    if (!names.insert(profile.name).second) {
      return Error::InvalidArgument(model + ": profile " + profile.name + " is listed twice");
    }
    profiles.push_back(std::move(profile));
  }

  // A profile the file gives no memory for (H200 7g.141gb) gets the per-slot
  // memory of the widest profile that has a figure, times its own width.
  const MigProfile* widest_known = nullptr;
  for (const MigProfile& p : profiles) {
    if (p.memory_mib > 0 && (!widest_known || p.memory_slices > widest_known->memory_slices)) {
      widest_known = &p;
    }
  }
  if (!widest_known) return Error::InvalidArgument(model + ": no profile gives its memory");
  const int64_t per_slot = widest_known->memory_mib / widest_known->memory_slices;
  for (MigProfile& p : profiles) {
    if (p.memory_mib == 0) p.memory_mib = per_slot * p.memory_slices;
  }

  for (const MigProfile& p : profiles) {
    if (!p.media_extensions) continue;
    auto base = std::find_if(profiles.begin(), profiles.end(),
                             [&](const MigProfile& q) { return q.name == p.base_profile; });
    if (base == profiles.end() || base->compute_slices != p.compute_slices ||
        base->memory_slices != p.memory_slices) {
      return Error::InvalidArgument(model + ": " + p.name + " needs a profile " + p.base_profile +
                                    " of the same size");
    }
  }
  std::stable_sort(profiles.begin(), profiles.end(), [](const MigProfile& a, const MigProfile& b) {
    if (a.memory_slices != b.memory_slices) return a.memory_slices < b.memory_slices;
    return a.compute_slices < b.compute_slices;
  });
  return profiles;
}

}  // namespace

std::string_view InterconnectName(Interconnect interconnect) {
  switch (interconnect) {
    case Interconnect::kNvlink:
      return "nvlink";
    case Interconnect::kPcie:
      return "pcie";
  }
  return "unknown";
}

const MigProfile* GpuModel::FindMigProfile(std::string_view profile_name) const {
  for (const MigProfile& p : mig_profiles) {
    if (p.name == profile_name) return &p;
  }
  return nullptr;
}

Result<std::vector<GpuModel>> BuildGpuCatalog(std::string_view mig_profiles_json) {
  ATRIUM_ASSIGN_OR_RETURN(Json doc, ParseJson(mig_profiles_json));
  if (!doc.is_object()) return Error::InvalidArgument("mig profiles must be a JSON object");
  auto gpus = doc.find("gpus");
  if (gpus == doc.end() || !gpus->is_object()) {
    return Error::InvalidArgument("mig profiles: 'gpus' must be an object");
  }
  for (auto it = gpus->begin(); it != gpus->end(); ++it) {
    if (it.key().starts_with('_')) continue;  // comments
    bool known =
        std::any_of(std::begin(kBuiltinModels), std::end(kBuiltinModels),
                    [&](const BuiltinModel& m) { return m.mig_capable && m.name == it.key(); });
    if (!known) {
      return Error::InvalidArgument("mig profiles describe " + it.key() +
                                    ", which is not a MIG-capable model of the built-in table");
    }
  }

  std::vector<GpuModel> models;
  for (const BuiltinModel& b : kBuiltinModels) {
    GpuModel model;
    model.name = std::string(b.name);
    model.memory_mib = int64_t{b.memory_gb} * 1024;
    model.mig_capable = b.mig_capable;
    model.tdp_watts = b.tdp_watts;
    model.interconnect = b.interconnect;
    if (b.mig_capable) {
      auto gpu = gpus->find(model.name);
      if (gpu == gpus->end()) {
        return Error::InvalidArgument("mig profiles lack MIG-capable model " + model.name);
      }
      ATRIUM_ASSIGN_OR_RETURN(model.mig_profiles,
                              ParseProfiles(*gpu, model.name, model.memory_mib));
    }
    models.push_back(std::move(model));
  }
  return models;
}

const std::vector<GpuModel>& AllGpuModels() {
  static const std::vector<GpuModel>* const kModels = [] {
    auto built = BuildGpuCatalog(EmbeddedMigProfilesJson());
    if (!built) {
      // The embedded file is checked by the capacity tests, so this is a
      // build that skipped them; there is no catalog to run without.
      std::fprintf(stderr, "atrium: embedded mig_profiles.json is invalid: %s\n",
                   built.error().message.c_str());
      std::abort();
    }
    return new std::vector<GpuModel>(std::move(built).value());
  }();
  return *kModels;
}

const GpuModel* FindGpuModel(std::string_view name) {
  for (const GpuModel& m : AllGpuModels()) {
    if (EqualsIgnoringCase(m.name, name)) return &m;
  }
  return nullptr;
}

std::string KnownGpuModelNames() {
  std::string out;
  for (const GpuModel& m : AllGpuModels()) {
    if (!out.empty()) out += ", ";
    out += m.name;
  }
  return out;
}

Result<const MigProfile*> FindMigProfile(const GpuModel& model, std::string_view name) {
  if (const MigProfile* p = model.FindMigProfile(name)) return p;
  if (model.mig_profiles.empty()) {
    return Error::InvalidArgument(model.name + " does not support MIG");
  }
  std::string known;
  for (const MigProfile& p : model.mig_profiles) {
    if (!known.empty()) known += ", ";
    known += p.name;
  }
  return Error::InvalidArgument("unknown MIG profile '" + std::string(name) + "' for " +
                                model.name + " (known: " + known + ")");
}

}  // namespace atrium::capacity
