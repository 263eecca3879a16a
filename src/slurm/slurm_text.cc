#include "slurm/slurm_text.h"

#include <charconv>
#include <set>

namespace atrium::slurm {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() &&
         (s.front() == ' ' || s.front() == '\t' || s.front() == '\r' || s.front() == '\n')) {
    s.remove_prefix(1);
  }
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t at = s.find(sep, start);
    if (at == std::string_view::npos) {
      parts.push_back(s.substr(start));
      return parts;
    }
    parts.push_back(s.substr(start, at - start));
    start = at + 1;
  }
}

bool ParseInt64(std::string_view s, int64_t& out) {
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size();
}

// Seconds since the epoch (SLURM_TIME_FORMAT=%s); "Unknown", "None", "N/A"
// and anything unparsable are "no time" (-1).
int64_t ParseEpoch(std::string_view s) {
  int64_t v = 0;
  return ParseInt64(s, v) && v > 0 ? v : -1;
}

// "<code>:<signal>"; a malformed value leaves both 0.
void ParseExitCode(std::string_view s, SlurmJobRecord& job) {
  auto parts = Split(s, ':');
  int64_t code = 0;
  int64_t sig = 0;
  if (parts.size() == 2 && ParseInt64(parts[0], code) && ParseInt64(parts[1], sig) && code >= 0 &&
      code <= 255 && sig >= 0 && sig <= 128) {
    job.exit_code = static_cast<int>(code);
    job.exit_signal = static_cast<int>(sig);
  }
}

std::string FirstWord(std::string_view s) {
  s = Trim(s);
  return std::string(s.substr(0, s.find(' ')));
}

}  // namespace

Result<std::string> ParseSbatchJobId(std::string_view out) {
  std::string_view line = Trim(out);
  std::string_view id = line.substr(0, line.find(';'));
  int64_t n = 0;
  if (!ParseInt64(id, n) || n <= 0) {
    return Error::InvalidArgument("sbatch --parsable printed no job id: '" +
                                  std::string(line.substr(0, 200)) + "'");
  }
  return std::string(id);
}

Result<std::vector<int>> ParseGresIndices(std::string_view gres) {
  std::vector<int> indices;
  std::set<int> seen;
  size_t pos = 0;
  while ((pos = gres.find("(IDX:", pos)) != std::string_view::npos) {
    pos += 5;
    size_t close = gres.find(')', pos);
    if (close == std::string_view::npos) {
      return Error::InvalidArgument("unterminated IDX list in GRES '" + std::string(gres) + "'");
    }
    std::string_view list = gres.substr(pos, close - pos);
    pos = close;
    if (list == "N/A") continue;
    for (std::string_view item : Split(list, ',')) {
      auto range = Split(item, '-');
      int64_t first = 0;
      int64_t last = 0;
      bool ok = range.size() == 1   ? ParseInt64(range[0], first) && (last = first, true)
                : range.size() == 2 ? ParseInt64(range[0], first) && ParseInt64(range[1], last)
                                    : false;
      if (!ok || first < 0 || last < first || last > 1023) {
        return Error::InvalidArgument("bad IDX list in GRES '" + std::string(gres) + "'");
      }
      for (int64_t i = first; i <= last; ++i) {
        if (seen.insert(static_cast<int>(i)).second) indices.push_back(static_cast<int>(i));
      }
    }
  }
  return indices;
}

int64_t GpuCountInTres(std::string_view tres) {
  for (std::string_view item : Split(tres, ',')) {
    constexpr std::string_view kKey = "gres/gpu=";
    if (item.substr(0, kKey.size()) == kKey) {
      int64_t n = 0;
      if (ParseInt64(item.substr(kKey.size()), n) && n >= 0) return n;
    }
  }
  return 0;
}

std::vector<std::string> NonEmptyLines(std::string_view out) {
  std::vector<std::string> lines;
  for (std::string_view line : Split(out, '\n')) {
    line = Trim(line);
    if (!line.empty()) lines.emplace_back(line);
  }
  return lines;
}

std::map<std::string, SlurmJobRecord> JobsById(std::vector<SlurmJobRecord> records) {
  std::map<std::string, SlurmJobRecord> by_id;
  for (SlurmJobRecord& job : records) {
    std::string id = job.job_id;
    by_id.try_emplace(std::move(id), std::move(job));
  }
  return by_id;
}

Result<std::vector<SlurmJobRecord>> ParseScontrolJobs(std::string_view out) {
  std::vector<SlurmJobRecord> jobs;
  for (std::string_view line : Split(out, '\n')) {
    line = Trim(line);
    if (line.empty() || line == "No jobs in the system") continue;
    SlurmJobRecord job;
    bool has_id = false;
    // Tokens are Key=Value separated by spaces; a value never holds a
    // space in the keys read here (names and paths of Atrium's own jobs
    // are validated to be free of them).
    for (std::string_view token : Split(line, ' ')) {
      size_t eq = token.find('=');
      if (eq == std::string_view::npos) continue;
      std::string_view key = token.substr(0, eq);
      std::string_view value = token.substr(eq + 1);
      if (key == "JobId") {
        job.job_id = std::string(value);
        has_id = !value.empty();
      } else if (key == "JobName") {
        job.name = std::string(value);
      } else if (key == "JobState") {
        job.state = std::string(value);
      } else if (key == "Reason") {
        job.reason = std::string(value);
      } else if (key == "ExitCode") {
        ParseExitCode(value, job);
      } else if (key == "StartTime") {
        job.start_s = ParseEpoch(value);
      } else if (key == "EndTime") {
        job.end_s = ParseEpoch(value);
      } else if (key == "GRES") {
        auto indices = ParseGresIndices(value);
        if (!indices) return std::move(indices).error();
        job.gpu_indices = std::move(*indices);
      } else if (key == "TRES") {
        job.gpus = GpuCountInTres(value);
      } else if (key == "Account") {
        job.account = std::string(value);
      } else if (key == "Restarts") {
        int64_t n = 0;
        if (ParseInt64(value, n) && n >= 0 && n < 1000000) job.restarts = static_cast<int>(n);
      }
    }
    if (!has_id) {
      return Error::InvalidArgument("scontrol show job line without JobId: '" +
                                    std::string(line.substr(0, 200)) + "'");
    }
    // A pending job's StartTime is the scheduler's forecast and a running
    // job's EndTime its time limit: neither happened.
    exec::WorkloadPhase phase = PhaseOfSlurmState(job.state);
    if (phase == exec::WorkloadPhase::kStarting) job.start_s = job.end_s = -1;
    if (phase == exec::WorkloadPhase::kRunning) job.end_s = -1;
    jobs.push_back(std::move(job));
  }
  return jobs;
}

Result<std::vector<SlurmJobRecord>> ParseSacct(std::string_view out) {
  constexpr size_t kFields = 9;  // kSacctFormat
  std::vector<SlurmJobRecord> jobs;
  for (std::string_view line : Split(out, '\n')) {
    if (Trim(line).empty()) continue;
    auto f = Split(Trim(line), '|');
    if (f.size() != kFields) {
      return Error::InvalidArgument("sacct line with " + std::to_string(f.size()) +
                                    " fields, expected " + std::to_string(kFields) + ": '" +
                                    std::string(line.substr(0, 200)) + "'");
    }
    SlurmJobRecord job;
    job.job_id = std::string(f[0]);
    job.name = std::string(f[1]);
    job.state = FirstWord(f[2]);
    ParseExitCode(f[3], job);
    job.start_s = ParseEpoch(f[4]);
    job.end_s = ParseEpoch(f[5]);
    int64_t elapsed = 0;
    job.elapsed_s = ParseInt64(f[6], elapsed) && elapsed >= 0 ? elapsed : -1;
    job.gpus = GpuCountInTres(f[7]);
    job.account = std::string(f[8]);
    if (PhaseOfSlurmState(job.state) == exec::WorkloadPhase::kStarting) job.start_s = -1;
    jobs.push_back(std::move(job));
  }
  return jobs;
}

exec::WorkloadPhase PhaseOfSlurmState(std::string_view state) {
  using exec::WorkloadPhase;
  static constexpr std::string_view kStarting[] = {"PENDING",      "REQUEUED",    "REQUEUE_FED",
                                                   "REQUEUE_HOLD", "CONFIGURING", "RESV_DEL_HOLD",
                                                   "SPECIAL_EXIT"};
  static constexpr std::string_view kRunning[] = {"RUNNING",   "COMPLETING", "SUSPENDED", "STOPPED",
                                                  "SIGNALING", "STAGE_OUT",  "RESIZING"};
  static constexpr std::string_view kLost[] = {"NODE_FAIL", "BOOT_FAIL", "REVOKED"};
  for (auto s : kStarting) {
    if (state == s) return WorkloadPhase::kStarting;
  }
  for (auto s : kRunning) {
    if (state == s) return WorkloadPhase::kRunning;
  }
  for (auto s : kLost) {
    if (state == s) return WorkloadPhase::kLost;
  }
  return WorkloadPhase::kExited;
}

exec::WorkloadStatus StatusFromRecord(const std::string& workload_id, const SlurmJobRecord& job) {
  exec::WorkloadStatus status;
  status.workload_id = workload_id;
  status.backend_ref = job.job_id;
  status.phase = PhaseOfSlurmState(job.state);
  status.gpus = job.gpu_indices;
  if (status.phase != exec::WorkloadPhase::kStarting && job.start_s > 0) {
    status.started_ms = job.start_s * 1000;
  }
  if (status.phase == exec::WorkloadPhase::kExited || status.phase == exec::WorkloadPhase::kLost) {
    if (job.end_s > 0) status.ended_ms = job.end_s * 1000;
  }
  if (status.phase == exec::WorkloadPhase::kExited) {
    if (job.exit_signal != 0) {
      status.signal = job.exit_signal;
    } else if (job.state == "CANCELLED" || job.state == "PREEMPTED" || job.state == "TIMEOUT" ||
               job.state == "DEADLINE") {
      status.signal = 15;
    } else {
      status.exit_code = job.exit_code;
    }
  }
  status.detail = "slurm job " + job.job_id + ": " + job.state;
  if (!job.reason.empty() && job.reason != "None") status.detail += " (" + job.reason + ")";
  if (job.restarts > 0) status.detail += ", requeued " + std::to_string(job.restarts) + "x";
  return status;
}

void ApplySandboxReport(std::string_view report, exec::WorkloadStatus& status) {
  if (status.phase != exec::WorkloadPhase::kExited || status.exit_code <= 128) return;
  constexpr std::string_view kSignal = "signal ";
  if (report.substr(0, kSignal.size()) != kSignal) return;
  const std::string expected = std::to_string(status.exit_code - 128) + "\n";
  if (report.substr(kSignal.size()) != expected) return;
  status.signal = status.exit_code - 128;
  status.exit_code = -1;
}

int64_t GpuSecondsFromSacct(const std::vector<SlurmJobRecord>& records, std::string_view job_id) {
  for (const auto& job : records) {
    if (job.job_id == job_id) return job.elapsed_s > 0 ? job.gpus * job.elapsed_s : 0;
  }
  return 0;
}

std::vector<std::string> MissingConfinement(std::string_view show_config) {
  std::string proctrack, task, container;
  for (std::string_view line : Split(show_config, '\n')) {
    size_t eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    std::string_view key = Trim(line.substr(0, eq));
    std::string value(Trim(line.substr(eq + 1)));
    if (key == "ProctrackType") proctrack = value;
    if (key == "TaskPlugin") task = value;
    if (key == "JobContainerType") container = value;
  }
  std::vector<std::string> missing;
  if (proctrack != "proctrack/cgroup") missing.push_back("processes not tracked by cgroup");
  if (task.find("task/cgroup") == std::string::npos) missing.push_back("GPU devices not confined");
  if (container != "job_container/tmpfs") missing.push_back("no private /tmp");
  return missing;
}

}  // namespace atrium::slurm
