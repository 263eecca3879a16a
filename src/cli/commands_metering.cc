// A tenant's GPU usage as the GPU meter billed it: usage gpu (the records,
// one per allocation or job and clock hour) and usage gpu-summary (totals
// per GPU model and kind or per project). `usage summary` shows the
// GPU-seconds beside the tokens.
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
                                                            const std::string& group_by) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& t : FieldAt(summary, "items")) {
    Json amount = FieldAt(t, "gpu_milli_ms");
    if (!amount.is_number_integer()) {
      return Error::InvalidArgument("the server's GPU totals carry no gpu_milli_ms");
    }
    std::vector<std::string> row;
    if (group_by == "model") {
      row = {CellText(FieldAt(t, "model")), CellText(FieldAt(t, "kind"))};
    } else if (group_by == "project") {
      row = {CellText(FieldAt(t, "project"))};
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
  } else {
    header = {"GROUP"};
  }
  header.push_back("RECORDS");
  header.push_back("GPU_SECONDS");
  return header;
}

namespace {

struct GpuUsageArgs {
  std::string tenant;
  std::string from;
  std::string to;
  std::string model;
  std::string project;
  std::string group_by;
  ListArgs list;
};

const std::vector<Column> kGpuUsageColumns = {{"FROM", "from"},
                                              {"TO", "to"},
                                              {"SUBJECT", "subject_id"},
                                              {"PROJECT", "project"},
                                              {"GPU_MODEL", "model"},
                                              {"KIND", "kind"},
                                              {"MIG", "mig_profile"},
                                              {"MILLI", "milli"},
                                              {"GPU_SECONDS", "gpu_seconds"},
                                              {"CLOSES", "closes_subject"}};

std::vector<std::pair<std::string, std::string>> Filters(const GpuUsageArgs& args) {
  return {{"from", args.from}, {"to", args.to}, {"model", args.model}, {"project", args.project}};
}

int ListGpuUsage(Context& ctx, const GpuUsageArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  return RunList(ctx, *api, WithQuery(*base + "/usage/gpu", Filters(args)), args.list,
                 kGpuUsageColumns);
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
  auto rows = GpuTotalsRows(*summary, args.group_by);
  if (!rows.has_value()) return ctx.Fail(rows.error());
  ctx.out() << FormatTable(GpuTotalsHeader(args.group_by), *rows);
  return kExitOk;
}

void AddGpuUsageFilters(CLI::App* command, GpuUsageArgs& args) {
  command->add_option("--tenant", args.tenant, "Tenant id or name (default: your own)");
  command->add_option("--from", args.from,
                      "Only GPU time from this time on (records start on the hour or when the "
                      "allocation started): RFC 3339 or ms since the epoch");
  command->add_option("--to", args.to, "Only GPU time before this time: RFC 3339 or ms");
  command->add_option("--model", args.model, "Only this GPU model, e.g. H100-80GB");
  command->add_option("--project", args.project, "Only this project");
}

}  // namespace

void AddGpuUsageCommands(CLI::App* usage, VerbTable& verbs) {
  auto list_args = std::make_shared<GpuUsageArgs>();
  CLI::App* list = usage->add_subcommand(
      "gpu", "List GPU usage records (GPU time held per allocation and hour), newest first");
  AddGpuUsageFilters(list, *list_args);
  AddListOptions(list, list_args->list);
  verbs.Add(list, [list_args](Context& ctx) { return ListGpuUsage(ctx, *list_args); });
  auto summary_args = std::make_shared<GpuUsageArgs>();
  CLI::App* summary = usage->add_subcommand(
      "gpu-summary", "GPU-seconds held, overall or per GPU model and kind or per project");
  AddGpuUsageFilters(summary, *summary_args);
  summary
      ->add_option("--group-by", summary_args->group_by,
                   "One row per GPU model and kind, or per project")
      ->check(CLI::IsMember({"model", "project"}));
  verbs.Add(summary, [summary_args](Context& ctx) { return GpuSummary(ctx, *summary_args); });
}

}  // namespace atrium::cli
