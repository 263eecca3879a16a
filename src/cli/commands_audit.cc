// audit list | export | verify. Platform staff read the whole trail
// (/api/v1/audit), a tenant admin its tenant's own chain.
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "cli/args.h"
#include "cli/audit_check.h"
#include "cli/commands.h"
#include "store/store.h"

namespace atrium::cli {
namespace {

const std::vector<Column> kAuditColumns = {
    {"SEQ", "seq"},       {"TIME", "time_text"},  {"ACTOR", "actor"},   {"ACTION", "action"},
    {"TARGET", "target"}, {"OUTCOME", "outcome"}, {"STATUS", "status"}, {"REQUEST", "request_id"}};

constexpr int kPage = 1000;

// The audit route for --tenant, or the caller's whole reach.
Result<std::string> AuditTarget(Context& ctx, ApiSession& api, const std::string& tenant) {
  if (!tenant.empty()) {
    ATRIUM_ASSIGN_OR_RETURN(std::string id, ctx.TenantIdOf(tenant));
    return "/api/v1/tenants/" + UrlEncode(id) + "/audit";
  }
  ATRIUM_ASSIGN_OR_RETURN(Json me, api.WhoAmI());
  std::string own = StringAt(FieldAt(me, "tenant"), "id");
  if (own.empty()) return std::string("/api/v1/audit");
  return "/api/v1/tenants/" + UrlEncode(own) + "/audit";
}

struct ListAuditArgs {
  std::string tenant;
  ListArgs list;
};

int List(Context& ctx, const ListAuditArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto target = AuditTarget(ctx, *api, args.tenant);
  if (!target.has_value()) return ctx.Fail(target.error());
  return RunList(ctx, *api, *target, args.list, kAuditColumns);
}

struct ExportArgs {
  std::string tenant;
  std::string out;
};

int Export(Context& ctx, const ExportArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto target = AuditTarget(ctx, *api, args.tenant);
  if (!target.has_value()) return ctx.Fail(target.error());
  auto records = api->ListAll(*target, kPage);
  if (!records.has_value()) return ctx.Fail(records.error());
  std::string text;
  for (const auto& record : *records) {
    text += record.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
  }
  if (args.out.empty() || args.out == "-") {
    ctx.out() << EscapeJsonForTerminal(text) << std::flush;
    return kExitOk;
  }
  // The trail names people and addresses: keep the file private.
  int fd = ::open(args.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  bool ok = fd >= 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  if (fd >= 0) ok = ::close(fd) == 0 && ok;
  if (!ok) return ctx.Fail(Error::Internal("cannot write " + args.out));
  ctx.err() << "Exported " << records->size() << " audit records to " << args.out << std::endl;
  return kExitOk;
}

struct VerifyArgs {
  std::string file;
  std::string store_url;
  std::string data_dir;
  std::string tenant;
};

// Every record and chain head straight from the store.
Result<std::pair<std::vector<AuditRecord>, std::vector<ChainHead>>> ReadStore(
    const std::string& url) {
  ATRIUM_ASSIGN_OR_RETURN(auto store, Store::Open(url, 1));
  std::vector<AuditRecord> records;
  ListOptions options;
  options.limit = kPage;
  while (true) {
    ATRIUM_ASSIGN_OR_RETURN(auto page, store->ListAudit(std::nullopt, options));
    for (auto& record : page.items) records.push_back(std::move(record));
    if (page.next_cursor.empty()) break;
    options.after = page.next_cursor;
  }
  // Read after the records: a record appended in between makes its chain
  // look truncated, which only happens against a live store.
  ATRIUM_ASSIGN_OR_RETURN(auto heads, store->AuditHeads());
  return std::make_pair(std::move(records), std::move(heads));
}

int PrintReport(Context& ctx, const audit::VerifyReport& report) {
  if (ctx.json_output()) {
    Json j = {{"ok", report.ok}, {"records", report.records}, {"chains", report.chains}};
    if (!report.ok) {
      j["broken"] = {{"seq", report.broken_seq},
                     {"chain", report.broken_chain},
                     {"chain_seq", report.broken_chain_seq},
                     {"reason", report.reason}};
    }
    ctx.PrintJson(j);
  } else {
    ctx.out() << EscapeForTerminal(DescribeReport(report)) << std::endl;
  }
  return report.ok ? kExitOk : kExitFailed;
}

int Verify(Context& ctx, const VerifyArgs& args) {
  int sources = !args.file.empty() + !args.store_url.empty() + !args.data_dir.empty();
  if (sources > 1) return ctx.Usage("give at most one of --file, --store, --data");
  if (!args.tenant.empty() && sources > 0) return ctx.Usage("--tenant is for online verification");

  if (!args.file.empty()) {
    std::ifstream in(args.file);
    if (!in) return ctx.Fail(Error::NotFound("cannot read " + args.file));
    std::stringstream text;
    text << in.rdbuf();
    auto records = ParseAuditJsonLines(text.str());
    if (!records.has_value()) {
      return ctx.Fail(Error::InvalidArgument(args.file + ": " + records.error().message));
    }
    // An export is whole chains: each must start at #1.
    return PrintReport(ctx, audit::Verify(std::move(records).value()));
  }

  if (!args.store_url.empty() || !args.data_dir.empty()) {
    std::string url = args.store_url;
    if (!args.data_dir.empty()) {
      std::error_code ec;
      std::filesystem::path db = std::filesystem::absolute(args.data_dir, ec) / "atrium.db";
      // Store::Open would create an empty database and call it verified.
      if (ec || !std::filesystem::exists(db, ec)) {
        return ctx.Fail(Error::NotFound("no store at " + db.string()));
      }
      url = "sqlite://" + db.string();
    }
    auto read = ReadStore(url);
    if (!read.has_value()) return ctx.Fail(read.error());
    return PrintReport(ctx, VerifyAgainstHeads(std::move(read->first), read->second));
  }

  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto target = AuditTarget(ctx, *api, args.tenant);
  if (!target.has_value()) return ctx.Fail(target.error());
  auto items = api->ListAll(*target, kPage);
  if (!items.has_value()) return ctx.Fail(items.error());
  std::vector<AuditRecord> records;
  for (const auto& item : *items) {
    auto record = audit::FromJson(item);
    if (!record.has_value()) return ctx.Fail(record.error());
    records.push_back(std::move(record).value());
  }
  return PrintReport(ctx, audit::Verify(std::move(records)));
}

}  // namespace

void AddAuditCommands(CLI::App& app, VerbTable& verbs) {
  CLI::App* audit = AddGroup(app, "audit", "Read, export and verify the audit trail");

  auto list_args = std::make_shared<ListAuditArgs>();
  CLI::App* list = audit->add_subcommand("list", "List audit records, oldest first");
  list->add_option("--tenant", list_args->tenant,
                   "Only this tenant's chain (default: all you may read)");
  AddListOptions(list, list_args->list);
  verbs.Add(list, [list_args](Context& ctx) { return List(ctx, *list_args); });

  auto export_args = std::make_shared<ExportArgs>();
  CLI::App* exp =
      audit->add_subcommand("export", "Write every audit record as JSON Lines (one a line)");
  exp->add_option("--tenant", export_args->tenant,
                  "Only this tenant's chain (default: all you may read)");
  exp->add_option("--out", export_args->out, "File to write (default: stdout)");
  verbs.Add(exp, [export_args](Context& ctx) { return Export(ctx, *export_args); });

  auto verify_args = std::make_shared<VerifyArgs>();
  CLI::App* verify = audit->add_subcommand(
      "verify",
      "Check the audit hash chains: from an export (--file), the store itself (--store, "
      "--data) or, with neither, through the API");
  verify->add_option("--file", verify_args->file, "A JSON Lines export to check");
  verify->add_option("--store", verify_args->store_url,
                     "Store URL to read directly, e.g. sqlite:///var/lib/atrium/atrium.db");
  verify->add_option("--data", verify_args->data_dir,
                     "The data directory of `atrium dev` (reads DIR/atrium.db)");
  verify->add_option("--tenant", verify_args->tenant, "Online: only this tenant's chain");
  verbs.Add(verify, [verify_args](Context& ctx) { return Verify(ctx, *verify_args); });
}

}  // namespace atrium::cli
