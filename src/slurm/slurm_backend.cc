#include "slurm/slurm_backend.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/atomic_file.h"
#include "common/remove_tree.h"
#include "exec/sandbox.h"

namespace atrium::slurm {
namespace {

constexpr int64_t kMaxLogRead = 1 << 20;

std::string OsError(std::string_view what, const std::string& path) {
  return std::string(what) + " " + path + ": " + strerror(errno);
}

struct UnixIds {
  uid_t uid = 0;
  gid_t gid = 0;
};

// The uid and primary gid of `user`; NotFound when there is none.
Result<UnixIds> LookupUser(const std::string& user) {
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  if (getpwnam_r(user.c_str(), &pw, buf.data(), buf.size(), &found) != 0 || !found) {
    return Error::NotFound("no Unix user " + user);
  }
  if (pw.pw_uid == 0) return Error::InvalidArgument("tenant user " + user + " is root");
  return UnixIds{pw.pw_uid, pw.pw_gid};
}

Status MakeDir(const std::string& path, mode_t mode, uid_t uid, gid_t gid) {
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) {
    return Error::Unavailable(OsError("mkdir", path));
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Error::Unavailable(path + " is not a directory");
  }
  if (::chown(path.c_str(), uid, gid) != 0 || ::chmod(path.c_str(), mode) != 0) {
    return Error::Unavailable(OsError("chown/chmod", path));
  }
  return OkStatus();
}

// Opens `path` for writing as a fresh, empty regular file, refusing what a
// tenant's user could have planted there first (the workload's directory is
// its own): a symbolic link (O_NOFOLLOW), a FIFO or device (O_NONBLOCK so
// opening one cannot block, then S_ISREG), or a hard link to a file
// elsewhere (one link only) — and truncates only after those checks.
Result<int> OpenFreshFile(const std::string& path) {
  const std::string planted = path + " is not a plain file of its own: refusing to write it";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
  // ELOOP: a symbolic link; ENXIO: a FIFO nobody reads.
  if (fd < 0 && (errno == ELOOP || errno == ENXIO)) return Error::Unavailable(planted);
  if (fd < 0) return Error::Unavailable(OsError("open", path));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
    ::close(fd);
    return Error::Unavailable(planted);
  }
  if (::ftruncate(fd, 0) != 0) {
    ::close(fd);
    return Error::Unavailable(OsError("ftruncate", path));
  }
  return fd;
}

Status WriteAll(int fd, std::string_view contents, const std::string& path) {
  size_t done = 0;
  while (done < contents.size()) {
    ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error::Unavailable(OsError("write", path));
    done += static_cast<size_t>(n);
  }
  return OkStatus();
}

// Gives the open file to uid:gid with `mode` and closes it.
Status HandOver(int fd, mode_t mode, uid_t uid, gid_t gid, const std::string& path) {
  bool ok = ::fchown(fd, uid, gid) == 0 && ::fchmod(fd, mode) == 0;
  ::close(fd);
  if (!ok) return Error::Unavailable(OsError("fchown/fchmod", path));
  return OkStatus();
}

// Creates (or truncates) `path` as OpenFreshFile does, with `contents`,
// then gives it to uid:gid with `mode`.
Status WriteOwnedFile(const std::string& path, std::string_view contents, mode_t mode, uid_t uid,
                      gid_t gid) {
  ATRIUM_ASSIGN_OR_RETURN(int fd, OpenFreshFile(path));
  if (auto written = WriteAll(fd, contents, path); !written.has_value()) {
    ::close(fd);
    return written;
  }
  return HandOver(fd, mode, uid, gid, path);
}

// Copies `from` (the platform's own file) to `to` as WriteOwnedFile writes.
Status CopyOwnedFile(const std::string& from, const std::string& to, mode_t mode, uid_t uid,
                     gid_t gid) {
  int in = ::open(from.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (in < 0) return Error::InvalidArgument("archive_path: " + OsError("open", from));
  auto out = OpenFreshFile(to);
  if (!out.has_value()) {
    ::close(in);
    return std::move(out).error();
  }
  std::string buffer(1 << 16, '\0');
  Status copied = OkStatus();
  for (;;) {
    ssize_t n = ::read(in, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      copied = Error::Unavailable(OsError("read", from));
      break;
    }
    if (n == 0) break;
    copied = WriteAll(*out, std::string_view(buffer.data(), static_cast<size_t>(n)), to);
    if (!copied.has_value()) break;
  }
  ::close(in);
  if (!copied.has_value()) {
    ::close(*out);
    return copied;
  }
  return HandOver(*out, mode, uid, gid, to);
}

// The first bytes of a regular file, never through a symbolic link; ""
// when there is none.
std::string ReadSmallFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return "";
  struct stat st {};
  std::string text;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    char buf[64];
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) text.assign(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

bool PathExists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

std::string Describe(const Argv& argv, const CommandOutput& out) {
  std::string text = argv[0] + " " + (argv.size() > 1 ? argv[1] : "") + " failed (exit " +
                     std::to_string(out.exit_code) + "): " + out.err.substr(0, 400);
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

}  // namespace

SlurmBackend::SlurmBackend(SlurmBackendOptions options, CommandRunner& runner, const Clock& clock)
    : options_(std::move(options)), runner_(runner), clock_(clock) {
  if (!options_.ended_dir.empty()) {
    // The controller marks every job's end, Atrium's or not, for every
    // control plane on the cluster: this one takes only its own workloads'.
    ends_.emplace(options_.ended_dir, options_.ended_scan_ms,
                  [root = options_.workload_root](const std::string& workload_id) {
                    return PathExists(PathsFor(root, workload_id).dir);
                  });
  }
}

Result<CommandOutput> SlurmBackend::RunChecked(const Argv& argv) {
  auto out = runner_.Run(argv);
  if (!out) return std::move(out).error();
  if (out->exit_code != 0) return Error::Unavailable(Describe(argv, *out));
  return out;
}

Result<SlurmBackend::StateRecord> SlurmBackend::ReadState(const WorkloadPaths& paths) {
  int fd = ::open(paths.state.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Error::NotFound("no state");
    return Error::Unavailable(OsError("open", paths.state));
  }
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0 && text.size() < 65536) text.append(buf, n);
  ::close(fd);
  StateRecord state;
  for (const auto& line : NonEmptyLines(text)) {
    auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string key = line.substr(0, eq);
    std::string value = line.substr(eq + 1);
    if (key == "job_id") state.job_id = value;
    if (key == "tenant_id") state.tenant_id = value;
    if (key == "kill_at_ms") state.kill_at_ms = std::strtoll(value.c_str(), nullptr, 10);
    if (key == "killed_at_ms") state.killed_at_ms = std::strtoll(value.c_str(), nullptr, 10);
    if (key == "released_ms") state.released_ms = std::strtoll(value.c_str(), nullptr, 10);
    if (key == "gpus") {
      auto indices = ParseGresIndices("(IDX:" + value + ")");
      if (indices) state.gpus = std::move(*indices);
    }
  }
  return state;
}

Status SlurmBackend::WriteState(const WorkloadPaths& paths, const StateRecord& state) {
  std::string text = "job_id=" + state.job_id + "\ntenant_id=" + state.tenant_id +
                     "\nkill_at_ms=" + std::to_string(state.kill_at_ms) +
                     "\nkilled_at_ms=" + std::to_string(state.killed_at_ms) +
                     "\nreleased_ms=" + std::to_string(state.released_ms) + "\n";
  if (!state.gpus.empty()) {
    text += "gpus=";
    for (size_t i = 0; i < state.gpus.size(); ++i) {
      text += (i ? "," : "") + std::to_string(state.gpus[i]);
    }
    text += "\n";
  }
  return ReplaceFileAtomically(paths.state, text, 0600);
}

Result<std::string> SlurmBackend::FindJobByName(const std::string& workload_id) {
  auto queued = RunChecked(SqueueByNameArgv(workload_id));
  if (!queued) return std::move(queued).error();
  auto ids = NonEmptyLines(queued->out);
  if (!ids.empty()) return ids.back();
  auto accounted = RunChecked(SacctByNameArgv(workload_id));
  if (!accounted) return std::move(accounted).error();
  auto records = ParseSacct(accounted->out);
  if (!records) return Error::Internal(records.error().message);
  std::string found;
  for (const auto& job : *records) {
    if (job.name == workload_id && job.job_id.find('.') == std::string::npos) found = job.job_id;
  }
  return found;
}

Result<SlurmJobRecord> SlurmBackend::LookupJob(const std::string& job_id) {
  // The controller knows live and recently ended jobs (MinJobAge); the
  // accounting database knows the rest.
  auto shown = runner_.Run(ScontrolShowJobArgv(job_id));
  if (!shown) return std::move(shown).error();
  if (shown->exit_code == 0) {
    auto jobs = ParseScontrolJobs(shown->out);
    if (!jobs) return Error::Internal(jobs.error().message);
    for (auto& job : *jobs) {
      if (job.job_id == job_id) return job;
    }
  } else if (shown->err.find("Invalid job id") == std::string::npos) {
    return Error::Unavailable(Describe(ScontrolShowJobArgv(job_id), *shown));
  }
  auto accounted = RunChecked(SacctJobArgv(job_id));
  if (!accounted) return std::move(accounted).error();
  auto records = ParseSacct(accounted->out);
  if (!records) return Error::Internal(records.error().message);
  for (auto& job : *records) {
    if (job.job_id == job_id) return job;
  }
  return Error::NotFound("slurm knows no job " + job_id);
}

Result<SlurmBackend::StateRecord> SlurmBackend::SubmittedState(const std::string& workload_id,
                                                               const WorkloadPaths& paths) {
  auto state = ReadState(paths);
  if (!state) {
    if (state.error().code == ErrorCode::kNotFound) {
      return Error::NotFound("no workload " + workload_id);
    }
    return std::move(state).error();
  }
  if (state->job_id.empty()) {
    // Submitted, perhaps, by a Start that did not live to record it.
    auto found = FindJobByName(workload_id);
    if (!found) return std::move(found).error();
    if (found->empty()) return Error::NotFound("workload " + workload_id + " never reached Slurm");
    state->job_id = *found;
    ATRIUM_RETURN_IF_ERROR(WriteState(paths, *state));
  }
  return state;
}

Result<exec::WorkloadStatus> SlurmBackend::InspectPaths(const std::string& workload_id,
                                                        const WorkloadPaths& paths) {
  ATRIUM_ASSIGN_OR_RETURN(StateRecord state, SubmittedState(workload_id, paths));
  auto job = LookupJob(state.job_id);
  return StatusOfJob(workload_id, paths, state, job);
}

Result<exec::WorkloadStatus> SlurmBackend::StatusOfJob(const std::string& workload_id,
                                                       const WorkloadPaths& paths,
                                                       StateRecord& state,
                                                       const Result<SlurmJobRecord>& job) {
  if (!job) {
    if (job.error().code != ErrorCode::kNotFound) return job.error();
    exec::WorkloadStatus lost;
    lost.workload_id = workload_id;
    lost.backend_ref = state.job_id;
    lost.phase = exec::WorkloadPhase::kLost;
    lost.detail = "slurm no longer knows job " + state.job_id;
    return lost;
  }
  // slurmdbd first names a job "allocation": only the controller's name
  // is trusted to tell a reused job id.
  if (job->name != workload_id && job->name != "allocation") {
    exec::WorkloadStatus lost;
    lost.workload_id = workload_id;
    lost.backend_ref = state.job_id;
    lost.phase = exec::WorkloadPhase::kLost;
    lost.detail = "slurm job " + state.job_id + " is now '" + job->name +
                  "' (the cluster's job ids were reset)";
    return lost;
  }
  exec::WorkloadStatus status = StatusFromRecord(workload_id, *job);
  if (!status.gpus.empty() && status.gpus != state.gpus) {
    state.gpus = status.gpus;
    ATRIUM_RETURN_IF_ERROR(WriteState(paths, state));
  } else if (status.gpus.empty()) {
    status.gpus = state.gpus;
  }
  if (status.phase == exec::WorkloadPhase::kRunning && state.kill_at_ms >= 0 &&
      clock_.NowMillis() >= state.kill_at_ms) {
    // The grace of a Stop has passed: SIGKILL to every process, then end
    // the job in Slurm. The time is taken before the signal: the processes
    // die after it, so it bounds the end from below without counting the
    // two commands' own latency (tens of milliseconds) as running time.
    const int64_t kill_sent_ms = clock_.NowMillis();
    ATRIUM_RETURN_IF_ERROR(RunChecked(ScancelSignalArgv(state.job_id, "KILL")));
    ATRIUM_RETURN_IF_ERROR(RunChecked(ScancelArgv(state.job_id)));
    state.kill_at_ms = -1;
    state.killed_at_ms = kill_sent_ms;
    ATRIUM_RETURN_IF_ERROR(WriteState(paths, state));
    status.detail += "; SIGKILL sent after the grace";
  }
  // Slurm keeps whole seconds: a workload this backend killed ended no
  // earlier than the SIGKILL it was sent while running.
  if (status.phase == exec::WorkloadPhase::kExited && state.killed_at_ms > status.ended_ms) {
    status.ended_ms = state.killed_at_ms;
  }
  if (status.phase == exec::WorkloadPhase::kExited && status.exit_code > 128) {
    ApplySandboxReport(ReadSmallFile(paths.report), status);
  }
  TrimLog(paths);
  return status;
}

Result<exec::WorkloadStatus> SlurmBackend::Start(const exec::LaunchSpec& spec) {
  if (!IsSafeWorkloadId(spec.workload_id)) {
    return Error::InvalidArgument(
        "workload_id: 1..128 of [A-Za-z0-9_.-], not starting with . or -");
  }
  auto account = AccountForTenant(spec.tenant_id);
  if (!account) return std::move(account).error();
  auto user = UnixUserForTenant(options_.unix_user_prefix, spec.tenant_id);
  if (!user) return std::move(user).error();
  auto qos = QosForPriority(spec.priority);
  if (!qos) return std::move(qos).error();
  const WorkloadPaths paths = PathsFor(options_.workload_root, spec.workload_id);
  SubmitContext context;
  context.paths = paths;
  context.account = *account;
  context.qos = *qos;
  context.user = *user;
  context.group = *user;  // replaced by the user's real primary group below
  context.partition = options_.partition;
  context.gpu_types_are_indices = options_.gpu_types_are_indices;
  // The command line and the launch file are built (and so checked) before
  // anything is written.
  auto sbatch = BuildSbatchArgv(spec, context);
  if (!sbatch) return std::move(sbatch).error();
  // A template's sandbox is planned for the tenant's uid, known below; a
  // stand-in checks the spec before anything is looked up or written.
  constexpr uint32_t kNobody = 65534;
  const bool sandboxed = !spec.root_fs.empty();
  auto launch = sandboxed
                    ? BuildSandboxedLaunchFile(spec, paths, options_.sandbox, kNobody, kNobody)
                    : BuildLaunchFile(spec, paths);
  if (!launch) return std::move(launch).error();

  if (auto known = ReadState(paths); known) {
    if (known->tenant_id != spec.tenant_id) {
      return Error::AlreadyExists("workload " + spec.workload_id + " belongs to another tenant");
    }
    auto status = InspectPaths(spec.workload_id, paths);
    if (status || status.error().code != ErrorCode::kNotFound) return status;
  } else if (known.error().code != ErrorCode::kNotFound) {
    return std::move(known).error();
  }

  ATRIUM_RETURN_IF_ERROR(CheckConfinement(spec));
  auto ids = LookupUser(*user);
  if (!ids) {
    if (ids.error().code == ErrorCode::kNotFound) {
      return Error::FailedPrecondition("tenant " + spec.tenant_id + " has no Unix user " + *user +
                                       " (SyncTenant first)");
    }
    return std::move(ids).error();
  }
  struct group gr {};
  struct group* found_group = nullptr;
  std::vector<char> buf(16384);
  if (getgrgid_r(ids->gid, &gr, buf.data(), buf.size(), &found_group) != 0 || !found_group) {
    return Error::FailedPrecondition("tenant user " + *user + " has no primary group");
  }
  context.group = found_group->gr_name;
  sbatch = BuildSbatchArgv(spec, context);
  if (!sbatch) return std::move(sbatch).error();
  if (sandboxed) {
    launch = BuildSandboxedLaunchFile(spec, paths, options_.sandbox, ids->uid, ids->gid);
    if (!launch) return std::move(launch).error();
  }

  ATRIUM_RETURN_IF_ERROR(MakeDir(paths.dir, 0711, 0, 0));
  StateRecord state;
  state.tenant_id = spec.tenant_id;
  if (options_.gpu_types_are_indices) {
    for (const auto& gpu : spec.gpus) state.gpus.push_back(gpu.index);
    std::sort(state.gpus.begin(), state.gpus.end());
  }
  ATRIUM_RETURN_IF_ERROR(WriteState(paths, state));
  ATRIUM_RETURN_IF_ERROR(MakeDir(paths.work, 0700, ids->uid, ids->gid));
  ATRIUM_RETURN_IF_ERROR(WriteOwnedFile(paths.batch_script, BatchScript(), 0644, 0, 0));
  if (!PathExists(paths.log)) {
    ATRIUM_RETURN_IF_ERROR(WriteOwnedFile(paths.log, "", 0600, ids->uid, ids->gid));
  }
  ATRIUM_RETURN_IF_ERROR(WriteOwnedFile(paths.launch, *launch, 0400, ids->uid, ids->gid));
  if (sandboxed) {
    ATRIUM_RETURN_IF_ERROR(WriteOwnedFile(paths.report, "", 0600, ids->uid, ids->gid));
  }
  if (!spec.script.empty()) {
    ATRIUM_RETURN_IF_ERROR(WriteOwnedFile(paths.script, spec.script, 0500, ids->uid, ids->gid));
  }
  if (!spec.archive_path.empty()) {
    ATRIUM_RETURN_IF_ERROR(
        CopyOwnedFile(spec.archive_path, paths.archive, 0400, ids->uid, ids->gid));
  }
  // A Start that died after sbatch but before recording the job id left
  // a state without one: InspectPaths above looked the job up by name then,
  // and found none, so this submits the workload's one and only job.
  auto submitted = runner_.Run(*sbatch);
  if (!submitted) return std::move(submitted).error();
  if (submitted->exit_code != 0) {
    std::string why = Describe(*sbatch, *submitted);
    // Slurm refusing the request itself (limits, QOS, account) is not an
    // outage: say so to the caller as a refusal.
    bool refused = submitted->err.find("Invalid") != std::string::npos ||
                   submitted->err.find("limit") != std::string::npos ||
                   submitted->err.find("not available") != std::string::npos;
    return refused ? Error::FailedPrecondition(why) : Error::Unavailable(why);
  }
  auto job_id = ParseSbatchJobId(submitted->out);
  if (!job_id) return Error::Internal(job_id.error().message);
  state.job_id = *job_id;
  ATRIUM_RETURN_IF_ERROR(WriteState(paths, state));
  // No round trip to ask what was just submitted: the submit latency is
  // sbatch's own (bench/, BENCHMARKS.md).
  exec::WorkloadStatus status;
  status.workload_id = spec.workload_id;
  status.backend_ref = state.job_id;
  status.phase = exec::WorkloadPhase::kStarting;
  status.gpus = state.gpus;
  status.detail = "slurm job " + state.job_id + ": submitted";
  return status;
}

Status SlurmBackend::WatchEnds(const exec::EndHint& hint) {
  if (!ends_) return OkStatus();
  return ends_->Start(hint);
}

void SlurmBackend::StopWatchingEnds() {
  if (ends_) ends_->Stop();
}

Result<exec::WorkloadStatus> SlurmBackend::Inspect(const std::string& workload_id) {
  if (!IsSafeWorkloadId(workload_id)) return Error::NotFound("no workload " + workload_id);
  return InspectPaths(workload_id, PathsFor(options_.workload_root, workload_id));
}

Result<std::vector<exec::WorkloadStatus>> SlurmBackend::List() {
  std::error_code ec;
  std::vector<std::string> ids;
  for (const auto& entry : std::filesystem::directory_iterator(options_.workload_root, ec)) {
    std::string id = entry.path().filename().string();
    if (IsSafeWorkloadId(id) && entry.is_directory()) ids.push_back(id);
  }
  if (ec) return Error::Unavailable("list " + options_.workload_root + ": " + ec.message());
  std::sort(ids.begin(), ids.end());
  return StatusesOf(ids);
}

Result<std::map<std::string, exec::WorkloadStatus>> SlurmBackend::InspectMany(
    const std::vector<std::string>& workload_ids) {
  std::vector<std::string> ids;
  for (const std::string& id : workload_ids) {
    if (IsSafeWorkloadId(id)) ids.push_back(id);
  }
  ATRIUM_ASSIGN_OR_RETURN(std::vector<exec::WorkloadStatus> statuses, StatusesOf(ids));
  std::map<std::string, exec::WorkloadStatus> found;
  for (exec::WorkloadStatus& status : statuses) {
    std::string id = status.workload_id;
    found.insert_or_assign(std::move(id), std::move(status));
  }
  return found;
}

Result<std::vector<exec::WorkloadStatus>> SlurmBackend::StatusesOf(
    const std::vector<std::string>& workload_ids) {
  struct Known {
    std::string workload_id;
    WorkloadPaths paths;
    StateRecord state;
  };
  std::vector<Known> known;
  for (const auto& id : workload_ids) {
    WorkloadPaths paths = PathsFor(options_.workload_root, id);
    auto state = SubmittedState(id, paths);
    if (state) {
      known.push_back({id, std::move(paths), std::move(*state)});
    } else if (state.error().code != ErrorCode::kNotFound) {
      return std::move(state).error();
    }
  }
  if (known.empty()) return std::vector<exec::WorkloadStatus>{};
  // One question to the controller for every job it knows (only Atrium
  // submits to the cluster: job_submit.lua), then one to the accounting
  // database for those it has forgotten (MinJobAge).
  ATRIUM_ASSIGN_OR_RETURN(CommandOutput shown, RunChecked(ScontrolShowJobsArgv()));
  auto controller = ParseScontrolJobs(shown.out);
  if (!controller) return Error::Internal(controller.error().message);
  std::map<std::string, SlurmJobRecord> jobs = JobsById(std::move(*controller));
  std::vector<std::string> forgotten;
  for (const Known& k : known) {
    if (!jobs.contains(k.state.job_id)) forgotten.push_back(k.state.job_id);
  }
  // In slices: a control plane that ran for months knows more ended jobs
  // than one command line holds.
  constexpr size_t kIdsPerSacct = 256;
  for (size_t from = 0; from < forgotten.size(); from += kIdsPerSacct) {
    const std::vector<std::string> slice(
        forgotten.begin() + static_cast<std::ptrdiff_t>(from),
        forgotten.begin() +
            static_cast<std::ptrdiff_t>(std::min(forgotten.size(), from + kIdsPerSacct)));
    ATRIUM_ASSIGN_OR_RETURN(CommandOutput accounted, RunChecked(SacctJobsArgv(slice)));
    auto records = ParseSacct(accounted.out);
    if (!records) return Error::Internal(records.error().message);
    jobs.merge(JobsById(std::move(*records)));
  }
  std::vector<exec::WorkloadStatus> all;
  all.reserve(known.size());
  for (Known& k : known) {
    auto it = jobs.find(k.state.job_id);
    Result<SlurmJobRecord> job = it != jobs.end()
                                     ? Result<SlurmJobRecord>(it->second)
                                     : Error::NotFound("slurm knows no job " + k.state.job_id);
    ATRIUM_ASSIGN_OR_RETURN(exec::WorkloadStatus status,
                            StatusOfJob(k.workload_id, k.paths, k.state, job));
    all.push_back(std::move(status));
  }
  return all;
}

Status SlurmBackend::Stop(const std::string& workload_id, int64_t grace_ms) {
  if (!IsSafeWorkloadId(workload_id)) return Error::NotFound("no workload " + workload_id);
  const WorkloadPaths paths = PathsFor(options_.workload_root, workload_id);
  auto status = InspectPaths(workload_id, paths);
  if (!status) return std::move(status).error();
  if (status->phase == exec::WorkloadPhase::kExited ||
      status->phase == exec::WorkloadPhase::kLost) {
    return OkStatus();
  }
  auto state = ReadState(paths);
  if (!state) return std::move(state).error();
  if (status->phase == exec::WorkloadPhase::kStarting || grace_ms <= 0) {
    // Nothing runs yet (or no grace): end it now.
    if (status->phase == exec::WorkloadPhase::kRunning) {
      ATRIUM_RETURN_IF_ERROR(RunChecked(ScancelSignalArgv(state->job_id, "KILL")));
    }
    return RunChecked(ScancelArgv(state->job_id)).has_value()
               ? OkStatus()
               : Status(Error::Unavailable("scancel " + state->job_id + " failed"));
  }
  if (state->kill_at_ms >= 0) return OkStatus();  // already stopping: keep the first deadline
  ATRIUM_RETURN_IF_ERROR(RunChecked(ScancelSignalArgv(state->job_id, "TERM")));
  state->kill_at_ms = clock_.NowMillis() + grace_ms;
  return WriteState(paths, *state);
}

Result<exec::LogChunk> SlurmBackend::ReadLog(const std::string& workload_id, int64_t offset,
                                             int64_t max_bytes) {
  if (offset < 0 || max_bytes <= 0) {
    return Error::InvalidArgument("offset must be >= 0 and max_bytes > 0");
  }
  auto status = Inspect(workload_id);
  if (!status) return std::move(status).error();
  const bool ended =
      status->phase == exec::WorkloadPhase::kExited || status->phase == exec::WorkloadPhase::kLost;
  const WorkloadPaths paths = PathsFor(options_.workload_root, workload_id);
  exec::LogChunk chunk;
  chunk.offset = offset;
  chunk.next_offset = offset;
  int fd = ::open(paths.log.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno != ENOENT) return Error::Unavailable(OsError("open", paths.log));
    chunk.complete = ended;
    return chunk;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Error::Unavailable(paths.log + " is not a regular file");
  }
  const int64_t size = st.st_size;
  // Offsets count every byte ever written; only the newest log_max_bytes
  // are kept.
  const int64_t first_kept =
      options_.log_max_bytes > 0 ? std::max<int64_t>(0, size - options_.log_max_bytes) : 0;
  const int64_t start = std::max(offset, first_kept);
  chunk.offset = start;
  chunk.next_offset = start;
  chunk.dropped = start - offset;
  if (start < size) {
    std::string data(static_cast<size_t>(std::min({max_bytes, kMaxLogRead, size - start})), '\0');
    ssize_t n = ::pread(fd, data.data(), data.size(), start);
    if (n < 0) {
      ::close(fd);
      return Error::Unavailable(OsError("read", paths.log));
    }
    data.resize(static_cast<size_t>(n));
    chunk.data = std::move(data);
    chunk.next_offset = start + n;
  } else if (offset > size) {
    chunk.offset = chunk.next_offset = size;
    chunk.dropped = 0;
  }
  ::close(fd);
  chunk.complete = ended && chunk.next_offset >= size;
  return chunk;
}

void SlurmBackend::TrimLog(const WorkloadPaths& paths) {
  if (options_.log_max_bytes <= 0) return;
  int fd = ::open(paths.log.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > options_.log_max_bytes) {
    // Whole blocks before the first kept byte; the file keeps its size (and
    // Slurm its O_APPEND offset), the holes read as zeros nobody is shown.
    const int64_t block = st.st_blksize > 0 ? st.st_blksize : 4096;
    const int64_t end = (st.st_size - options_.log_max_bytes) / block * block;
    if (end > 0) (void)::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, end);
  }
  ::close(fd);
}

Status SlurmBackend::Forget(const std::string& workload_id) {
  if (!IsSafeWorkloadId(workload_id)) return Error::NotFound("no workload " + workload_id);
  auto status = Inspect(workload_id);
  if (!status) return std::move(status).error();
  if (status->phase == exec::WorkloadPhase::kStarting ||
      status->phase == exec::WorkloadPhase::kRunning) {
    return Error::FailedPrecondition("workload " + workload_id + " is still " +
                                     std::string(exec::PhaseName(status->phase)));
  }
  // The tenant's uid may still write to its folder from another of its
  // jobs: nothing a link points to is ever removed (remove_tree.h).
  return RemoveTreeNoFollow(PathsFor(options_.workload_root, workload_id).dir);
}

Status SlurmBackend::Release(const std::string& workload_id) {
  if (!IsSafeWorkloadId(workload_id)) return Error::NotFound("no workload " + workload_id);
  const WorkloadPaths paths = PathsFor(options_.workload_root, workload_id);
  ATRIUM_ASSIGN_OR_RETURN(exec::WorkloadStatus status, InspectPaths(workload_id, paths));
  if (status.phase == exec::WorkloadPhase::kStarting ||
      status.phase == exec::WorkloadPhase::kRunning) {
    return Error::FailedPrecondition("workload " + workload_id + " is still " +
                                     std::string(exec::PhaseName(status.phase)));
  }
  ATRIUM_ASSIGN_OR_RETURN(StateRecord state, ReadState(paths));
  if (state.released_ms < 0) {
    for (const std::string* path : {&paths.work, &paths.archive, &paths.batch_script}) {
      ATRIUM_RETURN_IF_ERROR(RemoveTreeNoFollow(*path));
    }
    state.released_ms = clock_.NowMillis();
    ATRIUM_RETURN_IF_ERROR(WriteState(paths, state));
  }
  PruneExpired();
  return OkStatus();
}

void SlurmBackend::PruneExpired() {
  if (options_.log_retention_s <= 0) return;
  const int64_t now = clock_.NowMillis();
  const int64_t retention_ms = options_.log_retention_s * 1000;
  {
    std::lock_guard<std::mutex> lock(prune_mu_);
    if (last_prune_ms_ != 0 && now - last_prune_ms_ < std::min<int64_t>(retention_ms, 3'600'000))
      return;
    last_prune_ms_ = now;
  }
  std::error_code ec;
  std::vector<std::string> expired;
  for (const auto& entry : std::filesystem::directory_iterator(options_.workload_root, ec)) {
    const std::string id = entry.path().filename().string();
    if (!IsSafeWorkloadId(id) || !entry.is_directory(ec)) continue;
    auto state = ReadState(PathsFor(options_.workload_root, id));
    if (state && state->released_ms >= 0 && now - state->released_ms >= retention_ms) {
      expired.push_back(id);
    }
  }
  // One that cannot be deleted now is tried again at the next prune.
  for (const std::string& id : expired) {
    (void)RemoveTreeNoFollow(PathsFor(options_.workload_root, id).dir);
  }
}

Status SlurmBackend::CheckConfinement(const exec::LaunchSpec& spec) {
  if (!spec.require_full_confinement) return OkStatus();
  std::lock_guard<std::mutex> lock(facts_mu_);
  if (!confinement_known_) {
    auto config = RunChecked({"scontrol", "show", "config"});
    if (!config) return std::move(config).error();
    missing_confinement_ = MissingConfinement(config->out);
    confinement_known_ = true;
  }
  if (missing_confinement_.empty()) return OkStatus();
  std::string why;
  for (const auto& m : missing_confinement_) why += (why.empty() ? "" : ", ") + m;
  return Error::FailedPrecondition("the tenant demands full confinement; this cluster has " + why);
}

Status SlurmBackend::EnsureQos() {
  std::lock_guard<std::mutex> lock(facts_mu_);
  if (qos_ready_) return OkStatus();
  auto listed = RunChecked({"sacctmgr", "-n", "-P", "show", "qos", "format=name"});
  if (!listed) return std::move(listed).error();
  for (const auto& argv : PlanQosSetup(NonEmptyLines(listed->out), options_.preempt_grace_s)) {
    ATRIUM_RETURN_IF_ERROR(RunChecked(argv));
  }
  qos_ready_ = true;
  return OkStatus();
}

Status SlurmBackend::SyncTenant(const exec::TenantAccount& account) {
  auto name = AccountForTenant(account.tenant_id);
  if (!name) return std::move(name).error();
  auto user = UnixUserForTenant(options_.unix_user_prefix, account.tenant_id);
  if (!user) return std::move(user).error();
  ATRIUM_RETURN_IF_ERROR(EnsureQos());
  TenantFacts facts;
  auto accounts = RunChecked(
      {"sacctmgr", "-n", "-P", "show", "account", "where", "name=" + *name, "format=account"});
  if (!accounts) return std::move(accounts).error();
  facts.account_exists = !NonEmptyLines(accounts->out).empty();
  auto associations = RunChecked({"sacctmgr", "-n", "-P", "show", "association", "where",
                                  "account=" + *name, "user=" + *user, "format=user"});
  if (!associations) return std::move(associations).error();
  facts.association_exists = !NonEmptyLines(associations->out).empty();
  facts.unix_user_exists = LookupUser(*user).has_value();
  auto plan = PlanTenantSync(account, options_.unix_user_prefix, options_.create_unix_users, facts);
  if (!plan) return std::move(plan).error();
  for (const auto& argv : *plan) {
    auto out = runner_.Run(argv);
    if (!out) return std::move(out).error();
    if (out->exit_code == 0) continue;
    // sacctmgr answers a change that changes nothing with exit 1.
    if (out->out.find("Nothing modified") != std::string::npos ||
        out->err.find("Nothing modified") != std::string::npos) {
      continue;
    }
    if (out->err.find("Job(s) active") != std::string::npos ||
        out->out.find("Job(s) active") != std::string::npos) {
      return Error::FailedPrecondition("tenant " + account.tenant_id +
                                       " still has jobs ending in Slurm; retry");
    }
    return Error::Unavailable(Describe(argv, *out));
  }
  return OkStatus();
}

Result<int64_t> SlurmBackend::SacctGpuSeconds(const std::string& workload_id) {
  if (!IsSafeWorkloadId(workload_id)) return Error::NotFound("no workload " + workload_id);
  auto state = ReadState(PathsFor(options_.workload_root, workload_id));
  if (!state) return std::move(state).error();
  if (state->job_id.empty()) return Error::NotFound("workload " + workload_id + " not submitted");
  auto accounted = RunChecked(SacctJobArgv(state->job_id));
  if (!accounted) return std::move(accounted).error();
  auto records = ParseSacct(accounted->out);
  if (!records) return Error::Internal(records.error().message);
  // slurmdbd hears of a job's end after the controller: until its record
  // says ended, the number would be short.
  bool ended = false;
  for (const auto& job : *records) {
    if (job.job_id == state->job_id &&
        PhaseOfSlurmState(job.state) == exec::WorkloadPhase::kExited) {
      ended = true;
    }
  }
  if (!ended) {
    return Error::Unavailable("slurm accounting has not recorded the end of job " + state->job_id +
                              " yet");
  }
  return GpuSecondsFromSacct(*records, state->job_id);
}

}  // namespace atrium::slurm
