#include "capacity/mig.h"

#include <algorithm>
#include <bit>
#include <tuple>

namespace atrium::capacity {
namespace {

constexpr uint32_t kAllSlotsMask = (1u << kMigMemorySlots) - 1;

uint32_t SlotMask(int start, int width) { return ((1u << width) - 1) << start; }

std::string Label(const MigInstance& instance) {
  std::string s = instance.profile->name + "@" + std::to_string(instance.start);
  if (!instance.owner.empty()) s += " (" + instance.owner + ")";
  return s;
}

// "1 compute slice", "3 compute slices".
std::string Count(int n, const char* noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

std::string JoinInts(const std::vector<int>& values, const char* sep) {
  std::string out;
  for (int v : values) {
    if (!out.empty()) out += sep;
    out += std::to_string(v);
  }
  return out;
}

bool BelongsTo(const MigProfile* profile, const GpuModel& model) {
  return profile != nullptr && model.FindMigProfile(profile->name) == profile;
}

// The one implementation of the placement rules. Returns true if `profile`
// fits at `start`; otherwise false, with the reason in *why (when non-null)
// and *code. Messages are built only when asked for, because ranking calls
// this for every (profile, start) of every candidate layout.
bool Check(const MigLayout& layout, const MigProfile& profile, int start, ErrorCode* code,
           std::string* why) {
  auto fail = [&](ErrorCode c, auto&& make_message) {
    if (code) *code = c;
    if (why) *why = make_message();
    return false;
  };
  const GpuModel& model = layout.model();
  if (!BelongsTo(&profile, model)) {
    return fail(ErrorCode::kInvalidArgument, [&] {
      return "profile " + profile.name + " is not a MIG profile of " + model.name;
    });
  }
  const auto& valid = profile.valid_start_slots;
  if (std::find(valid.begin(), valid.end(), start) == valid.end()) {
    return fail(ErrorCode::kInvalidArgument, [&] {
      return "slot " + std::to_string(start) + " is not a valid start for " + profile.name +
             " (valid: " + JoinInts(valid, ", ") + ")";
    });
  }
  const int end = start + profile.memory_slices;
  if (layout.occupied_mask() & SlotMask(start, profile.memory_slices)) {
    for (const MigInstance& other : layout.instances()) {
      const int lo = std::max(start, other.start);
      const int hi = std::min(end, other.end());
      if (lo >= hi) continue;
      return fail(ErrorCode::kFailedPrecondition, [&] {
        std::string slots = hi - lo == 1 ? "memory slot " + std::to_string(lo) + " is"
                                         : "memory slots " + std::to_string(lo) + ".." +
                                               std::to_string(hi - 1) + " are";
        return slots + " taken by " + Label(other);
      });
    }
  }
  if (profile.compute_slices > layout.free_compute_slices()) {
    return fail(ErrorCode::kFailedPrecondition, [&] {
      return profile.name + " needs " + Count(profile.compute_slices, "compute slice") + "; only " +
             std::to_string(layout.free_compute_slices()) + " of " +
             std::to_string(kMigComputeSlices) + " are free";
    });
  }
  if (profile.media_extensions) {
    for (const MigInstance& other : layout.instances()) {
      if (!other.profile->media_extensions) continue;
      return fail(ErrorCode::kFailedPrecondition, [&] {
        return "only one +me GPU instance is allowed per GPU; " + Label(other) + " is placed";
      });
    }
  }
  // A "+me" GI is bounded by its own limit and by its base profile's.
  const MigProfile* limits[2] = {&profile, nullptr};
  if (profile.media_extensions) limits[1] = model.FindMigProfile(profile.base_profile);
  for (const MigProfile* limit : limits) {
    if (!limit) continue;
    const int placed = layout.CountTowardLimit(*limit);
    if (placed < limit->max_instances) continue;
    return fail(ErrorCode::kFailedPrecondition, [&] {
      std::string counted = limit == &profile ? "" : " (" + profile.name + " counts toward it)";
      return limit->name + " allows at most " + Count(limit->max_instances, "instance") +
             " per GPU" + counted + "; " + std::to_string(placed) + (placed == 1 ? " is" : " are") +
             " placed";
    });
  }
  return true;
}

bool Fits(const MigLayout& layout, const MigProfile& profile, int start) {
  return Check(layout, profile, start, nullptr, nullptr);
}

// How much room a layout leaves: the largest placeable profile and the number
// of (profile, start) placements still possible. Larger is better.
struct Room {
  int largest_memory_slices = 0;
  int largest_compute_slices = 0;
  int placements = 0;

  auto Key() const { return std::tuple(largest_memory_slices, largest_compute_slices, placements); }
};

Room MeasureRoom(const MigLayout& layout) {
  Room room;
  for (const MigProfile& p : layout.model().mig_profiles) {
    for (int start : p.valid_start_slots) {
      if (!Fits(layout, p, start)) continue;
      ++room.placements;
      if (std::tie(p.memory_slices, p.compute_slices) >
          std::tie(room.largest_memory_slices, room.largest_compute_slices)) {
        room.largest_memory_slices = p.memory_slices;
        room.largest_compute_slices = p.compute_slices;
      }
    }
  }
  return room;
}

// Places requests[i..] on `layout`; on success `layout` holds them all.
// `previous_start` is where requests[i - 1] went. Identical profiles are
// placed in descending start order only, since swapping two identical GIs
// gives the same geometry.
bool PlaceAll(MigLayout& layout, const std::vector<MigRequest>& requests, size_t i,
              int previous_start) {
  if (i == requests.size()) return true;
  const MigRequest& request = requests[i];
  const bool same_as_previous = i > 0 && requests[i - 1].profile == request.profile;
  for (int start : RankStarts(layout, *request.profile)) {
    if (same_as_previous && start >= previous_start) continue;
    if (!layout.Place(*request.profile, start, request.owner)) continue;
    if (PlaceAll(layout, requests, i + 1, start)) return true;
    (void)layout.Remove(start);
  }
  return false;
}

}  // namespace

int MigLayout::free_memory_slots() const { return kMigMemorySlots - std::popcount(occupied_mask_); }

int MigLayout::CountTowardLimit(const MigProfile& profile) const {
  int count = 0;
  for (const MigInstance& inst : instances_) {
    if (inst.profile == &profile ||
        (inst.profile->media_extensions && inst.profile->base_profile == profile.name &&
         !profile.media_extensions)) {
      ++count;
    }
  }
  return count;
}

const MigInstance* MigLayout::InstanceCovering(int slot) const {
  for (const MigInstance& inst : instances_) {
    if (slot >= inst.start && slot < inst.end()) return &inst;
  }
  return nullptr;
}

Status MigLayout::Place(const MigProfile& profile, int start, std::string owner) {
  ATRIUM_RETURN_IF_ERROR(CanPlace(*this, profile, start));
  auto at = std::find_if(instances_.begin(), instances_.end(),
                         [&](const MigInstance& inst) { return inst.start > start; });
  instances_.insert(at, MigInstance{&profile, start, std::move(owner)});
  occupied_mask_ |= SlotMask(start, profile.memory_slices);
  used_compute_slices_ += profile.compute_slices;
  return OkStatus();
}

Status MigLayout::Remove(int start) {
  auto it = std::find_if(instances_.begin(), instances_.end(),
                         [&](const MigInstance& inst) { return inst.start == start; });
  if (it == instances_.end()) {
    return Error::NotFound("no GPU instance starts at slot " + std::to_string(start));
  }
  occupied_mask_ &= ~SlotMask(it->start, it->profile->memory_slices);
  used_compute_slices_ -= it->profile->compute_slices;
  instances_.erase(it);
  return OkStatus();
}

int MigLayout::RemoveOwnedBy(std::string_view owner) {
  if (owner.empty()) return 0;
  std::vector<int> starts;
  for (const MigInstance& inst : instances_) {
    if (inst.owner == owner) starts.push_back(inst.start);
  }
  for (int start : starts) (void)Remove(start);
  return static_cast<int>(starts.size());
}

Status CanPlace(const MigLayout& layout, const MigProfile& profile, int start) {
  ErrorCode code = ErrorCode::kInternal;
  std::string why;
  if (Check(layout, profile, start, &code, &why)) return OkStatus();
  return Error{code, std::move(why)};
}

std::vector<int> RankStarts(const MigLayout& layout, const MigProfile& profile) {
  struct Candidate {
    int start;
    Room room;
  };
  std::vector<Candidate> candidates;
  for (int start : profile.valid_start_slots) {
    if (!Fits(layout, profile, start)) continue;
    MigLayout after = layout;
    (void)after.Place(profile, start);
    candidates.push_back({start, MeasureRoom(after)});
  }
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return std::tuple(a.room.Key(), a.start) > std::tuple(b.room.Key(), b.start);
  });
  std::vector<int> starts;
  starts.reserve(candidates.size());
  for (const Candidate& c : candidates) starts.push_back(c.start);
  return starts;
}

std::optional<int> ChooseStart(const MigLayout& layout, const MigProfile& profile) {
  std::vector<int> ranked = RankStarts(layout, profile);
  if (ranked.empty()) return std::nullopt;
  return ranked.front();
}

std::optional<MigLayout> ExtendLayout(const MigLayout& layout,
                                      const std::vector<MigRequest>& requests) {
  // Cheap necessary conditions first: they reject most impossible sets
  // (and any long list) before the search.
  int compute = 0;
  int memory = 0;
  for (const MigRequest& r : requests) {
    if (!BelongsTo(r.profile, layout.model())) return std::nullopt;
    compute += r.profile->compute_slices;
    memory += r.profile->memory_slices;
    if (compute > layout.free_compute_slices() || memory > layout.free_memory_slots()) {
      return std::nullopt;
    }
  }
  // Largest first: they have the fewest valid starts, so the search fails fast.
  const auto& profiles = layout.model().mig_profiles;
  std::vector<MigRequest> sorted = requests;
  std::sort(sorted.begin(), sorted.end(), [&](const MigRequest& a, const MigRequest& b) {
    auto key = [&](const MigRequest& r) {
      return std::tuple(-r.profile->memory_slices, -r.profile->compute_slices,
                        r.profile - profiles.data(), std::string_view(r.owner));
    };
    return key(a) < key(b);
  });
  MigLayout result = layout;
  if (!PlaceAll(result, sorted, 0, kMigMemorySlots)) return std::nullopt;
  return result;
}

std::optional<MigLayout> PlanLayout(const GpuModel& model,
                                    const std::vector<MigRequest>& requests) {
  return ExtendLayout(MigLayout(model), requests);
}

MigFreeSpace FreeSpace(const MigLayout& layout) {
  MigFreeSpace space;
  space.free_slot_mask = ~layout.occupied_mask() & kAllSlotsMask;
  space.free_memory_slots = layout.free_memory_slots();
  space.free_compute_slices = layout.free_compute_slices();
  for (const MigProfile& p : layout.model().mig_profiles) {
    MigProfileRoom room;
    room.profile = &p;
    for (int start : p.valid_start_slots) {
      if (Fits(layout, p, start)) room.starts.push_back(start);
    }
    if (room.starts.empty()) continue;
    std::vector<MigRequest> copies;
    while (true) {
      copies.push_back({&p, {}});
      if (!ExtendLayout(layout, copies)) break;
      room.max_additional = static_cast<int>(copies.size());
    }
    space.placeable.push_back(std::move(room));
  }
  return space;
}

std::string DescribeLayout(const MigLayout& layout) {
  std::string out = layout.model().name + ": ";
  if (layout.empty()) out += "no GPU instances";
  for (size_t i = 0; i < layout.instances().size(); ++i) {
    const MigInstance& inst = layout.instances()[i];
    if (i > 0) out += ", ";
    out += inst.profile->name + "@" + std::to_string(inst.start);
    if (!inst.owner.empty()) out += " [" + inst.owner + "]";
  }
  std::vector<int> free_slots;
  for (int slot = 0; slot < kMigMemorySlots; ++slot) {
    if (!(layout.occupied_mask() & (1u << slot))) free_slots.push_back(slot);
  }
  out += free_slots.empty() ? "; no free slots" : "; free slots " + JoinInts(free_slots, ",");
  out += "; " + std::to_string(layout.free_compute_slices()) + "/" +
         std::to_string(kMigComputeSlices) + " compute free";
  return out;
}

}  // namespace atrium::capacity
