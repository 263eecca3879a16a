// Rating throughput (BENCHMARKS.md §10): a plain executable that prints a
// table of medians over repeated runs.
//
//  1. The pure core on one core: token and GPU usage records rated against
//     a realistic price book (40 entries, contract prices for half of 200
//     tenants), records/s — beside a baseline that only copies each record
//     into a rated row, so the ratio is what choosing a price costs.
//  2. End to end on a real store: records ingested (the gateway's batched
//     INSERT), then rated by BillingService (read back, rated, rows and
//     marks stored in one transaction per batch) — beside the same batched
//     INSERT alone, in the same database and run. SQLite always;
//     PostgreSQL when ATRIUM_TEST_PG_URL names a server.
//
// Usage: billing_bench [--records N] [--runs R]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "billing/billing_service.h"
#include "billing/rating.h"
#include "common/clock.h"
#include "store/store.h"

namespace atrium::billing {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point from) {
  return std::chrono::duration<double>(Clock::now() - from).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

constexpr int kTenants = 200;
constexpr int kModels = 20;

std::string EntriesJson() {
  std::string out = "[";
  for (int m = 0; m < kModels; ++m) {
    const std::string model = "model-" + std::to_string(m);
    out += R"({"meter": "tokens.input", "model": ")" + model + R"(", "price_minor": "15"},)";
    out +=
        R"({"meter": "tokens.output", "model": ")" + model +
        R"(", "tier_mode": "graduated", "tiers": [{"up_to": 100, "price_minor": "60"}, {"price_minor": "40"}]},)";
  }
  out += R"({"meter": "gpu.whole", "model": "H100-80GB", "price_minor": "249"}])";
  return out;
}

Pricing MakePricing() {
  PriceBookVersion v;
  v.book_id = "pb_bench";
  v.version = 1;
  v.entries = *ParsePriceEntries(Json::parse(EntriesJson()), "entries");
  std::vector<BillingPlan> plans;
  for (int t = 0; t < kTenants; t += 2) {
    BillingPlan p;
    p.tenant_id = "tn_" + std::to_string(t);
    p.version = 1;
    p.price_book_id = "pb_bench";
    p.entries = *ParsePriceEntries(
        Json::parse(R"([{"meter": "tokens.input", "model": "model-3", "price_minor": "10"}])"),
        "entries");
    plans.push_back(std::move(p));
  }
  BillingPlan fallback;
  fallback.tenant_id = kDefaultPlanTenantId;
  fallback.version = 1;
  fallback.price_book_id = "pb_bench";
  plans.push_back(fallback);
  return Pricing({v}, std::move(plans));
}

std::vector<UsageRecord> TokenRecords(int n, int64_t at, const std::string& prefix) {
  std::vector<UsageRecord> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    UsageRecord& u = out[static_cast<size_t>(i)];
    u.id = prefix + std::to_string(i);
    u.tenant_id = "tn_" + std::to_string(i % kTenants);
    u.key_id = "key_" + std::to_string(i % 997);
    u.model = "model-" + std::to_string(i % kModels);
    u.deployment_id = "dep_" + std::to_string(i % kModels);
    u.api = "chat.completions";
    u.status = "completed";
    u.http_status = 200;
    u.input_tokens = 100 + i % 900;
    u.output_tokens = 20 + i % 300;
    u.created_at = at + i % 1000;
  }
  return out;
}

void PureCore(int records, int runs) {
  Pricing pricing = MakePricing();
  std::vector<UsageRecord> tokens = TokenRecords(records, 1'790'000'000'000, "req_");
  std::vector<double> rated;
  std::vector<double> copied;
  std::vector<RatedUsage> out;
  out.reserve(tokens.size() * 2);
  for (int r = 0; r < runs; ++r) {
    out.clear();
    auto t0 = Clock::now();
    for (const auto& u : tokens) {
      // The baseline: the same two rows per record, no price chosen.
      RatedUsage& a = out.emplace_back();
      a.tenant_id = u.tenant_id;
      a.source = "tokens";
      a.record_id = u.id;
      a.meter = "tokens.input";
      a.item = u.model;
      a.quantity = u.input_tokens;
      a.usage_at = u.created_at;
      a.key_id = u.key_id;
      a.deployment_id = u.deployment_id;
      RatedUsage& b = out.emplace_back(a);
      b.meter = "tokens.output";
      b.quantity = u.output_tokens;
    }
    copied.push_back(records / Seconds(t0));
    out.clear();
    t0 = Clock::now();
    for (const auto& u : tokens) RateTokenUsage(u, pricing, out);
    rated.push_back(records / Seconds(t0));
  }
  std::printf("pure core, %d token records, one core (median of %d runs)\n", records, runs);
  std::printf("  copy into rated rows (baseline)  %12.0f records/s\n", Median(copied));
  std::printf("  rate (choose the price)          %12.0f records/s   %.2fx the baseline's time\n",
              Median(rated), Median(copied) / Median(rated));
}

void EndToEnd(const std::string& name, const std::string& url_base, int records, int runs) {
  std::vector<double> insert_only;
  std::vector<double> ingest_and_rate;
  for (int r = 0; r < runs; ++r) {
    for (bool rate : {false, true}) {
      std::string url = url_base;
      std::filesystem::path dir;
      if (url.empty()) {
        dir = std::filesystem::temp_directory_path() /
              ("atrium-billing-bench-" + std::to_string(::getpid()) + "-" + std::to_string(r) +
               (rate ? "r" : "i"));
        std::filesystem::create_directories(dir);
        url = "sqlite://" + (dir / "bench.db").string();
      }
      auto store = Store::Open(url);
      if (!store.has_value()) {
        std::fprintf(stderr, "%s: %s\n", name.c_str(), store.error().message.c_str());
        return;
      }
      ManualClock clock(1'790'000'000'000);
      // The store keeps usage of tenants that exist (the records' 200).
      for (int t = 0; t < kTenants; ++t) {
        Tenant tenant;
        tenant.id = "tn_" + std::to_string(t);
        tenant.name = "bench-" + std::to_string(t);
        tenant.display_name = tenant.name;
        tenant.tier = "shared";
        tenant.state = "active";
        (void)(*store)->CreateTenant(tenant);  // exists already on a shared database
      }
      PriceBookRecord b;
      b.id = "pb_bench_" + std::to_string(r) + (rate ? "r" : "i") + std::to_string(::getpid());
      b.name = b.id;
      b.currency = "USD";
      PriceBookVersion v;
      v.effective_from = clock.NowMillis();
      v.entries_json = EntriesJson();
      (void)(*store)->CreatePriceBookForPlatform(b, v, clock.NowMillis());
      BillingPlan fallback;
      fallback.tenant_id = kDefaultPlanTenantId;
      fallback.price_book_id = b.id;
      fallback.effective_from = clock.NowMillis();
      fallback.entries_json = "[]";
      (void)(*store)->AddBillingPlanForPlatform(fallback, clock.NowMillis());
      const std::string prefix =
          "req_" + std::to_string(::getpid()) + "_" + std::to_string(r) + (rate ? "r" : "i") + "_";
      auto tokens = TokenRecords(records, clock.NowMillis() + 1, prefix);
      clock.AdvanceSeconds(60);
      BillingOptions o;
      o.interval_ms = 0;
      o.batch = 5'000;
      o.max_batches = 1'000'000;
      BillingService service(**store, clock, o);
      auto t0 = Clock::now();
      for (size_t i = 0; i < tokens.size(); i += 5'000) {
        std::vector<UsageRecord> batch(
            tokens.begin() + static_cast<long>(i),
            tokens.begin() + static_cast<long>(std::min(tokens.size(), i + 5'000)));
        if (!(*store)->InsertUsageRecords(batch).has_value()) std::abort();
      }
      if (rate) {
        auto round = service.RateDue();
        if (!round.has_value() || round->token_records < records) {
          std::fprintf(stderr, "rating failed or short: %s\n",
                       round.has_value() ? std::to_string(round->token_records).c_str()
                                         : round.error().message.c_str());
          std::abort();
        }
        ingest_and_rate.push_back(records / Seconds(t0));
      } else {
        insert_only.push_back(records / Seconds(t0));
      }
      if (dir.empty()) {
        // A shared PostgreSQL database: leave nothing for the next run to rate.
        (void)(*store)->database().Exec("DELETE FROM usage_records WHERE id LIKE $1",
                                        {prefix + "%"});
        (void)(*store)->database().Exec("DELETE FROM rated_usage WHERE record_id LIKE $1",
                                        {prefix + "%"});
      }
      store->reset();
      if (!dir.empty()) std::filesystem::remove_all(dir);
    }
  }
  std::printf("%s, %d token records (median of %d runs)\n", name.c_str(), records, runs);
  std::printf("  batched INSERT alone (baseline)  %12.0f records/s\n", Median(insert_only));
  std::printf("  INSERT, then rated and stored    %12.0f records/s   %.2fx the baseline's time\n",
              Median(ingest_and_rate), Median(insert_only) / Median(ingest_and_rate));
}

}  // namespace
}  // namespace atrium::billing

int main(int argc, char** argv) {
  int records = 1'000'000;
  int db_records = 50'000;
  int runs = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--records") records = std::atoi(argv[i + 1]);
    if (flag == "--db-records") db_records = std::atoi(argv[i + 1]);
    if (flag == "--runs") runs = std::atoi(argv[i + 1]);
  }
  atrium::billing::PureCore(records, runs);
  atrium::billing::EndToEnd("SQLite", "", db_records, runs);
  if (const char* pg = std::getenv("ATRIUM_TEST_PG_URL"); pg != nullptr && *pg != '\0') {
    atrium::billing::EndToEnd("PostgreSQL", pg, db_records, runs);
  }
  return 0;
}
