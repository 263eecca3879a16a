// The billing service over a real store (SQLite and PostgreSQL): usage is
// rated once per record and meter, also by a new service after a crash;
// young records wait; price versions never rewrite the past; drafts move
// with usage; invoices are final in order, numbered without gaps, and
// never change — late usage is an adjustment on the next one; `verify`
// proves the books and finds a row that was tampered with.
#include "billing/billing_service.h"

#include <gtest/gtest.h>

#include <map>

#include "common/clock.h"
#include "store/test_databases.h"
#include "support/store_rows.h"

namespace atrium::billing {
namespace {

using testdb::Backend;
using testdb::BackendName;

constexpr int64_t kMin = 60'000;
constexpr int64_t kHour = 3'600'000;
constexpr int64_t kNov3 = 1'793'664'000'000;  // 2026-11-03T00:00:00Z

class BillingServiceTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    database_.Create(GetParam());
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_NO_FATAL_FAILURE(testdb::OpenStore(database_, &store_));
    for (const char* id : {"tn_acme", "tn_globex"}) {
      ASSERT_TRUE(store_->CreateTenant(testing_rows::ActiveTenant(id, id + 3)).has_value());
    }
  }
  void TearDown() override {
    service_.reset();
    store_.reset();
    database_.Drop();
  }

  BillingService& Service() {
    if (!service_) {
      BillingOptions o;
      o.interval_ms = 0;
      o.rating_lag_ms = 10'000;
      o.batch = 3;  // several batches per round
      o.finalize_after_ms = kHour;
      service_ = std::make_unique<BillingService>(*store_, clock_, o);
    }
    return *service_;
  }

  // A book in USD, the default plan's, effective now.
  std::string MakeBook(const std::string& name, const char* entries) {
    PriceBookRecord b;
    b.id = "pb_" + name;
    b.name = name;
    b.currency = "USD";
    b.created_at = b.updated_at = clock_.NowMillis();
    PriceBookVersion v;
    v.effective_from = clock_.NowMillis();
    v.entries_json = entries;
    auto made = store_->CreatePriceBookForPlatform(b, v, clock_.NowMillis());
    EXPECT_TRUE(made.has_value()) << made.error().message;
    return b.id;
  }

  Status Plan(const std::string& tenant, const std::string& book, int64_t anchor = 1,
              int64_t discount_bp = 0, int64_t commitment = 0) {
    BillingPlan p;
    p.tenant_id = tenant;
    p.effective_from = clock_.NowMillis();
    p.price_book_id = book;
    p.anchor_day = anchor;
    p.discount_bp = discount_bp;
    p.commitment_minor = commitment;
    p.entries_json = "[]";
    p.created_at = clock_.NowMillis();
    auto added = store_->AddBillingPlanForPlatform(p, clock_.NowMillis());
    if (!added.has_value()) return added.error();
    return OkStatus();
  }

  UsageRecord Tokens(const std::string& id, const std::string& tenant, int64_t in, int64_t out,
                     int64_t at) {
    UsageRecord u;
    u.id = id;
    u.tenant_id = tenant;
    u.key_id = "key_1";
    u.model = "llama";
    u.deployment_id = "dp_1";
    u.api = "chat.completions";
    u.status = "completed";
    u.http_status = 200;
    u.input_tokens = in;
    u.output_tokens = out;
    u.created_at = at;
    return u;
  }

  GpuUsageRecord Gpu(const std::string& alloc, const std::string& tenant, int64_t from, int64_t to,
                     const std::string& kind = "allocation") {
    GpuUsageRecord g;
    g.subject_kind = kind;
    g.subject_id = alloc;
    g.id = kind + ":" + alloc + ":" + std::to_string(from);
    g.tenant_id = tenant;
    g.project = "research";
    g.model = "H100-80GB";
    g.kind = "whole";
    g.milli = 1000;
    g.from_ms = from;
    g.to_ms = to;
    g.gpu_milli_ms = 1000 * (to - from);
    g.closes_subject = true;
    g.created_at = to;
    return g;
  }

  // A rated row of acme's input tokens, as a rating round would make it.
  static RatedUsage Row(const std::string& record, int64_t quantity, int64_t at) {
    RatedUsage r;
    r.tenant_id = "tn_acme";
    r.source = "tokens";
    r.record_id = record;
    r.meter = "tokens.input";
    r.item = "llama";
    r.price_ref = "x";
    r.quantity = quantity;
    r.usage_at = at;
    r.key_id = "key_1";
    r.usage_period = PeriodContaining(at, 1).start_ms;
    return r;
  }

  Json Draft(const std::string& tenant, std::optional<std::string> period = std::nullopt) {
    auto d = Service().Invoice(tenant, period);
    EXPECT_TRUE(d.has_value()) << d.error().message;
    return d.has_value() ? *d : Json();
  }

  testdb::TestDatabase database_;
  std::unique_ptr<Store> store_;
  ManualClock clock_{kNov3};
  std::unique_ptr<BillingService> service_;
};

constexpr char kPrices[] = R"([{"meter": "tokens.input", "price_minor": "100"},
  {"meter": "tokens.output", "price_minor": "300"},
  {"meter": "gpu.whole", "model": "H100-80GB", "price_minor": "250"}])";

TEST_P(BillingServiceTest, RatesEachRecordOnceAcrossCrashes) {
  const std::string book = MakeBook("standard", kPrices);
  ASSERT_TRUE(Plan(kDefaultPlanTenantId, book).has_value());
  const int64_t t = clock_.NowMillis() + kMin;
  std::vector<UsageRecord> tokens;
  for (int i = 0; i < 7; ++i) {
    tokens.push_back(Tokens("req_" + std::to_string(i), "tn_acme", 1'000'000, 500'000, t + i));
  }
  ASSERT_TRUE(store_->InsertUsageRecords(tokens).has_value());
  ASSERT_TRUE(store_
                  ->InsertGpuUsageRecords({Gpu("al_1", "tn_acme", t, t + 2 * kHour),
                                           Gpu("al_1.1", "tn_acme", t, t + kHour, "job")})
                  .has_value());
  // Too young: nothing yet.
  clock_.AdvanceMillis(kMin + 5'000);
  auto round = Service().RateDue();
  ASSERT_TRUE(round.has_value()) << round.error().message;
  EXPECT_EQ(round->token_records, 0);
  clock_.AdvanceMillis(3 * kHour);
  round = Service().RateDue();
  ASSERT_TRUE(round.has_value()) << round.error().message;
  EXPECT_EQ(round->token_records, 7);
  EXPECT_EQ(round->gpu_records, 2);  // the job's record is read, and gives no rows
  EXPECT_EQ(round->rows, 7 * 2 + 1);

  Json d = Draft("tn_acme");
  EXPECT_EQ(d["status"], "draft");
  EXPECT_EQ(d["currency"], "USD");
  // 7M input at 1.00, 3.5M output at 3.00, 2 GPU-hours at 2.50.
  EXPECT_EQ(d["total_minor"], 700 + 1050 + 500) << d.dump(2);
  EXPECT_EQ(d["records"], 15);

  // A new service over the same store (a crash), and the same records
  // shipped again: nothing counted twice.
  service_.reset();
  ASSERT_TRUE(store_->InsertUsageRecords(tokens).has_value());
  round = Service().RateDue();
  ASSERT_TRUE(round.has_value());
  EXPECT_EQ(round->token_records, 0);
  EXPECT_EQ(Draft("tn_acme")["total_minor"], 2250);
  // Rows stored twice (a round whose marks were lost) are kept once.
  std::vector<RatedUsage> again = {Row("req_0", 5, t)};
  ASSERT_TRUE(store_->StoreRatedUsageForBilling({}, {}, again, {}, clock_.NowMillis()).has_value());
  EXPECT_EQ(Draft("tn_acme")["total_minor"], 2250);

  auto report = Service().Verify("tn_acme", "2026-11");
  ASSERT_TRUE(report.has_value()) << report.error().message;
  EXPECT_TRUE(report->ok()) << report->problems.at(0);
  EXPECT_EQ(report->records, 8);
  EXPECT_EQ(report->rated_rows, 15);
  // globex used nothing: an empty draft.
  EXPECT_EQ(Draft("tn_globex")["total_minor"], 0);
}

TEST_P(BillingServiceTest, PricesNeverRewriteThePast) {
  const std::string book = MakeBook("standard", kPrices);
  ASSERT_TRUE(Plan("tn_acme", book).has_value());
  PriceBookVersion past;
  past.book_id = book;
  past.effective_from = clock_.NowMillis() - 1;
  past.entries_json = R"([{"meter": "tokens.input", "price_minor": "1"}])";
  auto refused = store_->AddPriceBookVersionForPlatform(past, clock_.NowMillis());
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kFailedPrecondition);

  const int64_t before = clock_.NowMillis() + kMin;
  ASSERT_TRUE(
      store_->InsertUsageRecords({Tokens("req_a", "tn_acme", 1'000'000, 0, before)}).has_value());
  clock_.AdvanceMillis(2 * kMin);
  PriceBookVersion dearer = past;
  dearer.effective_from = clock_.NowMillis();
  dearer.entries_json = R"([{"meter": "tokens.input", "price_minor": "200"}])";
  auto v2 = store_->AddPriceBookVersionForPlatform(dearer, clock_.NowMillis());
  ASSERT_TRUE(v2.has_value()) << v2.error().message;
  EXPECT_EQ(v2->version, 2);
  ASSERT_TRUE(
      store_->InsertUsageRecords({Tokens("req_b", "tn_acme", 1'000'000, 0, clock_.NowMillis() + 1)})
          .has_value());
  clock_.AdvanceMillis(kMin);
  ASSERT_TRUE(Service().RateDue().has_value());
  // req_a at version 1 (1.00), req_b at version 2 (2.00): two lines.
  Json d = Draft("tn_acme");
  EXPECT_EQ(d["total_minor"], 300) << d.dump(2);
  EXPECT_EQ(d["lines"].size(), 2u);
}

TEST_P(BillingServiceTest, PlansKeepTheirCurrencyAndAnchor) {
  const std::string book = MakeBook("standard", kPrices);
  PriceBookRecord eur;
  eur.id = "pb_eur";
  eur.name = "euro";
  eur.currency = "EUR";
  PriceBookVersion v;
  v.effective_from = clock_.NowMillis();
  v.entries_json = "[]";
  ASSERT_TRUE(store_->CreatePriceBookForPlatform(eur, v, clock_.NowMillis()).has_value());
  // A taken name.
  eur.id = "pb_eur2";
  EXPECT_EQ(store_->CreatePriceBookForPlatform(eur, v, clock_.NowMillis()).error().code,
            ErrorCode::kAlreadyExists);

  EXPECT_EQ(Plan("tn_nobody", book).error().code, ErrorCode::kNotFound);
  EXPECT_EQ(Plan("tn_acme", "pb_none").error().code, ErrorCode::kNotFound);
  ASSERT_TRUE(Plan("tn_acme", book, 15).has_value());
  clock_.AdvanceMillis(1);
  EXPECT_EQ(Plan("tn_acme", book, 1).error().code, ErrorCode::kFailedPrecondition);
  EXPECT_EQ(Plan("tn_acme", "pb_eur", 15).error().code, ErrorCode::kFailedPrecondition);
  ASSERT_TRUE(Plan("tn_acme", book, 15, 1000).has_value());
  // globex has usage already: its periods stay from the 1st.
  ASSERT_TRUE(store_->InsertUsageRecords({Tokens("req_g", "tn_globex", 5, 5, clock_.NowMillis())})
                  .has_value());
  EXPECT_EQ(Plan("tn_globex", book, 15).error().code, ErrorCode::kFailedPrecondition);
  ASSERT_TRUE(Plan("tn_globex", book, 1).has_value());
  // acme's draft runs from the 15th.
  EXPECT_EQ(Draft("tn_acme")["period"], "2026-10");
  EXPECT_EQ(Draft("tn_acme")["period_start_date"], "2026-10-15");
  // Rating with an anchor the plans no longer say stores nothing.
  auto stale =
      store_->StoreRatedUsageForBilling({}, {}, {Row("req_x", 1, kNov3)}, {{"tn_acme", 1}}, kNov3);
  EXPECT_EQ(stale.error().code, ErrorCode::kFailedPrecondition);
}

TEST_P(BillingServiceTest, InvoicesAreFinalInOrderAndLateUsageAdjustsTheNext) {
  const std::string book = MakeBook("standard", kPrices);
  ASSERT_TRUE(Plan("tn_acme", book).has_value());
  ASSERT_TRUE(Plan("tn_globex", book, 1, 0, 5000).has_value());
  const int64_t t = clock_.NowMillis() + kMin;
  ASSERT_TRUE(
      store_->InsertUsageRecords({Tokens("req_1", "tn_acme", 2'000'000, 0, t)}).has_value());
  clock_.AdvanceMillis(kHour);
  ASSERT_TRUE(Service().RateDue().has_value());
  // November has not ended.
  EXPECT_EQ(Service().Finalize("tn_acme", "2026-11").error().code, ErrorCode::kFailedPrecondition);
  // On December 1st plus the grace: both tenants' Novembers are final,
  // numbered 1 and 2.
  clock_.AdvanceMillis(28 * 24 * kHour + 2 * kHour);
  auto made = Service().FinalizeDue();
  ASSERT_TRUE(made.has_value()) << made.error().message;
  EXPECT_EQ(*made, 2);
  EXPECT_EQ(*Service().FinalizeDue(), 0);
  auto acme = store_->ListInvoices(TenantScope::Of("tn_acme"));
  auto globex = store_->ListInvoices(TenantScope::Of("tn_globex"));
  ASSERT_EQ(acme->size(), 1u);
  ASSERT_EQ(globex->size(), 1u);
  EXPECT_EQ((*acme)[0].number + (*globex)[0].number, 3);
  EXPECT_EQ((*acme)[0].total_minor, 200);
  EXPECT_EQ((*globex)[0].total_minor, 5000);  // its commitment
  const std::string document = (*acme)[0].document;
  EXPECT_EQ(Draft("tn_acme", "2026-11")["status"], "final");
  EXPECT_EQ(Service().Finalize("tn_acme", "2026-11").error().code, ErrorCode::kFailedPrecondition);

  // A November record arrives late: December's draft adjusts, November's
  // invoice stays.
  ASSERT_TRUE(
      store_->InsertUsageRecords({Tokens("req_late", "tn_acme", 1'000'000, 0, t + 5)}).has_value());
  ASSERT_TRUE(Service().RateDue().has_value());
  EXPECT_EQ((*store_->ListInvoices(TenantScope::Of("tn_acme")))[0].document, document);
  Json dec = Draft("tn_acme");
  EXPECT_EQ(dec["period"], "2026-12");
  EXPECT_EQ(dec["adjustments_minor"], 100) << dec.dump(2);
  EXPECT_EQ(dec["lines"][0]["kind"], "adjustment");
  EXPECT_EQ(dec["lines"][0]["usage_period"], "2026-11");
  auto report = Service().Verify("tn_acme", "2026-11");
  ASSERT_TRUE(report.has_value());
  EXPECT_TRUE(report->ok()) << report->problems.at(0);
  EXPECT_TRUE(report->invoice_final);
  EXPECT_EQ(report->rated_rows, 2);
}

TEST_P(BillingServiceTest, AnEvictedTenantIsInvoicedOnlyForPeriodsItUsed) {
  const std::string book = MakeBook("standard", kPrices);
  ASSERT_TRUE(Plan("tn_globex", book, 1, 0, 5000).has_value());
  const int64_t t = clock_.NowMillis() + kMin;
  ASSERT_TRUE(
      store_->InsertUsageRecords({Tokens("req_g", "tn_globex", 1'000'000, 0, t)}).has_value());
  clock_.AdvanceMillis(kHour);
  ASSERT_TRUE(Service().RateDue().has_value());
  ASSERT_TRUE(store_->DeleteTenantAndData("tn_globex", clock_.NowMillis()).has_value());
  // Three months on: November (its usage, and its commitment) is invoiced,
  // December and January are not.
  clock_.AdvanceMillis(90LL * 24 * kHour);
  EXPECT_EQ(*Service().FinalizeDue(), 1);
  EXPECT_EQ(*Service().FinalizeDue(), 0);
  auto invoices = store_->ListInvoices(TenantScope::Of("tn_globex"));
  ASSERT_EQ(invoices->size(), 1u);
  EXPECT_EQ((*invoices)[0].total_minor, 5000);
  // A record of it that arrives late still gets billed, once.
  ASSERT_TRUE(
      store_->InsertUsageRecords({Tokens("req_g2", "tn_globex", 1'000'000, 0, t + 1)}).has_value());
  ASSERT_TRUE(Service().RateDue().has_value());
  EXPECT_EQ(*Service().FinalizeDue(), 1);
  invoices = store_->ListInvoices(TenantScope::Of("tn_globex"));
  ASSERT_EQ(invoices->size(), 2u);
  EXPECT_EQ((*invoices)[0].total_minor, 100);  // the adjustment, newest first
  auto report = Service().Verify("tn_globex", "2026-11");
  ASSERT_TRUE(report.has_value()) << report.error().message;
  EXPECT_TRUE(report->ok()) << report->problems.at(0);
}

TEST_P(BillingServiceTest, VerifyFindsTamperedRows) {
  const std::string book = MakeBook("standard", kPrices);
  ASSERT_TRUE(Plan("tn_acme", book).has_value());
  const int64_t t = clock_.NowMillis() + kMin;
  ASSERT_TRUE(store_
                  ->InsertUsageRecords({Tokens("req_1", "tn_acme", 1'000'000, 10, t),
                                        Tokens("req_2", "tn_acme", 3, 0, t + 1)})
                  .has_value());
  clock_.AdvanceMillis(kHour);
  ASSERT_TRUE(Service().RateDue().has_value());
  ASSERT_TRUE(Service().Verify("tn_acme", "2026-11")->ok());
  auto db = sql::Database::Open(database_.url(), 1);
  ASSERT_TRUE(db.has_value()) << db.error().message;
  ASSERT_TRUE((*db)
                  ->Exec("UPDATE rated_usage SET quantity = 1 WHERE record_id = 'req_1' AND "
                         "meter = 'tokens.input'")
                  .has_value());
  ASSERT_TRUE((*db)->Exec("DELETE FROM rated_usage WHERE record_id = 'req_2'").has_value());
  ASSERT_TRUE((*db)->Exec("UPDATE usage_records SET rated = 0 WHERE id = 'req_1'").has_value());
  auto report = Service().Verify("tn_acme", "2026-11");
  ASSERT_TRUE(report.has_value());
  // req_1 unrated (so both its rows have no record that gives them), req_2
  // without its row.
  ASSERT_EQ(report->problems.size(), 4u);
  std::string all;
  for (const auto& p : report->problems) all += p + "\n";
  EXPECT_NE(all.find("req_1 is not rated"), std::string::npos) << all;
  EXPECT_NE(all.find("req_2 has no rated tokens.input"), std::string::npos) << all;
  EXPECT_NE(all.find("rated row req_1 on tokens.input has no usage record"), std::string::npos)
      << all;
}

// Budgets count spend from rated and not-yet-rated usage, notify each
// threshold once per period, stop new work when a hard one is spent, and
// reset with the period.
TEST_P(BillingServiceTest, BudgetsCountUsageAsItArrivesAndNotifyOnce) {
  const std::string book = MakeBook("standard", kPrices);
  ASSERT_TRUE(Plan(kDefaultPlanTenantId, book).has_value());
  const TenantScope acme = TenantScope::Of("tn_acme");
  BudgetRecord b;
  b.id = "bud_1";
  b.scope = "tenant";
  b.currency = "USD";
  b.amount_minor = 1000;  // $10
  b.thresholds = {50, 80, 100};
  ASSERT_TRUE(store_->CreateBudget(acme, b).has_value());
  BudgetRecord p = b;
  p.id = "bud_p";
  p.scope = "project";
  p.subject = "research";
  p.amount_minor = 100'000;
  ASSERT_TRUE(store_->CreateBudget(acme, p).has_value());
  ASSERT_TRUE(Service().CheckSpend("tn_acme", "").has_value());

  // $6 of input tokens, not rated yet (too young): counted anyway.
  const int64_t t = clock_.NowMillis();
  ASSERT_TRUE(
      store_->InsertUsageRecords({Tokens("req_a", "tn_acme", 6'000'000, 0, t)}).has_value());
  auto counted = Service().RefreshBudgets();
  ASSERT_TRUE(counted.has_value()) << counted.error().message;
  EXPECT_EQ(*counted, 2);
  auto statuses = store_->ListBudgetStatuses(acme);
  ASSERT_TRUE(statuses.has_value());
  ASSERT_EQ(statuses->size(), 2u);
  EXPECT_EQ(statuses->at(0).spent_minor, 600);
  EXPECT_EQ(statuses->at(0).notified_percent, 50);
  EXPECT_EQ(statuses->at(1).spent_minor, 0);  // tokens have no project
  ASSERT_TRUE(Service().CheckSpend("tn_acme", "research").has_value());

  // Rated now: the same spend, no second notice.
  clock_.AdvanceMillis(kMin);
  ASSERT_TRUE(Service().RateDue().has_value());
  ASSERT_TRUE(Service().RefreshBudgets().has_value());
  EXPECT_EQ(store_->ListBudgetStatuses(acme)->at(0).spent_minor, 600);
  // $4 more: 100 % reached, spent; new work refused for the tenant (any
  // project), not for another tenant.
  ASSERT_TRUE(
      store_->InsertUsageRecords({Tokens("req_b", "tn_acme", 4'000'000, 0, t + kMin)}).has_value());
  ASSERT_TRUE(Service().RefreshBudgets().has_value());
  EXPECT_EQ(store_->ListBudgetStatuses(acme)->at(0).notified_percent, 100);
  auto refused = Service().CheckSpend("tn_acme", "research");
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kResourceExhausted);
  EXPECT_NE(refused.error().message.find("bud_1"), std::string::npos);
  EXPECT_TRUE(Service().CheckSpend("tn_globex", "").has_value());
  // Each threshold notified once: 50 (first count), then 100 (80 was
  // passed in the same step and is not notified on its own).
  auto audit = store_->ListAudit(std::string("tn_acme"), {});
  ASSERT_TRUE(audit.has_value());
  int notices = 0;
  for (const auto& a : audit->items) notices += a.action == "billing.budget_threshold";
  EXPECT_EQ(notices, 2);

  // Raised: new work may start again at the next count.
  b.amount_minor = 5000;
  b.updated_at = clock_.NowMillis();
  ASSERT_TRUE(store_->UpdateBudget(acme, b).has_value());
  ASSERT_TRUE(Service().RefreshBudgets().has_value());
  EXPECT_TRUE(Service().CheckSpend("tn_acme", "").has_value());
  // The next period starts from zero.
  clock_.AdvanceMillis(30LL * 24 * kHour);
  ASSERT_TRUE(Service().RefreshBudgets().has_value());
  EXPECT_EQ(store_->ListBudgetStatuses(acme)->at(0).spent_minor, 0);
  EXPECT_EQ(store_->ListBudgetStatuses(acme)->at(0).notified_percent, 0);
}

// Credits pay final invoices, the earliest to expire first, never below
// zero; what they paid is proved by verify; a prepaid tenant is stopped
// when its credit is spent.
TEST_P(BillingServiceTest, CreditsPayInvoicesAndPrepaidTenantsStopWhenSpent) {
  const std::string book = MakeBook("standard", kPrices);
  ASSERT_TRUE(Plan(kDefaultPlanTenantId, book).has_value());
  const TenantScope acme = TenantScope::Of("tn_acme");
  auto grant = [&](const std::string& id, int64_t amount, int64_t expires) {
    CreditGrant g;
    g.id = id;
    g.kind = "grant";
    g.currency = "USD";
    g.amount_minor = amount;
    g.expires_at = expires;
    g.created_at = clock_.NowMillis();
    ASSERT_TRUE(store_->CreateCreditGrant(acme, g).has_value());
  };
  const int64_t dec1 = kNov3 + 28LL * 24 * kHour;  // 2026-12-01
  grant("cr_late", 300, 0);                        // never expires
  grant("cr_soon", 200, dec1 + 10 * 24 * kHour);   // expires in December: pays first
  grant("cr_gone", 500, kNov3 + kHour);            // dead before November ends
  // $10 of usage in November.
  ASSERT_TRUE(store_->InsertUsageRecords({Tokens("req_c", "tn_acme", 10'000'000, 0, kNov3 + kMin)})
                  .has_value());
  clock_.AdvanceMillis(kHour);
  ASSERT_TRUE(Service().RateDue().has_value());
  Json draft = Draft("tn_acme");
  EXPECT_EQ(draft["credits_minor"], -500) << draft.dump(2);
  EXPECT_EQ(draft["total_minor"], 500);

  clock_.AdvanceMillis(30LL * 24 * kHour);  // past the period's end
  auto inv = Service().Finalize("tn_acme", "2026-11");
  ASSERT_TRUE(inv.has_value()) << inv.error().message;
  EXPECT_EQ(inv->total_minor, 500);
  auto grants = store_->ListCreditGrants(acme);
  ASSERT_TRUE(grants.has_value());
  std::map<std::string, int64_t> left;
  for (const auto& g : *grants) left[g.id] = g.remaining_minor;
  EXPECT_EQ(left["cr_soon"], 0);
  EXPECT_EQ(left["cr_late"], 0);
  EXPECT_EQ(left["cr_gone"], 500);
  auto report = Service().Verify("tn_acme", "2026-11");
  ASSERT_TRUE(report.has_value()) << report.error().message;
  EXPECT_TRUE(report->ok()) << report->problems.at(0);

  // A prepaid plan with $1 of credit: a budget of the balance, spent by
  // $2 of usage, stops new work.
  BillingPlan prepaid;
  prepaid.tenant_id = "tn_acme";
  prepaid.effective_from = clock_.NowMillis();
  prepaid.price_book_id = book;
  prepaid.anchor_day = 1;
  prepaid.prepaid = true;
  prepaid.entries_json = "[]";
  ASSERT_TRUE(store_->AddBillingPlanForPlatform(prepaid, clock_.NowMillis()).has_value());
  grant("cr_bought", 100, 0);
  ASSERT_TRUE(Service().RefreshBudgets().has_value());
  auto budgets = store_->ListBudgets(acme);
  ASSERT_TRUE(budgets.has_value());
  ASSERT_EQ(budgets->size(), 1u);
  EXPECT_EQ(budgets->at(0).scope, "prepaid");
  EXPECT_EQ(budgets->at(0).amount_minor, 100);
  EXPECT_TRUE(Service().CheckSpend("tn_acme", "").has_value());
  ASSERT_TRUE(
      store_->InsertUsageRecords({Tokens("req_d", "tn_acme", 2'000'000, 0, clock_.NowMillis())})
          .has_value());
  ASSERT_TRUE(Service().RefreshBudgets().has_value());
  auto refused = Service().CheckSpend("tn_acme", "");
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("prepaid"), std::string::npos);
  // Off the prepaid plan: the budget goes.
  prepaid.prepaid = false;
  prepaid.effective_from = clock_.NowMillis();
  ASSERT_TRUE(store_->AddBillingPlanForPlatform(prepaid, clock_.NowMillis()).has_value());
  ASSERT_TRUE(Service().RefreshBudgets().has_value());
  EXPECT_TRUE(store_->ListBudgets(acme)->empty());
  EXPECT_TRUE(Service().CheckSpend("tn_acme", "").has_value());
}

INSTANTIATE_TEST_SUITE_P(Backends, BillingServiceTest,
                         ::testing::Values(Backend::kSqlite, Backend::kPostgres), BackendName);

}  // namespace
}  // namespace atrium::billing
