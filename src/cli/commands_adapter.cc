// adapter register | list | get | delete: a tenant's LoRA adapters on
// managed deployments that allow them. `register --file` uploads the
// adapter's folder as an archive first and pins it by the file's own
// SHA-256; `--archive ID --sha256 HEX` names one uploaded before.
#include <fstream>
#include <iterator>
#include <memory>

#include "cli/args.h"
#include "cli/commands.h"
#include "crypto/crypto.h"

namespace atrium::cli {
namespace {

const std::vector<std::string> kAdapterFieldOrder = {
    "id", "name", "model", "status", "detail", "deployment", "artifact", "sha256", "created_at"};
const std::vector<Column> kAdapterColumns = {{"ID", "id"},
                                             {"MODEL", "model"},
                                             {"STATUS", "status"},
                                             {"DEPLOYMENT", "deployment"},
                                             {"CREATED", "created_at"}};

struct RegisterArgs {
  std::string tenant;
  std::string deployment;
  std::string name;
  std::string file;
  std::string archive;
  std::string sha256;
};

Result<std::string> FileSha256(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return Error::InvalidArgument("cannot read " + file);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return crypto::Sha256Hex(bytes);
}

int Register(Context& ctx, const RegisterArgs& args) {
  if (args.file.empty() == args.archive.empty()) {
    return ctx.Usage("give --file (a tar or tar.gz of the adapter) or --archive, one");
  }
  if (!args.archive.empty() && args.sha256.empty()) {
    return ctx.Usage("--archive needs --sha256: the digest of what was uploaded");
  }
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  std::string archive = args.archive;
  std::string sha256 = args.sha256;
  if (!args.file.empty()) {
    auto digest = FileSha256(args.file);
    if (!digest.has_value()) return ctx.Fail(digest.error());
    auto uploaded = UploadArchive(*api, args.file);
    if (!uploaded.has_value()) return ctx.Fail(uploaded.error());
    if (StringAt(*uploaded, "sha256") != *digest) {
      return ctx.Fail(Error::Internal("the server received other bytes than " + args.file +
                                      " holds (its SHA-256 differs)"));
    }
    archive = StringAt(*uploaded, "id");
    sha256 = *digest;
  }
  auto adapter = api->Post(*base + "/adapters", Json{{"name", args.name},
                                                     {"deployment", args.deployment},
                                                     {"artifact", "archive:" + archive},
                                                     {"sha256", sha256}});
  if (!adapter.has_value()) return ctx.Fail(adapter.error());
  ctx.PrintObject(*adapter, kAdapterFieldOrder);
  return kExitOk;
}

struct ListAdapterArgs {
  std::string tenant;
  std::string deployment;
};

int List(Context& ctx, const ListAdapterArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto list = api->Get(WithQuery(*base + "/adapters", {{"deployment", args.deployment}}));
  if (!list.has_value()) return ctx.Fail(list.error());
  if (ctx.json_output()) {
    ctx.PrintJson(*list);
    return kExitOk;
  }
  const Json items = FieldAt(*list, "items");
  std::vector<Json> rows;
  if (items.is_array()) rows.assign(items.begin(), items.end());
  ctx.out() << FormatObjects(kAdapterColumns, rows);
  return kExitOk;
}

struct OneAdapterArgs {
  std::string tenant;
  std::string id;
};

int Get(Context& ctx, const OneAdapterArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto adapter = api->Get(*base + "/adapters/" + UrlEncode(args.id));
  if (!adapter.has_value()) return ctx.Fail(adapter.error());
  ctx.PrintObject(*adapter, kAdapterFieldOrder);
  return kExitOk;
}

int Delete(Context& ctx, const OneAdapterArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto gone = api->Delete(*base + "/adapters/" + UrlEncode(args.id));
  if (!gone.has_value()) return ctx.Fail(gone.error());
  if (!ctx.json_output()) ctx.out() << "Deleted adapter " << EscapeForTerminal(args.id) << ".\n";
  return kExitOk;
}

}  // namespace

void AddAdapterCommands(CLI::App& app, VerbTable& verbs) {
  CLI::App* adapter = AddGroup(
      app, "adapter", "Your tenant's LoRA adapters, called as MODEL:NAME on managed deployments");

  auto r = std::make_shared<RegisterArgs>();
  CLI::App* reg = adapter->add_subcommand(
      "register", "Register an adapter on a managed deployment that allows adapters");
  reg->add_option("--deployment", r->deployment, "The deployment (its id)")->required();
  reg->add_option("--name", r->name, "Its name: clients call MODEL:NAME")->required();
  reg->add_option("--file", r->file,
                  "A tar or tar.gz of the adapter's folder (adapter_config.json and weights): "
                  "uploaded, then pinned by its SHA-256");
  reg->add_option("--archive", r->archive, "An archive uploaded before (atrium job upload)");
  reg->add_option("--sha256", r->sha256, "With --archive: the digest of what was uploaded");
  reg->add_option("--tenant", r->tenant, "Tenant id or name (default: your own)");
  verbs.Add(reg, [r](Context& ctx) { return Register(ctx, *r); });

  auto l = std::make_shared<ListAdapterArgs>();
  CLI::App* list = adapter->add_subcommand("list", "List the tenant's adapters and their status");
  list->add_option("--deployment", l->deployment, "Only those on this deployment");
  list->add_option("--tenant", l->tenant, "Tenant id or name (default: your own)");
  verbs.Add(list, [l](Context& ctx) { return List(ctx, *l); });

  auto g = std::make_shared<OneAdapterArgs>();
  CLI::App* get = adapter->add_subcommand("get", "Show an adapter: status, and why if not ready");
  get->add_option("id", g->id, "Adapter id")->required();
  get->add_option("--tenant", g->tenant, "Tenant id or name (default: your own)");
  verbs.Add(get, [g](Context& ctx) { return Get(ctx, *g); });

  auto d = std::make_shared<OneAdapterArgs>();
  CLI::App* del = adapter->add_subcommand("delete", "Delete an adapter: no longer routed at once");
  del->add_option("id", d->id, "Adapter id")->required();
  del->add_option("--tenant", d->tenant, "Tenant id or name (default: your own)");
  verbs.Add(del, [d](Context& ctx) { return Delete(ctx, *d); });
}

}  // namespace atrium::cli
