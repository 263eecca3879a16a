// node list | get | cordon | drain | uncordon | gpu-health, gpu list,
// capacity: the GPU fleet as the API shows it to the caller (tenants see
// only their own allocations on it; operators cordon and drain nodes and
// set GPU health).
#include <memory>

#include "cli/args.h"
#include "cli/commands.h"

namespace atrium::cli {
namespace {

const std::vector<std::string> kNodeFieldOrder = {
    "name",      "state",     "pool",           "rack",         "site",     "region",
    "gpu_model", "gpu_count", "driver_version", "cuda_version", "gpus_free"};
const std::vector<Column> kNodeColumns = {
    {"NAME", "name"},       {"STATE", "state"},    {"POOL", "pool"},
    {"MODEL", "gpu_model"}, {"GPUS", "gpu_count"}, {"FREE", "gpus_free"},
    {"RACK", "rack"},       {"REGION", "region"},  {"ALLOCATIONS", "allocations"}};
// STATE is unhealthy, scrubbing (an ended allocation's room waits for its
// scrub), cordoned, free or in_use; REASON says why a failed scrub took it
// out of service.
const std::vector<Column> kGpuColumns = {{"NODE", "node"},
                                         {"GPU", "index"},
                                         {"MODEL", "model"},
                                         {"STATE", "state"},
                                         {"HEALTHY", "healthy"},
                                         {"MIG", "mig_mode"},
                                         {"USED_MILLI", "used_milli"},
                                         {"FREE", "free"},
                                         {"ALLOCATIONS", "allocation_ids"},
                                         {"REASON", "health_reason"}};

std::string NodePath(const std::string& name) { return "/api/v1/nodes/" + UrlEncode(name); }

// The GPU objects with their allocation ids joined, for the table.
std::vector<Json> GpuRows(const Json& gpus) {
  std::vector<Json> rows;
  if (!gpus.is_array()) return rows;
  for (Json g : gpus) {
    Json ids = Json::array();
    for (const auto& a : FieldAt(g, "allocations")) {
      std::string id = StringAt(a, "id");
      std::string profile = StringAt(a, "mig_profile");
      ids.push_back(profile.empty() ? id : id + "(" + profile + ")");
    }
    g["allocation_ids"] = ids;
    rows.push_back(std::move(g));
  }
  return rows;
}

struct NodeListArgs {
  std::string pool;
  std::string model;
  ListArgs list;
};

int ListNodes(Context& ctx, const NodeListArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  return RunList(ctx, *api,
                 WithQuery("/api/v1/nodes", {{"pool", args.pool}, {"model", args.model}}),
                 args.list, kNodeColumns);
}

int GetNode(Context& ctx, const std::string& name) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto node = api->Get(NodePath(name));
  if (!node.has_value()) return ctx.Fail(node.error());
  if (ctx.json_output()) {
    ctx.PrintJson(*node);
    return kExitOk;
  }
  Json summary = *node;
  summary.erase("gpus");
  ctx.PrintObject(summary, kNodeFieldOrder);
  ctx.out() << "\n" << FormatObjects(kGpuColumns, GpuRows(FieldAt(*node, "gpus")));
  return kExitOk;
}

int NodeAction(Context& ctx, const std::string& name, const std::string& action) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto node = api->Post(NodePath(name) + "/" + action);
  if (!node.has_value()) return ctx.Fail(node.error());
  if (ctx.json_output()) {
    ctx.PrintJson(*node);
    return kExitOk;
  }
  ctx.out() << "node " << EscapeForTerminal(name) << ": "
            << EscapeForTerminal(StringAt(*node, "state")) << "\n";
  return kExitOk;
}

struct GpuHealthArgs {
  std::string node;
  int gpu = -1;
  bool healthy = false;
  bool unhealthy = false;
  std::string reason;
};

int SetGpuHealth(Context& ctx, const GpuHealthArgs& args) {
  if (args.healthy == args.unhealthy) return ctx.Usage("give one of --healthy or --unhealthy");
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  Json body = {{"healthy", args.healthy}};
  if (!args.reason.empty()) body["reason"] = args.reason;
  auto node = api->Put(NodePath(args.node) + "/gpus/" + std::to_string(args.gpu) + "/health", body);
  if (!node.has_value()) return ctx.Fail(node.error());
  if (ctx.json_output()) {
    ctx.PrintJson(*node);
    return kExitOk;
  }
  ctx.out() << "node " << EscapeForTerminal(args.node) << " GPU " << args.gpu << ": "
            << (args.healthy ? "healthy" : "unhealthy") << "\n";
  return kExitOk;
}

struct GpuListArgs {
  std::string node;
  std::string pool;
  std::string model;
  ListArgs list;
};

int ListGpus(Context& ctx, const GpuListArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  if (args.list.all && !args.list.cursor.empty()) {
    return ctx.Usage("--all and --cursor do not mix");
  }
  std::string target =
      WithQuery("/api/v1/gpus", {{"node", args.node}, {"pool", args.pool}, {"model", args.model}});
  std::vector<Json> gpus;
  std::string cursor = args.list.cursor;
  while (true) {
    auto page = api->Get(WithQuery(
        target,
        {{"limit", args.list.limit ? std::to_string(args.list.limit) : ""}, {"cursor", cursor}}));
    if (!page.has_value()) return ctx.Fail(page.error());
    for (const auto& g : FieldAt(*page, "items")) gpus.push_back(g);
    cursor = StringAt(*page, "next_cursor");
    if (!args.list.all || cursor.empty()) break;
  }
  if (ctx.json_output()) {
    ctx.PrintJson(Json(gpus));
    return kExitOk;
  }
  ctx.out() << FormatObjects(kGpuColumns, GpuRows(Json(gpus)));
  if (!cursor.empty()) {
    ctx.err() << "(more: add --cursor " << cursor << ", or --all for every page)" << std::endl;
  }
  return kExitOk;
}

struct CapacityArgs {
  std::string pool;
  std::string model;
};

int ShowCapacity(Context& ctx, const CapacityArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto capacity =
      api->Get(WithQuery("/api/v1/capacity", {{"pool", args.pool}, {"model", args.model}}));
  if (!capacity.has_value()) return ctx.Fail(capacity.error());
  if (ctx.json_output()) {
    ctx.PrintJson(*capacity);
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& row : FieldAt(*capacity, "items")) {
    std::string mig;
    for (const auto& m : FieldAt(row, "mig")) {
      if (!mig.empty()) mig += " ";
      mig += StringAt(m, "profile") + "=" + CellText(FieldAt(m, "free_instances"));
    }
    const Json share = FieldAt(row, "free_share_milli");
    rows.push_back({StringAt(row, "pool"), StringAt(row, "model"), CellText(FieldAt(row, "nodes")),
                    CellText(FieldAt(row, "gpus")), CellText(FieldAt(row, "gpus_usable")),
                    CellText(FieldAt(row, "gpus_free")),
                    share.is_number_integer() ? FormatMilliGpus(share.get<int64_t>()) : "-",
                    mig.empty() ? "-" : mig});
  }
  ctx.out() << FormatTable(
      {"POOL", "MODEL", "NODES", "GPUS", "USABLE", "FREE", "SHARE_FREE", "MIG_FREE"}, rows);
  return kExitOk;
}

}  // namespace

void AddCapacityCommands(CLI::App& app, VerbTable& verbs) {
  CLI::App* node = AddGroup(app, "node", "GPU nodes: list, inspect, cordon and drain; GPU health");

  auto list_args = std::make_shared<NodeListArgs>();
  CLI::App* list = node->add_subcommand("list", "List nodes with their state and free GPUs");
  list->add_option("--pool", list_args->pool, "Only nodes of this pool");
  list->add_option("--model", list_args->model, "Only nodes of this GPU model");
  AddListOptions(list, list_args->list);
  verbs.Add(list, [list_args](Context& ctx) { return ListNodes(ctx, *list_args); });

  auto get_arg = std::make_shared<std::string>();
  CLI::App* get = node->add_subcommand("get", "Show a node, its GPUs and what runs on them");
  get->add_option("node", *get_arg, "Node name")->required();
  verbs.Add(get, [get_arg](Context& ctx) { return GetNode(ctx, *get_arg); });

  for (const char* action : {"cordon", "drain", "uncordon"}) {
    auto arg = std::make_shared<std::string>();
    const std::string verb = action;
    const char* help = verb == "cordon"  ? "Cordon a node: no new work; running work stays"
                       : verb == "drain" ? "Drain a node: no new work; its allocations are asked "
                                           "to move"
                                         : "Uncordon a node: it takes new work again";
    CLI::App* command = node->add_subcommand(action, help);
    command->add_option("node", *arg, "Node name")->required();
    verbs.Add(command, [arg, verb](Context& ctx) { return NodeAction(ctx, *arg, verb); });
  }

  auto health_args = std::make_shared<GpuHealthArgs>();
  CLI::App* health = node->add_subcommand(
      "gpu-health",
      "Mark a GPU healthy or unhealthy: an unhealthy GPU takes no new work, its preemptible "
      "work is preempted and the rest asked to move");
  health->add_option("node", health_args->node, "Node name")->required();
  health->add_option("gpu", health_args->gpu, "The GPU's index on the node")
      ->required()
      ->check(CLI::NonNegativeNumber);
  health->add_flag("--healthy", health_args->healthy, "Back in service");
  health->add_flag("--unhealthy", health_args->unhealthy, "Out of service");
  health->add_option("--reason", health_args->reason, "Why, in words (at most 256 characters)");
  verbs.Add(health, [health_args](Context& ctx) { return SetGpuHealth(ctx, *health_args); });

  CLI::App* gpu = AddGroup(app, "gpu", "GPUs of the fleet");
  auto gpu_args = std::make_shared<GpuListArgs>();
  CLI::App* gpu_list = gpu->add_subcommand("list", "List GPUs with health, MIG mode and use");
  gpu_list->add_option("--node", gpu_args->node, "Only this node's GPUs");
  gpu_list->add_option("--pool", gpu_args->pool, "Only GPUs in this pool");
  gpu_list->add_option("--model", gpu_args->model, "Only this GPU model");
  AddListOptions(gpu_list, gpu_args->list);
  verbs.Add(gpu_list, [gpu_args](Context& ctx) { return ListGpus(ctx, *gpu_args); });

  auto capacity_args = std::make_shared<CapacityArgs>();
  CLI::App* capacity =
      app.add_subcommand("capacity", "Free capacity per pool, GPU model and MIG profile");
  capacity->add_option("--pool", capacity_args->pool, "Only this pool");
  capacity->add_option("--model", capacity_args->model, "Only this GPU model");
  verbs.Add(capacity, [capacity_args](Context& ctx) { return ShowCapacity(ctx, *capacity_args); });
}

}  // namespace atrium::cli
