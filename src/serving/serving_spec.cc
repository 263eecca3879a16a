#include "serving/serving_spec.h"

#include <algorithm>
#include <map>

#include "common/strings.h"
#include "scheduler/request_json.h"

namespace atrium::serving {
namespace {

bool IsTemplateName(std::string_view s) {
  if (s.empty() || s.size() > 63) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
  });
}

bool HasControl(std::string_view s) {
  return std::any_of(s.begin(), s.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

const std::vector<std::string>& Engines() {
  static const std::vector<std::string> kEngines = {"engine-sim", "vllm", "sglang", "tgi",
                                                    "llama-cpp"};
  return kEngines;
}

}  // namespace

std::vector<ServingTemplate> BuiltinTemplates() {
  std::vector<ServingTemplate> out;
  {
    // The simulator: no GPU used; named a simulator wherever it answers.
    ServingTemplate t;
    t.name = t.engine = "engine-sim";
    // Its batch is the profile's, and the template's max_batch, which the
    // gateway's slots are derived from (EndpointOf: 32 slots, 8 burst
    // slots, 2 prefills at once: BENCHMARKS.md section 6.3's setting).
    t.command = {"atrium",  "engine-sim", "--listen",       "{host}:{port}", "--model",
                 "{model}", "--profile",  "h100-llama3-8b", "--max-batch",   "64"};
    t.readiness_timeout_s = 60;
    t.metrics_path = "/metrics";
    t.running_metric = "vllm:num_requests_running";
    t.max_batch = 64;
    t.adapter_args = {"--enable-lora"};
    t.adapter_load_path = "/v1/load_lora_adapter";
    t.adapter_unload_path = "/v1/unload_lora_adapter";
    out.push_back(std::move(t));
  }
  {
    // vLLM's OpenAI-compatible server (`vllm serve`); metrics as vLLM
    // names them.
    ServingTemplate t;
    t.name = t.engine = "vllm";
    t.command = {"vllm",   "serve",  "{source}", "--served-model-name",    "{model}", "--host",
                 "{host}", "--port", "{port}",   "--enable-prefix-caching"};
    t.metrics_path = "/metrics";
    t.running_metric = "vllm:num_requests_running";
    t.max_batch = 256;
    // vLLM's LoRA serving, adapters loaded while it runs.
    t.adapter_args = {"--enable-lora"};
    t.adapter_env = {{"VLLM_ALLOW_RUNTIME_LORA_UPDATING", "True"}};
    t.adapter_load_path = "/v1/load_lora_adapter";
    t.adapter_unload_path = "/v1/unload_lora_adapter";
    out.push_back(std::move(t));
  }
  {
    ServingTemplate t;
    t.name = t.engine = "sglang";
    t.command = {"python3",      "-m",       "sglang.launch_server",
                 "--model-path", "{source}", "--served-model-name",
                 "{model}",      "--host",   "{host}",
                 "--port",       "{port}",   "--enable-metrics"};
    t.health_path = "/health";
    t.metrics_path = "/metrics";
    t.running_metric = "sglang:num_running_reqs";
    t.max_batch = 256;
    t.adapter_args = {"--enable-lora"};
    t.adapter_load_path = "/load_lora_adapter";
    t.adapter_unload_path = "/unload_lora_adapter";
    out.push_back(std::move(t));
  }
  {
    // Hugging Face text-generation-inference: OpenAI chat at
    // /v1/chat/completions, health at /health.
    ServingTemplate t;
    t.name = t.engine = "tgi";
    t.command = {"text-generation-launcher",
                 "--model-id",
                 "{source}",
                 "--hostname",
                 "{host}",
                 "--port",
                 "{port}"};
    t.health_path = "/health";
    t.metrics_path = "/metrics";
    t.running_metric = "tgi_batch_current_size";
    t.max_batch = 128;
    out.push_back(std::move(t));
  }
  {
    ServingTemplate t;
    t.name = t.engine = "llama-cpp";
    t.command = {"llama-server", "-m",     "{source}", "--alias", "{model}",
                 "--host",       "{host}", "--port",   "{port}",  "--metrics"};
    t.health_path = "/health";
    t.metrics_path = "/metrics";
    t.running_metric = "llamacpp:requests_processing";
    t.max_batch = 4;
    out.push_back(std::move(t));
  }
  return out;
}

Result<std::string> FillPlaceholders(const std::string& arg, const LaunchValues& values) {
  std::string out;
  size_t i = 0;
  while (i < arg.size()) {
    const size_t open = arg.find('{', i);
    if (open == std::string::npos) {
      out.append(arg, i);
      break;
    }
    out.append(arg, i, open - i);
    const size_t close = arg.find('}', open);
    if (close == std::string::npos) {
      return Error::InvalidArgument("unclosed placeholder in '" + arg + "'");
    }
    const std::string name = arg.substr(open + 1, close - open - 1);
    if (name == "port") {
      out += std::to_string(values.port);
    } else if (name == "host") {
      out += values.host;
    } else if (name == "model") {
      out += values.model;
    } else if (name == "source") {
      out += values.source.empty() ? values.model : values.source;
    } else {
      return Error::InvalidArgument("unknown placeholder {" + name.substr(0, 32) +
                                    "}: the template may use {port}, {host}, {model}, {source}");
    }
    i = close + 1;
  }
  return out;
}

Status ValidateTemplate(const ServingTemplate& t) {
  if (!IsTemplateName(t.name)) {
    return Error::InvalidArgument("serving template name must be 1-63 of [a-z0-9._-]");
  }
  if (std::find(Engines().begin(), Engines().end(), t.engine) == Engines().end()) {
    return Error::InvalidArgument("serving template " + t.name +
                                  ": engine must be engine-sim, vllm, sglang, tgi or llama-cpp");
  }
  if (t.command.empty() || t.command.front().empty()) {
    return Error::InvalidArgument("serving template " + t.name + ": command is empty");
  }
  bool has_port = false;
  const LaunchValues probe{1, "h", "m", "s", "", ""};
  for (const std::string& arg : t.command) {
    if (HasControl(arg)) {
      return Error::InvalidArgument("serving template " + t.name +
                                    ": command holds a control character");
    }
    auto filled = FillPlaceholders(arg, probe);
    if (!filled.has_value()) {
      return Error::InvalidArgument("serving template " + t.name + ": " + filled.error().message);
    }
    has_port = has_port || arg.find("{port}") != std::string::npos;
  }
  if (!has_port) {
    return Error::InvalidArgument("serving template " + t.name +
                                  ": command must pass the replica its {port}");
  }
  for (const std::string& arg : t.adapter_args) {
    if (HasControl(arg) || !FillPlaceholders(arg, probe).has_value()) {
      return Error::InvalidArgument("serving template " + t.name +
                                    ": adapter_args hold a control character or a bad placeholder");
    }
  }
  if (t.adapter_load_path.empty() != t.adapter_unload_path.empty()) {
    return Error::InvalidArgument("serving template " + t.name +
                                  ": adapter_load_path and adapter_unload_path go together");
  }
  std::vector<std::pair<std::string, std::string>> every_env = t.env;
  every_env.insert(every_env.end(), t.adapter_env.begin(), t.adapter_env.end());
  for (const auto& [name, value] : every_env) {
    if (name.empty() || jobs::IsReservedEnvName(name) || HasControl(value)) {
      return Error::InvalidArgument("serving template " + t.name + ": env " + name.substr(0, 64) +
                                    " is reserved or malformed");
    }
  }
  for (const auto& [inside, host] : t.read_only_binds) {
    if (!IsCleanAbsolutePath(inside) || !IsCleanAbsolutePath(host)) {
      return Error::InvalidArgument("serving template " + t.name +
                                    ": read_only_binds must be absolute paths without '..'");
    }
  }
  for (const std::string* path :
       {&t.health_path, &t.metrics_path, &t.adapter_load_path, &t.adapter_unload_path}) {
    if (path->empty() && path != &t.health_path) continue;
    if (path->empty() || path->front() != '/' || path->size() > 256 || HasControl(*path) ||
        path->find(' ') != std::string::npos) {
      return Error::InvalidArgument(
          "serving template " + t.name +
          ": health_path, metrics_path and the adapter paths are paths such as /v1/models");
    }
  }
  if (t.readiness_timeout_s < 1 || t.readiness_timeout_s > 86'400) {
    return Error::InvalidArgument("serving template " + t.name +
                                  ": readiness_timeout_s must be 1..86400");
  }
  if (t.max_batch < 1 || t.max_batch > kMaxReplicaCapacity) {
    return Error::InvalidArgument("serving template " + t.name + ": max_batch must be 1.." +
                                  std::to_string(kMaxReplicaCapacity));
  }
  return OkStatus();
}

Result<ManagedSpec> ReadManagedSpec(const Json& body, SpecAuthor author, bool stored) {
  if (!body.is_object()) return Error::InvalidArgument("field 'serving' must be an object");
  JsonObjectReader r(body, "serving");
  auto template_name = r.String("template", true, 63);
  auto source = r.String("source", false, 1024);
  std::optional<std::vector<std::string>> extra_args;
  if (author == SpecAuthor::kPlatform || stored) {
    extra_args = r.StringList("extra_args", false, 64, 1024);
  }
  auto priority = r.String("priority", false, 16);
  auto replicas = r.Int("replicas", false, 0, kMaxReplicas);
  auto autoscale = r.Bool("autoscale", false);
  auto min_replicas = r.Int("min_replicas", false, 0, kMaxReplicas);
  auto max_replicas = r.Int("max_replicas", false, 1, kMaxReplicas);
  auto drain_timeout = r.Int("drain_timeout_s", false, 0, kMaxDrainTimeoutS);
  auto capacity = r.Int("capacity", false, 0, kMaxReplicaCapacity);
  auto max_adapters = r.Int("max_adapters", false, 0, kMaxAdapters);
  std::optional<int64_t> generation;
  std::optional<int64_t> rolled_back_from;
  if (stored) {
    generation = r.Int("generation", false, 1, INT64_MAX / 2);
    rolled_back_from = r.Int("rolled_back_from", false, 0, INT64_MAX / 2);
  }
  const bool resources_null = r.IsNull("resources");
  ATRIUM_RETURN_IF_ERROR(r.Finish());

  ManagedSpec s;
  if (!IsTemplateName(*template_name)) {
    return Error::InvalidArgument("serving.template must be 1-63 of [a-z0-9._-]");
  }
  s.template_name = *template_name;
  if (source) {
    if (source->empty() || HasControl(*source) || source->front() == '-') {
      return Error::InvalidArgument("serving.source must be printable and must not start with '-'");
    }
    s.source = *source;
  }
  if (extra_args) {
    for (const std::string& a : *extra_args) {
      if (HasControl(a)) {
        return Error::InvalidArgument("serving.extra_args must not hold control characters");
      }
    }
    s.extra_args = *extra_args;
  }
  auto it = body.find("resources");
  if (it == body.end() || resources_null) {
    return Error::InvalidArgument("missing required field 'serving.resources'");
  }
  if (!it->is_object())
    return Error::InvalidArgument("field 'serving.resources' must be an object");
  JsonObjectReader rr(*it, "serving.resources");
  sched::AllocationFields fields = sched::ReadAllocationFields(rr, false);
  ATRIUM_RETURN_IF_ERROR(rr.Finish());
  ATRIUM_ASSIGN_OR_RETURN(s.resources, sched::AllocationRequestOf(fields));
  if (s.resources.nodes > 1) {
    return Error::InvalidArgument("a replica runs on one node: kind gang is not supported");
  }
  if (priority) {
    ATRIUM_ASSIGN_OR_RETURN(s.resources.priority, sched::ParsePriority(*priority));
  }
  s.autoscale = autoscale.value_or(false);
  s.replicas = replicas.value_or(1);
  s.min_replicas = min_replicas.value_or(s.autoscale ? 1 : s.replicas);
  s.max_replicas = max_replicas.value_or(std::max<int64_t>(s.replicas, 1));
  if (s.min_replicas > s.max_replicas) {
    return Error::InvalidArgument("serving.min_replicas is above serving.max_replicas");
  }
  if (s.replicas < s.min_replicas || s.replicas > s.max_replicas) {
    return Error::InvalidArgument("serving.replicas must lie within min_replicas..max_replicas");
  }
  s.drain_timeout_s = drain_timeout.value_or(30);
  s.capacity = capacity.value_or(0);
  s.max_adapters = max_adapters.value_or(0);
  s.generation = generation.value_or(1);
  s.rolled_back_from = rolled_back_from.value_or(0);
  return s;
}

Json ManagedSpecJson(const ManagedSpec& s) {
  Json j = Json::object();
  j["template"] = s.template_name;
  if (!s.source.empty()) j["source"] = s.source;
  if (!s.extra_args.empty()) j["extra_args"] = s.extra_args;
  j["resources"] = sched::AllocationRequestJson(s.resources, false);
  j["priority"] = std::string(sched::PriorityName(s.resources.priority));
  j["replicas"] = s.replicas;
  j["autoscale"] = s.autoscale;
  j["min_replicas"] = s.min_replicas;
  j["max_replicas"] = s.max_replicas;
  j["drain_timeout_s"] = s.drain_timeout_s;
  j["capacity"] = s.capacity;
  if (s.max_adapters > 0) j["max_adapters"] = s.max_adapters;
  j["generation"] = s.generation;
  if (s.rolled_back_from > 0) j["rolled_back_from"] = s.rolled_back_from;
  return j;
}

bool ManagedSpec::SameRun(const ManagedSpec& other) const {
  return template_name == other.template_name && source == other.source &&
         extra_args == other.extra_args && resources == other.resources &&
         (max_adapters > 0) == (other.max_adapters > 0);
}

Status ScaleTo(ManagedSpec& spec, int64_t replicas) {
  if (replicas < 0 || replicas > kMaxReplicas) {
    return Error::InvalidArgument("replicas must be between 0 and " + std::to_string(kMaxReplicas));
  }
  if (spec.autoscale && (replicas < spec.min_replicas || replicas > spec.max_replicas)) {
    return Error::InvalidArgument("the deployment autoscales between " +
                                  std::to_string(spec.min_replicas) + " and " +
                                  std::to_string(spec.max_replicas) +
                                  " replicas; change min_replicas and max_replicas instead");
  }
  spec.replicas = replicas;
  if (!spec.autoscale) {
    spec.min_replicas = std::min(spec.min_replicas, replicas);
    spec.max_replicas = std::max<int64_t>({spec.max_replicas, replicas, 1});
  }
  return OkStatus();
}

Result<ManagedSpec> ParseStoredSpec(const std::string& text) {
  ATRIUM_ASSIGN_OR_RETURN(Json j, ParseJson(text));
  return ReadManagedSpec(j, SpecAuthor::kPlatform, /*stored=*/true);
}

Result<ServingTemplate> FindTemplate(const std::vector<ServingTemplate>& templates,
                                     const std::string& name) {
  std::string names;
  for (const ServingTemplate& t : templates) {
    if (t.name == name) return t;
    names += (names.empty() ? "" : ", ") + t.name;
  }
  return Error::NotFound("no serving template '" + name + "' (there are: " + names + ")");
}

Result<jobs::JobSpec> ReplicaJobSpec(const ServingTemplate& t, const ManagedSpec& spec,
                                     const std::string& name, const LaunchValues& values) {
  jobs::JobSpec job;
  job.name = name;
  for (const std::string& arg : t.command) {
    ATRIUM_ASSIGN_OR_RETURN(std::string filled, FillPlaceholders(arg, values));
    job.args.push_back(std::move(filled));
  }
  job.command = {job.args.front()};
  job.args.erase(job.args.begin());
  job.args.insert(job.args.end(), spec.extra_args.begin(), spec.extra_args.end());
  std::map<std::string, std::string> env(t.env.begin(), t.env.end());
  job.platform.read_only_binds = t.read_only_binds;
  if (spec.max_adapters > 0) {
    if (!t.loads_adapters() || values.adapter_dir.empty()) {
      return Error::FailedPrecondition("serving template " + t.name + " cannot load adapters here");
    }
    for (const std::string& arg : t.adapter_args) {
      ATRIUM_ASSIGN_OR_RETURN(std::string filled, FillPlaceholders(arg, values));
      job.args.push_back(std::move(filled));
    }
    for (const auto& [name, value] : t.adapter_env) env[name] = value;
    if (!values.adapter_dir_inside.empty()) {
      job.platform.read_only_binds.emplace_back(values.adapter_dir_inside, values.adapter_dir);
    }
  }
  job.env.assign(env.begin(), env.end());
  job.resources = spec.resources;
  job.time_limit_s = 0;
  job.platform.host_network = true;
  std::sort(job.platform.read_only_binds.begin(), job.platform.read_only_binds.end());
  job.platform.no_time_limit = true;
  return job;
}

}  // namespace atrium::serving
