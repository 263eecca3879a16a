#include "capacity/inventory.h"

#include <algorithm>

#include "capacity/gpu_catalog.h"
#include "capacity/software_version.h"
#include "common/strings.h"

namespace atrium::capacity {
namespace {

template <typename T, typename Index>
Status AddNamed(std::vector<T>& items, Index& index, T item, std::string_view kind) {
  if (item.name.empty()) return Error::InvalidArgument(std::string(kind) + " name is empty");
  if (index.contains(item.name)) {
    return Error::AlreadyExists(std::string(kind) + " '" + item.name + "' already exists");
  }
  index.emplace(item.name, items.size());
  items.push_back(std::move(item));
  return OkStatus();
}

template <typename T, typename Index>
const T* FindNamed(const std::vector<T>& items, const Index& index, std::string_view name) {
  auto it = index.find(name);
  return it == index.end() ? nullptr : &items[it->second];
}

Status ValidatePool(const Fleet& fleet, const NodePool& pool) {
  const std::string what = "pool '" + pool.name + "'";
  const Site* site = fleet.FindSite(pool.site);
  if (!site) return Error::InvalidArgument(what + ": site '" + pool.site + "' does not exist");
  if (site->region != pool.region) {
    return Error::InvalidArgument(what + " is in region '" + pool.region + "' but its site '" +
                                  site->name + "' is in region '" + site->region + "'");
  }
  for (const std::string& label : pool.labels) {
    if (!IsValidSlug(label)) {
      std::string message = what;
      message.append(": label '").append(label).append("' is not a slug");
      return Error::InvalidArgument(std::move(message));
    }
  }
  for (const std::string& tenant : pool.allowed_tenants) {
    if (tenant.empty()) return Error::InvalidArgument(what + ": an allowed tenant is empty");
  }
  if (pool.dedicated_tenant) {
    if (pool.dedicated_tenant->empty()) {
      return Error::InvalidArgument(what + ": dedicated tenant is empty");
    }
    for (const std::string& tenant : pool.allowed_tenants) {
      if (tenant != *pool.dedicated_tenant) {
        std::string message = what;
        message.append(" is dedicated to '")
            .append(*pool.dedicated_tenant)
            .append("' but also allows '")
            .append(tenant)
            .append("'");
        return Error::InvalidArgument(std::move(message));
      }
    }
  }
  if (pool.HasLabel(kLabelSensitive) && !pool.dedicated_tenant && pool.allowed_tenants.empty()) {
    return Error::InvalidArgument(
        what + " is labelled sensitive but names no dedicated or allowed tenant");
  }
  return OkStatus();
}

Status ValidateNode(const Fleet& fleet, const Node& node) {
  const std::string what = "node '" + node.name + "'";
  const NodePool* pool = fleet.FindPool(node.pool);
  if (!pool) return Error::InvalidArgument(what + ": pool '" + node.pool + "' does not exist");
  const Rack* rack = fleet.FindRack(node.rack);
  if (!rack) return Error::InvalidArgument(what + ": rack '" + node.rack + "' does not exist");
  if (rack->site != pool->site) {
    return Error::InvalidArgument(what + ": rack '" + rack->name + "' is in site '" + rack->site +
                                  "' but pool '" + pool->name + "' is in site '" + pool->site +
                                  "'");
  }
  if (node.cpu_milli <= 0 || node.memory_mib <= 0) {
    return Error::InvalidArgument(what + ": CPU and memory must be positive");
  }
  if (node.idle_power_watts < 0) {
    return Error::InvalidArgument(what + ": idle power must not be negative");
  }
  if (!node.driver_version.empty()) {
    ATRIUM_RETURN_IF_ERROR(SoftwareVersion::Parse(node.driver_version, what + ": driver version"));
  }
  if (!node.cuda_version.empty()) {
    ATRIUM_RETURN_IF_ERROR(SoftwareVersion::Parse(node.cuda_version, what + ": CUDA version"));
  }
  const GpuModel* model = nullptr;
  if (!node.gpu_model.empty()) {
    model = FindGpuModel(node.gpu_model);
    if (!model || model->name != node.gpu_model) {
      return Error::InvalidArgument(what + ": unknown GPU model '" + node.gpu_model +
                                    "' (known: " + KnownGpuModelNames() + ")");
    }
  } else if (!node.gpus.empty()) {
    return Error::InvalidArgument(what + " has GPUs but no GPU model");
  }
  for (size_t i = 0; i < node.gpus.size(); ++i) {
    const Gpu& gpu = node.gpus[i];
    const std::string gpu_what = what + " GPU " + std::to_string(i);
    if (gpu.index != static_cast<int>(i)) {
      return Error::InvalidArgument(gpu_what + " has index " + std::to_string(gpu.index));
    }
    if (gpu.model != node.gpu_model) {
      return Error::InvalidArgument(gpu_what + ": model " + gpu.model +
                                    " differs from the node's " + node.gpu_model);
    }
    if (gpu.memory_mib <= 0) return Error::InvalidArgument(gpu_what + ": memory must be positive");
    if (gpu.mig_enabled && !model->mig_capable) {
      return Error::InvalidArgument(gpu_what + ": MIG is enabled but " + model->name +
                                    " does not support MIG");
    }
  }
  std::vector<bool> grouped(node.gpus.size(), false);
  for (const std::vector<int>& group : node.nvlink_groups) {
    for (int index : group) {
      if (index < 0 || index >= static_cast<int>(node.gpus.size())) {
        return Error::InvalidArgument(what + ": NVLink group names GPU " + std::to_string(index) +
                                      " but the node has " + std::to_string(node.gpus.size()) +
                                      " GPUs");
      }
      if (grouped[index]) {
        return Error::InvalidArgument(what + ": GPU " + std::to_string(index) +
                                      " appears twice in NVLink groups");
      }
      grouped[index] = true;
    }
  }
  return OkStatus();
}

}  // namespace

bool NodePool::Admits(std::string_view tenant) const {
  if (dedicated_tenant) return *dedicated_tenant == tenant;
  if (allowed_tenants.empty()) return true;
  return std::find(allowed_tenants.begin(), allowed_tenants.end(), tenant) != allowed_tenants.end();
}

Status Fleet::AddSite(Site site) { return AddNamed(sites_, site_index_, std::move(site), "site"); }
Status Fleet::AddRack(Rack rack) { return AddNamed(racks_, rack_index_, std::move(rack), "rack"); }
Status Fleet::AddPool(NodePool pool) {
  return AddNamed(pools_, pool_index_, std::move(pool), "pool");
}
Status Fleet::AddNode(Node node) { return AddNamed(nodes_, node_index_, std::move(node), "node"); }

const Site* Fleet::FindSite(std::string_view name) const {
  return FindNamed(sites_, site_index_, name);
}
const Rack* Fleet::FindRack(std::string_view name) const {
  return FindNamed(racks_, rack_index_, name);
}
const NodePool* Fleet::FindPool(std::string_view name) const {
  return FindNamed(pools_, pool_index_, name);
}
const Node* Fleet::FindNode(std::string_view name) const {
  return FindNamed(nodes_, node_index_, name);
}
Node* Fleet::FindMutableNode(std::string_view name) {
  return const_cast<Node*>(FindNamed(nodes_, node_index_, name));
}

int64_t Fleet::TotalGpus() const {
  int64_t total = 0;
  for (const Node& node : nodes_) total += static_cast<int64_t>(node.gpus.size());
  return total;
}

Status ValidateFleet(const Fleet& fleet) {
  for (const Site& site : fleet.sites()) {
    if (site.region.empty()) {
      return Error::InvalidArgument("site '" + site.name + "' has no region");
    }
    if (site.power_budget_watts < 0) {
      return Error::InvalidArgument("site '" + site.name + "': power budget must not be negative");
    }
  }
  for (const Rack& rack : fleet.racks()) {
    if (!fleet.FindSite(rack.site)) {
      return Error::InvalidArgument("rack '" + rack.name + "': site '" + rack.site +
                                    "' does not exist");
    }
    if (rack.power_budget_watts < 0) {
      return Error::InvalidArgument("rack '" + rack.name + "': power budget must not be negative");
    }
  }
  for (const NodePool& pool : fleet.pools()) ATRIUM_RETURN_IF_ERROR(ValidatePool(fleet, pool));
  for (const Node& node : fleet.nodes()) ATRIUM_RETURN_IF_ERROR(ValidateNode(fleet, node));
  return OkStatus();
}

}  // namespace atrium::capacity
