#include "gateway_server/usage_journal.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "threads/thread_name.h"

namespace atrium::gateway_server {
namespace {

using Json = nlohmann::json;

// Lines are read back in pieces of this size.
constexpr size_t kReadChunk = 1 << 20;

// usage.journal: read back, appended to.
constexpr OpenOptions kAppendable{.read = true};
// usage.inflight and its compacted copy: started empty.
constexpr OpenOptions kFresh{.truncate = true};

}  // namespace

namespace {

// JSON text by hand: this runs once per request on the gateway's hot path.
void AppendString(std::string& out, std::string_view key, std::string_view value) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  out += key;
  out += std::string_view("\":\"");
  const bool plain = std::none_of(value.begin(), value.end(), [](char c) {
    return c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20;
  });
  if (plain) {  // ids, names, URLs: the usual case, copied whole
    out += value;
    out += std::string_view("\",");
    return;
  }
  for (char c : value) {
    auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      out += std::string_view("\\u00");
      out += kHex[u >> 4];
      out += kHex[u & 0xf];
    } else {
      out += c;
    }
  }
  out += std::string_view("\",");
}

void AppendInt(std::string& out, std::string_view key, int64_t value) {
  char digits[24];
  const auto end = std::to_chars(digits, digits + sizeof digits, value).ptr;
  out += '"';
  out += key;
  out += std::string_view("\":");
  out.append(digits, static_cast<size_t>(end - digits));
  out += ',';
}

}  // namespace

namespace {

// EncodeUsageLine's text, appended to `out`.
void AppendUsageLine(std::string& out, const UsageRecord& r) {
  out += '{';
  AppendString(out, "id", r.id);
  AppendString(out, "tenant_id", r.tenant_id);
  AppendString(out, "key_id", r.key_id);
  AppendString(out, "model", r.model);
  AppendString(out, "deployment_id", r.deployment_id);
  AppendString(out, "endpoint", r.endpoint);
  AppendString(out, "api", r.api);
  out += r.stream ? std::string_view("\"stream\":true,") : std::string_view("\"stream\":false,");
  AppendInt(out, "input_tokens", r.input_tokens);
  AppendInt(out, "output_tokens", r.output_tokens);
  AppendInt(out, "cached_tokens", r.cached_tokens);
  AppendInt(out, "queue_ms", r.queue_ms);
  AppendInt(out, "ttft_ms", r.ttft_ms);
  AppendInt(out, "total_ms", r.total_ms);
  AppendString(out, "status", r.status);
  AppendInt(out, "http_status", r.http_status);
  AppendInt(out, "created_at", r.created_at);
  if (!r.flag.empty()) AppendString(out, "flag", r.flag);  // absent from older lines
  out.back() = '}';
}

}  // namespace

std::string EncodeUsageLine(const UsageRecord& r) {
  std::string out;
  out.reserve(384);
  AppendUsageLine(out, r);
  return out;
}

Result<UsageRecord> DecodeUsageLine(std::string_view line) {
  Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Error::InvalidArgument("usage journal: a line is not a JSON object");
  try {
    UsageRecord r;
    r.id = j.at("id").get<std::string>();
    r.tenant_id = j.at("tenant_id").get<std::string>();
    r.key_id = j.at("key_id").get<std::string>();
    r.model = j.at("model").get<std::string>();
    r.deployment_id = j.at("deployment_id").get<std::string>();
    r.endpoint = j.at("endpoint").get<std::string>();
    r.api = j.at("api").get<std::string>();
    r.stream = j.at("stream").get<bool>();
    r.input_tokens = j.at("input_tokens").get<int64_t>();
    r.output_tokens = j.at("output_tokens").get<int64_t>();
    r.cached_tokens = j.at("cached_tokens").get<int64_t>();
    r.queue_ms = j.at("queue_ms").get<int64_t>();
    r.ttft_ms = j.at("ttft_ms").get<int64_t>();
    r.total_ms = j.at("total_ms").get<int64_t>();
    r.status = j.at("status").get<std::string>();
    r.http_status = j.at("http_status").get<int>();
    r.created_at = j.at("created_at").get<int64_t>();
    if (auto flag = j.find("flag"); flag != j.end()) r.flag = flag->get<std::string>();
    if (r.id.empty()) return Error::InvalidArgument("usage journal: a record has no id");
    return r;
  } catch (const Json::exception& e) {
    return Error::InvalidArgument(std::string("usage journal: bad record: ") + e.what());
  }
}

namespace {

// Adds the last checkpoint per id in a checkpoint file (none when it does
// not exist) to `out`, later lines replacing earlier ones.
void ReadCheckpoints(const std::string& path, std::unordered_map<std::string, UsageRecord>& out) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto record = DecodeUsageLine(line);
    if (!record.has_value() || record->status != kInterruptedStatus) {
      spdlog::warn("usage journal: skipping an unreadable checkpoint in {}", path);
      continue;
    }
    std::string id = record->id;
    out[id] = std::move(*record);
  }
}

}  // namespace

UsageJournal::UsageJournal(UsageJournalOptions options, UsageSink sink)
    : options_(std::move(options)),
      sink_(std::move(sink)),
      files_(options_.files != nullptr ? *options_.files : FileSystem::Default()) {}

UsageJournal::~UsageJournal() { Stop(); }

Status UsageJournal::Start() {
  std::error_code ec;
  std::filesystem::create_directories(options_.directory, ec);
  if (ec) return Error::Unavailable("cannot create " + options_.directory + ": " + ec.message());
  journal_path_ = (std::filesystem::path(options_.directory) / "usage.journal").string();
  offset_path_ = (std::filesystem::path(options_.directory) / "usage.shipped").string();
  quarantine_path_ = (std::filesystem::path(options_.directory) / "usage.quarantine").string();
  inflight_path_ = (std::filesystem::path(options_.directory) / "usage.inflight").string();
  recovered_path_ = inflight_path_ + ".recovered";
  ATRIUM_ASSIGN_OR_RETURN(journal_, files_.Open(journal_path_, kAppendable));
  if (Status recovered = RecoverCheckpoints(); !recovered.has_value()) {
    journal_.reset();
    return recovered;
  }
  const Result<int64_t> stat = journal_->Size();
  int64_t size = stat.has_value() ? *stat : 0;
  int64_t offset = 0;
  if (FILE* f = std::fopen(offset_path_.c_str(), "r")) {
    long long v = 0;
    if (std::fscanf(f, "%lld", &v) == 1 && v >= 0) offset = v;
    std::fclose(f);
  }
  // Offset 0 is saved before the file is emptied, so an offset beyond the
  // file means a damaged side file: ship from the start (inserts ignore ids
  // the store already has).
  if (offset > size) offset = 0;
  shipped_offset_ = offset;
  // A torn last line from a killed process (no newline) would glue onto the
  // next record: end it so that it is skipped as unreadable.
  if (size > 0) {
    char last = 0;
    const Result<size_t> read = journal_->ReadAt(size - 1, &last, 1);
    if (read.has_value() && *read == 1 && last != '\n') {
      if (Status ended = journal_->Append("\n"); !ended.has_value()) {
        journal_.reset();
        std::lock_guard lock(inflight_mu_);
        inflight_.reset();
        return ended;
      }
      size += 1;
    }
  }
  {
    std::lock_guard lock(append_mu_);
    size_ = size;
    memory_from_ = size;
    pending_.clear();
  }
  taken_.clear();
  taken_bytes_ = 0;
  stopping_ = false;
  started_ = true;
  flusher_ = std::thread([this] {
    NameThisThread("usage-flush");
    FlushLoop();
  });
  shipper_ = std::thread([this] {
    NameThisThread("usage-ship");
    ShipLoop();
  });
  return OkStatus();
}

Status UsageJournal::RecoverCheckpoints() {
  std::unordered_map<std::string, UsageRecord> last;
  ReadCheckpoints(recovered_path_, last);  // left by a start that died before shipping them
  ReadCheckpoints(inflight_path_, last);
  recovered_.clear();
  if (!last.empty()) {
    std::string text;
    for (auto& [id, record] : last) {
      text += EncodeUsageLine(record);
      text += '\n';
      recovered_.push_back(std::move(record));
    }
    // On disk, rename included, before usage.inflight is emptied below.
    ATRIUM_RETURN_IF_ERROR(ReplaceFileAtomically(files_, recovered_path_, text));
  }
  std::lock_guard lock(inflight_mu_);
  ATRIUM_ASSIGN_OR_RETURN(inflight_, files_.Open(inflight_path_, kFresh));
  inflight_size_ = 0;
  live_.clear();
  live_bytes_ = 0;
  any_live_ = false;
  return OkStatus();
}

bool UsageJournal::ShipRecovered() {
  for (size_t start = 0; start < recovered_.size(); start += options_.batch) {
    const size_t end = std::min(recovered_.size(), start + options_.batch);
    std::vector<UsageRecord> batch(recovered_.begin() + static_cast<std::ptrdiff_t>(start),
                                   recovered_.begin() + static_cast<std::ptrdiff_t>(end));
    Status s = Ship(batch);
    if (!s.has_value()) {
      spdlog::warn("usage journal: store unavailable, {} interrupted requests wait: {}",
                   recovered_.size(), s.error().message);
      return false;
    }
  }
  spdlog::info("usage journal: {} requests the last process left running shipped as interrupted",
               recovered_.size());
  recovered_shipped_.fetch_add(static_cast<int64_t>(recovered_.size()));
  recovered_.clear();
  (void)files_.Remove(recovered_path_);
  return true;
}

Status UsageJournal::Checkpoint(UsageRecord record) {
  record.status = kInterruptedStatus;
  std::string line = EncodeUsageLine(record);
  line += '\n';
  std::lock_guard lock(inflight_mu_);
  if (!inflight_) return Error::Unavailable("usage journal is not open");
  ATRIUM_RETURN_IF_ERROR(inflight_->Append(line));
  inflight_size_ += static_cast<int64_t>(line.size());
  std::string& live = live_[record.id];
  live_bytes_ += static_cast<int64_t>(line.size()) - static_cast<int64_t>(live.size());
  live = std::move(line);
  any_live_ = true;
  dirty_ = true;
  // Mostly superseded lines: the flusher rewrites the file (with many
  // streams running the live lines alone may pass the threshold: then at
  // twice their size).
  if (inflight_size_ > std::max(options_.inflight_compact_bytes, 2 * live_bytes_)) {
    compact_due_ = true;
  }
  return OkStatus();
}

Status UsageJournal::CompactInflight() {
  std::string text;
  text.reserve(static_cast<size_t>(live_bytes_));
  for (const auto& [id, line] : live_) text += line;
  const std::string tmp = inflight_path_ + ".tmp";
  ATRIUM_ASSIGN_OR_RETURN(std::shared_ptr<File> file, files_.Open(tmp, kFresh));
  Status done = file->Append(text);
  if (done.has_value()) done = files_.Rename(tmp, inflight_path_);
  if (!done.has_value()) {  // the old file stays in use
    file.reset();
    (void)files_.Remove(tmp);
    return done;
  }
  // The old file closes once the flusher, should it be syncing it, is done.
  inflight_ = std::move(file);
  inflight_size_ = static_cast<int64_t>(text.size());
  dirty_ = true;  // the flusher syncs the new file
  return OkStatus();
}

Status UsageJournal::Append(const UsageRecord& record) {
  std::vector<UsageRecord> one{record};
  return AppendBatch(one);
}

Status UsageJournal::AppendBatch(std::vector<UsageRecord>& records) {
  if (records.empty()) return OkStatus();
  std::string text;
  text.reserve(records.size() * 400);
  std::vector<int64_t> line_bytes;
  line_bytes.reserve(records.size());
  for (const UsageRecord& record : records) {
    const size_t before = text.size();
    AppendUsageLine(text, record);
    text.push_back('\n');
    line_bytes.push_back(static_cast<int64_t>(text.size() - before));
  }
  {
    std::lock_guard lock(append_mu_);
    if (!journal_) return Error::Unavailable("usage journal is not open");
    if (Status written = journal_->Append(text); !written.has_value()) {
      // Part of the batch may have landed (a disk filling up): cut it off,
      // so that no line of a record reported lost ships, and the next line
      // starts where size_ says.
      if (Status cut = journal_->Truncate(size_); !cut.has_value()) {
        spdlog::error("usage journal: cannot cut a torn write off: {}", cut.error().message);
      }
      return written;
    }
    size_ += static_cast<int64_t>(text.size());
    if (any_live_.load()) {  // these requests' checkpoints are moot now
      std::lock_guard inflight(inflight_mu_);
      for (const UsageRecord& record : records) {
        auto it = live_.find(record.id);
        if (it == live_.end()) continue;
        live_bytes_ -= static_cast<int64_t>(it->second.size());
        live_.erase(it);
      }
      any_live_ = !live_.empty();
    }
    if (pending_.size() + records.size() > options_.memory_records) {
      // The shipper is that far behind: it reads these lines, and the ones
      // it has not taken yet, back from the file. The copies are freed by
      // the shipper, not on the caller's event loop.
      dropped_.push_back(std::move(pending_));
      pending_.clear();
      memory_from_ = size_;
    } else {
      for (size_t i = 0; i < records.size(); ++i) {
        pending_.push_back({std::move(records[i]), line_bytes[i]});
      }
    }
  }
  dirty_ = true;
  appended_.fetch_add(static_cast<int64_t>(records.size()));
  return OkStatus();
}

void UsageJournal::FlushLoop() {
  std::unique_lock lock(wake_mu_);
  while (!stopping_) {
    wake_.wait_for(lock, std::chrono::milliseconds(options_.flush_ms));
    lock.unlock();
    if (compact_due_.exchange(false)) {
      std::lock_guard inflight(inflight_mu_);
      if (auto s = CompactInflight(); !s.has_value()) {
        spdlog::warn("usage journal: cannot compact {}: {}", inflight_path_, s.error().message);
      }
    }
    if (dirty_.exchange(false)) {
      // A failed sync is neither reported nor retried here: a record is
      // durable against a process kill once written; the sync adds only
      // machine crashes, and the next round with new writes syncs again.
      (void)journal_->Sync();
      // Synced through a reference of its own, outside the lock:
      // checkpoints (on the I/O loops) do not wait for the disk.
      std::shared_ptr<File> inflight_file;
      {
        std::lock_guard inflight(inflight_mu_);
        inflight_file = inflight_;
      }
      if (inflight_file) (void)inflight_file->Sync();
    }
    lock.lock();
  }
}

void UsageJournal::CountRefusal(const std::string& tenant_id, const std::string& key_id,
                                std::string_view reason, int64_t at_ms) {
  std::lock_guard lock(refusals_mu_);
  refusals_.Add(tenant_id, key_id, reason, at_ms);
}

bool UsageJournal::ShipRefusals() {
  std::vector<RefusalCount> counts;
  {
    std::lock_guard lock(refusals_mu_);
    counts = refusals_.Take();
  }
  if (counts.empty() || !refusal_sink_) return true;
  Status s = refusal_sink_(counts);
  if (!s.has_value()) {
    spdlog::warn("usage journal: store unavailable, refusal counts wait: {}", s.error().message);
    std::lock_guard lock(refusals_mu_);
    refusals_.Restore(counts);
    return false;
  }
  return true;
}

void UsageJournal::ShipLoop() {
  std::unique_lock lock(wake_mu_);
  while (!stopping_) {
    lock.unlock();
    bool ok = ShipOnce();
    ok = ShipRefusals() && ok;
    lock.lock();
    if (stopping_) break;
    // After a store error wait longer: the store may be down for a while.
    wake_.wait_for(lock, std::chrono::milliseconds(ok ? options_.ship_ms : 1000));
  }
}

bool UsageJournal::ShipOnce() {
  int64_t memory_from = 0;
  std::vector<std::deque<Pending>> dropped;
  {
    std::lock_guard lock(append_mu_);
    memory_from = memory_from_;
    dropped.swap(dropped_);
  }
  dropped.clear();
  if (shipped_offset_ < memory_from) {
    // Lines the shipper took from memory but could not ship yet are among
    // those read back now (memory filled and the copies were dropped).
    taken_.clear();
    taken_bytes_ = 0;
    backlog_.clear();
    if (!ShipFromFile(memory_from)) return false;
  }
  const bool earlier_shipped = shipped_offset_ >= memory_from;
  // An earlier process's checkpoints go after its final records: the store
  // keeps the first record of an id.
  if (earlier_shipped && !recovered_.empty() && !ShipRecovered()) return false;
  if (earlier_shipped && !ShipFromMemory()) return false;
  // Everything shipped: empty a large file. Offset 0 first, so that a crash
  // in between re-ships (harmlessly) rather than skips; it is synced outside
  // the appenders' lock, and the file is emptied only if nothing was
  // appended meanwhile (else the next round saves the real offset again).
  {
    std::lock_guard lock(append_mu_);
    if (shipped_offset_ != size_ || size_ < options_.truncate_bytes) return true;
  }
  if (!SaveOffset(0).has_value()) return true;
  std::lock_guard lock(append_mu_);
  if (shipped_offset_ == size_ && journal_->Truncate(0).has_value()) {
    size_ = 0;
    memory_from_ = 0;
    shipped_offset_ = 0;
  }
  return true;
}

bool UsageJournal::ShipFromFile(int64_t end) {
  while (shipped_offset_ < end) {
    size_t want = static_cast<size_t>(std::min<int64_t>(kReadChunk, end - shipped_offset_));
    std::string chunk(want, '\0');
    const Result<size_t> n = journal_->ReadAt(shipped_offset_, chunk.data(), want);
    if (!n.has_value() || *n == 0) return false;
    chunk.resize(*n);
    std::vector<UsageRecord> batch;
    size_t consumed = 0;
    for (size_t nl;
         batch.size() < options_.batch && (nl = chunk.find('\n', consumed)) != std::string::npos;
         consumed = nl + 1) {
      std::string_view line(chunk.data() + consumed, nl - consumed);
      if (line.empty()) continue;
      auto record = DecodeUsageLine(line);
      if (!record.has_value()) {
        spdlog::warn("usage journal: skipping an unreadable line: {}", record.error().message);
        continue;
      }
      batch.push_back(std::move(*record));
    }
    if (consumed == 0) break;  // only an incomplete line so far
    if (!batch.empty()) {
      Status s = Ship(batch);
      if (!s.has_value()) {
        spdlog::warn("usage journal: store unavailable, {} records wait: {}", batch.size(),
                     s.error().message);
        return false;
      }
    }
    const int64_t next = shipped_offset_ + static_cast<int64_t>(consumed);
    if (!SaveOffset(next).has_value()) return false;
    shipped_offset_ = next;
    shipped_.fetch_add(static_cast<int64_t>(batch.size()));
  }
  return true;
}

bool UsageJournal::ShipFromMemory() {
  // This round ships what was appended before it began, in batches: records
  // that keep arriving wait for the next round rather than each making a
  // small transaction of their own.
  {
    std::lock_guard lock(append_mu_);
    // Memory filled since ShipOnce() looked: the lines before memory_from_
    // come from the file first, in the next round.
    if (memory_from_ > shipped_offset_) return true;
    if (backlog_.empty()) backlog_.swap(pending_);  // else a failed round's, retried first
  }
  for (;;) {
    while (taken_.size() < options_.batch && !backlog_.empty()) {
      taken_.push_back(std::move(backlog_.front().record));
      taken_bytes_ += backlog_.front().line_bytes;
      backlog_.pop_front();
    }
    if (taken_.empty()) return true;
    Status s = Ship(taken_);
    if (!s.has_value()) {
      spdlog::warn("usage journal: store unavailable, {} records wait: {}",
                   taken_.size() + backlog_.size(), s.error().message);
      return false;
    }
    const int64_t next = shipped_offset_ + taken_bytes_;
    if (!SaveOffset(next).has_value()) return false;
    shipped_offset_ = next;
    shipped_.fetch_add(static_cast<int64_t>(taken_.size()));
    taken_.clear();
    taken_bytes_ = 0;
  }
}

Status UsageJournal::Ship(const std::vector<UsageRecord>& batch) {
  Status s = sink_(batch);
  auto refused = [](const Status& st) {
    return st.error().code == ErrorCode::kInvalidArgument ||
           st.error().code == ErrorCode::kAlreadyExists;
  };
  if (s.has_value() || !refused(s)) return s;
  // Some record can never be stored (the store stored none of the batch):
  // find it by offering each alone. Records stored here and offered again
  // later (should the store go down meanwhile) are ignored by id.
  for (const UsageRecord& record : batch) {
    const std::vector<UsageRecord> one{record};
    Status alone = sink_(one);
    if (alone.has_value()) continue;
    if (!refused(alone)) return alone;
    // An earlier process's last checkpoint of a request whose own record
    // is stored already (it finished, or a restart shipped it before): the
    // request is billed once, by that record.
    if (alone.error().code == ErrorCode::kAlreadyExists && record.status == "interrupted") {
      spdlog::info(
          "usage journal: request {} is billed by its stored record; its checkpoint is "
          "not shipped",
          record.id);
      continue;
    }
    ATRIUM_RETURN_IF_ERROR(Quarantine(record, alone.error().message));
  }
  return OkStatus();
}

Status UsageJournal::Quarantine(const UsageRecord& record, const std::string& why) {
  std::string line = EncodeUsageLine(record);
  line += '\n';
  const OpenOptions appending;
  ATRIUM_ASSIGN_OR_RETURN(auto file, files_.Open(quarantine_path_, appending));
  Status written = file->Append(line);
  if (written.has_value()) written = file->Sync();
  file.reset();
  ATRIUM_RETURN_IF_ERROR(written);  // not set aside: it is offered again, nothing is lost
  const int64_t total = quarantined_.fetch_add(1) + 1;
  spdlog::error(
      "usage journal: the store refused record {} (tenant {}) as invalid; set aside in {} "
      "({} set aside since start): {}",
      record.id, record.tenant_id, quarantine_path_, total, why);
  return OkStatus();
}

Status UsageJournal::SaveOffset(int64_t offset) {
  return ReplaceFileAtomically(files_, offset_path_, std::to_string(offset) + "\n");
}

size_t UsageJournal::held_in_memory() {
  std::lock_guard lock(append_mu_);
  return pending_.size();
}

bool UsageJournal::WaitShipped(int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (shipped_.load() < appended_.load()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    wake_.notify_all();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

void UsageJournal::Stop() {
  if (!started_) return;
  {
    std::lock_guard lock(wake_mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  flusher_.join();
  shipper_.join();
  ShipOnce();  // one last attempt; what fails stays in the file for the next start
  ShipRefusals();
  (void)journal_->Sync();
  {
    std::lock_guard lock(append_mu_);
    journal_.reset();
  }
  {
    // Requests cut off without a final record keep their checkpoints for the
    // next start; otherwise there is nothing to keep.
    std::lock_guard lock(inflight_mu_);
    if (inflight_) {
      if (live_.empty()) {
        (void)files_.Remove(inflight_path_);
      } else {
        (void)inflight_->Sync();
      }
      inflight_.reset();
    }
  }
  started_ = false;
}

}  // namespace atrium::gateway_server
