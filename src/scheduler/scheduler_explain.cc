// Scheduler::Explain: why an allocation waits, or where it runs, in words.
#include <algorithm>

#include "scheduler/scheduler.h"
#include "scheduler/scheduler_internal.h"

namespace atrium::sched {
namespace {

std::string Ms(int64_t ms) { return std::to_string(ms) + " ms"; }

}  // namespace

Result<std::string> Scheduler::Explain(std::string_view id, Audience audience) const {
  const bool staff = audience == Audience::kStaff;
  const Allocation* a = Find(id);
  if (a == nullptr) return Error::NotFound("unknown allocation " + std::string(id));
  if (a->Placed()) {
    DecisionRecord r = Record(DecisionKind::kPlaced, *a);
    std::string out = "running on " + DescribePlacement(a->placement);
    if (!r.mig_profile.empty()) out += " mig " + r.mig_profile + "@" + std::to_string(r.mig_start);
    out += " since " + Ms(a->placed_ms);
    if (!a->move_requested.empty()) {
      out += "; asked to move at " + Ms(a->move_requested_ms) + ": " + a->move_requested;
    }
    if (a->state == AllocationState::kPreempting) {
      out += "; preempted at " + Ms(a->preempt_at_ms) + " to reclaim borrowed capacity for ";
      const Allocation* reclaimer = Find(a->preempted_for);
      if (staff) {
        out += a->preempted_for +
               (reclaimer != nullptr ? " of tenant " + reclaimer->request.tenant : std::string());
      } else {
        out += ReclaimerForVictim(*a);
      }
    }
    return out;
  }
  std::vector<std::string> lines;
  const std::vector<std::string> queue = Queue();
  const size_t pos = size_t(std::find(queue.begin(), queue.end(), a->id()) - queue.begin());
  lines.push_back("queued since " + Ms(a->submitted_ms) + ", position " + std::to_string(pos + 1) +
                  " of " + std::to_string(queue.size()));
  auto t = tenants_.find(a->request.tenant);
  if (t != tenants_.end() && t->second.suspended) {
    lines.push_back("tenant " + t->first +
                    " is suspended: its queued requests are not placed until it is resumed");
  }
  const QuotaCheck q = QuotaFor(*a);
  const Entitlement entitled = ComputeEntitlement();
  switch (q.verdict) {
    case QuotaVerdict::kWithinGuarantee:
      lines.push_back("within guarantee: " + q.reason);
      break;
    case QuotaVerdict::kWithinGuaranteeOverLimit:
      lines.push_back(q.reason);
      break;
    case QuotaVerdict::kBorrows:
      lines.push_back("borrows above the guarantee (preemptible, reclaimable): " + q.reason);
      break;
    default:
      lines.push_back(q.reason);
      break;
  }
  if (Entitles(q.verdict) && !entitled.contains(a->id())) {
    auto tp = tenants_.find(a->request.tenant);
    const ResourceClass rc = ClassOf(a->request);
    const bool project =
        tp != tenants_.end() && tp->second.ProjectQuotaFor(a->request.project, rc) != nullptr;
    lines.push_back("the guarantee left is taken by older queued requests of " +
                    (project ? "project " + a->request.project + " of " : std::string()) +
                    "tenant " + a->request.tenant + "; it waits behind them");
  }
  if (!a->request.requirements.Empty()) {
    lines.push_back("needs nodes with " + DescribeRequirements(a->request.requirements));
  }
  if (auto ctx = ContextFor(*a, state_)) {
    if (auto p = FindPlacement(*ctx, nullptr)) {
      if (q.verdict == QuotaVerdict::kWaits || q.verdict == QuotaVerdict::kNeverFits) {
        lines.push_back("room exists; only the quota holds it back");
      } else if (q.verdict == QuotaVerdict::kWithinGuaranteeOverLimit) {
        lines.push_back("room exists; it is placed once the reclaim gives the limit headroom back");
      } else {
        lines.push_back(KeepsReservations(*a, *p, ReservingReclaimers(entitled))
                            ? "a placement exists now; it is taken at the next decision"
                            : "the room that fits is reserved for a reclaim in flight");
      }
    } else {
      lines.push_back("placement: " + DiagnoseNoFit(*ctx));
      if (WaitsForScrub(*a)) {
        lines.push_back(
            "room is being scrubbed after other work ended; it is placed once the "
            "scrub finishes");
      }
    }
  }
  const auto victims = VictimsOf(a->id());
  if (!victims.empty()) {
    // Staff see every victim; a tenant sees only its own allocations named,
    // never which or how many of another tenant's work make room for it.
    std::string ids;
    int own = 0;
    bool others = false;
    int64_t grace_end = 0;
    for (const Allocation* v : victims) {
      grace_end = std::max(grace_end, v->preempt_at_ms);
      if (!staff && v->request.tenant != a->request.tenant) {
        others = true;
        continue;
      }
      ids += (ids.empty() ? "" : ", ") + v->id();
      ++own;
    }
    if (staff) {
      lines.push_back("waits for reclaim of " + std::to_string(victims.size()) + " allocations (" +
                      ids + "); grace ends at " + Ms(grace_end));
    } else if (!others) {
      lines.push_back("waits for reclaim of " + std::to_string(own) +
                      " of its tenant's own allocations (" + ids + "); grace ends at " +
                      Ms(grace_end));
    } else {
      lines.push_back("waits for reclaim of borrowed capacity" +
                      (own > 0 ? " (and of " + std::to_string(own) +
                                     " of its tenant's own allocations: " + ids + ")"
                               : std::string()) +
                      "; grace ends at " + Ms(grace_end));
    }
  } else if (Entitles(q.verdict) && entitled.contains(a->id()) && !WaitsForScrub(*a)) {
    lines.push_back("no borrowed capacity would make room; waits for releases");
  } else if (q.verdict == QuotaVerdict::kBorrows) {
    lines.push_back("borrowing work waits for idle capacity and never triggers reclaim");
  }
  std::string out;
  for (const std::string& l : lines) out += (out.empty() ? "" : "\n") + l;
  return out;
}

}  // namespace atrium::sched
