#include "exec_local/workload_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

namespace atrium::exec_local {
namespace {

using Json = nlohmann::json;

Result<Json> ParseJson(std::string_view text, const char* what) {
  Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return Error::Internal(std::string("unreadable ") + what + " record");
  }
  return json;
}

std::string OsError(const std::string& step, const std::string& path) {
  return "cannot " + step + " " + path + ": " + std::strerror(errno);
}

std::string SegmentPath(const std::string& dir, int64_t k) {
  return dir + "/log." + std::to_string(k);
}

// The segment numbers present in `dir`, ascending.
std::vector<int64_t> ListSegments(const std::string& dir) {
  std::vector<int64_t> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    std::string_view name = e->d_name;
    if (name.substr(0, 4) != "log." || name.size() == 4 || name.size() > 24) continue;
    auto digits = name.substr(4);
    if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    out.push_back(std::stoll(std::string(digits)));
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

int64_t FileSize(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return -1;
  return st.st_size;
}

}  // namespace

std::string EncodeLaunch(const LaunchRecord& r) {
  const auto pairs = [](const std::vector<std::pair<std::string, std::string>>& values) {
    Json out = Json::array();
    for (const auto& [name, value] : values) out.push_back({name, value});
    return out;
  };
  return Json{{"argv", r.argv},
              {"env", pairs(r.env)},
              {"unpack_argv", r.unpack_argv},
              {"unpack_env", pairs(r.unpack_env)},
              {"uid", r.uid},
              {"gid", r.gid},
              {"cgroup_dirs", r.cgroup_dirs},
              {"log_max_bytes", r.log_max_bytes},
              {"gpus", r.gpus},
              {"tenant_id", r.tenant_id},
              {"not_enforced", r.not_enforced},
              {"created_ms", r.created_ms},
              {"time_limit_ms", r.time_limit_ms},
              {"rlimit_nproc", r.rlimit_nproc},
              {"rlimit_as", r.rlimit_as},
              {"rlimit_fsize", r.rlimit_fsize}}
      .dump();
}

Result<LaunchRecord> DecodeLaunch(std::string_view text) {
  ATRIUM_ASSIGN_OR_RETURN(Json json, ParseJson(text, "launch"));
  LaunchRecord r;
  try {
    r.argv = json.at("argv").get<std::vector<std::string>>();
    for (const auto& pair : json.value("unpack_env", Json::array())) {
      r.unpack_env.emplace_back(pair.at(0).get<std::string>(), pair.at(1).get<std::string>());
    }
    r.unpack_argv = json.value("unpack_argv", std::vector<std::string>{});
    for (const auto& pair : json.at("env"))
      r.env.emplace_back(pair.at(0).get<std::string>(), pair.at(1).get<std::string>());
    r.uid = json.at("uid").get<uint32_t>();
    r.gid = json.at("gid").get<uint32_t>();
    r.cgroup_dirs = json.at("cgroup_dirs").get<std::vector<std::string>>();
    r.log_max_bytes = json.at("log_max_bytes").get<int64_t>();
    r.gpus = json.at("gpus").get<std::vector<int>>();
    r.tenant_id = json.at("tenant_id").get<std::string>();
    r.not_enforced = json.at("not_enforced").get<std::string>();
    r.created_ms = json.at("created_ms").get<int64_t>();
    r.time_limit_ms = json.value("time_limit_ms", int64_t{0});
    r.rlimit_nproc = json.value("rlimit_nproc", int64_t{0});
    r.rlimit_as = json.value("rlimit_as", int64_t{0});
    r.rlimit_fsize = json.value("rlimit_fsize", int64_t{0});
    if (r.rlimit_nproc < 0 || r.rlimit_as < 0 || r.rlimit_fsize < 0) {
      return Error::Internal("unreadable launch record: a negative resource limit");
    }
  } catch (const Json::exception& e) {
    return Error::Internal(std::string("unreadable launch record: ") + e.what());
  }
  return r;
}

std::string EncodeSupervisor(const SupervisorRecord& r) {
  return Json{{"pid", r.pid}, {"pid_start_ticks", r.pid_start_ticks}, {"started_ms", r.started_ms}}
      .dump();
}

Result<SupervisorRecord> DecodeSupervisor(std::string_view text) {
  ATRIUM_ASSIGN_OR_RETURN(Json json, ParseJson(text, "supervisor"));
  SupervisorRecord r;
  try {
    r.pid = json.at("pid").get<int>();
    r.pid_start_ticks = json.at("pid_start_ticks").get<uint64_t>();
    r.started_ms = json.at("started_ms").get<int64_t>();
  } catch (const Json::exception& e) {
    return Error::Internal(std::string("unreadable supervisor record: ") + e.what());
  }
  return r;
}

std::string EncodeExit(const ExitRecord& r) {
  return Json{{"exit_code", r.exit_code},
              {"signal", r.signal},
              {"ended_ms", r.ended_ms},
              {"detail", r.detail}}
      .dump();
}

Result<ExitRecord> DecodeExit(std::string_view text) {
  ATRIUM_ASSIGN_OR_RETURN(Json json, ParseJson(text, "exit"));
  ExitRecord r;
  try {
    r.exit_code = json.at("exit_code").get<int>();
    r.signal = json.at("signal").get<int>();
    r.ended_ms = json.at("ended_ms").get<int64_t>();
    r.detail = json.at("detail").get<std::string>();
  } catch (const Json::exception& e) {
    return Error::Internal(std::string("unreadable exit record: ") + e.what());
  }
  return r;
}

std::string EncodeStop(int64_t grace_ms) { return Json{{"grace_ms", grace_ms}}.dump(); }

Result<int64_t> DecodeStop(std::string_view text) {
  ATRIUM_ASSIGN_OR_RETURN(Json json, ParseJson(text, "stop"));
  auto grace = json.find("grace_ms");
  if (grace == json.end() || !grace->is_number_integer())
    return Error::Internal("unreadable stop record");
  return grace->get<int64_t>();
}

std::string EncodeReleased(int64_t released_ms) {
  return Json{{"released_ms", released_ms}}.dump();
}

Result<int64_t> DecodeReleased(std::string_view text) {
  ATRIUM_ASSIGN_OR_RETURN(Json json, ParseJson(text, "released"));
  auto at = json.find("released_ms");
  if (at == json.end() || !at->is_number_integer())
    return Error::Internal("unreadable release record");
  return at->get<int64_t>();
}

Result<std::string> ReadSmallFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT) return Error::NotFound("no file " + path);
    return Error::Unavailable(OsError("open", path));
  }
  std::string out;
  char buffer[8192];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      return Error::Unavailable(OsError("read", path));
    }
    if (n == 0) break;
    out.append(buffer, static_cast<size_t>(n));
    if (out.size() > (16u << 20)) {
      ::close(fd);
      return Error::Internal(path + " is larger than 16 MiB");
    }
  }
  ::close(fd);
  return out;
}

Result<uint64_t> ProcessStartTicks(int pid) {
  if (pid <= 0) return Error::NotFound("no process " + std::to_string(pid));
  auto stat = ReadSmallFile("/proc/" + std::to_string(pid) + "/stat");
  if (!stat.has_value()) return Error::NotFound("no process " + std::to_string(pid));
  // Fields after the command name (which may hold spaces and parentheses).
  const size_t close = stat->rfind(')');
  if (close == std::string::npos) return Error::Internal("unreadable /proc stat");
  std::string_view rest = std::string_view(*stat).substr(close + 1);
  // rest starts at field 3 (state); the start time is field 22.
  int field = 2;
  size_t pos = 0;
  while (pos < rest.size()) {
    while (pos < rest.size() && rest[pos] == ' ') ++pos;
    size_t end = rest.find(' ', pos);
    if (end == std::string_view::npos) end = rest.size();
    ++field;
    if (field == 3 && rest.substr(pos, end - pos) == "Z") {
      return Error::NotFound("process " + std::to_string(pid) + " has exited");
    }
    if (field == 22) return std::stoull(std::string(rest.substr(pos, end - pos)));
    pos = end;
  }
  return Error::Internal("unreadable /proc stat");
}

bool SupervisorAlive(const SupervisorRecord& record) {
  auto ticks = ProcessStartTicks(record.pid);
  return ticks.has_value() && *ticks == record.pid_start_ticks;
}

LogWriter::LogWriter(std::string dir, int64_t max_bytes)
    : dir_(std::move(dir)), segment_bytes_(std::max<int64_t>(max_bytes / 2, 1)) {}

LogWriter::~LogWriter() {
  if (fd_ >= 0) ::close(fd_);
}

Status LogWriter::OpenSegment() {
  if (fd_ >= 0) ::close(fd_);
  const auto path = SegmentPath(dir_, segment_);
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd_ < 0) return Error::Unavailable(OsError("open", path));
  in_segment_ = 0;
  // Keep this segment and the one before it: at most the bound in all.
  if (segment_ >= 2) ::unlink(SegmentPath(dir_, segment_ - 2).c_str());
  return OkStatus();
}

Status LogWriter::Append(std::string_view data) {
  if (fd_ < 0) ATRIUM_RETURN_IF_ERROR(OpenSegment());
  while (!data.empty()) {
    if (in_segment_ == segment_bytes_) {
      ++segment_;
      ATRIUM_RETURN_IF_ERROR(OpenSegment());
    }
    const size_t room = static_cast<size_t>(segment_bytes_ - in_segment_);
    const auto piece = data.substr(0, std::min(room, data.size()));
    const ssize_t n = ::write(fd_, piece.data(), piece.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error::Unavailable(OsError("write", SegmentPath(dir_, segment_)));
    in_segment_ += n;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return OkStatus();
}

Result<exec::LogChunk> ReadLogSegments(const std::string& dir, int64_t log_max_bytes,
                                       int64_t offset, int64_t max_bytes, bool ended) {
  if (offset < 0 || max_bytes <= 0) {
    return Error::InvalidArgument("log offset must be >= 0 and max_bytes > 0");
  }
  max_bytes = std::min<int64_t>(max_bytes, 16 << 20);
  const int64_t seg = std::max<int64_t>(log_max_bytes / 2, 1);
  // A segment may be rotated away between listing and reading: list again.
  for (int attempt = 0; attempt < 8; ++attempt) {
    const auto segments = ListSegments(dir);
    exec::LogChunk chunk;
    if (segments.empty()) {
      chunk.offset = chunk.next_offset = offset;
      chunk.complete = ended;
      return chunk;
    }
    const int64_t first = segments.front() * seg;
    const int64_t last_size = FileSize(SegmentPath(dir, segments.back()));
    if (last_size < 0) continue;
    const int64_t end = segments.back() * seg + last_size;
    if (offset < first) {
      chunk.dropped = first - offset;
      offset = first;
    }
    chunk.offset = std::min(offset, end);
    int64_t at = chunk.offset;
    bool vanished = false;
    while (at < end && static_cast<int64_t>(chunk.data.size()) < max_bytes) {
      const int64_t k = at / seg;
      const int fd = ::open(SegmentPath(dir, k).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
      if (fd < 0) {
        vanished = true;
        break;
      }
      const int64_t want = std::min<int64_t>(
          {max_bytes - static_cast<int64_t>(chunk.data.size()), (k + 1) * seg - at, end - at});
      std::string buffer(static_cast<size_t>(want), '\0');
      const ssize_t n = ::pread(fd, buffer.data(), buffer.size(), at - k * seg);
      ::close(fd);
      if (n <= 0) break;
      chunk.data.append(buffer.data(), static_cast<size_t>(n));
      at += n;
    }
    if (vanished) continue;
    chunk.next_offset = at;
    chunk.complete = ended && at >= end;
    return chunk;
  }
  return Error::Unavailable("the log of " + dir + " rotated faster than it could be read");
}

}  // namespace atrium::exec_local
