// What the local backend and a workload's supervisor keep on disk, in the
// workload's record directory (<state>/workloads/<id>/, root-owned, 0711):
//
//   launch.json      written by Start before the supervisor runs: the
//                    sandbox's argv and environment, uid/gid, cgroups, log
//                    bound, and what the host did not enforce
//   supervisor.json  written by the supervisor once the sandbox is spawned:
//                    its pid and that pid's start time (so a reused pid is
//                    never taken for it), when the workload started
//   stop.json        written by Stop before it signals the supervisor: the
//                    grace period
//   exit.json        written by the supervisor when the sandbox is gone:
//                    exit code or signal, end time
//   released.json    written by Release once the job service recorded the
//                    end and every process, file and the directory of the
//                    workload's uid are gone: the uid is free for another
//                    workload; only the records and the log stay
//   log.<k>          the log, in segments of half the bound (below)
//   archive          the job's archive, copied for the workload's uid (0400)
//   work/            the workload's own directory (0700, its uid)
//
// Every record is replaced atomically (common/atomic_file.h), so a control
// plane killed at any moment reads either nothing or a whole record.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"
#include "exec/backend.h"

namespace atrium::exec_local {

inline constexpr char kLaunchFile[] = "launch.json";
inline constexpr char kSupervisorFile[] = "supervisor.json";
inline constexpr char kStopFile[] = "stop.json";
inline constexpr char kExitFile[] = "exit.json";
inline constexpr char kReleasedFile[] = "released.json";
inline constexpr char kWorkDirName[] = "work";
// Beside the workloads' records (state_dir/workloads/<id>): the folder where
// each supervisor marks its workload's end (exec/end_markers.h).
inline constexpr char kEndedDirName[] = "ended";

struct LaunchRecord {
  std::vector<std::string> argv;  // bubblewrap's
  std::vector<std::pair<std::string, std::string>> env;
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<std::string> cgroup_dirs;  // the sandbox joins each
  int64_t log_max_bytes = 0;
  std::vector<int> gpus;
  std::string tenant_id;
  std::string not_enforced;   // "" = every mechanism enforced
  int64_t time_limit_ms = 0;  // 0 = none
  // The sandbox that unpacks the archive first; empty = no archive.
  std::vector<std::string> unpack_argv;
  std::vector<std::pair<std::string, std::string>> unpack_env;
  int64_t created_ms = 0;
  // Resource limits the supervisor sets before it becomes the workload's
  // uid (0 = none): RLIMIT_NPROC counts the processes of that uid, which is
  // the workload's alone, so it caps them where no pids cgroup does;
  // RLIMIT_AS where no memory cgroup does; RLIMIT_FSIZE bounds each file.
  int64_t rlimit_nproc = 0;
  int64_t rlimit_as = 0;
  int64_t rlimit_fsize = 0;
};

struct SupervisorRecord {
  int pid = 0;
  uint64_t pid_start_ticks = 0;  // /proc/<pid>/stat field 22
  int64_t started_ms = 0;
};

struct ExitRecord {
  int exit_code = -1;
  int signal = 0;
  int64_t ended_ms = 0;
  std::string detail;
};

std::string EncodeLaunch(const LaunchRecord& record);
Result<LaunchRecord> DecodeLaunch(std::string_view text);
std::string EncodeSupervisor(const SupervisorRecord& record);
Result<SupervisorRecord> DecodeSupervisor(std::string_view text);
std::string EncodeExit(const ExitRecord& record);
Result<ExitRecord> DecodeExit(std::string_view text);
std::string EncodeStop(int64_t grace_ms);
Result<int64_t> DecodeStop(std::string_view text);
std::string EncodeReleased(int64_t released_ms);
Result<int64_t> DecodeReleased(std::string_view text);

// The file's contents; NotFound when it does not exist, Unavailable on
// another error. At most 16 MiB.
Result<std::string> ReadSmallFile(const std::string& path);

// The start time of process `pid` (clock ticks since boot); NotFound when
// there is no such process. With the pid, it names one process for good.
Result<uint64_t> ProcessStartTicks(int pid);

// True when the supervisor in `record` is still the process it was.
bool SupervisorAlive(const SupervisorRecord& record);

// The workload's log is a series of segments `log.<k>` of exactly
// `max_bytes / 2` bytes (the last one shorter): segment k holds log bytes
// [k * seg, k * seg + size). The writer keeps the two newest, so the log
// never holds more than `max_bytes` and, once rotated, at least half of it:
// the newest bytes. A reader needs nothing but the directory listing.
class LogWriter {
 public:
  LogWriter(std::string dir, int64_t max_bytes);
  ~LogWriter();
  LogWriter(const LogWriter&) = delete;
  LogWriter& operator=(const LogWriter&) = delete;
  Status Append(std::string_view data);

 private:
  Status OpenSegment();
  std::string dir_;
  int64_t segment_bytes_;
  int64_t segment_ = 0;
  int64_t in_segment_ = 0;
  int fd_ = -1;
};

// Reads the log in `dir` from `offset`, at most `max_bytes`. `ended`: the
// workload has ended, so a read that reaches the end is `complete`.
Result<exec::LogChunk> ReadLogSegments(const std::string& dir, int64_t log_max_bytes,
                                       int64_t offset, int64_t max_bytes, bool ended);

}  // namespace atrium::exec_local
