// alloc create | list | get | release, and why: GPU allocations of the
// caller's tenant (platform staff list and release any tenant's).
#include <memory>

#include "cli/args.h"
#include "cli/commands.h"
#include "scheduler/allocation.h"

namespace atrium::cli {
namespace {

const std::vector<std::string> kAllocationFieldOrder = {
    "id",    "state",    "kind",    "model",     "gpus",      "nodes", "mig_profile",
    "milli", "priority", "project", "tenant_id", "placement", "reason"};
const std::vector<Column> kAllocationColumns = {
    {"ID", "id"},           {"STATE", "state"}, {"KIND", "kind"},
    {"MODEL", "model"},     {"SIZE", "size"},   {"PRIORITY", "priority"},
    {"PROJECT", "project"}, {"WHERE", "where"}, {"TENANT", "tenant_id"}};

std::string AllocationPath(const std::string& id) { return "/api/v1/allocations/" + UrlEncode(id); }

// "h100-80gb-0:0,1 h100-80gb-1:0,1" from a placement array.
std::string WhereText(const Json& placement) {
  std::string out;
  for (const auto& p : placement) {
    if (!out.empty()) out += " ";
    out += StringAt(p, "node") + ":" + CellText(FieldAt(p, "gpus"));
  }
  return out;
}

// What was asked, in one cell: "2 GPUs", "2x8 GPUs", "3g.40gb", "0.25 GPU".
std::string SizeText(const Json& a) {
  const std::string kind = StringAt(a, "kind");
  if (kind == "gpu") return CellText(FieldAt(a, "gpus")) + " GPU";
  if (kind == "gang")
    return CellText(FieldAt(a, "nodes")) + "x" + CellText(FieldAt(a, "gpus")) + " GPU";
  if (kind == "mig") return StringAt(a, "mig_profile");
  if (kind == "share") {
    Json milli = FieldAt(a, "milli");
    return milli.is_number_integer() ? FormatMilliGpus(milli.get<int64_t>()) + " GPU" : "-";
  }
  return "node";
}

struct CreateArgs {
  std::string tenant;
  std::string kind = "gpu";
  std::string model;
  int gpus = 0;
  int nodes = 0;
  std::string mig_profile;
  std::string share;
  int64_t gpu_memory_mib = 0;
  std::string priority;
  std::string project;
  std::string pool;
  std::string region;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
};

int Create(Context& ctx, const CreateArgs& args) {
  Json body = {{"kind", args.kind}, {"model", args.model}};
  if (args.gpus > 0) body["gpus"] = args.gpus;
  if (args.nodes > 0) body["nodes"] = args.nodes;
  if (!args.mig_profile.empty()) body["mig_profile"] = args.mig_profile;
  if (!args.share.empty()) {
    auto milli = ParseMilliGpus(args.share);
    if (!milli.has_value()) return ctx.Usage(milli.error().message);
    if (*milli < 1 || *milli > 999) return ctx.Usage("--share must be between 1m and 0.999");
    body["milli"] = *milli;
  }
  if (args.gpu_memory_mib > 0) body["gpu_memory_mib"] = args.gpu_memory_mib;
  if (!args.priority.empty()) body["priority"] = args.priority;
  if (!args.project.empty()) body["project"] = args.project;
  if (!args.pool.empty()) body["pool"] = args.pool;
  if (!args.region.empty()) body["region"] = args.region;
  if (args.cpu_milli > 0) body["cpu_milli"] = args.cpu_milli;
  if (args.memory_mib > 0) body["memory_mib"] = args.memory_mib;
  if (args.kind == "gang" && args.nodes < 2)
    return ctx.Usage("--kind gang needs --nodes 2 or more");
  if (args.kind == "mig" && args.mig_profile.empty()) {
    return ctx.Usage("--kind mig needs --mig-profile, e.g. 3g.40gb");
  }
  if (args.kind == "share" && (args.share.empty() || args.gpu_memory_mib <= 0)) {
    return ctx.Usage("--kind share needs --share (e.g. 0.25) and --gpu-memory-mib");
  }
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto id = ctx.TenantIdOf(args.tenant);
  if (!id.has_value()) return ctx.Fail(id.error());
  if (!id->empty()) body["tenant_id"] = *id;
  auto allocation = api->Post("/api/v1/allocations", body);
  if (!allocation.has_value()) return ctx.Fail(allocation.error());
  ctx.PrintObject(*allocation, kAllocationFieldOrder);
  if (!ctx.json_output() && StringAt(*allocation, "state") == "pending") {
    ctx.err() << "(queued: `atrium why " << EscapeForTerminal(StringAt(*allocation, "id"))
              << "` says what it waits for)" << std::endl;
  }
  return kExitOk;
}

struct ListArgsAlloc {
  std::string tenant;
  std::string state;
  ListArgs list;
};

int List(Context& ctx, const ListArgsAlloc& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto tenant_id = ctx.TenantIdOf(args.tenant);
  if (!tenant_id.has_value()) return ctx.Fail(tenant_id.error());
  std::string target =
      WithQuery("/api/v1/allocations", {{"tenant_id", *tenant_id}, {"state", args.state}});
  if (ctx.json_output()) return RunList(ctx, *api, target, args.list, kAllocationColumns);
  // Tables get two derived cells; fetch the pages here to add them.
  if (args.list.all && !args.list.cursor.empty()) {
    return ctx.Usage("--all and --cursor do not mix");
  }
  std::vector<Json> items;
  std::string cursor = args.list.cursor;
  while (true) {
    auto page = api->Get(WithQuery(
        target,
        {{"limit", args.list.limit ? std::to_string(args.list.limit) : ""}, {"cursor", cursor}}));
    if (!page.has_value()) return ctx.Fail(page.error());
    for (Json a : FieldAt(*page, "items")) {
      a["size"] = SizeText(a);
      a["where"] = WhereText(FieldAt(a, "placement"));
      items.push_back(std::move(a));
    }
    cursor = StringAt(*page, "next_cursor");
    if (!args.list.all || cursor.empty()) break;
  }
  ctx.out() << FormatObjects(kAllocationColumns, items);
  if (!cursor.empty()) {
    ctx.err() << "(more: add --cursor " << cursor << ", or --all for every page)" << std::endl;
  }
  return kExitOk;
}

int Get(Context& ctx, const std::string& id) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto allocation = api->Get(AllocationPath(id));
  if (!allocation.has_value()) return ctx.Fail(allocation.error());
  ctx.PrintObject(*allocation, kAllocationFieldOrder);
  return kExitOk;
}

int Release(Context& ctx, const std::string& id) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto allocation = api->Delete(AllocationPath(id));
  if (!allocation.has_value()) return ctx.Fail(allocation.error());
  if (ctx.json_output()) {
    ctx.PrintJson(*allocation);
    return kExitOk;
  }
  ctx.out() << "Released " << id << ".\n";
  return kExitOk;
}

int Why(Context& ctx, const std::string& id) {
  // A job id asks the job (pending: its allocation's words).
  if (id.rfind("job_", 0) == 0) return JobWhy(ctx, id);
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto why = api->Get(AllocationPath(id) + "/why");
  if (!why.has_value()) return ctx.Fail(why.error());
  if (ctx.json_output()) {
    ctx.PrintJson(*why);
    return kExitOk;
  }
  ctx.out() << EscapeForTerminal(id) << " (" << EscapeForTerminal(StringAt(*why, "state"))
            << "): " << EscapeLinesForTerminal(StringAt(*why, "explanation")) << "\n";
  return kExitOk;
}

}  // namespace

void AddAllocCommands(CLI::App& app, VerbTable& verbs) {
  CLI::App* alloc = AddGroup(app, "alloc", "GPU allocations of your tenant");

  auto create_args = std::make_shared<CreateArgs>();
  CLI::App* create = alloc->add_subcommand(
      "create", "Request GPUs: whole GPUs, a gang of nodes, a MIG slice, a share or a node");
  create->add_option("--tenant", create_args->tenant,
                     "Tenant id or name to allocate for (platform admins)");
  create->add_option("--kind", create_args->kind, "What to allocate")
      ->check(CLI::IsMember({"gpu", "gang", "mig", "share", "node"}))
      ->capture_default_str();
  create->add_option("--model", create_args->model, "GPU model, e.g. H100-80GB")->required();
  create->add_option("--gpus", create_args->gpus, "GPUs per node (gpu, gang), 1..8")
      ->check(CLI::Range(1, 8));
  create->add_option("--nodes", create_args->nodes, "Nodes of a gang, 2..256")
      ->check(CLI::Range(2, 256));
  create->add_option("--mig-profile", create_args->mig_profile, "MIG profile, e.g. 3g.40gb");
  create->add_option("--share", create_args->share, "Fraction of one GPU (share), e.g. 0.25");
  create->add_option("--gpu-memory-mib", create_args->gpu_memory_mib,
                     "GPU-memory cap of a share, MiB");
  create->add_option("--priority", create_args->priority, "Priority class (default batch)")
      ->check(CLI::IsMember({"interactive", "batch", "preemptible"}));
  create->add_option("--project", create_args->project, "Charge it to this project");
  create->add_option("--pool", create_args->pool, "Only nodes of this pool");
  create->add_option("--region", create_args->region, "Only nodes of this region");
  create->add_option("--cpu-milli", create_args->cpu_milli, "Host CPU per node, milli-cores");
  create->add_option("--memory-mib", create_args->memory_mib, "Host memory per node, MiB");
  verbs.Add(create, [create_args](Context& ctx) { return Create(ctx, *create_args); });

  auto list_args = std::make_shared<ListArgsAlloc>();
  CLI::App* list = alloc->add_subcommand("list", "List allocations");
  list->add_option("--tenant", list_args->tenant, "Only this tenant's (platform staff)");
  list->add_option("--state", list_args->state, "Only allocations in this state")
      ->check(CLI::IsMember(sched::AllAllocationStateNames()));
  AddListOptions(list, list_args->list);
  verbs.Add(list, [list_args](Context& ctx) { return List(ctx, *list_args); });

  auto get_arg = std::make_shared<std::string>();
  CLI::App* get = alloc->add_subcommand("get", "Show an allocation");
  get->add_option("allocation", *get_arg, "Allocation id")->required();
  verbs.Add(get, [get_arg](Context& ctx) { return Get(ctx, *get_arg); });

  auto release_arg = std::make_shared<std::string>();
  CLI::App* release =
      alloc->add_subcommand("release", "Release an allocation (or cancel it while it waits)");
  release->add_option("allocation", *release_arg, "Allocation id")->required();
  verbs.Add(release, [release_arg](Context& ctx) { return Release(ctx, *release_arg); });

  auto why_arg = std::make_shared<std::string>();
  CLI::App* why =
      app.add_subcommand("why", "Why an allocation or a job waits, or where it runs, in words");
  why->add_option("id", *why_arg, "Allocation id, or job id (job_...)")->required();
  verbs.Add(why, [why_arg](Context& ctx) { return Why(ctx, *why_arg); });
}

}  // namespace atrium::cli
