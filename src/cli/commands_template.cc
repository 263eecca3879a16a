// template publish | list | get | delete: environment templates. Without
// --tenant a tenant's users act on their tenant's own (and list the
// platform's beside them), platform staff on the platform's.
#include <memory>

#include "cli/args.h"
#include "cli/commands.h"

namespace atrium::cli {

namespace {

const std::vector<Column> kTemplateColumns = {
    {"REFERENCE", "reference"}, {"OWNER", "owner"}, {"STATE", "state"},
    {"DIGEST", "digest_short"}, {"NEEDS", "needs"}, {"DESCRIPTION", "description"},
    {"CREATED", "created_at"}};

// "driver>=550.54.15 cuda>=12.4 H100-80GB|H200-141GB", or "-".
std::string NeedsText(const Json& requirements) {
  std::string out;
  auto add = [&](const std::string& part) { out += (out.empty() ? "" : " ") + part; };
  if (!StringAt(requirements, "min_driver_version").empty()) {
    add("driver>=" + StringAt(requirements, "min_driver_version"));
  }
  if (!StringAt(requirements, "min_cuda_version").empty()) {
    add("cuda>=" + StringAt(requirements, "min_cuda_version"));
  }
  std::string models;
  for (const auto& m : FieldAt(requirements, "gpu_models")) {
    if (m.is_string()) models += (models.empty() ? "" : "|") + m.get<std::string>();
  }
  if (!models.empty()) add(models);
  return out.empty() ? "-" : out;
}

Json ForTable(Json t) {
  const std::string digest = StringAt(t, "rootfs_digest");
  t["digest_short"] = digest.substr(0, 19);  // "sha256:" + 12 hex digits
  t["needs"] = NeedsText(FieldAt(t, "requirements"));
  return t;
}

// NAME@VERSION as a path segment: '@' may stand in a path as it is (RFC
// 3986 pchar), and the API does not decode path segments.
std::string ReferencePath(const std::string& reference) {
  std::string out = UrlEncode(reference);
  for (size_t at = out.find("%40"); at != std::string::npos; at = out.find("%40")) {
    out.replace(at, 3, "@");
  }
  return out;
}

void PrintTemplate(Context& ctx, const Json& t) {
  if (ctx.json_output()) {
    ctx.PrintJson(t);
    return;
  }
  auto line = [&](const std::string& name, const std::string& value) {
    ctx.out() << name << ": " << EscapeForTerminal(value) << "\n";
  };
  line("reference", StringAt(t, "reference"));
  line("owner", StringAt(t, "owner"));
  line("state", StringAt(t, "state"));
  line("rootfs_digest", StringAt(t, "rootfs_digest"));
  line("needs", NeedsText(FieldAt(t, "requirements")));
  line("description", StringAt(t, "description"));
  // A named copy: items() of a temporary would outlive it.
  const Json env = FieldAt(t, "env");
  for (const auto& [name, value] : env.items()) {
    line("env " + name, value.is_string() ? value.get<std::string>() : value.dump());
  }
}

struct TemplateArgs {
  std::string tenant;
  std::string reference;  // NAME, NAME@VERSION
  // publish only
  std::string digest;
  std::string description;
  std::vector<std::string> env;  // KEY=VALUE
  std::string min_driver;
  std::string min_cuda;
  std::vector<std::string> gpu_models;
};

int Publish(Context& ctx, const TemplateArgs& args) {
  Json env = Json::object();
  for (const std::string& text : args.env) {
    const size_t eq = text.find('=');
    if (eq == std::string::npos || eq == 0) {
      return ctx.Usage("--env takes KEY=VALUE, not \"" + text + "\"");
    }
    env[text.substr(0, eq)] = text.substr(eq + 1);
  }
  Json body = {{"name", args.reference}, {"rootfs_digest", args.digest}, {"env", env}};
  if (!args.description.empty()) body["description"] = args.description;
  if (!args.min_driver.empty() || !args.min_cuda.empty() || !args.gpu_models.empty()) {
    Json req = Json::object();
    if (!args.min_driver.empty()) req["min_driver_version"] = args.min_driver;
    if (!args.min_cuda.empty()) req["min_cuda_version"] = args.min_cuda;
    if (!args.gpu_models.empty()) req["gpu_models"] = args.gpu_models;
    body["requirements"] = req;
  }
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.CollectionBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto t = api->Post(*base + "/environment-templates", body);
  if (!t.has_value()) return ctx.Fail(t.error());
  if (!ctx.json_output()) ctx.out() << "Published " << StringAt(*t, "reference") << ".\n";
  PrintTemplate(ctx, *t);
  return kExitOk;
}

int List(Context& ctx, const TemplateArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.CollectionBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto list = api->Get(*base + "/environment-templates");
  if (!list.has_value()) return ctx.Fail(list.error());
  if (ctx.json_output()) {
    ctx.PrintJson(*list);
    return kExitOk;
  }
  std::vector<Json> items;
  for (const Json& t : FieldAt(*list, "items")) items.push_back(ForTable(t));
  ctx.out() << FormatObjects(kTemplateColumns, items);
  return kExitOk;
}

int Get(Context& ctx, const TemplateArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.CollectionBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto t = api->Get(*base + "/environment-templates/" + ReferencePath(args.reference));
  if (!t.has_value()) return ctx.Fail(t.error());
  PrintTemplate(ctx, *t);
  return kExitOk;
}

int Delete(Context& ctx, const TemplateArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.CollectionBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto t = api->Delete(*base + "/environment-templates/" + ReferencePath(args.reference));
  if (!t.has_value()) return ctx.Fail(t.error());
  if (ctx.json_output()) {
    ctx.PrintJson(*t);
  } else {
    ctx.out() << "Retired " << StringAt(*t, "reference") << ".\n";
  }
  return kExitOk;
}

void AddTenantOption(CLI::App* command, std::string& tenant) {
  command->add_option("--tenant", tenant,
                      "Tenant id or name (default: your own; platform staff: the platform)");
}

}  // namespace

void AddTemplateCommands(CLI::App& app, VerbTable& verbs) {
  CLI::App* group =
      AddGroup(app, "template", "Environment templates: versioned software environments for jobs");

  auto publish_args = std::make_shared<TemplateArgs>();
  CLI::App* publish =
      group->add_subcommand("publish", "Publish the next version of an environment template");
  publish->add_option("name", publish_args->reference, "Template name (a slug)")->required();
  publish
      ->add_option("--digest", publish_args->digest,
                   "Root filesystem image in the operator's image store: sha256:<64 hex>")
      ->required();
  publish->add_option("--description", publish_args->description, "One line");
  publish->add_option("--env", publish_args->env, "KEY=VALUE (repeat for several)");
  publish->add_option("--min-driver", publish_args->min_driver,
                      "Minimum NVIDIA driver version, e.g. 550.54.15");
  publish->add_option("--min-cuda", publish_args->min_cuda, "Minimum CUDA version, e.g. 12.4");
  publish->add_option("--gpu-model", publish_args->gpu_models,
                      "GPU model the work may run on (repeat for several; default: any)");
  AddTenantOption(publish, publish_args->tenant);
  verbs.Add(publish, [publish_args](Context& ctx) { return Publish(ctx, *publish_args); });

  auto list_args = std::make_shared<TemplateArgs>();
  CLI::App* list = group->add_subcommand(
      "list", "List environment templates (a tenant sees the platform's and its own)");
  AddTenantOption(list, list_args->tenant);
  verbs.Add(list, [list_args](Context& ctx) { return List(ctx, *list_args); });

  auto get_args = std::make_shared<TemplateArgs>();
  CLI::App* get = group->add_subcommand("get", "Show one version (NAME: the newest active one)");
  get->add_option("reference", get_args->reference, "NAME or NAME@VERSION")->required();
  AddTenantOption(get, get_args->tenant);
  verbs.Add(get, [get_args](Context& ctx) { return Get(ctx, *get_args); });

  auto delete_args = std::make_shared<TemplateArgs>();
  CLI::App* del = group->add_subcommand(
      "delete", "Retire one version: kept as history, no longer used for new work");
  del->add_option("reference", delete_args->reference, "NAME@VERSION")->required();
  AddTenantOption(del, delete_args->tenant);
  verbs.Add(del, [delete_args](Context& ctx) { return Delete(ctx, *delete_args); });
}

}  // namespace atrium::cli
