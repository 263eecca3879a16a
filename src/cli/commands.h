// How the verbs are wired: each commands_*.cc adds its subcommands to the
// app and registers, for each leaf, the function that runs it. Arguments
// live in structs owned by the verb's closure, so they outlive parsing.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <map>

#include "cli/context.h"

namespace atrium::cli {

using Verb = std::function<int(Context&)>;

class VerbTable {
 public:
  // `verb` runs when `command` is the innermost parsed subcommand. Also
  // lets options the command does not know fall through to its parents, so
  // the global options work after the verb (`atrium tenant list -o json`).
  void Add(CLI::App* command, Verb verb);
  // The innermost parsed subcommand's verb, or nullptr.
  const Verb* Selected(const CLI::App& app) const;

 private:
  std::map<const CLI::App*, Verb> verbs_;
};

// A group command (`tenant`, `user`, ...) that needs one of its verbs.
CLI::App* AddGroup(CLI::App& app, const std::string& name, const std::string& description);
// --limit, --all and --cursor.
void AddListOptions(CLI::App* command, ListArgs& args);

void AddAuthCommands(CLI::App& app, VerbTable& verbs);      // login, logout, whoami
void AddTenantCommands(CLI::App& app, VerbTable& verbs);    // tenant ...
void AddUserCommands(CLI::App& app, VerbTable& verbs);      // user ...
void AddKeyCommands(CLI::App& app, VerbTable& verbs);       // key ...
void AddAuditCommands(CLI::App& app, VerbTable& verbs);     // audit ...
void AddCapacityCommands(CLI::App& app, VerbTable& verbs);  // node ..., gpu list, capacity
void AddQuotaCommands(CLI::App& app, VerbTable& verbs);     // quota ...
void AddProjectCommands(CLI::App& app, VerbTable& verbs);   // project ...
void AddAllocCommands(CLI::App& app, VerbTable& verbs);     // alloc ..., why
void AddJobCommands(CLI::App& app, VerbTable& verbs);       // job ...
// `atrium job why ID` (also what `atrium why job_...` runs).
int JobWhy(Context& ctx, const std::string& id);
void AddDeploymentCommands(CLI::App& app, VerbTable& verbs);  // deployment ...
void AddAdapterCommands(CLI::App& app, VerbTable& verbs);     // adapter ...
// price-book ..., billing ..., invoice ... (commands_billing.cc)
void AddBillingCommands(CLI::App& app, VerbTable& verbs);
void AddBudgetCommands(CLI::App& app, VerbTable& verbs);  // budget ... (commands_budget.cc)
// The array `field` of a JSON answer's object, as rows (none when absent).
std::vector<Json> ItemsOf(const Json& value, const std::string& field);
// Uploads a local tar or tar.gz as a job archive (commands_job.cc); the
// server's answer (id, sha256, size_bytes ...).
Result<Json> UploadArchive(ApiSession& api, const std::string& file);
void AddGatewayCommands(CLI::App& app, VerbTable& verbs);   // entitlement ..., limit ..., usage ...
void AddTemplateCommands(CLI::App& app, VerbTable& verbs);  // template ...

// usage gpu and usage gpu-summary (commands_metering.cc), under `usage`.
void AddGpuUsageCommands(CLI::App* usage, VerbTable& verbs);
// GPU-seconds from milli-GPU·ms, exact to the thousandth (truncated):
// 1234567 → "1.234".
std::string GpuSecondsText(int64_t gpu_milli_ms);
// The rows and header of a GPU usage summary's table (group_by "", "model"
// or "project"), from its `field`: "items" (time held) or "run_by_jobs".
// InvalidArgument when a row carries no integer amount.
Result<std::vector<std::vector<std::string>>> GpuTotalsRows(const Json& summary,
                                                            const std::string& group_by,
                                                            const std::string& field = "items");
std::vector<std::string> GpuTotalsHeader(const std::string& group_by);
// A GPU usage summary as text: the time held (billed) and, apart, the time
// run by jobs within it (not billed on top), each a table or "none"; a
// summary without run_by_jobs (an older server) shows the time held only.
Result<std::string> GpuSummaryText(const Json& summary, const std::string& group_by);

// Shared by `quota set` and `project quota` (commands_quota.cc): the
// --model/--kind/--guarantee/--limit options, the PUT body they make
// (InvalidArgument for a bad amount), and quota rows as a table.
void AddQuotaOptions(CLI::App* command, std::string& model, std::string& kind,
                     std::string& guarantee, std::string& limit);
Result<Json> QuotaBody(const std::string& model, const std::string& kind,
                       const std::string& guarantee, const std::string& limit);
void PrintQuotaRows(Context& ctx, const Json& rows);

// What to allocate, as `job submit` and `deployment create` take it: the
// options (the GPU model's under `model_flag`) and the allocation request
// they make (a usage error for a MIG or share request that is incomplete).
struct ResourceArgs {
  std::string kind = "gpu";
  std::string model;
  int gpus = 0;
  std::string mig_profile;
  std::string share;
  int64_t gpu_memory_mib = 0;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  std::string pool;
  std::string region;
};
void AddResourceOptions(CLI::App* command, ResourceArgs& args, const std::string& model_flag,
                        const std::string& region_flag = "--region");
Result<Json> ResourcesBody(const ResourceArgs& args);

}  // namespace atrium::cli
