// Billing through the API as an operator and tenants use it, and as a
// hostile tenant tries it: price books and plans are checked and refused
// whole (changing nothing) when wrong; a change never takes effect in the
// past; a tenant admin sees its draft move with usage and reads its final
// invoices as JSON and CSV, never another tenant's; members do not see
// money; an operator proves the books with verify.
#include <gtest/gtest.h>

#include <string>

#include "api/api_fixture.h"

namespace atrium::api {
namespace {

using fixture::BodyOf;

class BillingApiTest : public fixture::TwoJobTenantsTest {
 protected:
  void SetUp() override {
    TwoJobTenantsTest::SetUp();
    Json book = Root("POST", "/api/v1/price-books",
                     {{"name", "standard"}, {"currency", "USD"}, {"entries", Json::parse(R"([
                        {"meter": "tokens.input", "price_minor": "100"},
                        {"meter": "tokens.output", "model": "llama", "price_minor": "300"},
                        {"meter": "gpu.whole", "model": "H100-80GB", "price_minor": "250"}])")}},
                     201);
    book_ = book["id"].get<std::string>();
  }

  Json Root(const std::string& method, const std::string& path, const Json& body, int want) {
    http::Response r = h_.CallJson(method, path, h_.root_key(), body);
    EXPECT_EQ(r.status, want) << method << " " << path << ": " << r.body;
    return BodyOf(r);
  }

  int64_t BillingRows() {
    return Rows(
        "SELECT (SELECT COUNT(*) FROM price_books) + (SELECT COUNT(*) FROM price_book_versions) + "
        "(SELECT COUNT(*) FROM billing_plans) + (SELECT COUNT(*) FROM invoices)");
  }

  // Rates what is due, as the service's timer would.
  void Rate() {
    h_.clock().AdvanceSeconds(30);
    auto round = h_.billing().RateDue();
    ASSERT_TRUE(round.has_value()) << round.error().message;
  }

  std::string book_;
};

TEST_F(BillingApiTest, WrongPricesAreRefusedWholeAndChangeNothing) {
  const int64_t before = BillingRows();
  struct Bad {
    Json body;
    const char* says;
  };
  const Json ok_entries = Json::parse(R"([{"meter": "tokens.input", "price_minor": "1"}])");
  std::vector<Bad> bad = {
      {{{"name", "x"}, {"currency", "usd"}, {"entries", ok_entries}}, "ISO 4217"},
      {{{"name", "x"}, {"currency", "XBT"}, {"entries", ok_entries}}, "ISO 4217"},
      {{{"name", "X Y"}, {"currency", "USD"}, {"entries", ok_entries}}, "name must be"},
      {{{"name", "x"}, {"currency", "USD"}}, "missing required field 'entries'"},
      {{{"name", "x"}, {"currency", "USD"}, {"entries", "cheap"}}, "'entries'"},
      {{{"name", "x"},
        {"currency", "USD"},
        {"entries", Json::parse(R"([{"meter": "tokens.input", "price_minor": "0.0000001"}])")}},
       "six decimals"},
      {{{"name", "x"},
        {"currency", "USD"},
        {"entries", Json::parse(R"([{"meter": "tokens.input", "price_minor": "-5"}])")}},
       "entries[0].price_minor"},
      {{{"name", "x"},
        {"currency", "USD"},
        {"entries", Json::parse(R"([{"meter": "tokens.input", "price_minor": "1e9"}])")}},
       "not a digit"},
      {{{"name", "x"},
        {"currency", "USD"},
        {"entries",
         Json::parse(R"([{"meter": "tokens.input", "price_minor": "99999999999999999999"}])")}},
       "above 10^9"},
      {{{"name", "x"},
        {"currency", "USD"},
        {"entries", Json::parse(R"([{"meter": "tokens.input", "price_minor": "1"},
                                    {"meter": "tokens.input", "model": "*", "price_minor": "2"}])")}},
       "same usage"},
      {{{"name", "x"},
        {"currency", "USD"},
        {"entries", ok_entries},
        {"effective_from", "2001-01-01T00:00:00Z"}},
       "in the past"},
      {{{"name", "x"}, {"currency", "USD"}, {"entries", ok_entries}, {"minimum_charge_minor", -1}},
       "minimum_charge_minor"},
      {{{"name", "standard"}, {"currency", "USD"}, {"entries", ok_entries}}, "exists already"},
  };
  for (const auto& b : bad) {
    http::Response r = h_.CallJson("POST", "/api/v1/price-books", h_.root_key(), b.body);
    EXPECT_TRUE(r.status == 400 || r.status == 409) << b.body.dump() << " → " << r.status;
    EXPECT_NE(r.body.find(b.says), std::string::npos) << b.body.dump() << " → " << r.body;
  }
  // A version in the past, or for a book that does not exist.
  Root("POST", "/api/v1/price-books/" + book_ + "/versions",
       {{"entries", ok_entries}, {"effective_from", "1"}}, 400);
  Root("POST", "/api/v1/price-books/pb_nope/versions", {{"entries", ok_entries}}, 404);
  // A plan on a book in another currency than the tenant's first.
  Json eur = Root("POST", "/api/v1/price-books",
                  {{"name", "euro"}, {"currency", "EUR"}, {"entries", ok_entries}}, 201);
  Root("PUT", "/api/v1/tenants/" + a_.id + "/billing/plan", {{"price_book", "standard"}}, 201);
  Root("PUT", "/api/v1/tenants/" + a_.id + "/billing/plan", {{"price_book", "euro"}}, 409);
  Root("PUT", "/api/v1/tenants/" + a_.id + "/billing/plan",
       {{"price_book", "standard"}, {"discount_bp", 10'001}}, 400);
  Root("PUT", "/api/v1/tenants/" + a_.id + "/billing/plan",
       {{"price_book", "standard"}, {"anchor_day", 29}}, 400);
  Root("PUT", "/api/v1/tenants/" + a_.id + "/billing/plan",
       {{"price_book", "standard"}, {"commitment_minor", int64_t{1} << 62}}, 400);
  // Made: the euro book, its version, acme's plan; nothing else.
  EXPECT_EQ(BillingRows(), before + 3);
  // A tenant admin may not set its own plan or prices, nor read price books.
  EXPECT_EQ(h_.CallJson("PUT", "/api/v1/tenants/" + a_.id + "/billing/plan", alice_.key,
                        {{"price_book", "standard"}, {"discount_bp", 10'000}})
                .status,
            403);
  EXPECT_EQ(h_.Call("GET", "/api/v1/price-books", alice_.key).status, 403);
  EXPECT_EQ(h_.CallJson("POST", "/api/v1/tenants/" + a_.id + "/invoices/finalize", alice_.key,
                        {{"period", "2020-01"}})
                .status,
            403);
}

TEST_F(BillingApiTest, TheDraftMovesWithUsageAndFinalInvoicesStayTheTenants) {
  Root("PUT", "/api/v1/billing/default-price-book", {{"price_book", "standard"}}, 201);
  Root("PUT", "/api/v1/tenants/" + a_.id + "/billing/plan",
       {{"price_book", "standard"},
        {"discount_bp", 1000},
        {"entries", Json::parse(R"([{"meter": "tokens.input", "price_minor": "50"}])")}},
       201);
  Json plan = BodyOf(h_.Call("GET", "/api/v1/tenants/" + a_.id + "/billing/plan", alice_.key));
  EXPECT_EQ(plan["in_force"]["discount_bp"], 1000) << plan.dump();
  EXPECT_EQ(plan["price_book"]["name"], "standard");
  EXPECT_FALSE(plan["default_plan"].get<bool>());
  // bolt has no plan: the default book.
  Json bolt_plan = BodyOf(h_.Call("GET", "/api/v1/tenants/" + b_.id + "/billing/plan", bob_.key));
  EXPECT_TRUE(bolt_plan["default_plan"].get<bool>()) << bolt_plan.dump();

  h_.clock().AdvanceSeconds(1);
  const std::string draft = "/api/v1/tenants/" + a_.id + "/invoices/draft";
  Json empty = BodyOf(h_.Call("GET", draft, alice_.key));
  EXPECT_EQ(empty["total_minor"], 0) << empty.dump();
  EXPECT_EQ(empty["status"], "draft");
  for (int i = 0; i < 3; ++i) h_.AddUsage(alice_, "llama");
  h_.AddUsage(bob_, "llama");
  // GPU time from after the plan took effect (a minute before the clock).
  h_.clock().AdvanceSeconds(120);
  h_.AddGpuUsage(a_.id, "research", "al_billing");
  Rate();
  Json d = BodyOf(h_.Call("GET", draft, alice_.key));
  // 36 input tokens at the contract 0.50/M, 102 output at 3.00/M, 60 s of
  // an H100 at 2.50/h: 0 + 0 + 4 cents, less 10 %.
  EXPECT_EQ(d["usage_minor"], 4) << d.dump(2);
  EXPECT_EQ(d["discount_minor"], 0);
  bool keyed = false;
  for (const auto& line : d["lines"]) {
    if (line["meter"] == "tokens.output") {
      keyed = line["by_key"].size() == 1 && line["by_key"][0]["key_id"] == alice_.key_id &&
              line["quantity"] == 102;
    }
    if (line["meter"] == "gpu.whole") EXPECT_EQ(line["by_project"][0]["project"], "research");
  }
  EXPECT_TRUE(keyed) << d.dump(2);
  // Members do not see money; another tenant's admin finds nothing.
  fixture::Actor member = h_.CreateActor(a_.id, a_.name, Role::kTenantMember, false);
  EXPECT_EQ(h_.Call("GET", draft, member.key).status, 403);
  EXPECT_EQ(h_.Call("GET", draft, bob_.key).status, 404);
  EXPECT_EQ(h_.Call("GET", draft + "?period=2026-13", alice_.key).status, 400);
  EXPECT_EQ(h_.Call("GET", draft + "?period=" + std::string(50, '9'), alice_.key).status, 400);

  // The period ends; the operator finalises; the tenant reads it as JSON
  // and CSV, bolt cannot even by id.
  const std::string period = d["period"].get<std::string>();
  h_.clock().AdvanceSeconds(40 * 86'400);
  Json inv =
      Root("POST", "/api/v1/tenants/" + a_.id + "/invoices/finalize", {{"period", period}}, 201);
  EXPECT_EQ(inv["status"], "final");
  EXPECT_EQ(inv["total_minor"], d["total_minor"]);
  const std::string id = inv["id"].get<std::string>();
  Json listed = BodyOf(h_.Call("GET", "/api/v1/tenants/" + a_.id + "/invoices", alice_.key));
  ASSERT_EQ(listed["items"].size(), 1u);
  EXPECT_EQ(listed["items"][0]["number"], inv["number"]);
  http::Response csv =
      h_.Call("GET", "/api/v1/tenants/" + a_.id + "/invoices/" + id + "/csv", alice_.key);
  EXPECT_EQ(csv.status, 200);
  EXPECT_EQ(csv.content_type, "text/csv; charset=utf-8");
  EXPECT_NE(csv.body.find(inv["number"].get<std::string>() + "," + period + ",USD,line,"),
            std::string::npos)
      << csv.body;
  EXPECT_EQ(h_.Call("GET", "/api/v1/tenants/" + b_.id + "/invoices/" + id, bob_.key).status, 404);
  EXPECT_EQ(
      h_.Call("GET", "/api/v1/tenants/" + b_.id + "/invoices/" + id + "/csv", bob_.key).status,
      404);
  // Final twice: refused, nothing changes.
  Root("POST", "/api/v1/tenants/" + a_.id + "/invoices/finalize", {{"period", period}}, 409);
  // The books hold.
  Json v = Root("POST", "/api/v1/billing/verify", {{"period", period}}, 200);
  EXPECT_TRUE(v["ok"].get<bool>()) << v.dump(2);
  EXPECT_GE(v["tenants"].size(), 2u);
  Root("POST", "/api/v1/billing/verify", {{"period", period}, {"tenant", "tn_nope"}}, 404);
  Root("POST", "/api/v1/billing/verify", {{"period", "yesterday"}}, 400);
}

// A tenant admin's narrower keys (scoped to one model, or expiring) read
// the tenant's money as their owner does and never gain a write: prices,
// plans and finalising stay the platform admin's, and another tenant's
// invoices stay missing. A platform operator's key reads but sets nothing.
TEST_F(BillingApiTest, NarrowerKeysReadButNeverWriteMoney) {
  Root("PUT", "/api/v1/billing/default-price-book", {{"price_book", "standard"}}, 201);
  http::Response k = h_.CallJson(
      "POST", "/api/v1/tenants/" + a_.id + "/keys", alice_.key,
      {{"name", "scoped"}, {"owner_user_id", alice_.user_id}, {"scopes", Json::array({"llama"})}});
  ASSERT_EQ(k.status, 201) << k.body;
  const std::string scoped = BodyOf(k).value("key", "");
  const std::string expiring = h_.CreateKey(alice_, 3600).second;
  const int64_t before = BillingRows();
  for (const std::string& key : {scoped, expiring}) {
    EXPECT_EQ(h_.Call("GET", "/api/v1/tenants/" + a_.id + "/invoices/draft", key).status, 200);
    EXPECT_EQ(h_.Call("GET", "/api/v1/tenants/" + a_.id + "/billing/plan", key).status, 200);
    EXPECT_EQ(h_.Call("GET", "/api/v1/tenants/" + b_.id + "/invoices/draft", key).status, 404);
    EXPECT_EQ(h_.CallJson("PUT", "/api/v1/tenants/" + a_.id + "/billing/plan", key,
                          {{"price_book", "standard"}, {"discount_bp", 10'000}})
                  .status,
              403);
    EXPECT_EQ(h_.CallJson("POST", "/api/v1/price-books/" + book_ + "/versions", key,
                          {{"entries", Json::parse(R"([{"meter": "tokens.input",
                                                       "price_minor": "0"}])")}})
                  .status,
              403);
    EXPECT_EQ(h_.CallJson("POST", "/api/v1/tenants/" + a_.id + "/invoices/finalize", key,
                          {{"period", "2020-01"}})
                  .status,
              403);
  }
  fixture::Actor op = h_.CreateActor("", "", Role::kPlatformOperator, false);
  EXPECT_EQ(h_.Call("GET", "/api/v1/price-books", op.key).status, 200);
  EXPECT_EQ(
      h_.CallJson("PUT", "/api/v1/billing/default-price-book", op.key, {{"price_book", "standard"}})
          .status,
      403);
  EXPECT_EQ(h_.CallJson("PUT", "/api/v1/tenants/" + a_.id + "/billing/plan", op.key,
                        {{"price_book", "standard"}})
                .status,
            403);
  EXPECT_EQ(BillingRows(), before);
}

// Budgets and credits as a hostile tenant tries them: wrong amounts,
// thresholds, scopes and subjects (another tenant's key, a missing
// project) are refused and change nothing; a narrowed key cannot lift a
// cap; a tenant cannot grant itself credit; the prepaid budget is
// billing's; another tenant's budget answers 404.
TEST_F(BillingApiTest, BudgetsAndCreditsRefuseWhatIsWrongAndChangeNothing) {
  const std::string budgets = "/api/v1/tenants/" + a_.id + "/budgets";
  // Without a price book a budget has no currency.
  EXPECT_EQ(
      h_.CallJson("POST", budgets, alice_.key, {{"scope", "tenant"}, {"amount_minor", 100}}).status,
      409);
  Root("PUT", "/api/v1/billing/default-price-book", {{"price_book", "standard"}}, 201);
  auto rows = [&] {
    return Rows("SELECT (SELECT COUNT(*) FROM budgets) + (SELECT COUNT(*) FROM credit_grants)");
  };
  const int64_t before = rows();
  const std::string bob_key_id = h_.CreateKey(bob_).first;
  struct Bad {
    Json body;
    int status;
  };
  const std::vector<Bad> bad = {
      {{{"scope", "tenant"}, {"amount_minor", 0}}, 400},
      {{{"scope", "tenant"}, {"amount_minor", -5}}, 400},
      {{{"scope", "tenant"}, {"amount_minor", int64_t{1} << 62}}, 400},
      {{{"scope", "tenant"}, {"amount_minor", "100"}}, 400},
      {{{"scope", "planet"}, {"amount_minor", 100}}, 400},
      {{{"scope", "tenant"}, {"subject", "x"}, {"amount_minor", 100}}, 400},
      {{{"scope", "project"}, {"amount_minor", 100}}, 400},
      {{{"scope", "project"}, {"subject", "no-such"}, {"amount_minor", 100}}, 404},
      {{{"scope", "key"}, {"subject", bob_key_id}, {"amount_minor", 100}}, 404},
      {{{"scope", "tenant"}, {"amount_minor", 100}, {"thresholds", {80, 50}}}, 400},
      {{{"scope", "tenant"}, {"amount_minor", 100}, {"thresholds", {0}}}, 400},
      {{{"scope", "tenant"}, {"amount_minor", 100}, {"thresholds", {1001}}}, 400},
      {{{"scope", "tenant"}, {"amount_minor", 100}, {"thresholds", "50"}}, 400},
      {{{"scope", "tenant"},
        {"amount_minor", 100},
        {"thresholds", {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}}},
       400},
      {{{"scope", "tenant"}, {"amount_minor", 100}, {"hard", "yes"}}, 400},
      {{{"scope", "tenant"}, {"amount_minor", 100}, {"owner", "bob"}}, 400},
  };
  for (const auto& b : bad) {
    http::Response r = h_.CallJson("POST", budgets, alice_.key, b.body);
    EXPECT_EQ(r.status, b.status) << b.body.dump() << ": " << r.body;
  }
  // Credits are the platform admin's; a tenant cannot grant itself any.
  const std::string credits = "/api/v1/tenants/" + a_.id + "/credits";
  EXPECT_EQ(h_.CallJson("POST", credits, alice_.key, {{"amount_minor", 100}}).status, 403);
  for (const Json& body : {Json{{"amount_minor", 0}}, Json{{"amount_minor", int64_t{1} << 62}},
                           Json{{"amount_minor", 10}, {"kind", "gift"}},
                           Json{{"amount_minor", 10}, {"expires_at", "2001-01-01T00:00:00Z"}},
                           Json{{"amount_minor", 10}, {"expires_at", "soon"}}}) {
    http::Response r = h_.CallJson("POST", credits, h_.root_key(), body);
    EXPECT_EQ(r.status, 400) << body.dump() << ": " << r.body;
  }
  EXPECT_EQ(rows(), before);

  // A budget made: bob cannot see or change it; a narrowed key of alice's
  // reads it but cannot lift it.
  Json made = BodyOf(
      h_.CallJson("POST", budgets, alice_.key, {{"scope", "tenant"}, {"amount_minor", 500}}));
  ASSERT_EQ(made.value("currency", ""), "USD") << made.dump();
  EXPECT_EQ(made["state"], "ok");
  const std::string one = budgets + "/" + made.value("id", "");
  EXPECT_EQ(
      h_.CallJson("POST", budgets, alice_.key, {{"scope", "tenant"}, {"amount_minor", 9}}).status,
      409);
  EXPECT_EQ(h_.Call("GET", one, bob_.key).status, 404);
  EXPECT_EQ(h_.CallJson("PUT", "/api/v1/tenants/" + b_.id + "/budgets/" + made.value("id", ""),
                        bob_.key, {{"amount_minor", 1}})
                .status,
            404);
  const std::string expiring = h_.CreateKey(alice_, 3600).second;
  EXPECT_EQ(h_.Call("GET", one, expiring).status, 200);
  EXPECT_EQ(h_.CallJson("PUT", one, expiring, {{"amount_minor", 1'000'000}}).status, 403);
  EXPECT_EQ(h_.Call("DELETE", one, expiring).status, 403);
  EXPECT_EQ(h_.CallJson("PUT", one, alice_.key, Json::object()).status, 400);
  EXPECT_EQ(BodyOf(h_.Call("GET", one, alice_.key))["amount_minor"], 500);

  // Prepaid: the balance's budget is billing's, not the tenant's to change.
  Root("PUT", "/api/v1/tenants/" + a_.id + "/billing/plan",
       {{"price_book", "standard"}, {"prepaid", true}}, 201);
  Json grant =
      Root("POST", credits, {{"amount_minor", 250}, {"kind", "prepaid"}, {"note", "PO 1"}}, 201);
  EXPECT_EQ(grant["remaining_minor"], 250);
  ASSERT_TRUE(h_.billing().RefreshBudgets().has_value());
  Json list = BodyOf(h_.Call("GET", budgets, alice_.key));
  std::string prepaid_id;
  for (const auto& b : list["items"]) {
    if (b["scope"] == "prepaid") prepaid_id = b.value("id", "");
  }
  ASSERT_FALSE(prepaid_id.empty()) << list.dump(2);
  EXPECT_EQ(
      h_.CallJson("PUT", budgets + "/" + prepaid_id, alice_.key, {{"amount_minor", 99999}}).status,
      409);
  EXPECT_EQ(h_.Call("DELETE", budgets + "/" + prepaid_id, alice_.key).status, 409);
  Json mine = BodyOf(h_.Call("GET", credits, alice_.key));
  EXPECT_EQ(mine["balances"][0]["balance_minor"], 250) << mine.dump(2);
  EXPECT_EQ(h_.Call("GET", "/api/v1/tenants/" + a_.id + "/credits", bob_.key).status, 404);
}

}  // namespace
}  // namespace atrium::api
