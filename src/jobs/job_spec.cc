#include "jobs/job_spec.h"

#include <algorithm>

#include "common/strings.h"
#include "scheduler/request_json.h"

namespace atrium::jobs {
namespace {

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

// [A-Za-z0-9._-], 1..max_len, not starting with '.' (so never "." or "..":
// references end up in file names on the backends).
bool IsPlainName(std::string_view s, size_t max_len) {
  if (s.empty() || s.size() > max_len || s.front() == '.') return false;
  return std::all_of(s.begin(), s.end(), IsNameChar);
}

bool IsEnvName(std::string_view s, size_t max_len) {
  if (s.empty() || s.size() > max_len) return false;
  if (s.front() >= '0' && s.front() <= '9') return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

bool HasNul(std::string_view s) { return s.find('\0') != std::string_view::npos; }

Status CheckArgv(const std::vector<std::string>& argv, const JobLimits& limits) {
  if (argv.size() > limits.max_args) {
    return Error::InvalidArgument("command and args take at most " +
                                  std::to_string(limits.max_args) + " items");
  }
  size_t total = 0;
  for (const std::string& a : argv) {
    if (HasNul(a)) return Error::InvalidArgument("command and args must not contain NUL bytes");
    total += a.size() + 1;
  }
  if (total > limits.max_argv_bytes) {
    return Error::InvalidArgument("command and args are longer than " +
                                  std::to_string(limits.max_argv_bytes) + " bytes together");
  }
  return OkStatus();
}

}  // namespace

std::string_view RestartPolicyName(RestartPolicyKind kind) {
  switch (kind) {
    case RestartPolicyKind::kNever:
      return "never";
    case RestartPolicyKind::kOnFailure:
      return "on-failure";
    case RestartPolicyKind::kRequeueOnPreemption:
      return "requeue-on-preemption";
  }
  return "never";
}

Result<RestartPolicyKind> ParseRestartPolicy(std::string_view name) {
  for (auto kind : {RestartPolicyKind::kNever, RestartPolicyKind::kOnFailure,
                    RestartPolicyKind::kRequeueOnPreemption}) {
    if (RestartPolicyName(kind) == name) return kind;
  }
  return Error::InvalidArgument(
      "restart_policy must be one of never, on-failure, "
      "requeue-on-preemption");
}

bool IsReservedEnvName(std::string_view name) {
  for (std::string_view reserved :
       {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "LD_PRELOAD",
        "LD_AUDIT", "LD_LIBRARY_PATH"}) {
    if (name == reserved) return true;
  }
  return StartsWith(name, "ATRIUM_") || StartsWith(name, "CUDA_MPS_");
}

std::vector<std::string> JobSpec::Argv() const {
  std::vector<std::string> argv = command;
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

Result<EnvironmentRef> ParseEnvironmentRef(std::string_view text) {
  EnvironmentRef ref;
  size_t at = text.find('@');
  ref.name = std::string(text.substr(0, at));
  if (at != std::string_view::npos) ref.version = std::string(text.substr(at + 1));
  if (!IsPlainName(ref.name, 63) ||
      (at != std::string_view::npos && !IsPlainName(ref.version, 63))) {
    return Error::InvalidArgument(
        "environment must be 'name' or 'name@version' ([A-Za-z0-9._-], at most 63 each)");
  }
  return ref;
}

namespace {

Result<PlatformFields> ReadPlatformFields(const Json& body) {
  PlatformFields p;
  auto it = body.find("platform");
  if (it == body.end()) return p;
  if (!it->is_object()) return Error::InvalidArgument("field 'platform' must be an object");
  JsonObjectReader r(*it, "platform");
  auto host_network = r.Bool("host_network", false);
  auto binds = r.StringMap("read_only_binds", false, 16, 4096);
  auto no_time_limit = r.Bool("no_time_limit", false);
  ATRIUM_RETURN_IF_ERROR(r.Finish());
  p.host_network = host_network.value_or(false);
  for (const auto& [inside, host] : binds.value_or(std::map<std::string, std::string>{})) {
    if (!IsCleanAbsolutePath(inside) || !IsCleanAbsolutePath(host)) {
      return Error::InvalidArgument(
          "read_only_binds: both sides must be absolute paths without '..'");
    }
    p.read_only_binds.emplace_back(inside, host);
  }
  p.no_time_limit = no_time_limit.value_or(false);
  return p;
}

}  // namespace

Result<JobSpec> ReadJobSpec(const Json& body, const JobLimits& limits, SpecOrigin origin) {
  JsonObjectReader r(body, "job");
  auto name = r.String("name", true, 128);
  auto project = r.String("project", false, 63);
  auto command = r.String("command", false, limits.max_arg_bytes);
  auto args = r.StringList("args", false, limits.max_args, limits.max_arg_bytes);
  auto script = r.String("script", false, limits.max_script_bytes);
  auto env = r.StringMap("env", false, limits.max_env_vars, limits.max_env_value_bytes);
  auto archive = r.String("archive", false, 128);
  auto archive_bytes = r.Int("archive_bytes", false, 1, limits.max_archive_bytes);
  auto priority = r.String("priority", false, 16);
  auto time_limit = r.Int("time_limit_s", false, 1, limits.max_time_limit_s);
  auto restart = r.String("restart_policy", false, 32);
  auto max_restarts = r.Int("max_restarts", false, 0, limits.max_restarts);
  auto environment = r.String("environment", false, 127);
  // An object: read by its own reader below; IsNull marks it known.
  const bool resources_null = r.IsNull("resources");
  // Only the platform's own jobs carry it; to a tenant it is unknown.
  const bool platform_null = origin == SpecOrigin::kPlatform && r.IsNull("platform");
  ATRIUM_RETURN_IF_ERROR(r.Finish());

  JobSpec s;
  if (origin == SpecOrigin::kPlatform && !platform_null) {
    ATRIUM_ASSIGN_OR_RETURN(s.platform, ReadPlatformFields(body));
  }
  auto it = body.find("resources");
  if (it == body.end() || resources_null) {
    return Error::InvalidArgument("missing required field 'resources'");
  }
  if (!it->is_object()) return Error::InvalidArgument("field 'resources' must be an object");
  JsonObjectReader rr(*it, "resources");
  sched::AllocationFields fields = sched::ReadAllocationFields(rr, false);
  ATRIUM_RETURN_IF_ERROR(rr.Finish());
  ATRIUM_ASSIGN_OR_RETURN(s.resources, sched::AllocationRequestOf(fields));
  if (s.resources.nodes > 1) {
    // The backend launches one workload on one node; a gang would hold
    // nodes its job never uses.
    return Error::InvalidArgument("a job runs on one node: kind gang is not supported for jobs");
  }
  if (priority) {
    ATRIUM_ASSIGN_OR_RETURN(s.resources.priority, sched::ParsePriority(*priority));
  }

  if (!IsPlainName(*name, 128)) {
    return Error::InvalidArgument("name must be 1 to 128 of [A-Za-z0-9._-], not starting with '.'");
  }
  s.name = *name;
  if (project) {
    if (!IsValidSlug(*project)) return Error::InvalidArgument("project is not a valid name");
    s.project = *project;
  }
  s.resources.project = s.project;

  if (command.has_value() == script.has_value()) {
    return Error::InvalidArgument("a job needs exactly one of 'command' and 'script'");
  }
  if (command) {
    if (command->empty()) return Error::InvalidArgument("command must not be empty");
    s.command = {*command};
  }
  if (script) {
    if (script->empty()) return Error::InvalidArgument("script must not be empty");
    if (HasNul(*script)) return Error::InvalidArgument("script must not contain NUL bytes");
    s.script = *script;
  }
  s.args = args.value_or(std::vector<std::string>{});
  ATRIUM_RETURN_IF_ERROR(CheckArgv(s.Argv(), limits));

  size_t env_bytes = 0;
  for (const auto& [key, value] : env.value_or(std::map<std::string, std::string>{})) {
    if (!IsEnvName(key, limits.max_env_name_bytes)) {
      return Error::InvalidArgument("env name '" + key.substr(0, 64) +
                                    "' must be [A-Za-z_][A-Za-z0-9_]*, at most " +
                                    std::to_string(limits.max_env_name_bytes) + " bytes");
    }
    if (IsReservedEnvName(key)) {
      return Error::InvalidArgument("env name '" + key + "' is reserved for the platform");
    }
    if (HasNul(value)) return Error::InvalidArgument("env value of '" + key + "' contains NUL");
    env_bytes += key.size() + value.size() + 2;
    s.env.emplace_back(key, value);  // std::map: sorted by name
  }
  if (env_bytes > limits.max_env_bytes) {
    return Error::InvalidArgument("env is larger than " + std::to_string(limits.max_env_bytes) +
                                  " bytes together");
  }

  if (archive.has_value() != archive_bytes.has_value()) {
    return Error::InvalidArgument("'archive' and 'archive_bytes' go together");
  }
  if (archive) {
    if (!IsPlainName(*archive, 128)) {
      return Error::InvalidArgument("archive must be an upload's reference ([A-Za-z0-9._-])");
    }
    s.archive = *archive;
    s.archive_bytes = *archive_bytes;
  }

  s.time_limit_s = time_limit.value_or(limits.default_time_limit_s);
  if (s.platform.no_time_limit) {
    if (time_limit)
      return Error::InvalidArgument("time_limit_s and no_time_limit exclude each other");
    s.time_limit_s = 0;
  }
  if (restart) {
    ATRIUM_ASSIGN_OR_RETURN(s.restart.kind, ParseRestartPolicy(*restart));
  }
  if (s.restart.kind == RestartPolicyKind::kNever) {
    if (max_restarts && *max_restarts != 0) {
      return Error::InvalidArgument(
          "max_restarts needs restart_policy on-failure or "
          "requeue-on-preemption");
    }
  } else {
    s.restart.max_restarts =
        max_restarts.value_or(s.restart.kind == RestartPolicyKind::kOnFailure ? 3 : 10);
  }
  if (environment) {
    ATRIUM_RETURN_IF_ERROR(ParseEnvironmentRef(*environment));
    s.environment = *environment;
  }
  return s;
}

Json JobSpecJson(const JobSpec& s) {
  Json j = Json::object();
  j["name"] = s.name;
  if (!s.project.empty()) j["project"] = s.project;
  if (!s.command.empty()) j["command"] = s.command.front();
  if (!s.args.empty()) j["args"] = s.args;
  if (!s.script.empty()) j["script"] = s.script;
  if (!s.env.empty()) {
    Json env = Json::object();
    for (const auto& [k, v] : s.env) env[k] = v;
    j["env"] = env;
  }
  if (!s.archive.empty()) {
    j["archive"] = s.archive;
    j["archive_bytes"] = s.archive_bytes;
  }
  j["resources"] = sched::AllocationRequestJson(s.resources, false);
  j["priority"] = std::string(sched::PriorityName(s.resources.priority));
  j["time_limit_s"] = s.time_limit_s;
  j["restart_policy"] = std::string(RestartPolicyName(s.restart.kind));
  if (s.restart.kind != RestartPolicyKind::kNever) j["max_restarts"] = s.restart.max_restarts;
  if (!s.environment.empty()) j["environment"] = s.environment;
  if (s.platform != PlatformFields{}) {
    Json p = Json::object();
    if (s.platform.host_network) p["host_network"] = true;
    if (!s.platform.read_only_binds.empty()) {
      Json binds = Json::object();
      for (const auto& [inside, host] : s.platform.read_only_binds) binds[inside] = host;
      p["read_only_binds"] = binds;
    }
    if (s.platform.no_time_limit) p["no_time_limit"] = true;
    j["platform"] = p;
  }
  if (s.platform.no_time_limit) j.erase("time_limit_s");
  return j;
}

}  // namespace atrium::jobs
