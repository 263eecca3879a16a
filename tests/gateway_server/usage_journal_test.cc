#include "gateway_server/usage_journal.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

#include "support/fault_injecting_file_system.h"
#include "support/result_matchers.h"
#include "support/test_directory.h"
#include "support/wait.h"

namespace atrium::gateway_server {
namespace {

using testing_support::ChangeSignal;
using testing_support::WaitUntil;

// A store stand-in that keeps records by id, as InsertUsageRecords does, and
// can be told to fail.
struct FakeStore {
  std::mutex mu;
  std::map<std::string, UsageRecord> rows;
  int inserts = 0;      // calls, successful or not
  int64_t offered = 0;  // records offered, duplicates included
  std::atomic<bool> down{false};
  ChangeSignal changed;  // after every insert, kept or not
  Status Insert(const std::vector<UsageRecord>& records) {
    Status status = Keep(records);
    changed.Notify();
    return status;
  }
  // Waits until the store holds `n` records (or a timeout only a broken run reaches).
  void AwaitSize(size_t n) {
    changed.WaitUntil([&] { return size() >= n; });
  }
  // Insert's work, under the lock.
  Status Keep(const std::vector<UsageRecord>& records) {
    std::lock_guard lock(mu);
    ++inserts;
    if (down) return Error::Unavailable("store down");
    // As the real store: text with a NUL byte refuses the whole batch.
    for (const auto& r : records) {
      if (r.model.find('\0') != std::string::npos) {
        return Error::InvalidArgument("text parameter $4 contains a NUL byte");
      }
    }
    // As the real store: an id stored with other figures refuses the batch.
    for (const auto& r : records) {
      auto it = rows.find(r.id);
      if (it != rows.end() &&
          (it->second.status != r.status || it->second.output_tokens != r.output_tokens ||
           it->second.input_tokens != r.input_tokens)) {
        return Error{ErrorCode::kAlreadyExists,
                     "usage record " + r.id + " is stored already with a different payload"};
      }
    }
    for (const auto& r : records) {
      ++offered;
      rows.emplace(r.id, r);
    }
    return OkStatus();
  }
  size_t size() {
    std::lock_guard lock(mu);
    return rows.size();
  }
};

UsageRecord Record(int i) {
  UsageRecord r;
  r.id = "req_" + std::to_string(i);
  r.tenant_id = "tn_a";
  r.key_id = "key1";
  r.model = "m";
  r.deployment_id = "dep_1";
  r.endpoint = "http://127.0.0.1:1";
  r.api = "chat.completions";
  r.stream = i % 2 == 0;
  r.input_tokens = 10 + i;
  r.output_tokens = 20 + i;
  r.cached_tokens = i % 3;
  r.queue_ms = 1;
  r.ttft_ms = 2;
  r.total_ms = 3;
  r.status = "completed";
  r.http_status = 200;
  r.created_at = 1'790'000'000'000 + i;
  return r;
}

class UsageJournalTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = TestDirectory("atrium-journal"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  UsageJournalOptions Options() {
    UsageJournalOptions o;
    o.directory = dir_.string();
    o.flush_ms = 10;
    o.ship_ms = 10;
    o.batch = 7;
    return o;
  }
  UsageSink Sink() {
    return [this](const std::vector<UsageRecord>& r) { return store_.Insert(r); };
  }

  std::filesystem::path dir_;
  FakeStore store_;
};

TEST(UsageLineTest, RoundTrips) {
  UsageRecord r = Record(4);
  auto back = DecodeUsageLine(EncodeUsageLine(r));
  ASSERT_OK(back);
  EXPECT_EQ(back->id, r.id);
  EXPECT_EQ(back->tenant_id, r.tenant_id);
  EXPECT_EQ(back->input_tokens, r.input_tokens);
  EXPECT_EQ(back->output_tokens, r.output_tokens);
  EXPECT_EQ(back->cached_tokens, r.cached_tokens);
  EXPECT_EQ(back->stream, r.stream);
  EXPECT_EQ(back->created_at, r.created_at);
  EXPECT_EQ(EncodeUsageLine(r).find('\n'), std::string::npos);
  r.model = "a \"quoted\" \\ model\n\x01";
  auto odd = DecodeUsageLine(EncodeUsageLine(r));
  ASSERT_OK(odd);
  EXPECT_EQ(odd->model, r.model);
  EXPECT_EQ(EncodeUsageLine(r).find('\n'), std::string::npos);
  // A flagged record keeps its flag; lines without one (older ones) read as "".
  EXPECT_EQ(odd->flag, "");
  EXPECT_EQ(EncodeUsageLine(r).find("flag"), std::string::npos);
  r.flag = kUsageOverBound;
  auto flagged = DecodeUsageLine(EncodeUsageLine(r));
  ASSERT_OK(flagged);
  EXPECT_EQ(flagged->flag, kUsageOverBound);
}

TEST(UsageLineTest, RejectsGarbage) {
  EXPECT_FALSE(DecodeUsageLine("not json").has_value());
  EXPECT_FALSE(DecodeUsageLine("{}").has_value());
  EXPECT_FALSE(DecodeUsageLine(R"({"id":""})").has_value());
}

TEST_F(UsageJournalTest, ShipsEveryRecordOnce) {
  UsageJournal journal(Options(), Sink());
  ASSERT_OK(journal.Start());
  for (int i = 0; i < 100; ++i) ASSERT_OK(journal.Append(Record(i)));
  ASSERT_TRUE(journal.WaitShipped(10'000));
  journal.Stop();
  EXPECT_EQ(store_.size(), 100u);
  EXPECT_EQ(store_.offered, 100);  // nothing offered twice without a crash
}

// Issue 15, item 16: one record the store refuses as invalid (a model name
// with a NUL byte) was retried forever, batch and all, so no tenant's usage
// reached the store after it, in this process or (replayed from the file)
// after a restart. It is set aside now, and the others go on.
TEST_F(UsageJournalTest, ARecordTheStoreRefusesAsInvalidIsSetAsideAndTheOthersShip) {
  UsageRecord poison = Record(3);
  poison.model = std::string("p\0q", 3);
  {
    UsageJournal journal(Options(), Sink());
    ASSERT_OK(journal.Start());
    for (int i = 0; i < 20; ++i) ASSERT_OK(journal.Append(i == 3 ? poison : Record(i)));
    ASSERT_TRUE(journal.WaitShipped(10'000));
    EXPECT_EQ(journal.quarantined(), 1);
    journal.Stop();
  }
  EXPECT_EQ(store_.size(), 19u);
  EXPECT_EQ(store_.rows.count(poison.id), 0u);
  // Set aside beside the journal, whole, for an operator to mend.
  std::ifstream in(dir_ / "usage.quarantine");
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  auto kept = DecodeUsageLine(line);
  ASSERT_OK(kept);
  EXPECT_EQ(kept->id, poison.id);
  EXPECT_EQ(kept->model, poison.model);
  EXPECT_FALSE(std::getline(in, line));
}

TEST_F(UsageJournalTest, APoisonRecordLeftInTheFileByAnEarlierProcessDoesNotBlockTheRestart) {
  UsageRecord poison = Record(0);
  poison.model = std::string("\0", 1);
  store_.down = true;
  {
    UsageJournal journal(Options(), Sink());
    ASSERT_OK(journal.Start());
    for (int i = 0; i < 10; ++i) ASSERT_OK(journal.Append(i == 0 ? poison : Record(i)));
    journal.Stop();
  }
  store_.down = false;
  UsageJournal journal(Options(), Sink());
  ASSERT_OK(journal.Start());  // the earlier lines come from the file
  for (int i = 10; i < 15; ++i) ASSERT_OK(journal.Append(Record(i)));
  ASSERT_TRUE(journal.WaitShipped(10'000));
  store_.AwaitSize(14);
  EXPECT_EQ(journal.quarantined(), 1);
  journal.Stop();
  EXPECT_EQ(store_.size(), 14u);
}

TEST_F(UsageJournalTest, KeepsRecordsWhileTheStoreIsDownAndShipsThemLater) {
  store_.down = true;
  {
    UsageJournal journal(Options(), Sink());
    ASSERT_OK(journal.Start());
    for (int i = 0; i < 20; ++i) ASSERT_OK(journal.Append(Record(i)));
    EXPECT_FALSE(journal.WaitShipped(100));
    journal.Stop();
  }
  EXPECT_EQ(store_.size(), 0u);
  store_.down = false;
  UsageJournal journal(Options(), Sink());
  ASSERT_OK(journal.Start());  // the earlier process's records are shipped now
  store_.AwaitSize(20);
  journal.Stop();
  EXPECT_EQ(store_.size(), 20u);
}

TEST_F(UsageJournalTest, RecordsHeldWhileTheStoreIsDownShipAfterItReturnsInTheSameProcess) {
  // An earlier process's unshipped lines come from the file, this process's
  // records from memory; both reach the store once it is back, each once.
  store_.down = true;
  {
    UsageJournal journal(Options(), Sink());
    ASSERT_OK(journal.Start());
    for (int i = 0; i < 5; ++i) ASSERT_OK(journal.Append(Record(i)));
    journal.Stop();
  }
  UsageJournal journal(Options(), Sink());
  ASSERT_OK(journal.Start());
  for (int i = 5; i < 25; ++i) ASSERT_OK(journal.Append(Record(i)));
  EXPECT_FALSE(journal.WaitShipped(300));
  EXPECT_EQ(store_.size(), 0u);
  store_.down = false;
  ASSERT_TRUE(journal.WaitShipped(10'000));
  EXPECT_EQ(store_.size(), 25u);
  journal.Stop();
  // Restarting ships nothing again: the saved offset covers both parts.
  const int64_t offered = store_.offered;
  UsageJournal again(Options(), Sink());
  ASSERT_OK(again.Start());
  // A new record ships after whatever the file still holds: once it is in,
  // any old record shipped again would have been offered before it.
  ASSERT_OK(again.Append(Record(99)));
  store_.AwaitSize(26);
  again.Stop();
  EXPECT_EQ(store_.offered, offered + 1);
  EXPECT_EQ(store_.size(), 26u);
}

TEST_F(UsageJournalTest, WhileTheStoreIsDownMemoryStaysBoundedAndTheFileHoldsTheRest) {
  UsageJournalOptions o = Options();
  o.memory_records = 10;
  store_.down = true;
  UsageJournal journal(o, Sink());
  ASSERT_OK(journal.Start());
  for (int i = 0; i < 95; ++i) {
    ASSERT_OK(journal.Append(Record(i)));
    ASSERT_LE(journal.held_in_memory(), 10u);
  }
  std::vector<UsageRecord> batch = {Record(95), Record(96), Record(97), Record(98), Record(99)};
  ASSERT_OK(journal.AppendBatch(batch));
  EXPECT_LE(journal.held_in_memory(), 10u);
  EXPECT_FALSE(journal.WaitShipped(100));
  store_.down = false;
  ASSERT_TRUE(journal.WaitShipped(10'000));
  // Records taken before memory filled and then read back from the file
  // reach the store once, like every other.
  EXPECT_EQ(store_.size(), 100u);
  EXPECT_EQ(store_.offered, 100);
  for (int i = 100; i < 130; ++i) ASSERT_OK(journal.Append(Record(i)));  // and memory serves again
  ASSERT_TRUE(journal.WaitShipped(10'000));
  journal.Stop();
  EXPECT_EQ(store_.size(), 130u);
  EXPECT_EQ(store_.offered, 130);
  EXPECT_EQ(store_.rows["req_42"].output_tokens, Record(42).output_tokens);
}

TEST_F(UsageJournalTest, ARecordAppendedWhileMemoryIsFullIsShippedAfterTheLinesBeforeIt) {
  // Records keep arriving while the shipper is behind: whatever mix of file
  // and memory it ships from, every record arrives once and the offset ends
  // at the end of the file (a restart ships nothing again).
  UsageJournalOptions o = Options();
  o.memory_records = 8;
  o.ship_ms = 1;
  UsageJournal journal(o, Sink());
  ASSERT_OK(journal.Start());
  for (int i = 0; i < 2000; ++i) {
    store_.down = (i / 50) % 3 == 0;  // down a third of the time
    ASSERT_OK(journal.Append(Record(i)));
  }
  store_.down = false;
  ASSERT_TRUE(journal.WaitShipped(20'000));
  journal.Stop();
  EXPECT_EQ(store_.size(), 2000u);
  EXPECT_EQ(store_.offered, 2000);
  const int64_t offered = store_.offered;
  UsageJournal again(o, Sink());
  ASSERT_OK(again.Start());
  // As above: a new record ships after anything the offset left behind.
  ASSERT_OK(again.Append(Record(5000)));
  store_.AwaitSize(2001);
  again.Stop();
  EXPECT_EQ(store_.offered, offered + 1);
}

TEST_F(UsageJournalTest, ACrashBeforeTheOffsetIsSavedReshipsWithoutDuplicates) {
  {
    UsageJournal journal(Options(), Sink());
    ASSERT_OK(journal.Start());
    for (int i = 0; i < 30; ++i) ASSERT_OK(journal.Append(Record(i)));
    ASSERT_TRUE(journal.WaitShipped(10'000));
    journal.Stop();
  }
  // As if the process died after inserting but before saving the offset.
  std::ofstream(dir_ / "usage.shipped") << "0\n";
  UsageJournal journal(Options(), Sink());
  ASSERT_OK(journal.Start());
  ASSERT_OK(journal.Append(Record(30)));
  store_.AwaitSize(31);
  journal.Stop();
  EXPECT_EQ(store_.size(), 31u);
  EXPECT_GT(store_.offered, 31);  // re-offered, and the store kept one of each
}

TEST_F(UsageJournalTest, ATornLastLineIsSkippedAndLaterRecordsStillShip) {
  std::filesystem::create_directories(dir_);
  {
    std::ofstream out(dir_ / "usage.journal");
    out << EncodeUsageLine(Record(1)) << "\n"
        << R"({"id":"req_torn","tenant)";
  }
  UsageJournal journal(Options(), Sink());
  ASSERT_OK(journal.Start());
  ASSERT_OK(journal.Append(Record(2)));
  store_.AwaitSize(2);
  journal.Stop();
  EXPECT_EQ(store_.size(), 2u);
  EXPECT_TRUE(store_.rows.contains("req_1"));
  EXPECT_TRUE(store_.rows.contains("req_2"));
}

TEST_F(UsageJournalTest, EmptiesTheFileOnceEverythingIsShipped) {
  UsageJournalOptions o = Options();
  o.truncate_bytes = 1;
  UsageJournal journal(o, Sink());
  ASSERT_OK(journal.Start());
  for (int i = 0; i < 10; ++i) ASSERT_OK(journal.Append(Record(i)));
  ASSERT_TRUE(journal.WaitShipped(10'000));
  WaitUntil([&] { return std::filesystem::file_size(dir_ / "usage.journal") == 0; });
  EXPECT_EQ(std::filesystem::file_size(dir_ / "usage.journal"), 0u);
  ASSERT_OK(journal.Append(Record(10)));
  ASSERT_TRUE(journal.WaitShipped(10'000));
  journal.Stop();
  EXPECT_EQ(store_.size(), 11u);
}

// The files of a journal as a process killed now would leave them (what has
// been written is in the page cache, which survives the process).
std::filesystem::path SnapshotOf(const std::filesystem::path& dir) {
  const std::filesystem::path copy = dir.string() + "-killed";
  std::filesystem::remove_all(copy);
  std::filesystem::copy(dir, copy);
  return copy;
}

TEST_F(UsageJournalTest, ARequestCutOffByACrashIsShippedAsInterruptedWithItsLastCheckpoint) {
  std::filesystem::path killed;
  {
    UsageJournal journal(Options(), Sink());
    ASSERT_OK(journal.Start());
    UsageRecord finished = Record(1);
    ASSERT_OK(journal.Checkpoint(finished));  // it streamed, then finished
    ASSERT_OK(journal.Append(finished));
    UsageRecord running = Record(2);
    running.output_tokens = 3;
    ASSERT_OK(journal.Checkpoint(running));
    running.output_tokens = 9;
    ASSERT_OK(journal.Checkpoint(running));
    ASSERT_TRUE(journal.WaitShipped(10'000));
    killed = SnapshotOf(dir_);
    journal.Stop();
  }
  EXPECT_EQ(store_.size(), 1u);
  UsageJournalOptions o = Options();
  o.directory = killed.string();
  UsageJournal restarted(o, Sink());
  ASSERT_OK(restarted.Start());
  WaitUntil([&] { return restarted.recovered() > 0; });
  restarted.Stop();
  EXPECT_EQ(restarted.recovered(), 2);  // both offered; the store kept the final record of req_1
  ASSERT_EQ(store_.size(), 2u);
  EXPECT_EQ(store_.rows["req_1"].status, "completed");
  EXPECT_EQ(store_.rows["req_2"].status, kInterruptedStatus);
  EXPECT_EQ(store_.rows["req_2"].output_tokens, 9);
  EXPECT_FALSE(std::filesystem::exists(killed / "usage.inflight.recovered"));
  // Shipped once: a further start finds nothing to recover.
  UsageJournal again(o, Sink());
  ASSERT_OK(again.Start());
  usleep(100'000);
  again.Stop();
  EXPECT_EQ(again.recovered(), 0);
  std::filesystem::remove_all(killed);
}

TEST_F(UsageJournalTest, AFinalRecordStillInTheJournalWinsOverItsCheckpoint) {
  std::filesystem::path killed;
  store_.down = true;  // the final record is written but not shipped when the process dies
  {
    UsageJournal journal(Options(), Sink());
    ASSERT_OK(journal.Start());
    UsageRecord r = Record(3);
    r.output_tokens = 1;
    ASSERT_OK(journal.Checkpoint(r));
    r.output_tokens = 40;
    ASSERT_OK(journal.Append(r));
    killed = SnapshotOf(dir_);
    journal.Stop();
  }
  store_.down = false;
  UsageJournalOptions o = Options();
  o.directory = killed.string();
  UsageJournal restarted(o, Sink());
  ASSERT_OK(restarted.Start());
  WaitUntil([&] { return store_.size() >= 1 && restarted.recovered() > 0; });
  restarted.Stop();
  ASSERT_EQ(store_.size(), 1u);
  EXPECT_EQ(store_.rows["req_3"].status, "completed");
  EXPECT_EQ(store_.rows["req_3"].output_tokens, 40);
  // The checkpoint the store refuses (another payload under a stored id)
  // is not set aside: the request is billed, once, by its final record.
  EXPECT_EQ(restarted.quarantined(), 0);
  std::filesystem::remove_all(killed);
}

TEST_F(UsageJournalTest, AFinishedRecordTheStoreHoldsWithOtherFiguresIsSetAsideNotMerged) {
  UsageRecord first = Record(5);
  ASSERT_OK(store_.Insert({first}));
  UsageRecord changed = first;
  changed.output_tokens += 7;
  {
    UsageJournal journal(Options(), Sink());
    ASSERT_OK(journal.Start());
    ASSERT_OK(journal.Append(Record(4)));
    ASSERT_OK(journal.Append(changed));
    ASSERT_OK(journal.Append(Record(6)));
    ASSERT_TRUE(journal.WaitShipped(10'000));
    EXPECT_EQ(journal.quarantined(), 1);
    journal.Stop();
  }
  EXPECT_EQ(store_.size(), 3u);
  EXPECT_EQ(store_.rows[first.id].output_tokens, first.output_tokens);
}

TEST_F(UsageJournalTest, CheckpointsWaitWhileTheStoreIsDownAndTheFileStaysSmall) {
  UsageJournalOptions o = Options();
  o.inflight_compact_bytes = 4096;
  std::filesystem::path killed;
  {
    UsageJournal journal(o, Sink());
    ASSERT_OK(journal.Start());
    for (int step = 0; step < 200; ++step) {  // two long streams, checkpointed often
      for (int id : {5, 6}) {
        UsageRecord r = Record(id);
        r.output_tokens = step;
        ASSERT_OK(journal.Checkpoint(r));
      }
    }
    // The flusher rewrites it to the live lines once it passes the threshold.
    WaitUntil([&] { return std::filesystem::file_size(dir_ / "usage.inflight") <= 4096; });
    EXPECT_LE(std::filesystem::file_size(dir_ / "usage.inflight"), 4096u);
    killed = SnapshotOf(dir_);
    journal.Stop();
  }
  // Stopped while 5 and 6 still run: their checkpoints stay for the next start.
  EXPECT_TRUE(std::filesystem::exists(dir_ / "usage.inflight"));
  o.directory = killed.string();
  store_.down = true;
  {
    UsageJournal restarted(o, Sink());
    ASSERT_OK(restarted.Start());
    usleep(100'000);
    restarted.Stop();
    EXPECT_EQ(restarted.recovered(), 0);
  }
  EXPECT_TRUE(std::filesystem::exists(killed / "usage.inflight.recovered"));
  store_.down = false;
  UsageJournal later(o, Sink());
  ASSERT_OK(later.Start());
  WaitUntil([&] { return later.recovered() >= 2; });
  later.Stop();
  ASSERT_EQ(store_.size(), 2u);
  EXPECT_EQ(store_.rows["req_5"].output_tokens, 199);
  EXPECT_EQ(store_.rows["req_6"].output_tokens, 199);
  std::filesystem::remove_all(killed);
}

TEST_F(UsageJournalTest, AGracefulStopWithNothingRunningLeavesNoCheckpoints) {
  UsageJournal journal(Options(), Sink());
  ASSERT_OK(journal.Start());
  ASSERT_OK(journal.Checkpoint(Record(7)));
  ASSERT_OK(journal.Append(Record(7)));
  journal.Stop();
  EXPECT_FALSE(std::filesystem::exists(dir_ / "usage.inflight"));
}

// Faults in the journal's own writes, through a FileSystem that fails them.

std::vector<std::string> LinesOf(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST_F(UsageJournalTest, ARecordHalfWrittenWhenTheProcessDiesIsDroppedAndEveryOtherShipsOnce) {
  FaultInjectingFileSystem files;
  UsageJournalOptions o = Options();
  o.files = &files;
  const std::string torn_line = EncodeUsageLine(Record(10)) + "\n";
  store_.down = true;  // nothing ships in the first life: it all comes from the file
  {
    UsageJournal journal(o, Sink());
    ASSERT_OK(journal.Start());
    for (int i = 0; i < 10; ++i) ASSERT_OK(journal.Append(Record(i)));
    // Half of req_10's line reaches the disk, then the process is killed:
    // nothing after that (no cutting off, no sync, no offset) happens.
    files.Inject({.op = FileOp::kWrite,
                  .path_suffix = "/usage.journal",
                  .partial_bytes = torn_line.size() / 2,
                  .crash = true});
    EXPECT_FALSE(journal.Append(Record(10)).has_value());  // never acknowledged
    ASSERT_TRUE(files.crashed());
    journal.Stop();
  }
  const std::vector<std::string> left = LinesOf(dir_ / "usage.journal");
  ASSERT_EQ(left.size(), 11u);
  EXPECT_EQ(left.back(), torn_line.substr(0, torn_line.size() / 2)) << "the torn tail is there";

  store_.down = false;
  UsageJournal restarted(Options(), Sink());
  ASSERT_OK(restarted.Start());
  ASSERT_OK(restarted.Append(Record(11)));  // must not glue onto the torn tail
  ASSERT_TRUE(restarted.WaitShipped(10'000));
  restarted.Stop();
  std::lock_guard lock(store_.mu);
  std::vector<std::string> ids;
  for (const auto& [id, record] : store_.rows) ids.push_back(id);
  EXPECT_EQ(ids, (std::vector<std::string>{"req_0", "req_1", "req_11", "req_2", "req_3", "req_4",
                                           "req_5", "req_6", "req_7", "req_8", "req_9"}));
  EXPECT_EQ(store_.offered, 11) << "each offered once";
  EXPECT_EQ(store_.rows["req_11"].output_tokens, Record(11).output_tokens);
}

TEST_F(UsageJournalTest, AShortWriteIsCutOffSoTheNextRecordStartsOnALineOfItsOwn) {
  FaultInjectingFileSystem files;
  UsageJournalOptions o = Options();
  o.files = &files;
  store_.down = true;  // the next life ships from the file
  {
    UsageJournal journal(o, Sink());
    ASSERT_OK(journal.Start());
    for (int i = 0; i < 5; ++i) ASSERT_OK(journal.Append(Record(i)));
    // The disk fills up 40 bytes into req_5's line: the write reports it.
    files.Inject({.op = FileOp::kWrite,
                  .path_suffix = "/usage.journal",
                  .partial_bytes = 40,
                  .error = ENOSPC});
    const Status failed = journal.Append(Record(5));
    ASSERT_FALSE(failed.has_value());
    EXPECT_EQ(failed.error().code, ErrorCode::kUnavailable);
    ASSERT_OK(journal.Append(Record(6)));  // space again
    journal.Stop();
  }
  std::vector<std::string> ids;
  for (const std::string& line : LinesOf(dir_ / "usage.journal")) {
    auto record = DecodeUsageLine(line);
    ASSERT_TRUE(record.has_value()) << "a torn line is left: " << line;
    ids.push_back(record->id);
  }
  EXPECT_EQ(ids, (std::vector<std::string>{"req_0", "req_1", "req_2", "req_3", "req_4", "req_6"}));

  store_.down = false;
  UsageJournal restarted(Options(), Sink());
  ASSERT_OK(restarted.Start());
  ASSERT_OK(restarted.Append(Record(7)));
  ASSERT_TRUE(restarted.WaitShipped(10'000));
  restarted.Stop();
  EXPECT_EQ(store_.size(), 7u);
  EXPECT_FALSE(store_.rows.contains("req_5")) << "reported lost, so never billed";
  EXPECT_TRUE(store_.rows.contains("req_6"));
  EXPECT_EQ(store_.offered, 7);
}

TEST_F(UsageJournalTest, AFailingSyncIsIgnoredAndNoRecordIsLost) {
  // A record is durable against a process kill once written; the sync is
  // for machine crashes, and its failure neither fails appends nor stops
  // the shipper (it is tried again when more is written).
  FaultInjectingFileSystem files;
  files.Inject({.op = FileOp::kSync, .path_suffix = "/usage.journal", .and_after = true});
  UsageJournalOptions o = Options();
  o.files = &files;
  UsageJournal journal(o, Sink());
  ASSERT_OK(journal.Start());
  for (int i = 0; i < 10; ++i) ASSERT_OK(journal.Append(Record(i)));
  ASSERT_TRUE(files.WaitForCount(FileOp::kSync, "/usage.journal", 1, 10'000));
  for (int i = 10; i < 20; ++i) ASSERT_OK(journal.Append(Record(i)));
  ASSERT_TRUE(files.WaitForCount(FileOp::kSync, "/usage.journal", 2, 10'000)) << "synced again";
  ASSERT_TRUE(journal.WaitShipped(10'000));
  journal.Stop();
  EXPECT_EQ(store_.size(), 20u);
}

TEST_F(UsageJournalTest, ACompactionThatCannotWriteKeepsTheOldCheckpointFile) {
  FaultInjectingFileSystem files;
  files.Inject({.op = FileOp::kWrite,
                .path_suffix = "/usage.inflight.tmp",
                .and_after = true,  // no room for a copy, ever
                .partial_bytes = 10,
                .error = ENOSPC});
  UsageJournalOptions o = Options();
  o.files = &files;
  o.inflight_compact_bytes = 4096;
  {
    UsageJournal journal(o, Sink());
    ASSERT_OK(journal.Start());
    for (int step = 0; step < 50; ++step) {  // past the threshold: compaction is due
      UsageRecord r = Record(5);
      r.output_tokens = step;
      ASSERT_OK(journal.Checkpoint(r));
    }
    ASSERT_TRUE(files.WaitForCount(FileOp::kWrite, "/usage.inflight.tmp", 1, 10'000));
    UsageRecord last = Record(5);
    last.output_tokens = 50;
    ASSERT_OK(journal.Checkpoint(last));  // still written, to the old file
    EXPECT_EQ(files.Count(FileOp::kRename, "/usage.inflight"), 0);
    journal.Stop();  // req_5 still runs: its checkpoints stay
  }
  // The half-written copy is gone; the checkpoint file holds every line.
  EXPECT_FALSE(std::filesystem::exists(dir_ / "usage.inflight.tmp"));
  UsageJournal restarted(Options(), Sink());
  ASSERT_OK(restarted.Start());
  WaitUntil([&] { return restarted.recovered() >= 1; });
  restarted.Stop();
  ASSERT_EQ(store_.size(), 1u);
  EXPECT_EQ(store_.rows["req_5"].output_tokens, 50);
  EXPECT_EQ(store_.rows["req_5"].status, kInterruptedStatus);
}

}  // namespace
}  // namespace atrium::gateway_server
