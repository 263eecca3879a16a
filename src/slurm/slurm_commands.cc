#include "slurm/slurm_commands.h"

#include <algorithm>
#include <set>

#include "exec/sandbox.h"
#include "slurm/slurm_text.h"

namespace atrium::slurm {
namespace {

bool IsIdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-';
}

bool IsEnvName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool HasNul(std::string_view s) { return s.find('\0') != std::string_view::npos; }

// The highest GPU index a node may have (matches the local sandbox's bound).
constexpr int kMaxGpuIndex = 1023;

}  // namespace

bool IsSafeWorkloadId(std::string_view id) {
  if (id.empty() || id.size() > 128 || id.front() == '.' || id.front() == '-') return false;
  return std::all_of(id.begin(), id.end(), IsIdChar);
}

bool IsSafeNodeName(std::string_view node) {
  if (node.empty() || node.size() > 64 || node.front() == '-') return false;
  return std::all_of(node.begin(), node.end(), IsIdChar);
}

WorkloadPaths PathsFor(std::string_view root, std::string_view workload_id) {
  WorkloadPaths p;
  p.dir = std::string(root) + "/" + std::string(workload_id);
  p.state = p.dir + "/state";
  p.batch_script = p.dir + "/job.sbatch";
  p.log = p.dir + "/log";
  p.archive = p.dir + "/archive";
  p.report = p.dir + "/report";
  p.work = p.dir + "/work";
  p.launch = p.work + "/launch.argv";
  p.script = p.work + "/.atrium-job.sh";
  return p;
}

Result<std::string> AccountForTenant(std::string_view tenant_id) {
  bool ok = !tenant_id.empty() && tenant_id.size() <= 64 && tenant_id.front() != '-' &&
            std::all_of(tenant_id.begin(), tenant_id.end(), [](char c) {
              return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
            });
  if (!ok) {
    return Error::InvalidArgument(
        "tenant_id: a Slurm account name needs 1..64 of [a-z0-9_-], not starting with '-'");
  }
  return std::string(tenant_id);
}

Result<std::string> UnixUserForTenant(std::string_view prefix, std::string_view tenant_id) {
  auto account = AccountForTenant(tenant_id);
  if (!account) return std::move(account).error();
  std::string user = std::string(prefix) + *account;
  bool ok = user.size() <= 32 && !user.empty() &&
            ((user[0] >= 'a' && user[0] <= 'z') || user[0] == '_') &&
            std::all_of(user.begin(), user.end(), [](char c) {
              return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
            });
  if (!ok) {
    return Error::InvalidArgument("tenant_id: '" + user +
                                  "' is not a Unix user name ([a-z_][a-z0-9_-]*, at most 32)");
  }
  return user;
}

Result<std::string> QosForPriority(std::string_view priority) {
  if (priority.empty() || priority == "batch") return std::string("batch");
  if (priority == "interactive" || priority == "preemptible") return std::string(priority);
  return Error::InvalidArgument("priority: expected interactive, batch or preemptible");
}

std::string SlurmTimeLimit(int64_t seconds) {
  return std::to_string(seconds / 60) + ":" + std::to_string(seconds % 60);
}

Result<Argv> BuildSbatchArgv(const exec::LaunchSpec& spec, const SubmitContext& context) {
  if (!IsSafeWorkloadId(spec.workload_id)) {
    return Error::InvalidArgument(
        "workload_id: 1..128 of [A-Za-z0-9_.-], not starting with . or -");
  }
  if (!IsSafeNodeName(spec.node)) {
    return Error::InvalidArgument("node: 1..64 of [A-Za-z0-9_.-], not starting with -");
  }
  if (spec.cpu_milli < 0 || spec.memory_mib < 0 || spec.time_limit_s < 0 || spec.pids_max < 0) {
    return Error::InvalidArgument("cpu_milli, memory_mib, pids_max, time_limit_s: must be >= 0");
  }
  if (!spec.read_only_binds.empty() && spec.root_fs.empty()) {
    return Error::InvalidArgument(
        "read_only_binds: a job without a root_fs runs unsandboxed on the node, where nothing is "
        "bound; name the host's paths themselves");
  }
  std::set<int> indices;
  int32_t share_milli = 0;
  for (const auto& gpu : spec.gpus) {
    if (!gpu.mig_profile.empty()) {
      return Error::InvalidArgument(
          "gpus: a MIG instance (" + gpu.mig_profile.substr(0, 32) +
          ") does not run on the slurm backend: Slurm 22.05 fixes a node's MIG instances in "
          "gres.conf while Atrium places them as tenants ask (docs/slurm.md, MIG)");
    }
    if (gpu.share_milli < 0 || gpu.share_milli >= 1000) {
      return Error::InvalidArgument("gpus: a share is 1..999 milli-GPU");
    }
    if (gpu.index < 0 || gpu.index > kMaxGpuIndex || !indices.insert(gpu.index).second) {
      return Error::InvalidArgument("gpus: index out of range or granted twice");
    }
    share_milli = std::max(share_milli, gpu.share_milli);
  }
  if (share_milli > 0 && spec.gpus.size() > 1) {
    return Error::InvalidArgument("gpus: a share is one GPU's, alone in its workload");
  }
  Argv argv = {context.sbatch,
               "--parsable",
               "--job-name=" + spec.workload_id,
               "--nodelist=" + spec.node,
               "--account=" + context.account,
               "--qos=" + context.qos,
               "--uid=" + context.user,
               "--gid=" + context.group,
               "--chdir=" + context.paths.work,
               "--output=" + context.paths.log,
               "--error=" + context.paths.log,
               "--open-mode=append",
               "--export=NONE",
               "--no-requeue",
               "--ntasks=1"};
  if (!context.partition.empty()) argv.push_back("--partition=" + context.partition);
  if (spec.cpu_milli > 0) {
    argv.push_back("--cpus-per-task=" + std::to_string((spec.cpu_milli + 999) / 1000));
  }
  if (spec.memory_mib > 0) argv.push_back("--mem=" + std::to_string(spec.memory_mib) + "M");
  if (spec.time_limit_s > 0) argv.push_back("--time=" + SlurmTimeLimit(spec.time_limit_s));
  if (share_milli > 0) {
    // A time-sliced share: shards of that GPU, one per milli-GPU
    // (deploy/slurm/gres.conf: 1000 shards per GPU, typed like it).
    const std::string count = std::to_string(share_milli);
    argv.push_back("--gres=shard:" + (context.gpu_types_are_indices
                                          ? "idx" + std::to_string(*indices.begin()) + ":" + count
                                          : count));
  } else if (!indices.empty()) {
    std::string gres;
    if (context.gpu_types_are_indices) {
      for (int index : indices) {
        if (!gres.empty()) gres += ",";
        gres += "gpu:idx" + std::to_string(index) + ":1";
      }
    } else {
      gres = "gpu:" + std::to_string(indices.size());
    }
    argv.push_back("--gres=" + gres);
  }
  argv.push_back(context.paths.batch_script);
  return argv;
}

Result<std::string> BuildLaunchFile(const exec::LaunchSpec& spec, const WorkloadPaths& paths,
                                    const Argv& wrapper) {
  Argv command;
  if (!spec.script.empty()) {
    if (HasNul(spec.script)) return Error::InvalidArgument("script: contains a NUL byte");
    command = {"/bin/sh", ".atrium-job.sh"};
    command.insert(command.end(), spec.argv.begin(), spec.argv.end());
  } else {
    if (spec.argv.empty() || spec.argv[0].empty()) {
      return Error::InvalidArgument("argv: the command is empty");
    }
    if (spec.argv[0].find('=') != std::string::npos) {
      return Error::InvalidArgument("argv: the command's first word may not contain '='");
    }
    command = spec.argv;
  }
  for (const auto& arg : command) {
    if (HasNul(arg)) return Error::InvalidArgument("argv: an argument contains a NUL byte");
  }
  Argv entries = wrapper;
  entries.insert(entries.end(),
                 {"/usr/bin/env", "--", "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + paths.work});
  // Atrium's own variables last: env(1) keeps the last of a name given twice.
  std::vector<std::pair<std::string, std::string>> env = spec.env;
  if (spec.gpus.size() == 1) {
    for (auto& entry : exec::ShareEnvironment(spec.gpus.front())) env.push_back(std::move(entry));
  }
  for (const auto& [name, value] : env) {
    if (!IsEnvName(name)) {
      return Error::InvalidArgument("env: '" + name.substr(0, 64) +
                                    "' is not a variable name ([A-Za-z_][A-Za-z0-9_]*)");
    }
    if (HasNul(value)) return Error::InvalidArgument("env: the value of " + name + " has a NUL");
    std::string entry = name;
    entry += '=';
    entry += value;
    entries.push_back(std::move(entry));
  }
  entries.insert(entries.end(), command.begin(), command.end());
  std::string file;
  for (const auto& entry : entries) {
    file += entry;
    file.push_back('\0');
  }
  return file;
}

Result<std::string> BuildSandboxedLaunchFile(const exec::LaunchSpec& spec,
                                             const WorkloadPaths& paths, const NodeSandbox& sandbox,
                                             uint32_t uid, uint32_t gid) {
  if (spec.root_fs.empty()) return Error::InvalidArgument("root_fs: none to sandbox");
  if (sandbox.init_path.empty()) {
    return Error::FailedPrecondition(
        "root_fs: this Slurm backend knows no atrium-sandbox-init on its nodes, so it cannot run"
        " an environment template's root");
  }
  exec::SandboxHost host;
  host.bwrap_path = sandbox.bwrap_path;
  host.device_dir = sandbox.device_dir;
  host.control_devices = sandbox.control_devices;
  host.control_devices_may_be_absent = true;
  host.work_dir = paths.work;
  host.init_path = sandbox.init_path;
  host.report_fd = kReportFd;
  host.uid = uid;
  host.gid = gid;
  // The jobs' network is the node's today (README "Running on Slurm"); the
  // sandbox gives a template's job a namespace of its own, as locally.
  host.unshare_network = true;
  auto plan = exec::PlanSandbox(spec, host);
  if (!plan) return std::move(plan).error();
  Argv entries = {"/usr/bin/env", "-i", "--"};
  // PlanSandbox checked the names ([A-Za-z_][A-Za-z0-9_]*) and the values.
  for (const auto& [name, value] : plan->env) {
    std::string entry = name;
    entry += '=';
    entry += value;
    entries.push_back(std::move(entry));
  }
  entries.insert(entries.end(), plan->argv.begin(), plan->argv.end());
  std::string file;
  for (const auto& entry : entries) {
    if (HasNul(entry)) return Error::InvalidArgument("an argument contains a NUL byte");
    file += entry;
    file.push_back('\0');
  }
  return file;
}

std::string_view BatchScript() {
  return "#!/bin/bash\n"
         "# Atrium's Slurm backend: the same text for every workload. The command,\n"
         "# its arguments and its environment are data in launch.argv (entries\n"
         "# ending in NUL), read with mapfile and exec'd: never shell code.\n"
         "set -eu\n"
         "if [ -f ../archive ]; then\n"
         "  /usr/bin/tar --no-same-owner --no-same-permissions -xf ../archive\n"
         "fi\n"
         "# A sandboxed command's init reports how it ended on fd 3 (root_fs only).\n"
         "if [ -f ../report ]; then exec 3>../report; fi\n"
         "mapfile -d '' -t atrium_argv < launch.argv\n"
         "exec \"${atrium_argv[@]}\"\n";
}

Argv ScontrolShowJobArgv(std::string_view job_id) {
  return {"scontrol", "show", "job", "-d", "-o", std::string(job_id)};
}

Argv ScontrolShowJobsArgv() { return {"scontrol", "show", "job", "-d", "-o"}; }

Argv SacctJobsArgv(const std::vector<std::string>& job_ids) {
  std::string list;
  for (const std::string& id : job_ids) list += (list.empty() ? "" : ",") + id;
  return SacctJobArgv(list);
}

Argv SacctJobArgv(std::string_view job_id) {
  return {"sacct",
          "-a",
          "-n",
          "-P",
          "-S",
          "1970-01-01T00:00:00",
          std::string("--format=") + kSacctFormat,
          "-j",
          std::string(job_id)};
}

Argv SacctByNameArgv(std::string_view workload_id) {
  return {"sacct",
          "-a",
          "-n",
          "-P",
          "-S",
          "1970-01-01T00:00:00",
          std::string("--format=") + kSacctFormat,
          "--name=" + std::string(workload_id)};
}

Argv SqueueByNameArgv(std::string_view workload_id) {
  return {"squeue", "-h", "-t", "all", "-o", "%A", "--name=" + std::string(workload_id)};
}

Argv ScancelSignalArgv(std::string_view job_id, std::string_view signal) {
  return {"scancel", "--full", "--signal=" + std::string(signal), std::string(job_id)};
}

Argv ScancelArgv(std::string_view job_id) { return {"scancel", std::string(job_id)}; }

std::string GrpTresForLimits(const std::vector<std::pair<std::string, int64_t>>& limits) {
  if (limits.empty()) return "gres/gpu=-1";
  int64_t sum = 0;
  for (const auto& [model, limit] : limits) {
    int64_t bounded = std::clamp<int64_t>(limit, 0, 1000000);
    if (model.empty()) return "gres/gpu=" + std::to_string(bounded);
    sum += bounded;
  }
  return "gres/gpu=" + std::to_string(sum);
}

Result<std::vector<Argv>> PlanTenantSync(const exec::TenantAccount& account,
                                         std::string_view unix_user_prefix, bool create_unix_users,
                                         const TenantFacts& facts) {
  auto name = AccountForTenant(account.tenant_id);
  if (!name) return std::move(name).error();
  auto user = UnixUserForTenant(unix_user_prefix, account.tenant_id);
  if (!user) return std::move(user).error();
  const std::string& acct = *name;
  std::vector<Argv> plan;
  const std::string where = "name=" + acct;
  if (account.state == "active") {
    if (create_unix_users && !facts.unix_user_exists) {
      plan.push_back({"useradd", "--system", "--user-group", "--no-create-home", "--shell",
                      "/usr/sbin/nologin", "--comment", "Atrium tenant " + acct, *user});
    }
    if (!facts.account_exists) {
      plan.push_back({"sacctmgr", "-i", "add", "account", acct, "Description=atrium tenant",
                      "Organization=" + acct});
    }
    if (!facts.association_exists) {
      plan.push_back({"sacctmgr", "-i", "add", "user", *user, "Account=" + acct,
                      "QOS=interactive,batch,preemptible", "DefaultQOS=batch"});
    }
    plan.push_back({"sacctmgr", "-i", "modify", "account", "where", where, "set",
                    "GrpTRES=" + GrpTresForLimits(account.gpu_limits), "GrpSubmitJobs=-1"});
    return plan;
  }
  if (account.state == "suspended" || account.state == "evicting") {
    if (facts.account_exists) {
      plan.push_back(
          {"sacctmgr", "-i", "modify", "account", "where", where, "set", "GrpSubmitJobs=0"});
      plan.push_back({"scancel", "--account=" + acct});
    }
    return plan;
  }
  if (account.state == "deleted") {
    if (facts.account_exists) {
      plan.push_back({"scancel", "--account=" + acct});
      if (facts.association_exists) {
        plan.push_back(
            {"sacctmgr", "-i", "delete", "user", "where", "name=" + *user, "account=" + acct});
      }
      plan.push_back({"sacctmgr", "-i", "delete", "account", "where", where});
    }
    return plan;
  }
  return Error::InvalidArgument("state: expected active, suspended, evicting or deleted");
}

std::vector<Argv> PlanQosSetup(const std::vector<std::string>& existing, int64_t grace_s) {
  auto has = [&](std::string_view name) {
    return std::find(existing.begin(), existing.end(), name) != existing.end();
  };
  std::vector<Argv> plan;
  const std::string grace = "GraceTime=" + std::to_string(std::max<int64_t>(grace_s, 0));
  if (!has("preemptible")) {
    plan.push_back({"sacctmgr", "-i", "add", "qos", "preemptible", "Priority=0",
                    "PreemptMode=requeue", grace});
  } else {
    // The grace period follows the scheduler's setting on every start.
    plan.push_back({"sacctmgr", "-i", "modify", "qos", "where", "name=preemptible", "set", grace});
  }
  if (!has("batch")) {
    plan.push_back({"sacctmgr", "-i", "add", "qos", "batch", "Priority=50", "Preempt=preemptible"});
  }
  if (!has("interactive")) {
    plan.push_back(
        {"sacctmgr", "-i", "add", "qos", "interactive", "Priority=100", "Preempt=preemptible"});
  }
  return plan;
}

}  // namespace atrium::slurm
