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
// (AllocationSubjectSource, placement to release: what is billed) and job
// runs (JobSubjectSource, a workload's start to its end: what ran within
// the held time, recorded beside it and not billed on top; docs/billing.md).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "metering/gpu_usage.h"
#include "store/store.h"
#include "threads/periodic_thread.h"

namespace atrium::metering {

// One subject to meter and how far it is metered.
struct MeterSubject {
  HeldInterval held;
  GpuMeteredPoint metered;
};

// Where subjects of one kind come from. An implementation reads its own
// durable rows and the metered points (Store::GpuMeteredPointsForMetering
// with its subject kind), and is added with GpuMeter::AddSource before
// Start.
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
std::optional<HeldInterval> HeldIntervalOfAllocation(const AllocationToMeter& row);

// Job runs (Store job_runs): one subject per attempt, subject id
// "<job id>.<attempt>" (the backend's workload id; on Slurm the job name),
// from when its workload started running to when it ended (succeeded,
// failed, cancelled, preempted, timed out or lost), with the GPU model,
// kind, MIG profile and charge of that attempt's allocation. A job
// requeued after a preemption has one subject per attempt: the gaps while
// it waited are in none of them. These records say what ran within the
// allocations' held time; they are not billed on top of it.
class JobSubjectSource final : public MeterSubjectSource {
 public:
  explicit JobSubjectSource(Store& store) : store_(store) {}
  std::string subject_kind() const override { return "job"; }
  Result<std::vector<MeterSubject>> SubjectsToMeter(int64_t changed_since_ms) override;

 private:
  Store& store_;
};

// The interval a job run ran; nullopt for one that never started.
std::optional<HeldInterval> HeldIntervalOfJobRun(const JobRunToMeter& r);

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
  void Round();

  Store& store_;
  const Clock& clock_;
  const GpuMeterOptions options_;
  std::vector<std::unique_ptr<MeterSubjectSource>> sources_;

  std::mutex round_mu_;           // one round at a time (timer vs. callers)
  int64_t changed_since_ms_ = 0;  // GUARDED_BY(round_mu_)

  PeriodicThread timer_;  // last: stopped before the rest goes
};

}  // namespace atrium::metering
