// audit list | export | verify. Platform staff read the whole trail
// (/api/v1/audit), a tenant admin its tenant's own chain.
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>

#include "cli/args.h"
#include "cli/audit_check.h"
#include "cli/commands.h"
#include "store/audit_state.h"
#include "store/store.h"

namespace atrium::cli {
namespace {

const std::vector<Column> kAuditColumns = {
    {"SEQ", "seq"},       {"TIME", "time_text"},     {"ACTOR", "actor"},
    {"ACTION", "action"}, {"TARGET", "target"},      {"OUTCOME", "outcome"},
    {"STATUS", "status"}, {"REQUEST", "request_id"}, {"DETAIL", "detail"}};

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

// The trail summary (heads, sequence number, checkpoint) for an audit route.
Result<TrailSummary> FetchSummary(ApiSession& api, const std::string& target) {
  ATRIUM_ASSIGN_OR_RETURN(Json heads, api.Get(target + "/heads"));
  return TrailSummaryFromJson(heads);
}

struct FetchedTrail {
  std::vector<Json> items;  // as the API answered them, for export
  AuditExport trail;        // the same records, parsed, and the summary
};

// The summary first, then the records it covers: what export and online
// verification read.
Result<FetchedTrail> FetchTrail(ApiSession& api, const std::string& target) {
  ATRIUM_ASSIGN_OR_RETURN(TrailSummary summary, FetchSummary(api, target));
  ATRIUM_ASSIGN_OR_RETURN(auto items, api.ListAll(target, kPage));
  std::vector<AuditRecord> records;
  for (const auto& item : items) {
    ATRIUM_ASSIGN_OR_RETURN(AuditRecord record, audit::FromJson(item));
    records.push_back(std::move(record));
  }
  records = CoveredBy(std::move(records), summary);
  std::set<int64_t> covered;
  for (const auto& r : records) covered.insert(r.seq);
  std::erase_if(items,
                [&](const Json& item) { return !covered.count(item.value("seq", int64_t{0})); });
  return FetchedTrail{std::move(items), AuditExport{std::move(records), std::move(summary)}};
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
  auto fetched = FetchTrail(*api, *target);
  if (!fetched.has_value()) return ctx.Fail(fetched.error());
  std::string text;
  for (const auto& item : fetched->items) {
    text += item.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
  }
  // Last: a file cut short loses this line, and one missing records no
  // longer matches it.
  text += Json{{"audit_export", TrailSummaryToJson(*fetched->trail.summary)}}.dump() + "\n";
  if (args.out.empty() || args.out == "-") {
    ctx.out() << EscapeJsonForTerminal(text) << std::flush;
    return kExitOk;
  }
  // The trail names people and addresses: keep the file private.
  int fd = ::open(args.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  bool ok = fd >= 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  if (fd >= 0) ok = ::close(fd) == 0 && ok;
  if (!ok) return ctx.Fail(Error::Internal("cannot write " + args.out));
  ctx.err() << "Exported " << fetched->items.size() << " audit records to " << args.out
            << std::endl;
  return kExitOk;
}

struct VerifyArgs {
  std::string file;
  std::string store_url;
  std::string data_dir;
  std::string tenant;
  std::string public_key;
  std::string checkpoints;
};

// Every record, the counter and the chain heads straight from the store.
Result<AuditExport> ReadStore(const std::string& url) {
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
  ATRIUM_ASSIGN_OR_RETURN(audit::TrailState state, ReadAuditState(store->database()));
  TrailSummary summary;
  summary.last_seq = state.last_seq;
  summary.heads = std::move(state.heads);
  return AuditExport{std::move(records), std::move(summary)};
}

Result<std::string> ReadText(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Error::NotFound("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The public key to check checkpoints with: --public-key, or the one in
// `pub_file` when it exists; "" = the key each checkpoint names.
Result<std::string> TrustedKey(const std::string& given, const std::string& pub_file) {
  if (!given.empty() || pub_file.empty()) return given;
  std::error_code ec;
  if (!std::filesystem::exists(pub_file, ec)) return std::string();
  ATRIUM_ASSIGN_OR_RETURN(std::string text, ReadText(pub_file));
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return text;
}

int PrintReport(Context& ctx, const audit::VerifyReport& report, const std::string& note = "") {
  if (!note.empty()) ctx.err() << note << std::endl;
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
  if (!args.checkpoints.empty() && args.store_url.empty() && args.data_dir.empty()) {
    return ctx.Usage("--checkpoints is for --store and --data");
  }
  std::string note;

  if (!args.file.empty()) {
    auto text = ReadText(args.file);
    if (!text.has_value()) return ctx.Fail(text.error());
    auto parsed = ParseAuditExport(*text);
    if (!parsed.has_value()) {
      return ctx.Fail(Error::InvalidArgument(args.file + ": " + parsed.error().message));
    }
    if (!parsed->summary) {
      audit::VerifyReport report;
      report.ok = false;
      report.records = static_cast<int64_t>(parsed->records.size());
      report.reason =
          "the export has no summary line: its end was cut off (or it was written before "
          "exports carried one), so missing records would not show";
      return PrintReport(ctx, report);
    }
    auto report =
        VerifySummary(std::move(parsed->records), *parsed->summary, args.public_key, &note);
    return PrintReport(ctx, report, note);
  }

  if (!args.store_url.empty() || !args.data_dir.empty()) {
    std::string url = args.store_url;
    std::string checkpoints = args.checkpoints;
    std::string pub_file;
    if (!args.data_dir.empty()) {
      std::error_code ec;
      std::filesystem::path dir = std::filesystem::absolute(args.data_dir, ec);
      std::filesystem::path db = dir / "atrium.db";
      // Store::Open would create an empty database and call it verified.
      if (ec || !std::filesystem::exists(db, ec)) {
        return ctx.Fail(Error::NotFound("no store at " + db.string()));
      }
      url = "sqlite://" + db.string();
      if (checkpoints.empty()) checkpoints = (dir / "audit-checkpoints.jsonl").string();
      pub_file = (dir / "audit-signing.key.pub").string();
    }
    auto read = ReadStore(url);
    if (!read.has_value()) return ctx.Fail(read.error());
    std::error_code ec;
    if (!checkpoints.empty() &&
        (!args.checkpoints.empty() || std::filesystem::exists(checkpoints, ec))) {
      auto text = ReadText(checkpoints);
      if (!text.has_value()) return ctx.Fail(text.error());
      auto latest = audit::LatestCheckpointIn(*text);
      if (!latest.has_value()) {
        return ctx.Fail(Error::InvalidArgument(checkpoints + ": " + latest.error().message));
      }
      read->summary->checkpoint = std::move(*latest);
    }
    auto key = TrustedKey(args.public_key, pub_file);
    if (!key.has_value()) return ctx.Fail(key.error());
    auto report = VerifySummary(std::move(read->records), *read->summary, *key, &note);
    return PrintReport(ctx, report, note);
  }

  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto target = AuditTarget(ctx, *api, args.tenant);
  if (!target.has_value()) return ctx.Fail(target.error());
  auto fetched = FetchTrail(*api, *target);
  if (!fetched.has_value()) return ctx.Fail(fetched.error());
  auto report = VerifySummary(std::move(fetched->trail.records), *fetched->trail.summary,
                              args.public_key, &note);
  return PrintReport(ctx, report, note);
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
      audit->add_subcommand("export",
                            "Write every audit record as JSON Lines (one a line), then a summary "
                            "line: the chain heads, sequence number and signed checkpoint");
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
  verify->add_option("--public-key", verify_args->public_key,
                     "The operator's audit checkpoint key (hex) to check signatures with "
                     "(default: DATA/audit-signing.key.pub with --data, else the key the "
                     "checkpoint names, which catches damage but not forgery)");
  verify->add_option("--checkpoints", verify_args->checkpoints,
                     "With --store or --data: the checkpoint file to compare the store with "
                     "(default with --data: DATA/audit-checkpoints.jsonl)");
  verbs.Add(verify, [verify_args](Context& ctx) { return Verify(ctx, *verify_args); });
}

}  // namespace atrium::cli
