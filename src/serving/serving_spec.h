// What a managed deployment runs: the serving template (how an engine is
// started and checked) and the managed spec (which template, what each
// replica holds, how many). Pure: no clock, no I/O. The API and the store
// read a spec with the same strict reader (ReadManagedSpec), so what is
// stored is exactly what was accepted.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/json_reader.h"
#include "common/result.h"
#include "jobs/job_spec.h"
#include "scheduler/allocation.h"

namespace atrium::serving {

// How one engine is started and checked. Operators' templates come from
// the configuration ([serving.templates.NAME]); BuiltinTemplates() are the
// defaults for the engines Atrium knows.
//
// `command` is argv with placeholders, each replaced whole or inside an
// argument: {port} (the replica's port), {host} (the address it binds),
// {model} (the name clients send), {source} (what the engine loads: the
// spec's source, else the model name). Nothing a tenant writes is ever
// split into arguments: each value fills one placeholder of one argument.
struct ServingTemplate {
  std::string name;    // what a deployment names, e.g. "vllm"
  std::string engine;  // engine-sim | vllm | sglang | tgi | llama-cpp
  std::vector<std::string> command;
  std::vector<std::pair<std::string, std::string>> env;
  // Host folders the engine needs inside the local sandbox: (inside, host).
  std::vector<std::pair<std::string, std::string>> read_only_binds;
  std::string health_path = "/v1/models";  // 200: ready
  int64_t readiness_timeout_s = 600;       // from running to ready, at most
  // Where the engine tells, as Prometheus text, how many requests it runs
  // now (`running_metric`): a draining replica stops once it says 0. "":
  // it drains for the deployment's whole drain timeout.
  std::string metrics_path;
  std::string running_metric;
  // Requests the engine runs in one batch: a replica's slot capacity unless
  // the spec says otherwise (see EndpointSlotsOf).
  int64_t max_batch = 8;
  // Tenants' LoRA adapters (adapters.h). Where a deployment allows them,
  // `adapter_args` are appended to the command and `adapter_env` set; the
  // controller loads an adapter with POST adapter_load_path
  // {"lora_name", "lora_path"} and unloads it with POST adapter_unload_path
  // {"lora_name"} (vLLM's and SGLang's run-time LoRA API). Both "": the
  // engine cannot load adapters while it runs, and no deployment of this
  // template allows them.
  std::vector<std::string> adapter_args;
  std::vector<std::pair<std::string, std::string>> adapter_env;
  std::string adapter_load_path;
  std::string adapter_unload_path;
  bool loads_adapters() const { return !adapter_load_path.empty(); }
};

// The templates of engine-sim, vllm, sglang, tgi and llama-cpp as their
// manuals start them. engine-sim's command[0] is "atrium": the runtime puts
// the path of this binary there.
std::vector<ServingTemplate> BuiltinTemplates();
// InvalidArgument naming the field: a bad name or engine, an empty command,
// a placeholder that is not one of the four, no {port}, a bad path.
Status ValidateTemplate(const ServingTemplate& t);

// Upper bounds on what a spec may ask, so no number overflows downstream.
inline constexpr int64_t kMaxReplicas = 64;
inline constexpr int64_t kMaxDrainTimeoutS = 3600;
inline constexpr int64_t kMaxReplicaCapacity = 4096;
inline constexpr int64_t kMaxAdapters = 1024;

struct ManagedSpec {
  std::string template_name;
  // What the engine loads (a path or a hub id); "" = the model name.
  std::string source;
  // Appended to the template's command; platform staff only (ReadManagedSpec
  // refuses them from a tenant: an argument can change where the engine
  // listens or what it loads).
  std::vector<std::string> extra_args;
  // What each replica holds, as an allocation takes it (priority included).
  sched::AllocationRequest resources;
  int64_t replicas = 1;  // wanted now
  // Autoscaling: replicas move between min and max from the gateway's
  // signals; without it they stay at `replicas`.
  bool autoscale = false;
  int64_t min_replicas = 1;
  int64_t max_replicas = 1;
  // Requests a draining replica may finish before it is stopped.
  int64_t drain_timeout_s = 30;
  // Slots per replica at the gateway; 0 = the template's max_batch.
  int64_t capacity = 0;
  // Tenants' LoRA adapters the deployment holds at most (of every tenant);
  // 0: it allows none. Only on a template that loads adapters.
  int64_t max_adapters = 0;
  // Bumped when what a replica runs changes (template, source, args,
  // resources): replicas of an older generation are replaced.
  int64_t generation = 1;
  // Set by a roll back (stored form only): the generation that never became
  // ready and was given up. 0: this spec is what its author wrote.
  int64_t rolled_back_from = 0;

  bool operator==(const ManagedSpec&) const = default;
  // Whether two specs' replicas run the same thing (template, source, args,
  // resources): what a new generation changes.
  bool SameRun(const ManagedSpec& other) const;
};

enum class SpecAuthor { kTenant, kPlatform };

// Reads a spec from a JSON object: template, source, extra_args (platform
// only), resources (an allocation request without project), priority,
// replicas, autoscale, min_replicas, max_replicas, drain_timeout_s,
// capacity, generation and rolled_back_from (stored form only: an
// author's are refused).
// Unknown fields, wrong types and values out of bounds are InvalidArgument
// naming the field. `stored`: the canonical form read back (generation
// allowed).
Result<ManagedSpec> ReadManagedSpec(const Json& body, SpecAuthor author, bool stored = false);
Json ManagedSpecJson(const ManagedSpec& spec);
// Sets the replicas wanted now. A fixed-size spec's bounds follow them; an
// autoscaling one's do not: InvalidArgument outside min..max.
Status ScaleTo(ManagedSpec& spec, int64_t replicas);
// ReadManagedSpec of a stored deployment's `serving` text.
Result<ManagedSpec> ParseStoredSpec(const std::string& text);

// The template `name` among `templates`; NotFound naming the ones there are.
Result<ServingTemplate> FindTemplate(const std::vector<ServingTemplate>& templates,
                                     const std::string& name);

// Fills one argument's placeholders. InvalidArgument for an unknown one.
struct LaunchValues {
  int64_t port = 0;
  std::string host;
  std::string model;
  std::string source;
  // The deployment's adapter folder (host path), shown read-only inside
  // the local sandbox at `adapter_dir_inside`; "" inside: no bind, the
  // engine reads the folder where it is (the Slurm backend runs an engine
  // without a sandbox). Used only when the spec allows adapters.
  std::string adapter_dir;
  std::string adapter_dir_inside;
};
Result<std::string> FillPlaceholders(const std::string& arg, const LaunchValues& values);

// The job one replica is: the template's command filled in plus the
// spec's extra args (and, where the spec allows adapters, the template's
// adapter args and environment and the adapter folder), the template's environment, the spec's
// resources, the node's network and no time limit (src/jobs runs it like any job, on the allocation
// the scheduler places). `name` is the job's name.
Result<jobs::JobSpec> ReplicaJobSpec(const ServingTemplate& t, const ManagedSpec& spec,
                                     const std::string& name, const LaunchValues& values);

}  // namespace atrium::serving
