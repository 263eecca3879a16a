// job submit | list | get | cancel | logs [-f] | events | why: jobs of the
// caller's tenant (platform staff list, read and cancel any tenant's).
// job upload | archives list|get|delete: the archives jobs unpack into
// their working directories.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <thread>

#include "cli/args.h"
#include "cli/commands.h"
#include "jobs/job_state.h"

namespace atrium::cli {
namespace {

const std::vector<std::string> kJobFieldOrder = {
    "id",      "name",      "state",         "attempt",     "exit_code", "signal",     "reason",
    "project", "tenant_id", "allocation_id", "workload_id", "stopping",  "started_at", "ended_at"};
const std::vector<Column> kJobColumns = {{"ID", "id"},
                                         {"NAME", "name"},
                                         {"STATE", "state"},
                                         {"ATTEMPT", "attempt"},
                                         {"EXIT", "exit_code"},
                                         {"PROJECT", "project"},
                                         {"CREATED", "created_at"},
                                         {"TENANT", "tenant_id"}};
const std::vector<Column> kEventColumns = {
    {"SEQ", "seq"}, {"TIME", "time"},   {"ATTEMPT", "attempt"}, {"FROM", "from"},
    {"TO", "to"},   {"ACTOR", "actor"}, {"REASON", "reason"}};

std::string JobPath(const std::string& id) { return "/api/v1/jobs/" + UrlEncode(id); }

constexpr char kArchivesPath[] = "/api/v1/jobs/archives";
const std::vector<std::string> kArchiveFieldOrder = {
    "id", "name", "size_bytes", "sha256", "unpacked_bytes", "entries", "created_at"};
const std::vector<Column> kArchiveColumns = {{"ID", "id"},           {"NAME", "name"},
                                             {"SIZE", "size_bytes"}, {"UNPACKED", "unpacked_bytes"},
                                             {"ENTRIES", "entries"}, {"CREATED", "created_at"}};
// Bigger files are not read: no server takes more than 1 GiB.
constexpr uintmax_t kMostArchiveBytes = uintmax_t{1} << 30;

int Upload(Context& ctx, const std::string& file) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto archive = UploadArchive(*api, file);
  if (!archive.has_value()) return ctx.Fail(archive.error());
  ctx.PrintObject(*archive, kArchiveFieldOrder);
  return kExitOk;
}

int ListArchives(Context& ctx) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  return RunList(ctx, *api, kArchivesPath, ListArgs{}, kArchiveColumns);
}

int GetArchive(Context& ctx, const std::string& id) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto archive = api->Get(std::string(kArchivesPath) + "/" + UrlEncode(id));
  if (!archive.has_value()) return ctx.Fail(archive.error());
  ctx.PrintObject(*archive, kArchiveFieldOrder);
  return kExitOk;
}

int DeleteArchive(Context& ctx, const std::string& id) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto deleted = api->Delete(std::string(kArchivesPath) + "/" + UrlEncode(id));
  if (!deleted.has_value()) return ctx.Fail(deleted.error());
  if (!ctx.json_output()) ctx.out() << "Deleted archive " << EscapeForTerminal(id) << ".\n";
  return kExitOk;
}

struct SubmitArgs {
  std::string name;
  std::string project;
  std::vector<std::string> command;  // program and its args
  std::string script_file;           // a local file sent as the inline script
  std::string archive_file;          // a local tar / tar.gz uploaded first
  std::string archive_id;            // an archive uploaded before
  std::vector<std::string> env;      // NAME=VALUE
  ResourceArgs resources;
  std::string priority;
  int64_t time_limit_s = 0;
  std::string restart;
  int64_t max_restarts = -1;
  std::string environment;
  std::string idempotency_key;
};

int Submit(Context& ctx, const SubmitArgs& args) {
  auto resources_body = ResourcesBody(args.resources);
  if (!resources_body.has_value()) return ctx.Usage(resources_body.error().message);
  const Json& resources = *resources_body;

  Json body = {{"name", args.name}, {"resources", resources}};
  if (args.command.empty() == args.script_file.empty()) {
    return ctx.Usage("give the command after -- , or --script FILE (one of them)");
  }
  if (!args.script_file.empty()) {
    std::ifstream in(args.script_file, std::ios::binary);
    if (!in) return ctx.Usage("cannot read --script " + args.script_file);
    std::string script((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    body["script"] = script;
  } else {
    body["command"] = args.command.front();
    if (args.command.size() > 1) {
      body["args"] = std::vector<std::string>(args.command.begin() + 1, args.command.end());
    }
  }
  if (!args.env.empty()) {
    Json env = Json::object();
    for (const std::string& kv : args.env) {
      const size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) return ctx.Usage("--env takes NAME=VALUE: " + kv);
      env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    body["env"] = env;
  }
  if (!args.project.empty()) body["project"] = args.project;
  if (!args.priority.empty()) body["priority"] = args.priority;
  if (args.time_limit_s > 0) body["time_limit_s"] = args.time_limit_s;
  if (!args.restart.empty()) body["restart_policy"] = args.restart;
  if (args.max_restarts >= 0) body["max_restarts"] = args.max_restarts;
  if (!args.environment.empty()) body["environment"] = args.environment;

  if (!args.archive_file.empty() && !args.archive_id.empty()) {
    return ctx.Usage("give --archive FILE or --archive-id ID, not both");
  }
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  if (!args.archive_file.empty() || !args.archive_id.empty()) {
    auto archive = args.archive_file.empty()
                       ? api->Get(std::string(kArchivesPath) + "/" + UrlEncode(args.archive_id))
                       : UploadArchive(*api, args.archive_file);
    if (!archive.has_value()) return ctx.Fail(archive.error());
    body["archive"] = StringAt(*archive, "id");
    body["archive_bytes"] = archive->value("size_bytes", int64_t{0});
    if (!args.archive_file.empty() && !ctx.json_output()) {
      ctx.err() << "(uploaded " << EscapeForTerminal(args.archive_file) << " as "
                << EscapeForTerminal(StringAt(*archive, "id")) << ")" << std::endl;
    }
  }
  std::map<std::string, std::string> headers;
  if (!args.idempotency_key.empty()) headers["Idempotency-Key"] = args.idempotency_key;
  auto job = api->Call("POST", "/api/v1/jobs", body, headers);
  if (!job.has_value()) return ctx.Fail(job.error());
  ctx.PrintObject(*job, kJobFieldOrder);
  if (!ctx.json_output() && StringAt(*job, "state") == "pending") {
    ctx.err() << "(queued: `atrium why " << EscapeForTerminal(StringAt(*job, "id"))
              << "` says what it waits for)" << std::endl;
  }
  return kExitOk;
}

struct ListJobArgs {
  std::string tenant;
  std::string state;
  std::string project;
  ListArgs list;
};

int List(Context& ctx, const ListJobArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto tenant_id = ctx.TenantIdOf(args.tenant);
  if (!tenant_id.has_value()) return ctx.Fail(tenant_id.error());
  std::string target =
      WithQuery("/api/v1/jobs",
                {{"tenant_id", *tenant_id}, {"state", args.state}, {"project", args.project}});
  return RunList(ctx, *api, target, args.list, kJobColumns);
}

int Get(Context& ctx, const std::string& id) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto job = api->Get(JobPath(id));
  if (!job.has_value()) return ctx.Fail(job.error());
  ctx.PrintObject(*job, kJobFieldOrder);
  return kExitOk;
}

int Cancel(Context& ctx, const std::string& id) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto job = api->Post(JobPath(id) + "/cancel");
  if (!job.has_value()) return ctx.Fail(job.error());
  if (ctx.json_output()) {
    ctx.PrintJson(*job);
    return kExitOk;
  }
  if (StringAt(*job, "state") == "cancelled") {
    ctx.out() << "Cancelled " << EscapeForTerminal(id) << ".\n";
  } else {
    ctx.out() << "Stopping " << EscapeForTerminal(id) << " (SIGTERM sent; SIGKILL at "
              << EscapeForTerminal(StringAt(FieldAt(*job, "stopping"), "kill_at")) << ").\n";
  }
  return kExitOk;
}

int Events(Context& ctx, const std::string& id, const ListArgs& list) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  return RunList(ctx, *api, JobPath(id) + "/events", list, kEventColumns);
}

struct LogArgs {
  std::string id;
  bool follow = false;
  int64_t offset = 0;
  int64_t attempt = 0;
};

// Prints the log as the workload wrote it (raw bytes, for `| grep`); with
// -f keeps asking (each ask waits on the server) until the attempt ends.
int Logs(Context& ctx, const LogArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  int64_t offset = args.offset;
  for (;;) {
    auto chunk = api->Get(
        WithQuery(JobPath(args.id) + "/logs", {{"offset", std::to_string(offset)},
                                               {"attempt", std::to_string(args.attempt)},
                                               {"follow", args.follow ? "true" : "false"}}));
    if (!chunk.has_value()) return ctx.Fail(chunk.error());
    if (ctx.json_output()) {
      ctx.PrintJson(*chunk);
    } else {
      const Json dropped = FieldAt(*chunk, "dropped");
      if (dropped.is_number_integer() && dropped.get<int64_t>() > 0 && offset == args.offset) {
        ctx.err() << "(" << dropped.get<int64_t>() << " bytes rotated away before this)\n";
      }
      ctx.out() << StringAt(*chunk, "data") << std::flush;
    }
    const Json next = FieldAt(*chunk, "next_offset");
    const bool complete = FieldAt(*chunk, "complete") == Json(true);
    const bool more = next.is_number_integer() && next.get<int64_t>() > offset;
    if (next.is_number_integer()) offset = next.get<int64_t>();
    if (complete || (!args.follow && !more)) break;
    // Nothing new: the server waited, or had no waiter's place free and
    // answered at once; either way, ask again after a breath.
    if (!more) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  return kExitOk;
}

}  // namespace

Result<Json> UploadArchive(ApiSession& api, const std::string& file) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(file, ec);
  if (ec) return Error::InvalidArgument("cannot read " + file + ": " + ec.message());
  if (size > kMostArchiveBytes) {
    return Error::InvalidArgument(file + " is larger than any server takes (1 GiB)");
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) return Error::InvalidArgument("cannot read " + file);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const bool gzip = bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
                    static_cast<unsigned char>(bytes[1]) == 0x8b;
  // The file's name labels the archive when it is a plain one.
  std::string name = std::filesystem::path(file).filename().string();
  const bool plain =
      !name.empty() && name.size() <= 128 && name.front() != '.' &&
      std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '_' || c == '-';
      });
  return api.Upload(WithQuery(kArchivesPath, {{"name", plain ? name : ""}}), bytes,
                    gzip ? "application/gzip" : "application/x-tar");
}

int JobWhy(Context& ctx, const std::string& id) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto why = api->Get(JobPath(id) + "/why");
  if (!why.has_value()) return ctx.Fail(why.error());
  if (ctx.json_output()) {
    ctx.PrintJson(*why);
    return kExitOk;
  }
  ctx.out() << EscapeLinesForTerminal(StringAt(*why, "why")) << "\n";
  return kExitOk;
}

void AddJobCommands(CLI::App& app, VerbTable& verbs) {
  CLI::App* job = AddGroup(app, "job", "Jobs of your tenant: commands run on allocated GPUs");

  auto s = std::make_shared<SubmitArgs>();
  CLI::App* submit = job->add_subcommand(
      "submit", "Submit a job: atrium job submit --name N --model M [options] -- COMMAND ARGS...");
  submit->add_option("--name", s->name, "Job name")->required();
  submit->add_option("--project", s->project, "Charge it to this project");
  submit->add_option("--script", s->script_file, "Run this local file as an inline shell script");
  submit->add_option("--archive", s->archive_file,
                     "Upload this tar or tar.gz and unpack it into the job's working directory");
  submit->add_option("--archive-id", s->archive_id,
                     "Unpack this uploaded archive (atrium job upload)");
  submit->add_option("--env", s->env, "NAME=VALUE (repeatable)");
  AddResourceOptions(submit, s->resources, "--model");
  submit->get_option("--model")->required();
  submit->add_option("--priority", s->priority, "Priority class (default batch)")
      ->check(CLI::IsMember({"interactive", "batch", "preemptible"}));
  submit->add_option("--time-limit", s->time_limit_s, "Seconds before it is stopped")
      ->check(CLI::Range(int64_t{1}, int64_t{7} * 24 * 3600));
  submit->add_option("--restart", s->restart, "Restart policy (default never)")
      ->check(CLI::IsMember({"never", "on-failure", "requeue-on-preemption"}));
  submit->add_option("--max-restarts", s->max_restarts, "Requeues the policy may make")
      ->check(CLI::Range(int64_t{0}, int64_t{100}));
  submit->add_option("--environment", s->environment, "Environment template: name[@version]");
  submit->add_option("--idempotency-key", s->idempotency_key,
                     "Retrying with the same key returns the first job");
  submit->add_option("command", s->command, "The command and its arguments (after --)");
  verbs.Add(submit, [s](Context& ctx) { return Submit(ctx, *s); });

  auto l = std::make_shared<ListJobArgs>();
  CLI::App* list = job->add_subcommand("list", "List jobs");
  list->add_option("--tenant", l->tenant, "Only this tenant's (platform staff)");
  list->add_option("--state", l->state, "Only jobs in this state")
      ->check(CLI::IsMember(jobs::AllJobStateNames()));
  list->add_option("--project", l->project, "Only jobs of this project");
  AddListOptions(list, l->list);
  verbs.Add(list, [l](Context& ctx) { return List(ctx, *l); });

  auto get_arg = std::make_shared<std::string>();
  CLI::App* get = job->add_subcommand("get", "Show a job");
  get->add_option("job", *get_arg, "Job id")->required();
  verbs.Add(get, [get_arg](Context& ctx) { return Get(ctx, *get_arg); });

  auto cancel_arg = std::make_shared<std::string>();
  CLI::App* cancel =
      job->add_subcommand("cancel", "Cancel a job: SIGTERM, a grace period, then SIGKILL");
  cancel->add_option("job", *cancel_arg, "Job id")->required();
  verbs.Add(cancel, [cancel_arg](Context& ctx) { return Cancel(ctx, *cancel_arg); });

  auto log_args = std::make_shared<LogArgs>();
  CLI::App* logs = job->add_subcommand("logs", "Print a job's stdout and stderr");
  logs->add_option("job", log_args->id, "Job id")->required();
  logs->add_flag("-f,--follow", log_args->follow, "Keep printing until the job ends");
  logs->add_option("--offset", log_args->offset, "Start at this byte")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 50));
  logs->add_option("--attempt", log_args->attempt, "Which attempt (default the current one)")
      ->check(CLI::Range(int64_t{0}, int64_t{1'000'000}));
  verbs.Add(logs, [log_args](Context& ctx) { return Logs(ctx, *log_args); });

  auto events_id = std::make_shared<std::string>();
  auto events_list = std::make_shared<ListArgs>();
  CLI::App* events = job->add_subcommand("events", "A job's transitions with reasons");
  events->add_option("job", *events_id, "Job id")->required();
  AddListOptions(events, *events_list);
  verbs.Add(events, [events_id, events_list](Context& ctx) {
    return Events(ctx, *events_id, *events_list);
  });

  auto upload_file = std::make_shared<std::string>();
  CLI::App* upload = job->add_subcommand(
      "upload", "Upload a tar or tar.gz of working files; jobs name it with --archive-id");
  upload->add_option("file", *upload_file, "The archive")->required();
  verbs.Add(upload, [upload_file](Context& ctx) { return Upload(ctx, *upload_file); });

  CLI::App* archives = job->add_subcommand("archives", "Your tenant's uploaded job archives");
  archives->require_subcommand(1);
  CLI::App* archives_list = archives->add_subcommand("list", "List the archives");
  verbs.Add(archives_list, [](Context& ctx) { return ListArchives(ctx); });
  auto archive_get_arg = std::make_shared<std::string>();
  CLI::App* archives_get = archives->add_subcommand("get", "Show an archive");
  archives_get->add_option("archive", *archive_get_arg, "Archive id")->required();
  verbs.Add(archives_get,
            [archive_get_arg](Context& ctx) { return GetArchive(ctx, *archive_get_arg); });
  auto archive_delete_arg = std::make_shared<std::string>();
  CLI::App* archives_delete = archives->add_subcommand("delete", "Delete an archive");
  archives_delete->add_option("archive", *archive_delete_arg, "Archive id")->required();
  verbs.Add(archives_delete,
            [archive_delete_arg](Context& ctx) { return DeleteArchive(ctx, *archive_delete_arg); });

  auto why_arg = std::make_shared<std::string>();
  CLI::App* why = job->add_subcommand("why", "Why a job waits, or where it runs");
  why->add_option("job", *why_arg, "Job id")->required();
  verbs.Add(why, [why_arg](Context& ctx) { return JobWhy(ctx, *why_arg); });
}

void AddResourceOptions(CLI::App* command, ResourceArgs& args, const std::string& model_flag,
                        const std::string& region_flag) {
  command->add_option("--kind", args.kind, "What to allocate")
      ->check(CLI::IsMember({"gpu", "mig", "share", "node"}))
      ->capture_default_str();
  command->add_option(model_flag, args.model, "GPU model, e.g. H100-80GB");
  command->add_option("--gpus", args.gpus, "GPUs (gpu, node), 1..8")->check(CLI::Range(1, 8));
  command->add_option("--mig-profile", args.mig_profile, "MIG profile, e.g. 3g.40gb");
  command->add_option("--share", args.share, "Fraction of one GPU (share), e.g. 0.25");
  command->add_option("--gpu-memory-mib", args.gpu_memory_mib, "GPU-memory cap of a share, MiB");
  command->add_option("--cpu-milli", args.cpu_milli, "Host CPU, milli-cores");
  command->add_option("--memory-mib", args.memory_mib, "Host memory, MiB");
  command->add_option("--pool", args.pool, "Only nodes of this pool");
  command->add_option(region_flag, args.region, "Only nodes of this region");
}

Result<Json> ResourcesBody(const ResourceArgs& args) {
  Json resources = {{"kind", args.kind}, {"model", args.model}};
  if (args.gpus > 0) resources["gpus"] = args.gpus;
  if (!args.mig_profile.empty()) resources["mig_profile"] = args.mig_profile;
  if (!args.share.empty()) {
    ATRIUM_ASSIGN_OR_RETURN(int64_t milli, ParseMilliGpus(args.share));
    if (milli < 1 || milli > 999) {
      return Error::InvalidArgument("--share must be between 1m and 0.999");
    }
    resources["milli"] = milli;
  }
  if (args.gpu_memory_mib > 0) resources["gpu_memory_mib"] = args.gpu_memory_mib;
  if (args.cpu_milli > 0) resources["cpu_milli"] = args.cpu_milli;
  if (args.memory_mib > 0) resources["memory_mib"] = args.memory_mib;
  if (!args.pool.empty()) resources["pool"] = args.pool;
  if (!args.region.empty()) resources["region"] = args.region;
  if (args.kind == "mig" && args.mig_profile.empty()) {
    return Error::InvalidArgument("--kind mig needs --mig-profile, e.g. 3g.40gb");
  }
  if (args.kind == "share" && (args.share.empty() || args.gpu_memory_mib <= 0)) {
    return Error::InvalidArgument("--kind share needs --share (e.g. 0.25) and --gpu-memory-mib");
  }
  return resources;
}

}  // namespace atrium::cli
