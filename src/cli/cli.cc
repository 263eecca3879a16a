#include "cli/cli.h"

#include "cli/commands.h"

namespace atrium::cli {
namespace {

// RegisterCommands and RunSelected share the table; the app they are given
// lives for the whole process, and so does this.
VerbTable& Verbs() {
  static VerbTable* table = new VerbTable();
  return *table;
}

}  // namespace

void VerbTable::Add(CLI::App* command, Verb verb) {
  for (CLI::App* c = command; c != nullptr && c->get_parent() != nullptr; c = c->get_parent()) {
    c->fallthrough();
  }
  verbs_[command] = std::move(verb);
}

const Verb* VerbTable::Selected(const CLI::App& app) const {
  const CLI::App* at = &app;
  while (true) {
    auto parsed = at->get_subcommands();
    if (parsed.empty()) break;
    at = parsed.front();
  }
  auto it = verbs_.find(at);
  return it == verbs_.end() ? nullptr : &it->second;
}

CLI::App* AddGroup(CLI::App& app, const std::string& name, const std::string& description) {
  CLI::App* group = app.add_subcommand(name, description);
  group->require_subcommand(1);
  group->fallthrough();
  return group;
}

void AddListOptions(CLI::App* command, ListArgs& args) {
  command->add_option("--limit", args.limit, "Items per page (server default: 100)")
      ->check(CLI::Range(1, 1000));
  command->add_flag("--all", args.all, "Follow the cursors and show every page");
  command->add_option("--cursor", args.cursor, "Start after this cursor (from a previous page)");
}

void RegisterCommands(CLI::App& app, CliOptions& options) {
  app.add_option("--server", options.server,
                 "Control-plane URL, e.g. http://127.0.0.1:8080 (env ATRIUM_SERVER)");
  app.add_option("--token", options.token,
                 "Bearer credential: API key or token (env ATRIUM_TOKEN)");
  app.add_option("-o,--output", options.output, "Output format")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  VerbTable& verbs = Verbs();
  AddAuthCommands(app, verbs);
  AddTenantCommands(app, verbs);
  AddUserCommands(app, verbs);
  AddKeyCommands(app, verbs);
  AddAuditCommands(app, verbs);
  AddCapacityCommands(app, verbs);
  AddQuotaCommands(app, verbs);
  AddProjectCommands(app, verbs);
  AddTemplateCommands(app, verbs);
  AddAllocCommands(app, verbs);
  AddJobCommands(app, verbs);
  AddDeploymentCommands(app, verbs);
  AddAdapterCommands(app, verbs);
  AddBillingCommands(app, verbs);
  AddBudgetCommands(app, verbs);
  AddGatewayCommands(app, verbs);
}

int RunSelected(CLI::App& app, const CliOptions& options) {
  const Verb* verb = Verbs().Selected(app);
  Context ctx(options);
  if (verb == nullptr) return ctx.Usage("no command given; see `atrium --help`");
  return (*verb)(ctx);
}

}  // namespace atrium::cli
