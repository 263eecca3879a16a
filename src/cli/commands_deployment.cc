// deployment create | list | get | update | delete | scale | replicas: the
// model deployments behind the inference gateway. Platform staff run shared
// ones (or place a dedicated one for --tenant); a tenant admin runs its
// tenant's dedicated ones. With --template a deployment is managed: the
// platform runs its replicas on its own GPUs.
#include <memory>

#include "cli/args.h"
#include "cli/commands.h"

namespace atrium::cli {
namespace {

const std::vector<std::string> kDeploymentFieldOrder = {
    "id",      "model",        "version",   "visibility",     "tenant_id",
    "region",  "latency_tier", "endpoints", "endpoint_count", "capacity",
    "managed", "created_at",   "updated_at"};
const std::vector<Column> kReplicaColumns = {{"ID", "id"},      {"STATE", "state"},
                                             {"URL", "url"},    {"GENERATION", "generation"},
                                             {"JOB", "job_id"}, {"REASON", "reason"}};
const std::vector<Column> kDeploymentColumns = {{"ID", "id"},
                                                {"MODEL", "model"},
                                                {"VERSION", "version"},
                                                {"VISIBILITY", "visibility"},
                                                {"TENANT", "tenant_id"},
                                                {"REGION", "region"},
                                                {"TIER", "latency_tier"},
                                                {"ENDPOINTS", "endpoint_count"},
                                                {"CAPACITY", "capacity"}};

std::string DeploymentPath(const std::string& id) { return "/api/v1/deployments/" + UrlEncode(id); }

// The endpoints array of a body from repeated --endpoint URL[=CAPACITY[:MAX_PREFILL[:BURST]]].
Result<Json> EndpointsBody(const std::vector<std::string>& args) {
  Json endpoints = Json::array();
  for (const auto& text : args) {
    ATRIUM_ASSIGN_OR_RETURN(EndpointArg e, ParseEndpointArg(text));
    Json endpoint = {{"url", e.url}};
    if (e.capacity > 0) endpoint["capacity"] = e.capacity;
    if (e.max_prefill > 0) endpoint["max_prefill"] = e.max_prefill;
    if (e.burst > 0) endpoint["burst"] = e.burst;
    endpoints.push_back(std::move(endpoint));
  }
  return endpoints;
}

// Single deployments print their endpoints one per line after the fields.
void PrintDeployment(Context& ctx, const Json& d) {
  if (ctx.json_output()) {
    ctx.PrintJson(d);
    return;
  }
  Json shown = d;
  shown.erase("endpoints");
  shown.erase("serving");
  ctx.out() << FormatDetail(shown, kDeploymentFieldOrder);
  const Json serving = FieldAt(d, "serving");
  if (serving.is_object()) {
    ctx.out() << "serving: template " << EscapeForTerminal(StringAt(serving, "template"))
              << ", replicas " << CellText(FieldAt(serving, "replicas")) << " (min "
              << CellText(FieldAt(serving, "min_replicas")) << ", max "
              << CellText(FieldAt(serving, "max_replicas")) << "), generation "
              << CellText(FieldAt(serving, "generation")) << "\n";
  }
  Json endpoints = FieldAt(d, "endpoints");
  if (!endpoints.is_array()) {
    ctx.out() << "endpoints: (run by the platform)\n";
    return;
  }
  for (const auto& e : endpoints) {
    ctx.out() << "endpoint: " << EscapeForTerminal(StringAt(e, "url")) << " (capacity "
              << CellText(FieldAt(e, "capacity"));
    const Json max_prefill = FieldAt(e, "max_prefill");
    if (max_prefill.is_number_integer() && max_prefill.get<int64_t>() > 0) {
      ctx.out() << ", max_prefill " << CellText(max_prefill);
    }
    const Json burst = FieldAt(e, "burst");
    if (burst.is_number_integer() && burst.get<int64_t>() > 0) {
      ctx.out() << ", burst " << CellText(burst);
    }
    ctx.out() << ")\n";
  }
}

struct FieldArgs {
  std::string model;
  std::string version;
  std::vector<std::string> endpoints;
  std::string region;
  std::string latency_tier;
};

void AddFieldOptions(CLI::App* command, FieldArgs& args, bool create) {
  auto* model = command->add_option("--model", args.model,
                                    "Model name clients send, e.g. llama-3.1-8b-instruct");
  auto* endpoint = command->add_option(
      "--endpoint", args.endpoints,
      "Upstream server URL[=CAPACITY[:MAX_PREFILL[:BURST]]] (repeatable), e.g. "
      "http://10.0.0.5:8000=16 or http://10.0.0.5:8000=32:2:4; capacity defaults to 8; "
      "MAX_PREFILL paces streamed requests awaiting their first token (default: no limit); "
      "BURST slots above capacity are for tenants served less than their share (default 0)");
  auto* region = command->add_option("--region", args.region, "Region the servers run in");
  command->add_option("--version", args.version, "Free-text version, e.g. 2024-07");
  command->add_option("--latency-tier", args.latency_tier, "Latency tier (default standard)")
      ->check(CLI::IsMember({"interactive", "standard", "batch"}));
  if (create) {
    model->required();
    (void)endpoint;  // or --template
    region->required();
  } else {
    endpoint->description(
        "Upstream server URL[=CAPACITY] (repeatable); replaces every endpoint of the deployment");
  }
}

// The body fields that were given.
Result<Json> FieldsBody(const FieldArgs& args) {
  Json body = Json::object();
  if (!args.model.empty()) body["model"] = args.model;
  if (!args.version.empty()) body["version"] = args.version;
  if (!args.region.empty()) body["region"] = args.region;
  if (!args.latency_tier.empty()) body["latency_tier"] = args.latency_tier;
  if (!args.endpoints.empty()) {
    ATRIUM_ASSIGN_OR_RETURN(body["endpoints"], EndpointsBody(args.endpoints));
  }
  return body;
}

struct CreateArgs {
  FieldArgs fields;
  std::string visibility;
  std::string tenant;
  // Managed: the serving template and what each replica holds.
  std::string serving_template;
  std::string source;
  std::vector<std::string> extra_args;
  int64_t replicas = -1;  // -1: not given (1, or min_replicas when it autoscales)
  bool autoscale = false;
  int64_t min_replicas = -1;  // -1: not given
  int64_t max_replicas = -1;
  int64_t capacity = 0;
  int64_t drain_timeout_s = -1;
  int64_t max_adapters = 0;
  std::string priority;
  ResourceArgs resources;
};

// The `serving` object of a managed deployment's create.
Result<Json> ServingBody(const CreateArgs& args) {
  ATRIUM_ASSIGN_OR_RETURN(Json resources, ResourcesBody(args.resources));
  int64_t replicas = args.replicas;
  if (replicas < 0) replicas = args.autoscale && args.min_replicas >= 0 ? args.min_replicas : 1;
  Json serving = {
      {"template", args.serving_template}, {"resources", resources}, {"replicas", replicas}};
  if (args.autoscale) serving["autoscale"] = true;
  if (args.min_replicas >= 0) serving["min_replicas"] = args.min_replicas;
  if (args.max_replicas >= 0) serving["max_replicas"] = args.max_replicas;
  if (!args.source.empty()) serving["source"] = args.source;
  if (!args.extra_args.empty()) serving["extra_args"] = args.extra_args;
  if (args.capacity > 0) serving["capacity"] = args.capacity;
  if (args.drain_timeout_s >= 0) serving["drain_timeout_s"] = args.drain_timeout_s;
  if (!args.priority.empty()) serving["priority"] = args.priority;
  if (args.max_adapters > 0) serving["max_adapters"] = args.max_adapters;
  return serving;
}

int Create(Context& ctx, const CreateArgs& args) {
  auto body = FieldsBody(args.fields);
  if (!body.has_value()) return ctx.Usage(body.error().message);
  if (!args.visibility.empty()) (*body)["visibility"] = args.visibility;
  if (args.serving_template.empty() == args.fields.endpoints.empty()) {
    return ctx.Usage("give --endpoint (servers someone else runs) or --template (managed), one");
  }
  if (!args.serving_template.empty()) {
    auto serving = ServingBody(args);
    if (!serving.has_value()) return ctx.Usage(serving.error().message);
    (*body)["serving"] = *serving;
  }
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto id = ctx.TenantIdOf(args.tenant);
  if (!id.has_value()) return ctx.Fail(id.error());
  if (!id->empty()) (*body)["tenant_id"] = *id;
  auto created = api->Post("/api/v1/deployments", *body);
  if (!created.has_value()) return ctx.Fail(created.error());
  PrintDeployment(ctx, *created);
  return kExitOk;
}

struct ListDeploymentArgs {
  std::string tenant;
  std::string model;
  ListArgs list;
};

int List(Context& ctx, const ListDeploymentArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto tenant_id = ctx.TenantIdOf(args.tenant);
  if (!tenant_id.has_value()) return ctx.Fail(tenant_id.error());
  return RunList(
      ctx, *api,
      WithQuery("/api/v1/deployments", {{"tenant_id", *tenant_id}, {"model", args.model}}),
      args.list, kDeploymentColumns);
}

int Get(Context& ctx, const std::string& id) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto d = api->Get(DeploymentPath(id));
  if (!d.has_value()) return ctx.Fail(d.error());
  PrintDeployment(ctx, *d);
  return kExitOk;
}

struct UpdateArgs {
  std::string id;
  FieldArgs fields;
};

int Update(Context& ctx, const UpdateArgs& args) {
  auto body = FieldsBody(args.fields);
  if (!body.has_value()) return ctx.Usage(body.error().message);
  if (body->empty()) {
    return ctx.Usage(
        "nothing to change: give --model, --version, --endpoint, --region or --latency-tier");
  }
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto d = api->Patch(DeploymentPath(args.id), *body);
  if (!d.has_value()) return ctx.Fail(d.error());
  PrintDeployment(ctx, *d);
  return kExitOk;
}

struct ScaleArgs {
  std::string id;
  int64_t replicas = 0;
};

int Scale(Context& ctx, const ScaleArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto d = api->Post(DeploymentPath(args.id) + "/scale", Json{{"replicas", args.replicas}});
  if (!d.has_value()) return ctx.Fail(d.error());
  PrintDeployment(ctx, *d);
  return kExitOk;
}

int Replicas(Context& ctx, const std::string& id) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto page = api->Get(DeploymentPath(id) + "/replicas");
  if (!page.has_value()) return ctx.Fail(page.error());
  if (ctx.json_output()) {
    ctx.PrintJson(*page);
    return kExitOk;
  }
  const Json items = FieldAt(*page, "items");
  std::vector<Json> rows;
  if (items.is_array()) rows.assign(items.begin(), items.end());
  ctx.out() << FormatObjects(kReplicaColumns, rows);
  return kExitOk;
}

int Delete(Context& ctx, const std::string& id) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto gone = api->Delete(DeploymentPath(id));
  if (!gone.has_value()) return ctx.Fail(gone.error());
  if (!ctx.json_output()) ctx.out() << "Deleted deployment " << id << ".\n";
  return kExitOk;
}

}  // namespace

void AddDeploymentCommands(CLI::App& app, VerbTable& verbs) {
  CLI::App* deployment =
      AddGroup(app, "deployment", "Model deployments behind the inference gateway");

  auto create_args = std::make_shared<CreateArgs>();
  CLI::App* create = deployment->add_subcommand(
      "create", "Create a deployment: shared (platform staff) or dedicated to one tenant");
  AddFieldOptions(create, create_args->fields, /*create=*/true);
  create
      ->add_option("--visibility", create_args->visibility,
                   "shared (platform staff; the default without --tenant) or dedicated")
      ->check(CLI::IsMember({"shared", "dedicated"}));
  create->add_option("--tenant", create_args->tenant,
                     "Tenant id or name a dedicated deployment is for (platform staff; a tenant "
                     "admin's are its own tenant's)");
  create->add_option("--template", create_args->serving_template,
                     "Managed: the serving template its replicas run (engine-sim, vllm, sglang, "
                     "tgi, llama-cpp, or the operator's)");
  create->add_option("--source", create_args->source,
                     "Managed: what the engine loads (a path or hub id; default the model name)");
  create->add_option("--extra-arg", create_args->extra_args,
                     "Managed: an argument appended to the engine's command (repeatable; "
                     "platform staff)");
  create
      ->add_option("--replicas", create_args->replicas,
                   "Managed: replicas (default 1; autoscaling: --min-replicas)")
      ->check(CLI::Range(0, 64));
  create->add_flag("--autoscale", create_args->autoscale,
                   "Managed: replicas follow the gateways' load between --min-replicas and "
                   "--max-replicas");
  create->add_option("--min-replicas", create_args->min_replicas, "Managed: the fewest replicas")
      ->check(CLI::Range(0, 64));
  create->add_option("--max-replicas", create_args->max_replicas, "Managed: the most replicas")
      ->check(CLI::Range(1, 64));
  create
      ->add_option("--slots", create_args->capacity,
                   "Managed: gateway slots per replica (default: from the engine's batch)")
      ->check(CLI::Range(1, 4096));
  create
      ->add_option("--drain-timeout", create_args->drain_timeout_s,
                   "Managed: seconds a draining replica may finish requests (default 30)")
      ->check(CLI::Range(0, 3600));
  create
      ->add_option("--max-adapters", create_args->max_adapters,
                   "Managed: tenants' LoRA adapters it may hold (atrium adapter register; "
                   "engine-sim, vllm, sglang)")
      ->check(CLI::Range(1, 1024));
  create->add_option("--priority", create_args->priority, "Managed: the replicas' priority class")
      ->check(CLI::IsMember({"interactive", "batch", "preemptible"}));
  AddResourceOptions(create, create_args->resources, "--gpu-model", "--node-region");
  verbs.Add(create, [create_args](Context& ctx) { return Create(ctx, *create_args); });

  auto list_args = std::make_shared<ListDeploymentArgs>();
  CLI::App* list = deployment->add_subcommand(
      "list", "List deployments (tenants: their dedicated ones and the shared ones they may use)");
  list->add_option("--tenant", list_args->tenant, "What this tenant may use (platform staff)");
  list->add_option("--model", list_args->model, "Only deployments of this model");
  AddListOptions(list, list_args->list);
  verbs.Add(list, [list_args](Context& ctx) { return List(ctx, *list_args); });

  auto get_arg = std::make_shared<std::string>();
  CLI::App* get = deployment->add_subcommand("get", "Show a deployment");
  get->add_option("id", *get_arg, "Deployment id")->required();
  verbs.Add(get, [get_arg](Context& ctx) { return Get(ctx, *get_arg); });

  auto update_args = std::make_shared<UpdateArgs>();
  CLI::App* update = deployment->add_subcommand(
      "update", "Change a deployment's model, version, endpoints, region or latency tier");
  update->add_option("id", update_args->id, "Deployment id")->required();
  AddFieldOptions(update, update_args->fields, /*create=*/false);
  verbs.Add(update, [update_args](Context& ctx) { return Update(ctx, *update_args); });

  auto delete_arg = std::make_shared<std::string>();
  CLI::App* del = deployment->add_subcommand("delete", "Delete a deployment");
  del->add_option("id", *delete_arg, "Deployment id")->required();
  verbs.Add(del, [delete_arg](Context& ctx) { return Delete(ctx, *delete_arg); });

  auto scale_args = std::make_shared<ScaleArgs>();
  CLI::App* scale = deployment->add_subcommand(
      "scale", "Set a managed deployment's replicas (a replica scaled away drains first)");
  scale->add_option("id", scale_args->id, "Deployment id")->required();
  scale->add_option("--replicas", scale_args->replicas, "Replicas")
      ->required()
      ->check(CLI::Range(0, 64));
  verbs.Add(scale, [scale_args](Context& ctx) { return Scale(ctx, *scale_args); });

  auto replicas_arg = std::make_shared<std::string>();
  CLI::App* replicas =
      deployment->add_subcommand("replicas", "List a managed deployment's replicas");
  replicas->add_option("id", *replicas_arg, "Deployment id")->required();
  verbs.Add(replicas, [replicas_arg](Context& ctx) { return Replicas(ctx, *replicas_arg); });
}

}  // namespace atrium::cli
