// UsageJournal: how every request's usage record reaches the store exactly
// once. Append() writes the record as one JSON line to an append-only file
// before the request's last bytes go to the client, so a killed gateway
// (SIGKILL: the page cache survives) never loses the record of a request the
// client saw complete; a flusher fdatasync()s the file every flush_ms for
// machine crashes. A shipper thread inserts the records after the shipped
// offset into the store in batches (InsertUsageRecords ignores ids it already
// has), then records the new offset in a side file. Lines an earlier process
// left are read back from the file; this process's own records are handed to
// the shipper in memory as well, so that the hot path's records are never
// parsed again. At most `memory_records` wait in memory for the shipper to
// take them: when it falls that far behind (the store is down or slow), the
// copies are dropped and it reads those lines back from the file instead.
// A crash between insert and offset only re-ships lines the store already
// holds, so the store never holds a record twice; when everything is
// shipped the file is emptied (offset set to 0 first, then truncated, for
// the same reason). While the store is unreachable, records wait in the
// file.
//
// A request still running when the process dies has no record in that file.
// For one whose client has started to receive tokens (a stream) the gateway
// writes checkpoints: the record as it would be were the request cut off now
// (status "interrupted", the tokens relayed so far), to a second file,
// usage.inflight, at the stream's start and then every second; its final
// record makes the checkpoint moot. The next Start() takes the last
// checkpoint of every request the earlier process left and ships them after
// that process's final records: the store keeps the first record of an id,
// so a request that did finish keeps its final record and one that did not
// is billed for what it had relayed by its last checkpoint. (Should the
// final record's write fail, the checkpoint is what remains of the request.)
//
// Refusals (requests no model server saw) are not records: CountRefusal()
// adds them to a bounded in-memory tally (gateway::RefusalTally) that the
// shipper hands to the refusal sink with each round. They are statistics,
// not bills: counts not yet shipped when the process dies are lost.
//
// A record the store refuses as invalid (kInvalidArgument: it can never be
// stored, e.g. text with a NUL byte) must not hold up the others behind it,
// nor be retried forever: the shipper offers the refused batch's records one
// by one, sets each one the store refuses aside in usage.quarantine (a JSON
// line, as in the journal, for an operator to mend and re-ship), counts it
// and logs it at error level, and goes on. Any other store error means the
// store is unavailable: the batch waits and is offered again.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/file_system.h"
#include "common/result.h"
#include "gateway/refusal_tally.h"
#include "model/gateway_records.h"

namespace atrium::gateway_server {

struct UsageJournalOptions {
  std::string directory;                     // holds usage.journal and usage.shipped
  int flush_ms = 200;                        // fdatasync period
  int ship_ms = 200;                         // how often new lines are shipped
  size_t batch = 1000;                       // records per store transaction
  size_t memory_records = 65536;             // unshipped records kept in memory
  int64_t truncate_bytes = 16 << 20;         // empty the file once shipped and this large
  int64_t inflight_compact_bytes = 4 << 20;  // usage.inflight is rewritten past this
  // Where the files are written; nullptr for the disk (FileSystem::Default()).
  // Not owned; outlives the journal. Tests pass one that injects faults.
  FileSystem* files = nullptr;
};

// A checkpoint's status: the request was cut off by the gateway's end.
inline constexpr const char* kInterruptedStatus = "interrupted";

// Inserts records idempotently (by id); the store's InsertUsageRecords.
// kInvalidArgument: some record can never be stored (nothing was stored);
// any other error: the store is unavailable.
using UsageSink = std::function<Status(const std::vector<UsageRecord>&)>;
// Adds refusal counts; the store's AddGatewayRefusals.
using RefusalSink = std::function<Status(const std::vector<RefusalCount>&)>;

std::string EncodeUsageLine(const UsageRecord& record);  // one JSON object, no newline
Result<UsageRecord> DecodeUsageLine(std::string_view line);

class UsageJournal {
 public:
  UsageJournal(UsageJournalOptions options, UsageSink sink);
  ~UsageJournal();  // Stop()s
  UsageJournal(const UsageJournal&) = delete;
  UsageJournal& operator=(const UsageJournal&) = delete;

  // Opens (creating) the files and starts the flusher and shipper; what an
  // earlier process left unshipped is shipped first.
  Status Start();
  // Durable against a process kill when it returns OK.
  Status Append(const UsageRecord& record);
  // Several records with one write(2); the same guarantee for each.
  Status AppendBatch(std::vector<UsageRecord>& records);
  // The record of a request still running, as it would be if the process
  // died now (its status is set to "interrupted"); durable against a process
  // kill when it returns OK. The request's final record supersedes it.
  Status Checkpoint(UsageRecord record);
  // Ships what is left (one last attempt), syncs, joins the threads.
  void Stop();

  // Where refusal counts go; set before Start(). Without one they are
  // counted and dropped.
  void SetRefusalSink(RefusalSink sink) { refusal_sink_ = std::move(sink); }
  // One request refused before any model server saw it; thread-safe.
  void CountRefusal(const std::string& tenant_id, const std::string& key_id,
                    std::string_view reason, int64_t at_ms);

  // For tests: lines appended and shipped by this process.
  int64_t appended() const { return appended_.load(); }
  int64_t shipped() const { return shipped_.load(); }
  // Checkpoints of an earlier process shipped as interrupted records (the
  // store ignored those whose request had a final record).
  int64_t recovered() const { return recovered_shipped_.load(); }
  // Records the store refused as invalid, set aside in usage.quarantine by
  // this process.
  int64_t quarantined() const { return quarantined_.load(); }
  // Records of this process waiting in memory for the shipper to take them
  // (at most options.memory_records; the shipper holds as many more at most).
  size_t held_in_memory();
  // Blocks until everything appended so far is in the store (or timeout).
  bool WaitShipped(int timeout_ms);

 private:
  void FlushLoop();
  void ShipLoop();
  // One round: ships the records after the offset. False on a store error.
  bool ShipOnce();
  // Lines [shipped_offset_, end) read back from the file, in batches.
  bool ShipFromFile(int64_t end);
  // This process's records, from memory.
  bool ShipFromMemory();
  Status SaveOffset(int64_t offset);
  // Offers `batch` to the store; a batch it refuses as invalid is offered
  // record by record and the refused records are quarantined. OK when every
  // record is in the store or in quarantine; otherwise the store's error
  // (unavailable), and the batch is to be offered again.
  Status Ship(const std::vector<UsageRecord>& batch);
  // Appends the record to usage.quarantine (synced).
  Status Quarantine(const UsageRecord& record, const std::string& why);
  // Start(): an earlier process's last checkpoint per request, kept in
  // usage.inflight.recovered until shipped; a fresh usage.inflight.
  Status RecoverCheckpoints();
  // Ships them once the earlier process's final records are in the store.
  bool ShipRecovered();
  // Rewrites usage.inflight with the live checkpoints only.
  Status CompactInflight();  // REQUIRES(inflight_mu_)
  // Hands the refusal counts to the sink; on failure they wait for the next round.
  bool ShipRefusals();

  const UsageJournalOptions options_;
  const UsageSink sink_;
  FileSystem& files_;
  std::string journal_path_;
  std::string offset_path_;
  std::string quarantine_path_;
  // usage.journal, open from Start() to Stop(): appended under append_mu_,
  // read by the shipper and synced by the flusher outside it.
  std::unique_ptr<File> journal_;

  std::mutex append_mu_;  // serialises write(2) with truncation
  int64_t size_ = 0;      // GUARDED_BY(append_mu_)
  // Where this process's appends began: lines before it are read from the
  // file, the rest are in pending_ (0 once the file has been emptied).
  int64_t memory_from_ = 0;  // GUARDED_BY(append_mu_)
  struct Pending {
    UsageRecord record;
    int64_t line_bytes;  // its line's length, newline included
  };
  std::deque<Pending> pending_;  // GUARDED_BY(append_mu_): appended, not yet taken
  // Copies dropped when pending_ filled, for the shipper to free.
  std::vector<std::deque<Pending>> dropped_;  // GUARDED_BY(append_mu_)
  // Shipper thread: pending_ swapped out whole (the appenders' lock is held
  // for no copying), then what is being shipped, not yet in the store, and
  // the bytes of its lines.
  std::deque<Pending> backlog_;
  std::vector<UsageRecord> taken_;
  int64_t taken_bytes_ = 0;
  int64_t shipped_offset_ = 0;  // shipper thread only (and Start/Stop)

  // Checkpoints.
  std::string inflight_path_;
  std::string recovered_path_;
  std::mutex inflight_mu_;
  std::shared_ptr<File> inflight_;                     // GUARDED_BY(inflight_mu_)
  int64_t inflight_size_ = 0;                          // GUARDED_BY(inflight_mu_)
  std::unordered_map<std::string, std::string> live_;  // GUARDED_BY(inflight_mu_): id -> line
  int64_t live_bytes_ = 0;                             // GUARDED_BY(inflight_mu_)
  std::atomic<bool> any_live_{false};                  // live_ is not empty (spares finals a lock)
  std::atomic<bool> compact_due_{false};               // the flusher is to CompactInflight()
  std::vector<UsageRecord> recovered_;                 // shipper thread only (and Start)
  std::atomic<int64_t> recovered_shipped_{0};

  RefusalSink refusal_sink_;
  std::mutex refusals_mu_;
  gateway::RefusalTally refusals_;  // GUARDED_BY(refusals_mu_)

  std::mutex wake_mu_;
  std::condition_variable wake_;
  bool stopping_ = false;  // GUARDED_BY(wake_mu_)
  std::atomic<bool> dirty_{false};
  std::atomic<int64_t> appended_{0};
  std::atomic<int64_t> shipped_{0};
  std::atomic<int64_t> quarantined_{0};
  std::thread flusher_;
  std::thread shipper_;
  bool started_ = false;
};

}  // namespace atrium::gateway_server
