// A tenant's GPU usage as the GPU meter recorded it: usage gpu (the
// records, one per allocation or job run and clock hour) and usage
// gpu-summary (totals per GPU model and kind or per project: the time held,
// which is billed, and apart from it the time run by jobs within it).
// `usage summary` shows the same GPU-seconds beside the tokens.
#include <memory>

#include "cli/args.h"
#include "cli/commands.h"

namespace atrium::cli {

std::string GpuSecondsText(int64_t gpu_milli_ms) {
  // Exact to a thousandth of a GPU-second (truncated), without floating
  // point: 1 GPU-second is 1,000,000 milli-GPU·ms.
  const bool negative = gpu_milli_ms < 0;
  const uint64_t v =
      negative ? 0 - static_cast<uint64_t>(gpu_milli_ms) : static_cast<uint64_t>(gpu_milli_ms);
  std::string frac = std::to_string(v % 1'000'000 / 1000);
  frac.insert(0, 3 - frac.size(), '0');
  return (negative ? "-" : "") + std::to_string(v / 1'000'000) + "." + frac;
}

Result<std::vector<std::vector<std::string>>> GpuTotalsRows(const Json& summary,
                                                            const std::string& group_by,
                                                            const std::string& field) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& t : FieldAt(summary, field)) {
    Json amount = FieldAt(t, "gpu_milli_ms");
    if (!amount.is_number_integer()) {
      return Error::InvalidArgument("the server's GPU totals carry no gpu_milli_ms");
    }
    std::vector<std::string> row;
    if (group_by == "model") {
      row = {CellText(FieldAt(t, "model")), CellText(FieldAt(t, "kind"))};
    } else if (group_by == "project") {
      row = {CellText(FieldAt(t, "project"))};
    } else if (group_by == "deployment") {
      row = {CellText(FieldAt(t, "deployment_id"))};
    } else {
      row = {"total"};
    }
    row.push_back(CellText(FieldAt(t, "records")));
    row.push_back(GpuSecondsText(amount.get<int64_t>()));
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<std::string> GpuTotalsHeader(const std::string& group_by) {
  std::vector<std::string> header;
  if (group_by == "model") {
    header = {"GPU_MODEL", "KIND"};
  } else if (group_by == "project") {
    header = {"PROJECT"};
  } else if (group_by == "deployment") {
    header = {"DEPLOYMENT"};
  } else {
    header = {"GROUP"};
  }
  header.push_back("RECORDS");
  header.push_back("GPU_SECONDS");
  return header;
}

Result<std::string> GpuSummaryText(const Json& summary, const std::string& group_by) {
  std::string text;
  auto section = [&](const std::string& title, const std::string& field) -> Status {
    ATRIUM_ASSIGN_OR_RETURN(auto rows, GpuTotalsRows(summary, group_by, field));
    text += title + ":\n";
    text += rows.empty() ? "none\n" : FormatTable(GpuTotalsHeader(group_by), rows);
    return OkStatus();
  };
  ATRIUM_RETURN_IF_ERROR(section("GPU time held (billed)", "items"));
  if (summary.is_object() && summary.contains("run_by_jobs")) {
    text += "\n";
    ATRIUM_RETURN_IF_ERROR(section(
        "GPU time run by jobs (within the time held above; not billed on top)", "run_by_jobs"));
  }
  return text;
}

namespace {

struct GpuUsageArgs {
  std::string tenant;
  std::string from;
  std::string to;
  std::string model;
  std::string project;
  std::string deployment;
  std::string group_by;
  std::string subject_kind;  // usage gpu only
  std::string job;           // usage gpu only
  ListArgs list;
};

const std::vector<Column> kGpuUsageColumns = {{"FROM", "from"},
                                              {"TO", "to"},
                                              {"OF", "subject_kind"},
                                              {"SUBJECT", "subject_id"},
                                              {"PROJECT", "project"},
                                              {"DEPLOYMENT", "deployment_id"},
                                              {"GPU_MODEL", "model"},
                                              {"KIND", "kind"},
                                              {"MIG", "mig_profile"},
                                              {"MILLI", "milli"},
                                              {"GPU_SECONDS", "gpu_seconds"},
                                              {"CLOSES", "closes_subject"}};

std::vector<std::pair<std::string, std::string>> Filters(const GpuUsageArgs& args) {
  return {{"from", args.from},
          {"to", args.to},
          {"model", args.model},
          {"project", args.project},
          {"deployment", args.deployment}};
}

int ListGpuUsage(Context& ctx, const GpuUsageArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto params = Filters(args);
  params.emplace_back("subject_kind", args.subject_kind);
  params.emplace_back("job", args.job);
  return RunList(ctx, *api, WithQuery(*base + "/usage/gpu", params), args.list, kGpuUsageColumns);
}

int GpuSummary(Context& ctx, const GpuUsageArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto params = Filters(args);
  params.emplace_back("group_by", args.group_by);
  auto summary = api->Get(WithQuery(*base + "/usage/gpu/summary", params));
  if (!summary.has_value()) return ctx.Fail(summary.error());
  if (ctx.json_output()) {
    ctx.PrintJson(*summary);
    return kExitOk;
  }
  auto text = GpuSummaryText(*summary, args.group_by);
  if (!text.has_value()) return ctx.Fail(text.error());
  ctx.out() << *text;
  return kExitOk;
}

void AddGpuUsageFilters(CLI::App* command, GpuUsageArgs& args) {
  command->add_option("--tenant", args.tenant, "Tenant id or name (default: your own)");
  command->add_option("--from", args.from,
                      "Only GPU time from this time on (records start on the hour or when the "
                      "allocation or job started): RFC 3339 or ms since the epoch");
  command->add_option("--to", args.to, "Only GPU time before this time: RFC 3339 or ms");
  command->add_option("--model", args.model, "Only this GPU model, e.g. H100-80GB");
  command->add_option("--project", args.project, "Only this project");
  command->add_option("--deployment", args.deployment,
                      "Only the GPU time of this managed deployment's replicas");
}

}  // namespace

void AddGpuUsageCommands(CLI::App* usage, VerbTable& verbs) {
  auto list_args = std::make_shared<GpuUsageArgs>();
  CLI::App* list = usage->add_subcommand(
      "gpu",
      "List GPU usage records (GPU time held per allocation, and run per job attempt, per hour), "
      "newest first");
  AddGpuUsageFilters(list, *list_args);
  list->add_option("--of", list_args->subject_kind,
                   "Only allocations' records (time held: billed) or jobs' (time run within it)")
      ->check(CLI::IsMember({"allocation", "job"}));
  list->add_option("--job", list_args->job,
                   "Only this job's records (one subject per attempt: <job id>.<attempt>)");
  AddListOptions(list, list_args->list);
  verbs.Add(list, [list_args](Context& ctx) { return ListGpuUsage(ctx, *list_args); });
  auto summary_args = std::make_shared<GpuUsageArgs>();
  CLI::App* summary = usage->add_subcommand(
      "gpu-summary",
      "GPU-seconds held (billed) and, apart, run by jobs within them, overall or per GPU model "
      "and kind, per project or per managed deployment");
  AddGpuUsageFilters(summary, *summary_args);
  summary
      ->add_option("--group-by", summary_args->group_by,
                   "One row per GPU model and kind, per project or per managed deployment")
      ->check(CLI::IsMember({"model", "project", "deployment"}));
  verbs.Add(summary, [summary_args](Context& ctx) { return GpuSummary(ctx, *summary_args); });
}

}  // namespace atrium::cli
