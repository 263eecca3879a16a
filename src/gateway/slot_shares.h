// SlotShares: who may take a free upstream slot of one deployment. Each
// tenant active on the deployment (a request running or waiting in its
// queue; nothing else: a tenant whose requests all ended, refused or
// served, holds no slot back, or one rejected request every second or two
// would keep half a deployment idle for free) has a fair share of its slots
// in proportion to its weight. Below its share a tenant may always take a
// free slot; at or above it, only while enough slots stay free for every
// other active tenant to reach its own share. So a tenant that sends lightly
// finds a slot at once however hard another floods, and the price is that
// up to those unused shares stay idle while the light tenant is active.
// With one tenant active there is no reserve: the deployment is
// work-conserving. The dispatcher serves the waiting requests of tenants
// below their share first, then the fair queue's (VTC) order; this only
// decides whether the flooding tenant may take the last free slots. What is
// kept free for a tenant is the part of its share that neither its running
// nor its waiting requests fill: a tenant with a backlog (the flooding one,
// typically) holds no slots back from others, and a light tenant's burst
// above its share can be served from a slot the flooder's request freed. It
// also tells who is light (Light) and who asks for least (LeastDemand), for
// prefill pacing and burst slots. Those, and the shares they compare with,
// count a tenant as present while it is active or for `presence_window_ms`
// after a request of it arrived: a light tenant between two requests still
// has the flooder's prefills paced and its next request let onto a burst
// slot. Neither holds slots for the absent tenant (pacing only spaces a
// flooder's refills by their prefills, under 1% of its throughput in
// DispatcherFloodTest; burst slots are above the capacity), unlike the
// slots MayStart keeps, which only activity reserves. Pure and thread-compatible; the
// Dispatcher serialises calls.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>

namespace atrium::gateway {

class SlotShares {
 public:
  // `usage_half_life_ms`: how fast what a tenant was served is forgotten (Light).
  explicit SlotShares(int64_t presence_window_ms = 2000, int64_t usage_half_life_ms = 1000)
      : presence_window_ms_(presence_window_ms), usage_half_life_ms_(usage_half_life_ms) {}

  // A request of `tenant` arrived: its weight, and it is present from now
  // on (not active: that takes a request running or waiting).
  void Seen(const std::string& tenant, double weight, int64_t now_ms);
  // One of its requests entered / left the deployment's queue (left: to
  // start, or given up).
  void Queued(const std::string& tenant);
  void Dequeued(const std::string& tenant);
  void Started(const std::string& tenant);
  void Finished(const std::string& tenant);

  // How many requests of a tenant wait in the deployment's queue.
  using QueuedFn = std::function<int64_t(const std::string& tenant)>;
  // May `tenant` start a request now, with `free` of `capacity` slots free?
  // `queued` (optional; none waiting without it) counts each tenant's waiting
  // requests, which are taken off the slots kept for it. Only active
  // tenants have slots kept for them.
  bool MayStart(const std::string& tenant, int64_t capacity, int64_t free, int64_t now_ms,
                const QueuedFn& queued = nullptr) const;
  // The tenant's share of `capacity` slots among the tenants present now.
  double ShareOf(const std::string& tenant, int64_t capacity, int64_t now_ms) const;
  // Another tenant than `tenant` is present on the deployment now.
  bool Contended(const std::string& tenant, int64_t now_ms) const;
  // At least two tenants are present on the deployment now.
  bool Shared(int64_t now_ms) const;
  // The tenant runs nothing, or fewer requests than its share of `slots` (of
  // the deployment's capacity, or of the requests running now), counting
  // `waiting` more (its requests that wait) with those it runs.
  bool BelowShare(const std::string& tenant, int64_t slots, int64_t now_ms,
                  int64_t waiting = 0) const;

  // The tenant's requests were served `tokens` more (input and output; a
  // negative count corrects an earlier estimate).
  void Served(const std::string& tenant, double tokens, int64_t now_ms);
  // Another tenant is present and this one received less than its weighted
  // share (among the present tenants) of the tokens served on the deployment
  // lately: each tenant's tokens decay with the usage half-life (so while
  // nothing has been served, nobody is light). Such a tenant may take burst
  // slots.
  bool Light(const std::string& tenant, int64_t now_ms) const;

  // No other present tenant asks for less (running and waiting requests per
  // unit of weight): `waiting` of this tenant's requests wait (or are about
  // to), `queued` counts the others'.
  bool LeastDemand(const std::string& tenant, int64_t waiting, int64_t now_ms,
                   const QueuedFn& queued) const;

  // Forgets tenants neither active nor present (memory stays bounded).
  void Sweep(int64_t now_ms);
  size_t tracked() const { return tenants_.size(); }

 private:
  struct TenantState {
    double weight = 1;
    int64_t in_flight = 0;
    int64_t waiting = 0;
    int64_t last_seen_ms = 0;
    double served = 0;  // decayed tokens, as of served_ms
    int64_t served_ms = 0;
  };
  double DecayedServed(const TenantState& t, int64_t now_ms) const;
  static bool Active(const TenantState& t) { return t.in_flight > 0 || t.waiting > 0; }
  bool Present(const TenantState& t, int64_t now_ms) const {
    return Active(t) || now_ms - t.last_seen_ms < presence_window_ms_;
  }

  const int64_t presence_window_ms_;
  const int64_t usage_half_life_ms_;
  std::unordered_map<std::string, TenantState> tenants_;
};

}  // namespace atrium::gateway
