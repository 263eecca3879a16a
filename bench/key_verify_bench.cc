// What one credential check costs: IdentityService::Authenticate with an API
// key whose verification is cached (the gateway's hot path), the same with the
// cache dropped before every call (a store lookup each time), an access token
// (the session row is looked up in the store on every call), and, as the
// baseline measured in the same run, the bare SHA-256 of a key secret that the
// warm path cannot avoid. The store is a real SQLite file in a temp dir.
//
// Before the timed runs it prints a check, not timed, that a revoked key (and
// a suspended tenant's key) fails on the very next Authenticate although the
// key was in the cache, and that a second IdentityService over the same store
// (another replica, which nobody tells) rejects it within kCredentialRecheckMs.
//
// Cached entries are re-read from the store once they are kCredentialRecheckMs
// (1 s) old. The one-key warm loop keeps the real clock: one store read per
// second among hundreds of thousands of hits. With 10,000 keys cycled, each key
// is hit only some tens of times a second, so a reload is a few % of the calls;
// that case is therefore run twice: with a clock frozen at the warm-up (pure
// cache hits) and with the real clock (hits plus the reloads at this rate).
//
// After the runs it prints each benchmark's median over the repetitions and its
// ratio to the baseline's median, so the figure that matters on a noisy
// machine needs no arithmetic by hand. Usage (BENCHMARKS.md):
//   key_verify_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "crypto/crypto.h"
#include "identity/api_key.h"
#include "identity/identity_service.h"
#include "store/store.h"
#include "tenancy/tenant_service.h"

namespace atrium {
namespace {

template <typename T>
T Must(Result<T> r, const char* what) {
  if (!r.has_value()) throw std::runtime_error(std::string(what) + ": " + r.error().message);
  return std::move(r).value();
}
void Must(Status s, const char* what) {
  if (!s.has_value()) throw std::runtime_error(std::string(what) + ": " + s.error().message);
}

// Keys cached for the "many cached keys" variant: the cache is a hash map, so
// verifying one key among 10,000 should cost what verifying the only one does.
constexpr int kManyKeys = 10'000;

// Reads the system clock on every call, as SystemClock does, so a cache hit
// pays the same, but reports the time it was frozen at: cached entries never
// age past kCredentialRecheckMs, so every call is a pure cache hit.
class FrozenSystemClock final : public Clock {
 public:
  int64_t NowMillis() const override {
    benchmark::DoNotOptimize(SystemClock::Instance().NowMillis());
    return frozen_;
  }

 private:
  int64_t frozen_ = SystemClock::Instance().NowMillis();
};

// One store and the services over it, built once for every benchmark.
struct World {
  std::filesystem::path dir;
  std::unique_ptr<Store> store;
  std::unique_ptr<IdentityService> identity;            // the hot-path cache under test
  std::unique_ptr<IdentityService> identity_many;       // kManyKeys cached, frozen clock
  std::unique_ptr<IdentityService> identity_many_real;  // kManyKeys, real clock
  FrozenSystemClock frozen_clock;
  std::unique_ptr<TenantService> tenants;
  Tenant tenant;
  User bot;    // service account that owns the keys
  User alice;  // human who logs in for the access token
  std::string key_text;
  std::string key_secret;  // the secret part of key_text, for the baseline
  std::string access_token;
  std::vector<std::string> many_keys;

  World() {
    crypto::InitCrypto();
    std::string templ =
        (std::filesystem::temp_directory_path() / "atrium-keybench-XXXXXX").string();
    if (mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir = templ;
    store = Must(Store::Open("sqlite://" + (dir / "bench.db").string()), "Store::Open");
    IdentityOptions options;
    options.fast_password_hashing = true;
    const Clock& clock = SystemClock::Instance();
    identity = std::make_unique<IdentityService>(*store, clock, options);
    Must(identity->Init(), "Init");
    identity_many = std::make_unique<IdentityService>(*store, frozen_clock, options);
    Must(identity_many->Init(), "Init");
    identity_many_real = std::make_unique<IdentityService>(*store, clock, options);
    Must(identity_many_real->Init(), "Init");
    tenants = std::make_unique<TenantService>(*store, *identity, clock);

    NewTenant nt;
    nt.name = "acme";
    tenant = Must(tenants->Create(nt), "create tenant");
    TenantScope scope = TenantScope::Of(tenant.id);
    Principal root;
    root.role = Role::kPlatformAdmin;
    NewUser nb;
    nb.username = "ci-bot";
    nb.role = "tenant-member";
    nb.kind = "service";
    bot = Must(identity->CreateUser(root, scope, nb), "create service account");
    NewUser na;
    na.username = "alice";
    na.role = "tenant-admin";
    na.password = "correct-horse-battery";
    alice = Must(identity->CreateUser(root, scope, na), "create user");

    key_text = NewKey("hot");
    key_secret = Must(ParseApiKey(key_text), "ParseApiKey").secret;
    access_token =
        Must(identity->Login("acme", "alice", na.password, "127.0.0.1"), "Login").access_token;

    many_keys.reserve(kManyKeys);
    for (int i = 0; i < kManyKeys; ++i) {
      many_keys.push_back(NewKey("many-" + std::to_string(i)));
      Must(identity_many->Authenticate(many_keys.back()), "warm the cache");
      Must(identity_many_real->Authenticate(many_keys.back()), "warm the cache");
    }
  }

  ~World() {
    tenants.reset();
    identity_many_real.reset();
    identity_many.reset();
    identity.reset();
    store.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }

  std::string NewKey(const std::string& name) {
    Principal actor;
    actor.role = Role::kPlatformAdmin;
    actor.tenant_id = tenant.id;
    actor.user_id = bot.id;
    NewApiKey req;
    req.name = name;
    return Must(identity->CreateApiKey(actor, TenantScope::Of(tenant.id), req), "CreateApiKey")
        .second;
  }
};

World* g_world = nullptr;

// Baseline: the SHA-256 of a key secret, which even a cache hit must compute.
void BM_Baseline_Sha256OfSecret(benchmark::State& state) {
  for (auto _ : state) {
    std::string h = HashApiKeySecret(g_world->key_secret);
    benchmark::DoNotOptimize(h);
  }
}
BENCHMARK(BM_Baseline_Sha256OfSecret);

// The hot path: parse + checksum + SHA-256 + cache hit + tenant-state hit.
void BM_ApiKey_WarmCache(benchmark::State& state) {
  IdentityService& id = *g_world->identity;
  if (!id.Authenticate(g_world->key_text).has_value()) state.SkipWithError("key rejected");
  for (auto _ : state) {
    auto p = id.Authenticate(g_world->key_text);
    if (!p.has_value()) state.SkipWithError("key rejected");
    benchmark::DoNotOptimize(p);
  }
}
BENCHMARK(BM_ApiKey_WarmCache)->ThreadRange(1, 2)->UseRealTime();

// The same with 10,000 keys cached, cycling through them.
void CycleManyKeys(benchmark::State& state, IdentityService& id) {
  const auto& keys = g_world->many_keys;
  size_t i = static_cast<size_t>(state.thread_index()) * 7919;
  for (auto _ : state) {
    auto p = id.Authenticate(keys[i++ % keys.size()]);
    if (!p.has_value()) state.SkipWithError("key rejected");
    benchmark::DoNotOptimize(p);
  }
}
// Frozen clock: every call is a cache hit.
void BM_ApiKey_WarmCache_10000Keys(benchmark::State& state) {
  CycleManyKeys(state, *g_world->identity_many);
}
BENCHMARK(BM_ApiKey_WarmCache_10000Keys)->UseRealTime();
// Real clock: each key is re-read from the store once a second, so this is the
// hit cost plus (cold cost / hits per key per second) at this loop's rate.
void BM_ApiKey_10000Keys_RealClock(benchmark::State& state) {
  CycleManyKeys(state, *g_world->identity_many_real);
}
BENCHMARK(BM_ApiKey_10000Keys_RealClock)->UseRealTime();

// Cold: the tenant's cache entries are dropped before every call, so each call
// reads the key, its owner and the tenant from the store. ForgetTenant itself
// is timed too; on a one-entry cache it is tens of nanoseconds.
void BM_ApiKey_ColdCache(benchmark::State& state) {
  IdentityService& id = *g_world->identity;
  for (auto _ : state) {
    id.ForgetTenant(g_world->tenant.id);
    auto p = id.Authenticate(g_world->key_text);
    if (!p.has_value()) state.SkipWithError("key rejected");
    benchmark::DoNotOptimize(p);
  }
}
BENCHMARK(BM_ApiKey_ColdCache)->UseRealTime();

// Access token: HMAC-SHA256 signature check, then the session and the user
// are read from the store on every call (logout must take effect at once).
void BM_AccessToken(benchmark::State& state) {
  IdentityService& id = *g_world->identity;
  for (auto _ : state) {
    auto p = id.Authenticate(g_world->access_token);
    if (!p.has_value()) state.SkipWithError("token rejected");
    benchmark::DoNotOptimize(p);
  }
}
BENCHMARK(BM_AccessToken)->UseRealTime();

// Untimed. Right after a change made through another IdentityService, polls
// `replica` every 5 ms and prints how long it kept accepting `credential`.
// Passes if it is rejected by the first check made kCredentialRecheckMs after
// the change: the replica loaded its entry before the change, so that check
// must re-read the store. Takes about a second.
bool ReplicaRejectsWithinRecheck(IdentityService& replica, const std::string& credential,
                                 const char* what) {
  using Ms = std::chrono::duration<double, std::milli>;
  const auto changed = std::chrono::steady_clock::now();
  const auto bound = changed + std::chrono::milliseconds(kCredentialRecheckMs);
  bool accepted_at_once = replica.Authenticate(credential).has_value();
  double rejected_after_ms = -1;
  std::string message;
  for (;;) {
    auto now = std::chrono::steady_clock::now();
    auto r = replica.Authenticate(credential);
    if (!r.has_value()) {
      rejected_after_ms = Ms(now - changed).count();
      message = r.error().message;
      break;
    }
    if (now >= bound) break;  // accepted at or after the bound: fail
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  bool pass = rejected_after_ms >= 0;
  char detail[200];
  if (pass) {
    std::snprintf(detail, sizeof detail, " (%s at once, rejected after %.0f ms: \"%s\")",
                  accepted_at_once ? "still accepted" : "rejected", rejected_after_ms,
                  message.c_str());
  } else {
    std::snprintf(detail, sizeof detail, " (still accepted %lld ms after the change)",
                  static_cast<long long>(kCredentialRecheckMs));
  }
  std::printf("  %-68s %s%s\n", what, pass ? "PASS" : "FAIL", detail);
  return pass;
}

// Untimed: revocation and suspension take effect on the very next call even
// though the key was cached. Returns false if a promise is broken.
bool CheckRevocationIsImmediate(World& w) {
  bool ok = true;
  auto line = [](const char* what, bool pass, const std::string& detail) {
    std::printf("  %-68s %s%s\n", what, pass ? "PASS" : "FAIL", detail.c_str());
  };
  std::printf("Revocation check (untimed):\n");
  TenantScope scope = TenantScope::Of(w.tenant.id);
  std::string text = w.NewKey("to-revoke");
  std::string key_id = Must(ParseApiKey(text), "ParseApiKey").key_id;
  // A second service over the same store stands for another replica.
  IdentityOptions options;
  options.fast_password_hashing = true;
  IdentityService replica(*w.store, SystemClock::Instance(), options);
  Must(replica.Init(), "replica Init");

  bool first = w.identity->Authenticate(text).has_value();
  bool second = w.identity->Authenticate(text).has_value();  // served from the cache
  bool on_replica = replica.Authenticate(text).has_value();  // cached there too
  line("key accepted, then accepted again from the cache", first && second && on_replica, "");
  ok = ok && first && second && on_replica;

  Must(w.identity->RevokeApiKey(scope, key_id), "RevokeApiKey");
  auto after = w.identity->Authenticate(text);
  bool revoked = !after.has_value() && after.error().code == ErrorCode::kUnauthenticated;
  line("RevokeApiKey, then the very next Authenticate fails", revoked,
       revoked ? " (\"" + after.error().message + "\")" : "");
  ok = ok && revoked;

  // Another process over the same store keeps its own cache and is not told;
  // it re-reads the key once its entry is kCredentialRecheckMs old.
  bool across = ReplicaRejectsWithinRecheck(
      replica, text, "revoked key on a 2nd IdentityService (a replica, not told)");
  ok = ok && across;

  // Suspension: a cached key of the tenant stops working before Suspend returns.
  std::string bot_key = w.NewKey("suspend-check");
  bool before = w.identity->Authenticate(bot_key).has_value() &&
                w.identity->Authenticate(bot_key).has_value() &&
                replica.Authenticate(bot_key).has_value();
  Must(w.tenants->Suspend(w.tenant.id), "Suspend");
  auto suspended = w.identity->Authenticate(bot_key);
  bool blocked = before && !suspended.has_value();
  line("tenant suspended, then its cached key fails on the next call", blocked,
       blocked ? " (\"" + suspended.error().message + "\")" : "");
  ok = ok && blocked;
  bool suspended_across = ReplicaRejectsWithinRecheck(
      replica, bot_key, "suspended tenant's key on the replica (not told)");
  ok = ok && suspended_across;
  Must(w.tenants->Resume(w.tenant.id), "Resume");
  bool resumed = w.identity->Authenticate(bot_key).has_value();
  line("tenant resumed, then the key works again", resumed, "");
  ok = ok && resumed;
  std::printf("\n");
  std::fflush(stdout);
  return ok;
}

// Prints the usual console table, then each benchmark's median (or its only
// run when there are no repetitions) as a ratio to the baseline's median.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  RatioReporter() : ConsoleReporter(OO_Tabular) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.error_occurred) continue;
      bool median = r.run_type == Run::RT_Aggregate && r.aggregate_name == "median";
      bool single = r.run_type == Run::RT_Iteration && r.repetitions <= 1;
      if (!median && !single) continue;
      std::string name = r.run_name.str();
      order_.push_back(name);
      real_ns_[name] = r.GetAdjustedRealTime() * Multiplier(r.time_unit);
      cpu_ns_[name] = r.GetAdjustedCPUTime() * Multiplier(r.time_unit);
    }
  }

  void Finalize() override {
    ConsoleReporter::Finalize();
    std::ostream& out = GetOutputStream();
    auto base = real_ns_.find("BM_Baseline_Sha256OfSecret");
    out << "\nMedians and ratio to the baseline (BM_Baseline_Sha256OfSecret, same run):\n";
    char buf[256];
    std::snprintf(buf, sizeof buf, "  %-52s %12s %12s %10s\n", "benchmark", "real ns/op",
                  "cpu ns/op", "x baseline");
    out << buf;
    for (const std::string& name : order_) {
      double ratio = base != real_ns_.end() ? real_ns_[name] / base->second : 0;
      std::snprintf(buf, sizeof buf, "  %-52s %12.0f %12.0f %10.1f\n", name.c_str(), real_ns_[name],
                    cpu_ns_[name], ratio);
      out << buf;
    }
  }

 private:
  static double Multiplier(benchmark::TimeUnit u) {
    switch (u) {
      case benchmark::kNanosecond:
        return 1;
      case benchmark::kMicrosecond:
        return 1e3;
      case benchmark::kMillisecond:
        return 1e6;
      case benchmark::kSecond:
        return 1e9;
    }
    return 1;
  }
  std::vector<std::string> order_;
  std::map<std::string, double> real_ns_;
  std::map<std::string, double> cpu_ns_;
};

}  // namespace
}  // namespace atrium

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  int rc = 0;
  try {
    atrium::World world;
    atrium::g_world = &world;
    if (!atrium::CheckRevocationIsImmediate(world)) rc = 1;
    atrium::RatioReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    benchmark::Shutdown();
    atrium::g_world = nullptr;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "key_verify_bench: %s\n", e.what());
    return 2;
  }
  return rc;
}
