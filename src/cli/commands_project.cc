// project create | list | delete | quota: a tenant's projects and their
// split of its quota (tenant admins).
#include <memory>

#include "cli/args.h"
#include "cli/commands.h"

namespace atrium::cli {

namespace {

const std::vector<Column> kProjectColumns = {
    {"NAME", "name"}, {"QUOTAS", "quota_text"}, {"CREATED", "created_at"}};

std::string QuotaText(const Json& quotas) {
  std::string out;
  for (const auto& q : quotas) {
    if (!out.empty()) out += " ";
    auto gpus = [](const Json& v) {
      return v.is_number_integer() ? FormatMilliGpus(v.get<int64_t>()) : std::string("-");
    };
    out += StringAt(q, "resource_class") + "=" + gpus(FieldAt(q, "guarantee_milli")) + "/" +
           gpus(FieldAt(q, "limit_milli"));
  }
  return out;
}

void PrintProject(Context& ctx, const Json& project) {
  if (ctx.json_output()) {
    ctx.PrintJson(project);
    return;
  }
  ctx.out() << "name: " << EscapeForTerminal(StringAt(project, "name")) << "\n";
  PrintQuotaRows(ctx, FieldAt(project, "quotas"));
}

struct ProjectArgs {
  std::string name;
  std::string tenant;
};

int Create(Context& ctx, const ProjectArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto project = api->Post(*base + "/projects", {{"name", args.name}});
  if (!project.has_value()) return ctx.Fail(project.error());
  PrintProject(ctx, *project);
  return kExitOk;
}

int List(Context& ctx, const std::string& tenant) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto page = api->Get(*base + "/projects");
  if (!page.has_value()) return ctx.Fail(page.error());
  if (ctx.json_output()) {
    ctx.PrintJson(*page);
    return kExitOk;
  }
  std::vector<Json> items;
  for (Json p : FieldAt(*page, "items")) {
    p["quota_text"] = QuotaText(FieldAt(p, "quotas"));
    items.push_back(std::move(p));
  }
  ctx.out() << FormatObjects(kProjectColumns, items);
  return kExitOk;
}

int Delete(Context& ctx, const ProjectArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto gone = api->Delete(*base + "/projects/" + UrlEncode(args.name));
  if (!gone.has_value()) return ctx.Fail(gone.error());
  if (!ctx.json_output()) ctx.out() << "Deleted project " << args.name << ".\n";
  return kExitOk;
}

struct QuotaArgs {
  ProjectArgs project;
  std::string model;
  std::string kind = "gpu";
  std::string guarantee;
  std::string limit;
};

int SetQuota(Context& ctx, const QuotaArgs& args) {
  auto body = QuotaBody(args.model, args.kind, args.guarantee, args.limit);
  if (!body.has_value()) return ctx.Usage(body.error().message);
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(args.project.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto project = api->Put(*base + "/projects/" + UrlEncode(args.project.name) + "/quotas", *body);
  if (!project.has_value()) return ctx.Fail(project.error());
  PrintProject(ctx, *project);
  return kExitOk;
}

struct ClearQuotaArgs {
  ProjectArgs project;
  std::string model;
  std::string kind = "gpu";
};

int ClearQuota(Context& ctx, const ClearQuotaArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(args.project.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto project = api->Delete(*base + "/projects/" + UrlEncode(args.project.name) + "/quotas/" +
                             UrlEncode(args.model) + "/" + UrlEncode(args.kind));
  if (!project.has_value()) return ctx.Fail(project.error());
  PrintProject(ctx, *project);
  return kExitOk;
}

void AddTenantOption(CLI::App* command, std::string& tenant) {
  command->add_option("--tenant", tenant, "Tenant id or name (default: your own)");
}

}  // namespace

void AddProjectCommands(CLI::App& app, VerbTable& verbs) {
  CLI::App* project = AddGroup(app, "project", "A tenant's projects and their quota split");

  auto create_args = std::make_shared<ProjectArgs>();
  CLI::App* create = project->add_subcommand("create", "Create a project");
  create->add_option("name", create_args->name, "Project name")->required();
  AddTenantOption(create, create_args->tenant);
  verbs.Add(create, [create_args](Context& ctx) { return Create(ctx, *create_args); });

  auto list_arg = std::make_shared<std::string>();
  CLI::App* list = project->add_subcommand("list", "List projects with their quota split");
  AddTenantOption(list, *list_arg);
  verbs.Add(list, [list_arg](Context& ctx) { return List(ctx, *list_arg); });

  auto delete_args = std::make_shared<ProjectArgs>();
  CLI::App* del = project->add_subcommand("delete", "Delete a project that holds no allocations");
  del->add_option("name", delete_args->name, "Project name")->required();
  AddTenantOption(del, delete_args->tenant);
  verbs.Add(del, [delete_args](Context& ctx) { return Delete(ctx, *delete_args); });

  auto quota_args = std::make_shared<QuotaArgs>();
  CLI::App* quota = project->add_subcommand(
      "quota", "Set a project's share of the tenant's quota for one GPU model and kind");
  quota->add_option("name", quota_args->project.name, "Project name")->required();
  AddTenantOption(quota, quota_args->project.tenant);
  AddQuotaOptions(quota, quota_args->model, quota_args->kind, quota_args->guarantee,
                  quota_args->limit);
  verbs.Add(quota, [quota_args](Context& ctx) { return SetQuota(ctx, *quota_args); });

  auto clear_args = std::make_shared<ClearQuotaArgs>();
  CLI::App* clear = project->add_subcommand(
      "quota-clear",
      "Remove a project's quota for one GPU model and kind: the project is then limited by the "
      "tenant's quota only (a quota of 0 0 denies the class to the project)");
  clear->add_option("name", clear_args->project.name, "Project name")->required();
  AddTenantOption(clear, clear_args->project.tenant);
  clear->add_option("--model", clear_args->model, "GPU model, e.g. H100-80GB")->required();
  clear->add_option("--kind", clear_args->kind, "Allocation kind (a gang uses gpu)")
      ->check(CLI::IsMember({"gpu", "mig", "share", "node"}))
      ->capture_default_str();
  verbs.Add(clear, [clear_args](Context& ctx) { return ClearQuota(ctx, *clear_args); });
}

}  // namespace atrium::cli
