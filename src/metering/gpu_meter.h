// The GPU meter: the shell that writes the GPU usage records the pure rule
// (gpu_usage.h) says are due, from durable rows only.
//
// Each round reads, from every subject source, the subjects that may have
// usage due (still held, or ended without their closing record) with how far
// each is metered — read back from the records themselves — computes the
// due records at the clock's time and stores them, idempotently by id, one
// transaction per source. The meter keeps nothing of its own: after a
// `kill -9` a new meter over the same store resumes where the stored records
// end, and a round repeated (the first one's write lost or not) stores each
// stretch of time once.
//
// Subjects come through `MeterSubjectSource`: allocations
// (AllocationSubjectSource, placement to release) now; jobs (start to end)
// plug in as another source over their own rows (see the interface).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "metering/gpu_usage.h"
#include "store/store.h"

namespace atrium::metering {

// One subject to meter and how far it is metered.
struct MeterSubject {
  HeldInterval held;
  GpuMeteredPoint metered;
};

// Where subjects of one kind come from. An implementation reads its own
// durable rows and the metered points (Store::GpuMeteredPointsForMetering
// with its subject kind). To meter jobs: a JobSubjectSource lists every job
// that started (started_ms set) and has no closing record, and is still
// running, has records, or changed at or after `changed_since_ms` (the
// allocation query in store_scheduling.cc is the model); it maps each to a HeldInterval
// {subject_kind "job", start = started_ms, end = ended_ms or kStillHeld,
// milli and kind from its allocation}, and is added with
// GpuMeter::AddSource before Start.
class MeterSubjectSource {
 public:
  virtual ~MeterSubjectSource() = default;
  // "allocation" | "job": the subject kind of every subject it lists.
  virtual std::string subject_kind() const = 0;
  // Every subject that may have usage due: held ones, and ended ones
  // without a stored closing record that have some records already (a
  // catch-up cut by max_records_per_subject) or whose row changed at or
  // after `changed_since_ms` (0: all of them). Listing more is harmless
  // (nothing is due for them); listing fewer loses usage.
  virtual Result<std::vector<MeterSubject>> SubjectsToMeter(int64_t changed_since_ms) = 0;
};

// Allocations from placement (placed_ms) to release (ended_ms), holding
// their quota charge (charge_milli: 1000 per whole GPU, a share's milli, a
// MIG instance's sevenths as the scheduler charges them). Pending and
// rejected allocations were never placed and are not billed.
class AllocationSubjectSource final : public MeterSubjectSource {
 public:
  explicit AllocationSubjectSource(Store& store) : store_(store) {}
  std::string subject_kind() const override { return "allocation"; }
  Result<std::vector<MeterSubject>> SubjectsToMeter(int64_t changed_since_ms) override;

 private:
  Store& store_;
};

// The interval an allocation row held; nullopt for one never placed.
std::optional<HeldInterval> HeldIntervalOfAllocation(const AllocationRecord& a);

struct GpuMeterOptions {
  // How often the timer runs a round. 0: no timer (tests call Tick).
  int64_t interval_ms = 60'000;
  // Open subjects are metered up to now - open_lag_ms (see MeteringLimits).
  int64_t open_lag_ms = 60'000;
  // Ended subjects are looked for among rows changed since the previous
  // round's start minus this much: room for a writer that read its clock
  // before that round and committed after it. The first round looks at
  // every row.
  int64_t rescan_overlap_ms = 600'000;  // 10 minutes
  size_t max_records_per_subject = kDefaultMaxRecordsPerSubject;
  // Called on the timer thread after each of its rounds (tests wait on it).
  std::function<void()> on_round;
};

// What one round did.
struct MeterRound {
  int64_t subjects = 0;
  int64_t records = 0;  // computed and handed to the store (stored if new)
  int64_t skipped = 0;  // subjects whose rows the rule refused (logged)
};

class GpuMeter {
 public:
  GpuMeter(Store& store, const Clock& clock, GpuMeterOptions options = {});
  ~GpuMeter();
  GpuMeter(const GpuMeter&) = delete;
  GpuMeter& operator=(const GpuMeter&) = delete;

  // Before Start only.
  void AddSource(std::unique_ptr<MeterSubjectSource> source);
  // Starts the timer (when interval_ms > 0); the first round runs at once.
  Status Start();
  // Stops the timer; call before closing the store. Idempotent.
  void Stop();
  // Runs one round at the clock's time (what the timer does). Errors: the
  // store's; what earlier sources stored stays, and the next round redoes
  // the rest.
  Result<MeterRound> Tick();

 private:
  void Run();

  Store& store_;
  const Clock& clock_;
  const GpuMeterOptions options_;
  std::vector<std::unique_ptr<MeterSubjectSource>> sources_;

  std::mutex round_mu_;           // one round at a time (timer vs. callers)
  int64_t changed_since_ms_ = 0;  // GUARDED_BY(round_mu_)

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;  // GUARDED_BY(stop_mu_)
  std::thread thread_;
};

}  // namespace atrium::metering
