// SlotRules: the rules that hand out one deployment's upstream slots to a
// request — may it take a free slot now, does it wait for its endpoint's
// prefills (max_prefill pacing), may it use the burst slots above the
// capacity, and does it go ahead of the fair queue's order. SlotShares keeps
// the tenants' state these rules read; the Balancer applies the verdict to
// the endpoints (see PickRule). Pure: the deployment's state and the time
// come in, a decision goes out; no clock, lock or I/O. A SlotRules is a
// view, made per decision on the Dispatcher's stack: it holds references to
// the state it reads, which must outlive it, and allocates nothing.
#pragma once

#include <cstdint>
#include <string>

#include "gateway/balancer.h"
#include "gateway/slot_shares.h"

namespace atrium::gateway {

// One deployment as the rules see it.
struct DeploymentLoad {
  int64_t capacity = 0;   // its endpoints' slots (each endpoint at least one)
  int64_t in_flight = 0;  // requests running on it
  bool paces = false;     // some endpoint sets max_prefill
  bool bursts = false;    // some endpoint has burst slots
  // The fair discipline: the slots are shared by weight, and light tenants
  // are not paced and may burst. Without it (FIFO, the baseline benchmarks
  // compare against) any tenant takes any free slot, there are no burst
  // slots, and every streamed request is paced while another tenant is
  // present.
  bool fair = true;
  // What a tenant is served is tracked (SlotShares::Served) only where it is
  // read: by pacing and burst slots (SlotShares::Light).
  bool TracksService() const { return paces || bursts; }
};

class SlotRules {
 public:
  // `queued` counts each tenant's requests waiting in the deployment's queue
  // (read under the fair discipline only; it must be set then).
  SlotRules(const SlotShares& shares, const DeploymentLoad& load,
            const SlotShares::QueuedFn& queued, int64_t now_ms)
      : shares_(shares), load_(load), queued_(queued), now_ms_(now_ms) {}

  // May a request of `tenant` take a slot now? Below the capacity, what
  // SlotShares::MayStart says (the slots kept for other active tenants'
  // shares stay theirs); at the capacity, whether it may take a burst slot
  // (Burst). Without the fair discipline always: the endpoints' free slots
  // alone decide.
  bool MayTakeSlot(const std::string& tenant) const;

  // Whether a request waits for its endpoint's prefills (max_prefill, see
  // Balancer::Pick), while another tenant is present (under FIFO: any
  // streamed request then): a streamed request of a tenant that runs
  // something and asks for at least its weighted share of the deployment's
  // capacity (running and waiting requests, this one included), unless it
  // asks for no more than any other tenant and is light (SlotShares::Light).
  // A lone tenant is not paced (nobody waits behind its prefills), nor is a
  // tenant asking for less than its share, nor a light tenant's burst: their
  // first token comes after at most the prefills already started, however
  // hard another floods. A tenant that starts flooding is paced once what
  // it asks for reaches its share, which shows as its requests arrive,
  // before it has been served anything. `waiting`: the request is in the
  // queue now (`queued` counts it).
  bool Paced(const std::string& tenant, bool stream, bool waiting) const;

  // Whether a request of `tenant` may use burst slots above the capacity
  // (fair discipline only), while another tenant is present: its tenant asks
  // for no more than any other (running and waiting requests), and runs less
  // than its weighted share of the capacity (another took more of the slots
  // than its share) or is light (SlotShares::Light: served less than its
  // share lately, which lets a light tenant's burst above its share of the
  // slots start at once too).
  bool Burst(const std::string& tenant) const;

  // Paced and Burst, as the Balancer takes them.
  PickRule RuleFor(const std::string& tenant, bool stream, bool waiting) const {
    return {.paced = Paced(tenant, stream, waiting), .burst = Burst(tenant)};
  }

  // Within a priority class, a waiting request of a tenant below its share
  // of the slots goes before the fair queue's (VTC) order: a tenant that
  // starts flooding has the lower counter (the credit of its return) and
  // would otherwise take the slots a light tenant's burst is waiting for,
  // its share included.
  bool GoesFirst(const std::string& tenant) const;

  // Whether any request may take a burst slot now: the deployment has them,
  // under the fair discipline, and tenants share it (only then may one take
  // a burst slot). Without that, nothing starts without a slot within the
  // capacity free.
  bool BurstSlotsOpen() const;

 private:
  int64_t Queued(const std::string& tenant) const { return queued_(tenant); }

  const SlotShares& shares_;
  const DeploymentLoad& load_;
  const SlotShares::QueuedFn& queued_;
  const int64_t now_ms_;
};

}  // namespace atrium::gateway
