#include "metering/gpu_meter.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

namespace atrium::metering {

std::optional<HeldInterval> HeldIntervalOfAllocation(const AllocationToMeter& row) {
  const AllocationRecord& a = row.allocation;
  if (a.placed_ms < 0) return std::nullopt;
  HeldInterval h;
  h.subject_kind = "allocation";
  h.subject_id = a.id;
  h.tenant_id = a.tenant_id;
  h.project = a.project;
  h.model = a.model;
  // An unknown kind stays visible: the rule refuses it and the meter logs it.
  std::string_view kind = GpuKindOfAllocation(a.kind);
  h.kind = kind.empty() ? a.kind : std::string(kind);
  h.mig_profile = a.mig_profile;
  h.milli = a.charge_milli;
  h.deployment_id = row.deployment_id;
  h.start_ms = a.placed_ms;
  h.end_ms = a.Held() ? kStillHeld : a.ended_ms;
  // An ended row without its end (never written so) is billed to its
  // placement: nothing rather than a guess.
  if (!a.Held() && a.ended_ms < 0) h.end_ms = a.placed_ms;
  return h;
}

Result<std::vector<MeterSubject>> AllocationSubjectSource::SubjectsToMeter(
    int64_t changed_since_ms) {
  ATRIUM_ASSIGN_OR_RETURN(auto rows, store_.ListAllocationsToMeterForMetering(changed_since_ms));
  std::vector<std::string> ids;
  ids.reserve(rows.size());
  for (const auto& a : rows) ids.push_back(a.allocation.id);
  ATRIUM_ASSIGN_OR_RETURN(auto points, store_.GpuMeteredPointsForMetering("allocation", ids));
  std::vector<MeterSubject> out;
  out.reserve(rows.size());
  for (const auto& a : rows) {
    auto held = HeldIntervalOfAllocation(a);
    if (!held) continue;
    auto p = points.find(a.allocation.id);
    out.push_back({std::move(*held), p == points.end() ? GpuMeteredPoint{} : p->second});
  }
  return out;
}

std::optional<HeldInterval> HeldIntervalOfJobRun(const JobRunToMeter& r) {
  if (r.run.started_ms < 0) return std::nullopt;
  HeldInterval h;
  h.subject_kind = "job";
  h.subject_id = r.run.workload_id();
  h.tenant_id = r.run.tenant_id;
  h.project = r.run.project;
  h.model = r.model;
  std::string_view kind = GpuKindOfAllocation(r.kind);
  h.kind = kind.empty() ? r.kind : std::string(kind);
  h.mig_profile = r.mig_profile;
  h.milli = r.charge_milli;
  h.deployment_id = r.deployment_id;
  h.start_ms = r.run.started_ms;
  h.end_ms = r.run.ended_ms < 0 ? kStillHeld : r.run.ended_ms;
  return h;
}

Result<std::vector<MeterSubject>> JobSubjectSource::SubjectsToMeter(int64_t changed_since_ms) {
  ATRIUM_ASSIGN_OR_RETURN(auto rows, store_.ListJobRunsToMeterForMetering(changed_since_ms));
  std::vector<std::string> ids;
  ids.reserve(rows.size());
  for (const auto& r : rows) ids.push_back(r.run.workload_id());
  ATRIUM_ASSIGN_OR_RETURN(auto points, store_.GpuMeteredPointsForMetering("job", ids));
  std::vector<MeterSubject> out;
  out.reserve(rows.size());
  for (const auto& r : rows) {
    auto held = HeldIntervalOfJobRun(r);
    if (!held) continue;
    auto p = points.find(held->subject_id);
    out.push_back({std::move(*held), p == points.end() ? GpuMeteredPoint{} : p->second});
  }
  return out;
}

GpuMeter::GpuMeter(Store& store, const Clock& clock, GpuMeterOptions options)
    : store_(store),
      clock_(clock),
      options_(std::move(options)),
      timer_("gpu-meter", options_.interval_ms, [this] { Round(); }) {}

GpuMeter::~GpuMeter() { Stop(); }

void GpuMeter::AddSource(std::unique_ptr<MeterSubjectSource> source) {
  sources_.push_back(std::move(source));
}

Status GpuMeter::Start() {
  timer_.Start(PeriodicThread::First::kAtOnce);
  return OkStatus();
}

void GpuMeter::Stop() { timer_.Stop(); }

void GpuMeter::Round() {
  auto round = Tick();
  if (!round.has_value()) {
    spdlog::warn("GPU meter: round failed, retrying next round: {}", round.error().message);
  }
  if (options_.on_round) options_.on_round();
}

Result<MeterRound> GpuMeter::Tick() {
  std::lock_guard<std::mutex> lock(round_mu_);
  const int64_t now = clock_.NowMillis();
  const MeteringLimits limits{options_.open_lag_ms, options_.max_records_per_subject};
  MeterRound round;
  for (const auto& source : sources_) {
    ATRIUM_ASSIGN_OR_RETURN(auto subjects, source->SubjectsToMeter(changed_since_ms_));
    std::vector<GpuUsageRecord> due;
    for (const auto& s : subjects) {
      ++round.subjects;
      auto records = DueGpuUsageRecords(s.held, s.metered, now, limits);
      if (!records.has_value()) {
        ++round.skipped;
        spdlog::error("GPU meter: not billing {} {}: {}", s.held.subject_kind, s.held.subject_id,
                      records.error().message);
        continue;
      }
      due.insert(due.end(), std::make_move_iterator(records->begin()),
                 std::make_move_iterator(records->end()));
    }
    ATRIUM_RETURN_IF_ERROR(store_.InsertGpuUsageRecords(due));
    round.records += static_cast<int64_t>(due.size());
  }
  // Rows that end from here on change at or after this round's start (less
  // the overlap); the first round looked at every row.
  changed_since_ms_ = std::max<int64_t>(0, now - options_.rescan_overlap_ms);
  return round;
}

}  // namespace atrium::metering
