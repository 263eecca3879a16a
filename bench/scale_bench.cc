// Does a lookup stay flat as the counts grow? Seeds SQLite stores with 100,
// 1,000 and 10,000 tenants, and with one tenant of 1,000, 10,000 and 100,000
// users, then sends GET requests through ControlPlaneApi::Handle in-process
// with a platform-admin API key, so routing, authentication (warm key cache),
// tenant resolution, authorization, the store and the JSON view are all timed
// — everything but the socket (bench/api_wrk.sh covers that).
//
// Latency of every request is taken with steady_clock around Handle, and the
// calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID) around the same call:
// on a shared 2-core machine the wall-clock p99 is mostly time spent waiting
// for a core, which the CPU-time p99 leaves out. The worlds of every size are
// open at once and measured in interleaved rounds (round 1: every case at
// every size, round 2: again, ...), so that noise from other work on a shared
// machine lands on all sizes alike. Per case and size
// it prints the median over the rounds of each round's p50 and p99 (wall and
// CPU), the rows in the answer, and the ratio of that wall p99 to the
// smallest size's and to the previous size's (flat = about 1).
//
// Seeding goes through Store::CreateTenant / Store::CreateUser (one row per
// call, the store's own SQL) with one precomputed password hash, so no
// per-user argon2. Ids come from NewId on a clock that advances 1 ms per row,
// as if the rows were created over time.
//
//   scale_bench [--rounds=5] [--requests=2000] [--quick]
// --quick: sizes 100/1,000 tenants and 1,000/10,000 users, for a smoke run.
#include <stdlib.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "api/api.h"
#include "common/clock.h"
#include "crypto/crypto.h"
#include "crypto/ids.h"
#include "identity/identity_service.h"
#include "store/store.h"
#include "tenancy/tenant_service.h"

namespace atrium {
namespace {

using SteadyClock = std::chrono::steady_clock;

template <typename T>
T Must(Result<T> r, const std::string& what) {
  if (!r.has_value()) throw std::runtime_error(what + ": " + r.error().message);
  return std::move(r).value();
}
void Must(Status s, const std::string& what) {
  if (!s.has_value()) throw std::runtime_error(what + ": " + s.error().message);
}

double ThreadCpuMicros() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

double SecondsSince(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

// A store in its own temp dir with the services and the API over it.
class World {
 public:
  World(const std::string& label) : label_(label) {
    std::string templ =
        (std::filesystem::temp_directory_path() / "atrium-scalebench-XXXXXX").string();
    if (mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = templ;
    store_ = Must(Store::Open("sqlite://" + (dir_ / "scale.db").string()), "Store::Open");
    IdentityOptions options;
    options.fast_password_hashing = true;
    identity_ = std::make_unique<IdentityService>(*store_, SystemClock::Instance(), options);
    Must(identity_->Init(), "IdentityService::Init");
    tenants_ = std::make_unique<TenantService>(*store_, *identity_, SystemClock::Instance());
    api_ = std::make_unique<api::ControlPlaneApi>(
        api::Services{store_.get(), identity_.get(), tenants_.get(), &SystemClock::Instance()});
    admin_key_ = Must(identity_->BootstrapAdminKey("bench-admin"), "BootstrapAdminKey");
  }
  ~World() {
    api_.reset();
    tenants_.reset();
    identity_.reset();
    store_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  const std::string& label() const { return label_; }
  Store& store() { return *store_; }
  uintmax_t DatabaseBytes() const {
    uintmax_t total = 0;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir_, ec)) {
      if (e.is_regular_file(ec)) total += e.file_size(ec);
    }
    return total;
  }

  // One GET through the whole API pipeline.
  http::Response Get(const std::string& target) {
    http::Request req = MakeRequest(target);
    return api_->Handle(req);
  }

  // The same, timed around Handle only (building the request is not timed):
  // wall-clock and this thread's CPU microseconds.
  int TimedGet(const std::string& target, double* wall_us, double* cpu_us) {
    http::Request req = MakeRequest(target);
    double cpu_start = ThreadCpuMicros();
    auto start = SteadyClock::now();
    http::Response response = api_->Handle(req);
    auto end = SteadyClock::now();
    *cpu_us = ThreadCpuMicros() - cpu_start;
    *wall_us = std::chrono::duration<double, std::micro>(end - start).count();
    return response.status;
  }

 private:
  // Targets here hold only [A-Za-z0-9_/?&=.-], so no percent-decoding is needed.
  http::Request MakeRequest(const std::string& target) {
    http::Request req;
    req.method = "GET";
    req.target = target;
    auto q = target.find('?');
    req.path = target.substr(0, q);
    if (q != std::string::npos) {
      std::string rest = target.substr(q + 1);
      size_t pos = 0;
      while (pos <= rest.size()) {
        size_t amp = rest.find('&', pos);
        std::string pair =
            rest.substr(pos, amp == std::string::npos ? std::string::npos : amp - pos);
        if (!pair.empty()) {
          size_t eq = pair.find('=');
          std::string name = pair.substr(0, eq);
          std::string value = eq == std::string::npos ? "" : pair.substr(eq + 1);
          req.query.emplace(name, value);
          req.query_all.emplace_back(name, value);
        }
        if (amp == std::string::npos) break;
        pos = amp + 1;
      }
    }
    req.headers["authorization"] = "Bearer " + admin_key_;
    req.remote_address = "127.0.0.1";
    req.request_id = "bench-" + std::to_string(++next_request_);
    return req;
  }

  std::string label_;
  std::filesystem::path dir_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<IdentityService> identity_;
  std::unique_ptr<TenantService> tenants_;
  std::unique_ptr<api::ControlPlaneApi> api_;
  std::string admin_key_;
  uint64_t next_request_ = 0;
};

// A password hash computed once and given to every seeded user.
const std::string& SeedPasswordHash() {
  static const std::string hash =
      Must(crypto::HashPassword("seeded-password-123", /*fast=*/true), "HashPassword");
  return hash;
}

// n tenants, half labelled env=prod and half env=dev; returns their ids sorted.
std::vector<std::string> SeedTenants(Store& store, int n, ManualClock& clock) {
  std::vector<std::string> ids;
  ids.reserve(n);
  for (int i = 0; i < n; ++i) {
    clock.AdvanceMillis(1);
    Tenant t;
    t.id = NewId("tn", clock);
    t.name = "tenant-" + std::to_string(i);
    t.display_name = "Tenant " + std::to_string(i);
    t.tier = "shared";
    t.regions = {"eu-west"};
    t.weight = 1;
    t.labels = {{"env", i % 2 == 0 ? "prod" : "dev"}, {"team", "t" + std::to_string(i % 50)}};
    t.state = "active";
    t.created_at = t.updated_at = clock.NowMillis();
    Must(store.CreateTenant(t), "CreateTenant");
    ids.push_back(t.id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

// n human users in one tenant; returns their ids sorted.
std::vector<std::string> SeedUsers(Store& store, const std::string& tenant_id, int n,
                                   ManualClock& clock) {
  std::vector<std::string> ids;
  ids.reserve(n);
  for (int i = 0; i < n; ++i) {
    clock.AdvanceMillis(1);
    User u;
    u.id = NewId("usr", clock);
    u.tenant_id = tenant_id;
    u.username = "user-" + std::to_string(i);
    u.display_name = "User " + std::to_string(i);
    u.email = "user-" + std::to_string(i) + "@example.com";
    u.role = i % 10 == 0 ? "tenant-admin" : "tenant-member";
    u.kind = "human";
    u.password_hash = SeedPasswordHash();
    u.state = "active";
    u.created_at = u.updated_at = clock.NowMillis();
    Must(store.CreateUser(u), "CreateUser");
    ids.push_back(u.id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

// A request shape, measured at every size of its series.
struct CaseSpec {
  std::string name;
  // Target for request number i in world w (deterministic per seed).
  std::function<std::string(size_t world, std::mt19937_64& rng)> target;
};

struct Series {
  std::string title;
  std::string unit;  // "tenants" or "users"
  std::vector<int> sizes;
  std::vector<std::unique_ptr<World>> worlds;
  std::vector<CaseSpec> cases;
  // [case][world] -> per-round p50 and p99 (microseconds), wall and CPU
  std::vector<std::vector<std::vector<double>>> p50, p99, cpu_p50, cpu_p99;
  std::vector<std::vector<size_t>> rows;  // [case][world] -> items in the answer
};

struct RoundResult {
  double p50 = 0, p99 = 0, cpu_p50 = 0, cpu_p99 = 0;
};

double Percentile(std::vector<double>& v, double q) {
  // Nearest rank: the smallest value with at least q of the samples at or below it.
  size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  rank = std::clamp<size_t>(rank, 1, v.size());
  std::nth_element(v.begin(), v.begin() + (rank - 1), v.end());
  return v[rank - 1];
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Runs `requests` GETs of one case in one world; returns the round's percentiles.
RoundResult MeasureRound(World& w, const CaseSpec& c, size_t world_index, int requests,
                         uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> wall, cpu;
  wall.reserve(requests);
  cpu.reserve(requests);
  for (int i = 0; i < requests; ++i) {
    double wall_us = 0, cpu_us = 0;
    int status = w.TimedGet(c.target(world_index, rng), &wall_us, &cpu_us);
    if (status != 200) {
      throw std::runtime_error(c.name + " in " + w.label() + " answered " + std::to_string(status));
    }
    wall.push_back(wall_us);
    cpu.push_back(cpu_us);
  }
  return {Percentile(wall, 0.50), Percentile(wall, 0.99), Percentile(cpu, 0.50),
          Percentile(cpu, 0.99)};
}

// Items in a list answer ({"items":[...]}), 1 for a single object.
size_t RowsIn(const http::Response& response) {
  Json j = Json::parse(response.body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("items") && j["items"].is_array()) return j["items"].size();
  return 1;
}

void PrintSeries(const Series& s, int rounds, int requests, double baseline_p50) {
  std::printf("\n%s — median over %d rounds of %d requests each; microseconds\n", s.title.c_str(),
              rounds, requests);
  std::printf("  %-44s %8s %5s %8s %8s %8s %8s %9s %9s %8s\n", "case", s.unit.c_str(), "rows",
              "p50", "p99", "cpu p50", "cpu p99", "p99/min", "p99/prev", "p50/hz");
  for (size_t c = 0; c < s.cases.size(); ++c) {
    double p99_min = Median(s.p99[c][0]);
    for (size_t w = 0; w < s.worlds.size(); ++w) {
      double p50 = Median(s.p50[c][w]);
      double p99 = Median(s.p99[c][w]);
      double p99_prev = Median(s.p99[c][w == 0 ? 0 : w - 1]);
      std::printf("  %-44s %8d %5zu %8.0f %8.0f %8.0f %8.0f %9.2f %9.2f %8.0f\n",
                  s.cases[c].name.c_str(), s.sizes[w], s.rows[c][w], p50, p99,
                  Median(s.cpu_p50[c][w]), Median(s.cpu_p99[c][w]), p99 / p99_min, p99 / p99_prev,
                  p50 / baseline_p50);
    }
  }
}

int Main(int argc, char** argv) {
  int rounds = 5;
  int requests = 2000;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--rounds=", 0) == 0) {
      rounds = std::max(1, std::atoi(a.c_str() + 9));
    } else if (a.rfind("--requests=", 0) == 0) {
      requests = std::max(100, std::atoi(a.c_str() + 11));
    } else if (a == "--quick") {
      quick = true;
    } else {
      std::fprintf(stderr, "usage: scale_bench [--rounds=5] [--requests=2000] [--quick]\n");
      return 2;
    }
  }
  crypto::InitCrypto();
  ManualClock seed_clock(1'790'000'000'000);

  // ---- tenants series
  Series tenants;
  tenants.title = "Tenants: N tenants in the store";
  tenants.unit = "tenants";
  tenants.sizes = quick ? std::vector<int>{100, 1'000} : std::vector<int>{100, 1'000, 10'000};
  std::vector<std::vector<std::string>> tenant_ids;
  for (int n : tenants.sizes) {
    auto w = std::make_unique<World>(std::to_string(n) + " tenants");
    auto start = SteadyClock::now();
    tenant_ids.push_back(SeedTenants(w->store(), n, seed_clock));
    std::printf("seeded %6d tenants in %6.2f s (%.1f MB on disk)\n", n, SecondsSince(start),
                w->DatabaseBytes() / 1e6);
    std::fflush(stdout);
    tenants.worlds.push_back(std::move(w));
  }
  auto random_tenant = [&](size_t w, std::mt19937_64& rng) -> const std::string& {
    const auto& ids = tenant_ids[w];
    return ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(rng)];
  };
  auto middle_tenant = [&](size_t w) -> const std::string& {
    return tenant_ids[w][tenant_ids[w].size() / 2];
  };
  tenants.cases = {
      {"GET /tenants/{id} (random id)",
       [&](size_t w, std::mt19937_64& rng) { return "/api/v1/tenants/" + random_tenant(w, rng); }},
      {"GET /tenants?limit=100 (first page)",
       [&](size_t, std::mt19937_64&) { return std::string("/api/v1/tenants?limit=100"); }},
      {"GET /tenants?limit=100&cursor=<middle>",
       [&](size_t w, std::mt19937_64&) {
         return "/api/v1/tenants?limit=100&cursor=" + middle_tenant(w);
       }},
      // Filtered by a label that half the tenants carry: the join path.
      {"GET /tenants?limit=100&label=env=prod",
       [&](size_t, std::mt19937_64&) {
         return std::string("/api/v1/tenants?limit=100&label=env=prod");
       }},
  };

  // ---- users series: one tenant with N users
  Series users;
  users.title = "Users: one tenant with N users";
  users.unit = "users";
  users.sizes = quick ? std::vector<int>{1'000, 10'000} : std::vector<int>{1'000, 10'000, 100'000};
  std::vector<std::string> user_tenant;
  std::vector<std::vector<std::string>> user_ids;
  for (int n : users.sizes) {
    auto w = std::make_unique<World>(std::to_string(n) + " users");
    user_tenant.push_back(SeedTenants(w->store(), 1, seed_clock).front());
    auto start = SteadyClock::now();
    user_ids.push_back(SeedUsers(w->store(), user_tenant.back(), n, seed_clock));
    std::printf("seeded %6d users   in %6.2f s (%.1f MB on disk)\n", n, SecondsSince(start),
                w->DatabaseBytes() / 1e6);
    std::fflush(stdout);
    users.worlds.push_back(std::move(w));
  }
  auto users_base = [&](size_t w) { return "/api/v1/tenants/" + user_tenant[w] + "/users"; };
  users.cases = {
      {"GET /tenants/{t}/users/{id} (random id)",
       [&](size_t w, std::mt19937_64& rng) {
         const auto& ids = user_ids[w];
         return users_base(w) + "/" +
                ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(rng)];
       }},
      {"GET /tenants/{t}/users?limit=100 (first)",
       [&](size_t w, std::mt19937_64&) { return users_base(w) + "?limit=100"; }},
      {"GET /tenants/{t}/users?limit=100&cursor=<mid>",
       [&](size_t w, std::mt19937_64&) {
         return users_base(w) + "?limit=100&cursor=" + user_ids[w][user_ids[w].size() / 2];
       }},
  };

  // ---- baseline: the pipeline with no credential, no store and no list
  CaseSpec healthz{"GET /healthz (no auth, no store)",
                   [](size_t, std::mt19937_64&) { return std::string("/healthz"); }};
  std::vector<double> healthz_p50, healthz_p99;

  for (Series* s : {&tenants, &users}) {
    s->p50.assign(s->cases.size(), std::vector<std::vector<double>>(s->worlds.size()));
    s->p99 = s->cpu_p50 = s->cpu_p99 = s->p50;
    s->rows.assign(s->cases.size(), std::vector<size_t>(s->worlds.size()));
  }

  // Warm-up: first requests fill the key cache, the statement caches and the page cache.
  for (Series* s : {&tenants, &users}) {
    for (size_t c = 0; c < s->cases.size(); ++c) {
      for (size_t w = 0; w < s->worlds.size(); ++w) {
        std::mt19937_64 rng(7);
        for (int i = 0; i < 200; ++i) {
          http::Response response = s->worlds[w]->Get(s->cases[c].target(w, rng));
          if (response.status != 200) {
            throw std::runtime_error(s->cases[c].name + " in " + s->worlds[w]->label() +
                                     " answered " + std::to_string(response.status) + ": " +
                                     response.body);
          }
          s->rows[c][w] = RowsIn(response);
        }
      }
    }
  }

  auto start = SteadyClock::now();
  for (int r = 0; r < rounds; ++r) {
    uint64_t seed = 1000 + r;
    RoundResult hz = MeasureRound(*tenants.worlds[0], healthz, 0, requests, seed);
    healthz_p50.push_back(hz.p50);
    healthz_p99.push_back(hz.p99);
    for (Series* s : {&tenants, &users}) {
      for (size_t c = 0; c < s->cases.size(); ++c) {
        for (size_t w = 0; w < s->worlds.size(); ++w) {
          RoundResult r = MeasureRound(*s->worlds[w], s->cases[c], w, requests, seed);
          s->p50[c][w].push_back(r.p50);
          s->p99[c][w].push_back(r.p99);
          s->cpu_p50[c][w].push_back(r.cpu_p50);
          s->cpu_p99[c][w].push_back(r.cpu_p99);
        }
      }
    }
    std::fprintf(stderr, "round %d/%d done (%.0f s)\n", r + 1, rounds, SecondsSince(start));
  }

  double base_p50 = Median(healthz_p50);
  std::printf("\nBaseline, same run: %s p50 %.1f us, p99 %.1f us\n", healthz.name.c_str(), base_p50,
              Median(healthz_p99));
  std::printf(
      "Columns: rows = items in the answer; p50/p99 = wall-clock us around Handle;\n"
      "cpu = this thread's CPU us for the same call; p99/min and p99/prev = wall p99\n"
      "over the smallest and the previous size's; p50/hz = wall p50 over healthz p50.\n");
  PrintSeries(tenants, rounds, requests, base_p50);
  PrintSeries(users, rounds, requests, base_p50);

  // The bar: p99 under 10 ms at the largest size of each series.
  bool ok = true;
  for (const Series* s : {&tenants, &users}) {
    for (size_t c = 0; c < s->cases.size(); ++c) {
      double p99 = Median(s->p99[c].back());
      if (p99 >= 10'000) {
        ok = false;
        std::printf("BAR MISSED: %s at %d %s: p99 %.0f us >= 10 ms\n", s->cases[c].name.c_str(),
                    s->sizes.back(), s->unit.c_str(), p99);
      }
    }
  }
  std::printf("\nBar (p99 < 10 ms at the largest size of every case): %s\n", ok ? "met" : "MISSED");
  return 0;
}

}  // namespace
}  // namespace atrium

int main(int argc, char** argv) {
  try {
    return atrium::Main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "scale_bench: %s\n", e.what());
    return 2;
  }
}
