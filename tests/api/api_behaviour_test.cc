// Behaviour of the control-plane API beyond who may do what (that is the
// isolation matrix): input validation, errors, login and sessions, signing
// key rotation, the tenant lifecycle and the audit trail.
#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "api/api_fixture.h"
#include "audit/chain.h"
#include "common/strings.h"

namespace atrium::api {
namespace {

using fixture::Actor;
using fixture::ApiHarness;
using fixture::BodyOf;
using fixture::CallOptions;
using fixture::kTestPassword;
using fixture::kTestSource;
using fixture::World;

struct ErrorBody {
  std::string code, message, request_id;
};

ErrorBody ErrorOf(const http::Response& r) {
  Json j = BodyOf(r);
  if (!j.is_object() || !j.contains("error")) return {};
  return {j["error"].value("code", ""), j["error"].value("message", ""),
          j["error"].value("request_id", "")};
}

std::string HeaderOf(const http::Response& r, const std::string& name) {
  for (const auto& [n, v] : r.headers) {
    if (n == name) return v;
  }
  return "";
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// True if `j` has a member called `name` at any depth.
bool HasFieldNamed(const Json& j, const std::string& name) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() == name || HasFieldNamed(it.value(), name)) return true;
    }
  } else if (j.is_array()) {
    for (const auto& v : j) {
      if (HasFieldNamed(v, name)) return true;
    }
  }
  return false;
}

class ApiBehaviourTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    harness_ = new ApiHarness();
    world_ = new World(harness_->BuildWorld());
  }
  static void TearDownTestSuite() {
    delete world_;
    delete harness_;
  }
  void TearDown() override {
    const auto& v = harness_->error_shape_violations();
    EXPECT_TRUE(v.empty()) << "an error answer lacked the common shape: " << v.front();
  }

  ApiHarness& h() { return *harness_; }
  const World& w() { return *world_; }
  const Actor& PlatformAdmin() { return w().platform.at(Role::kPlatformAdmin); }
  const Actor& PlatformOperator() { return w().platform.at(Role::kPlatformOperator); }
  const Actor& TenantAdmin() { return w().own.members.at(Role::kTenantAdmin); }
  const Actor& Member() { return w().own.members.at(Role::kTenantMember); }
  std::string TenantPath() { return "/api/v1/tenants/" + w().own.id; }

  bool TenantNamed(const std::string& name) {
    return h().store().GetTenantByName(name).has_value();
  }
  int64_t UserCount(const std::string& tenant_id) {
    auto page = h().store().ListUsers(TenantScope::Of(tenant_id), ListOptions{"", 1000});
    return page.has_value() ? static_cast<int64_t>(page->items.size()) : -1;
  }
  int64_t TenantCount() {
    auto n = h().store().CountTenants();
    return n.has_value() ? *n : -1;
  }

  // Every record of `path` (an audit list), following next_cursor.
  std::vector<Json> AllPages(const std::string& path, const std::string& bearer) {
    std::vector<Json> items;
    std::string cursor;
    for (int guard = 0; guard < 1000; ++guard) {
      http::Response r = h().Call(
          "GET", path + "?limit=1000" + (cursor.empty() ? "" : "&cursor=" + cursor), bearer);
      EXPECT_EQ(r.status, 200) << path << ": " << r.body;
      Json page = BodyOf(r);
      if (!page.is_object()) break;
      for (auto& item : page["items"]) items.push_back(item);
      if (page["next_cursor"].is_null()) break;
      cursor = page["next_cursor"].get<std::string>();
    }
    return items;
  }

  static ApiHarness* harness_;
  static World* world_;
};
ApiHarness* ApiBehaviourTest::harness_ = nullptr;
World* ApiBehaviourTest::world_ = nullptr;

// --- Errors and input validation ---

TEST_F(ApiBehaviourTest, EveryErrorHasTheOneShapeWithTheRequestId) {
  struct Probe {
    std::string method, target, bearer, body, content_type;
    int status;
    std::string code;
  };
  std::string admin = PlatformAdmin().key;
  std::vector<Probe> probes = {
      {"POST", "/api/v1/tenants", admin, "{bad", "application/json", 400, "invalid_argument"},
      {"GET", "/api/v1/whoami", "", "", "", 401, "unauthenticated"},
      {"GET", "/api/v1/whoami", "atr_not_a_key", "", "", 401, "unauthenticated"},
      {"POST", "/api/v1/tenants", Member().key, "{}", "application/json", 403, "permission_denied"},
      {"GET", "/api/v1/tenants/tn_nope", admin, "", "", 404, "not_found"},
      {"GET", "/api/v1/no/such/route", "", "", "", 404, "not_found"},
      {"DELETE", "/api/v1/tenants", admin, "", "", 405, "method_not_allowed"},
      {"POST", "/api/v1/tenants", admin, R"({"name":")" + w().own.name + R"("})",
       "application/json", 409, "already_exists"},
      {"POST", "/api/v1/tenants", admin, "name=x", "text/plain", 415, "unsupported_media_type"},
  };
  for (const auto& p : probes) {
    CallOptions o;
    o.content_type = p.content_type;
    http::Response r = h().Call(p.method, p.target, p.bearer, p.body, o);
    ErrorBody e = ErrorOf(r);
    std::string what = p.method + " " + p.target;
    EXPECT_EQ(r.status, p.status) << what << ": " << r.body;
    EXPECT_EQ(e.code, p.code) << what;
    EXPECT_FALSE(e.message.empty()) << what;
    EXPECT_EQ(e.request_id, h().last_request_id()) << what;
    EXPECT_EQ(r.content_type, "application/json") << what;
    if (r.status == 401) {
      EXPECT_EQ(HeaderOf(r, "WWW-Authenticate"), "Bearer") << what;
    }
  }
}

TEST_F(ApiBehaviourTest, MalformedJsonIsRefusedAndCreatesNothing) {
  std::string admin = PlatformAdmin().key;
  int64_t tenants = TenantCount();
  int64_t users = UserCount(w().own.id);
  for (const char* body :
       {"{bad", R"({"name": "x")", "[]", "\"name\"", "null", R"({"name": "trailing"} x)"}) {
    http::Response r = h().Call("POST", "/api/v1/tenants", admin, body);
    EXPECT_EQ(r.status, 400) << body;
    EXPECT_EQ(ErrorOf(r).code, "invalid_argument") << body;
    http::Response u = h().Call("POST", TenantPath() + "/users", admin, body);
    EXPECT_EQ(u.status, 400) << body;
  }
  std::string deep(100, '[');
  EXPECT_EQ(h().Call("POST", "/api/v1/tenants", admin, deep).status, 400);
  EXPECT_EQ(TenantCount(), tenants);
  EXPECT_EQ(UserCount(w().own.id), users);
}

TEST_F(ApiBehaviourTest, UnknownFieldIsRefusedByName) {
  std::string admin = PlatformAdmin().key;
  std::string name = h().UniqueName("unknown-field");
  http::Response r =
      h().CallJson("POST", "/api/v1/tenants", admin, {{"name", name}, {"colour", "red"}});
  EXPECT_EQ(r.status, 400);
  EXPECT_TRUE(Contains(ErrorOf(r).message, "colour")) << r.body;
  EXPECT_FALSE(TenantNamed(name));

  std::string user = TenantPath() + "/users/" + w().own.object.user_id;
  auto before = h().store().GetUser(TenantScope::Of(w().own.id), w().own.object.user_id);
  ASSERT_TRUE(before.has_value());
  r = h().CallJson("PATCH", user, admin, {{"display_name", "Changed"}, {"nickname", "x"}});
  EXPECT_EQ(r.status, 400);
  EXPECT_TRUE(Contains(ErrorOf(r).message, "nickname")) << r.body;
  auto after = h().store().GetUser(TenantScope::Of(w().own.id), w().own.object.user_id);
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->display_name, before->display_name);
}

TEST_F(ApiBehaviourTest, WrongTypesAreRefusedNamingTheField) {
  std::string admin = PlatformAdmin().key;
  struct Case {
    Json body;
    std::string field;
  };
  std::vector<Case> cases = {
      {{{"name", 7}}, "name"},
      {{{"name", "ok-name"}, {"weight", "heavy"}}, "weight"},
      {{{"name", "ok-name"}, {"weight", 1.5}}, "weight"},
      {{{"name", "ok-name"}, {"regions", "eu-west"}}, "regions"},
      {{{"name", "ok-name"}, {"labels", {{"plan", 1}}}}, "labels"},
      {{{"name", "ok-name"}, {"tier", true}}, "tier"},
      {{{"name", nullptr}}, "name"},
  };
  for (const auto& c : cases) {
    Json body = c.body;
    if (body["name"] == "ok-name") body["name"] = h().UniqueName("typed");
    http::Response r = h().CallJson("POST", "/api/v1/tenants", admin, body);
    EXPECT_EQ(r.status, 400) << body.dump();
    EXPECT_TRUE(Contains(ErrorOf(r).message, "'" + c.field + "'")) << r.body;
    if (body["name"].is_string()) {
      EXPECT_FALSE(TenantNamed(body["name"].get<std::string>()));
    }
  }
  http::Response r = h().CallJson(
      "POST", TenantPath() + "/keys", admin,
      {{"name", "k"}, {"owner_user_id", w().own.object.user_id}, {"expires_in_seconds", "soon"}});
  EXPECT_EQ(r.status, 400);
  EXPECT_TRUE(Contains(ErrorOf(r).message, "'expires_in_seconds'")) << r.body;
}

TEST_F(ApiBehaviourTest, NonJsonContentTypeIs415AndChangesNothing) {
  std::string admin = PlatformAdmin().key;
  std::string name = h().UniqueName("media");
  std::string body = R"({"name": ")" + name + R"("})";
  for (const char* type : {"text/plain", "application/x-www-form-urlencoded", "application/xml"}) {
    CallOptions o;
    o.content_type = type;
    http::Response r = h().Call("POST", "/api/v1/tenants", admin, body, o);
    EXPECT_EQ(r.status, 415) << type;
    EXPECT_EQ(ErrorOf(r).code, "unsupported_media_type");
  }
  CallOptions none;
  none.content_type = "";
  EXPECT_EQ(h().Call("POST", "/api/v1/tenants", admin, body, none).status, 415);
  EXPECT_FALSE(TenantNamed(name));
  CallOptions charset;
  charset.content_type = "application/json; charset=utf-8";
  EXPECT_EQ(h().Call("POST", "/api/v1/tenants", admin, body, charset).status, 201);
  EXPECT_TRUE(TenantNamed(name));
}

TEST_F(ApiBehaviourTest, UnknownQueryParameterIsRefused) {
  std::string admin = PlatformAdmin().key;
  for (std::string path : {std::string("/api/v1/tenants"), TenantPath() + "/users",
                           TenantPath() + "/keys", TenantPath() + "/audit",
                           std::string("/api/v1/audit"), std::string("/api/v1/platform/users")}) {
    http::Response r = h().Call("GET", path + "?colour=red", admin);
    EXPECT_EQ(r.status, 400) << path;
    EXPECT_TRUE(Contains(ErrorOf(r).message, "colour")) << path << ": " << r.body;
  }
}

TEST_F(ApiBehaviourTest, LimitMustBeBetween1And1000) {
  std::string admin = PlatformAdmin().key;
  for (std::string path : {std::string("/api/v1/tenants"), TenantPath() + "/users",
                           TenantPath() + "/keys", std::string("/api/v1/audit")}) {
    for (const char* bad : {"0", "1001", "abc", "-1", "", "1.5", "10x"}) {
      http::Response r = h().Call("GET", path + "?limit=" + bad, admin);
      EXPECT_EQ(r.status, 400) << path << "?limit=" << bad;
      EXPECT_TRUE(Contains(ErrorOf(r).message, "limit")) << r.body;
    }
    EXPECT_EQ(h().Call("GET", path + "?limit=1", admin).status, 200) << path;
    EXPECT_EQ(h().Call("GET", path + "?limit=1000", admin).status, 200) << path;
  }
}

TEST_F(ApiBehaviourTest, PagesFollowTheCursorWithoutRepeats) {
  std::string admin = PlatformAdmin().key;
  std::set<std::string> seen;
  std::string cursor;
  int pages = 0;
  do {
    http::Response r = h().Call(
        "GET", TenantPath() + "/users?limit=2" + (cursor.empty() ? "" : "&cursor=" + cursor),
        admin);
    ASSERT_EQ(r.status, 200) << r.body;
    Json page = BodyOf(r);
    EXPECT_LE(page["items"].size(), 2u);
    for (const auto& u : page["items"]) EXPECT_TRUE(seen.insert(u["id"].get<std::string>()).second);
    cursor = page["next_cursor"].is_null() ? "" : page["next_cursor"].get<std::string>();
    ++pages;
  } while (!cursor.empty() && pages < 100);
  EXPECT_EQ(static_cast<int64_t>(seen.size()), UserCount(w().own.id));
  EXPECT_GE(pages, 2);
}

TEST_F(ApiBehaviourTest, UnknownRouteIs404AndWrongMethodIs405) {
  for (std::string path : {std::string("/api/v1/nope"), std::string("/api/v2/tenants"),
                           TenantPath() + "/users/x/y", std::string("/api/v1/tenants/")}) {
    http::Response r = h().Call("GET", path, PlatformAdmin().key);
    EXPECT_EQ(r.status, 404) << path;
    EXPECT_EQ(ErrorOf(r).code, "not_found") << path;
  }
  struct Wrong {
    std::string method, path;
  };
  for (const auto& [method, path] : std::vector<Wrong>{{"DELETE", "/api/v1/tenants"},
                                                       {"PUT", TenantPath()},
                                                       {"GET", "/api/v1/auth/login"},
                                                       {"POST", "/api/v1/whoami"},
                                                       {"PATCH", "/healthz"}}) {
    http::Response r = h().Call(method, path, PlatformAdmin().key);
    EXPECT_EQ(r.status, 405) << method << " " << path;
    EXPECT_EQ(ErrorOf(r).code, "method_not_allowed");
  }
}

// --- Login, sessions, signing keys ---

TEST_F(ApiBehaviourTest, LoginSucceedsAndFailsUniformly) {
  const Actor& admin = TenantAdmin();
  http::Response ok = h().CallJson(
      "POST", "/api/v1/auth/login", "",
      {{"tenant", admin.tenant_name}, {"username", admin.username}, {"password", kTestPassword}});
  ASSERT_EQ(ok.status, 200) << ok.body;
  Json j = BodyOf(ok);
  EXPECT_EQ(j["token_type"], "Bearer");
  EXPECT_EQ(j["user"]["id"], admin.user_id);
  EXPECT_TRUE(j["expires_at"].is_string());
  EXPECT_FALSE(HasFieldNamed(j, "password_hash"));

  // Every failure reads the same, so a caller cannot probe which part was wrong.
  std::vector<Json> failures = {
      {{"tenant", admin.tenant_name},
       {"username", admin.username},
       {"password", "wrong-password-1"}},
      {{"tenant", admin.tenant_name}, {"username", "nobody-here"}, {"password", kTestPassword}},
      {{"tenant", "no-such-tenant"}, {"username", admin.username}, {"password", kTestPassword}},
      {{"tenant", w().other.name}, {"username", admin.username}, {"password", kTestPassword}},
      {{"tenant", w().own.name},
       {"username", w().own.object.username},
       {"password", kTestPassword}},
      {{"username", admin.username}, {"password", kTestPassword}},  // not platform staff
      {{"tenant", w().suspended.name},
       {"username", w().suspended.members.at(Role::kTenantAdmin).username},
       {"password", kTestPassword}},
  };
  std::string message;
  for (const auto& body : failures) {
    http::Response r = h().CallJson("POST", "/api/v1/auth/login", "", body);
    EXPECT_EQ(r.status, 401) << body.dump();
    if (message.empty()) message = ErrorOf(r).message;
    EXPECT_EQ(ErrorOf(r).message, message) << body.dump();
  }
  // Platform staff log in without a tenant.
  const Actor& staff = PlatformOperator();
  EXPECT_EQ(h().CallJson("POST", "/api/v1/auth/login", "",
                         {{"username", staff.username}, {"password", kTestPassword}})
                .status,
            200);
}

TEST_F(ApiBehaviourTest, SixthFailedLoginIsThrottledWithRetryAfter) {
  h().clock().AdvanceSeconds(61);  // a fresh minute of refusal counts
  const int64_t counted_before = h().api().unauthenticated_denials();
  Actor victim = h().CreateActor(w().own.id, w().own.name, Role::kTenantMember, true);
  Json wrong = {{"tenant", victim.tenant_name},
                {"username", victim.username},
                {"password", "not-the-password"}};
  CallOptions from;
  from.source = "198.51.100.23";
  for (int i = 1; i <= 5; ++i) {
    http::Response r = h().CallJson("POST", "/api/v1/auth/login", "", wrong, from);
    EXPECT_EQ(r.status, 401) << "attempt " << i;
  }
  http::Response sixth = h().CallJson("POST", "/api/v1/auth/login", "", wrong, from);
  const std::string sixth_id = h().last_request_id();
  EXPECT_EQ(sixth.status, 429);
  EXPECT_EQ(ErrorOf(sixth).code, "resource_exhausted");
  std::string retry = HeaderOf(sixth, "Retry-After");
  ASSERT_FALSE(retry.empty()) << "429 without Retry-After";
  EXPECT_GT(std::stoi(retry), 0);
  // Even the right password waits, from anywhere.
  Json right = wrong;
  right["password"] = kTestPassword;
  EXPECT_EQ(h().CallJson("POST", "/api/v1/auth/login", "", right).status, 429);
  // Throttled attempts are counted, not recorded one by one (anyone can
  // send them) ...
  auto rows = h().store().database().Exec(
      "SELECT outcome, status, target FROM audit_log WHERE request_id = $1", {sixth_id});
  ASSERT_TRUE(rows.has_value());
  EXPECT_EQ(rows->rows.size(), 0u);
  EXPECT_EQ(h().api().unauthenticated_denials() - counted_before, 7);
  // After the window the right password works again.
  h().clock().AdvanceSeconds(std::stoi(retry) + 61);
  EXPECT_EQ(h().CallJson("POST", "/api/v1/auth/login", "", right).status, 200);
  // ... and the minute's count reached the trail as one denied record,
  // found by its first request.
  rows = h().store().database().Exec(
      "SELECT outcome, status, target FROM audit_log WHERE request_id = $1", {sixth_id});
  ASSERT_TRUE(rows.has_value());
  ASSERT_EQ(rows->rows.size(), 1u);
  EXPECT_EQ(rows->rows[0].Text(0), "denied");
  EXPECT_EQ(rows->rows[0].Int(1), 429);
  EXPECT_TRUE(StartsWith(rows->rows[0].Text(2),
                         "unauthenticated: 2 requests from 2 addresses (resource_exhausted)"))
      << rows->rows[0].Text(2);
}

// Regression: every unauthenticated request to an audited route appended a
// record to the platform chain under the global audit lock, so anyone could
// grow the trail at will. A flood is now one record per minute.
TEST_F(ApiBehaviourTest, UnauthenticatedFloodIsCountedNotRecordedOneByOne) {
  // A fresh minute, and whatever earlier tests left counted written out.
  h().clock().AdvanceSeconds(61);
  ASSERT_EQ(h().CallJson("PATCH", TenantPath(), PlatformAdmin().key, {{"display_name", "Flooded"}})
                .status,
            200);
  auto count_rows = [&] {
    auto rows = h().store().database().Exec("SELECT COUNT(*) FROM audit_log", {});
    return rows.has_value() ? rows->rows[0].Int(0) : -1;
  };
  const int64_t rows_before = count_rows();
  const int64_t counted_before = h().api().unauthenticated_denials();
  std::string first_id;
  for (int i = 0; i < 200; ++i) {
    http::Response r =
        h().CallJson("POST", "/api/v1/tenants", i % 2 ? "" : "atr_not_a_key", {{"name", "flood"}});
    EXPECT_EQ(r.status, 401);
    if (i == 0) first_id = h().last_request_id();
  }
  EXPECT_EQ(count_rows(), rows_before) << "a refused anonymous request appended a record";
  EXPECT_EQ(h().api().unauthenticated_denials() - counted_before, 200);

  // The next audited request after the minute writes the summary; an
  // authenticated refusal still gets its own record at once.
  h().clock().AdvanceSeconds(61);
  http::Response own = h().CallJson("POST", "/api/v1/tenants", Member().key, {{"name", "nope"}});
  EXPECT_EQ(own.status, 403);
  EXPECT_EQ(count_rows(), rows_before + 2);
  auto rows = h().store().database().Exec(
      "SELECT actor, tenant_id, action, outcome, status, target FROM audit_log WHERE "
      "request_id = $1",
      {first_id});
  ASSERT_TRUE(rows.has_value());
  ASSERT_EQ(rows->rows.size(), 1u);
  const auto& row = rows->rows[0];
  EXPECT_EQ(row.Text(0), "anonymous");
  EXPECT_EQ(row.Text(1), "") << "the platform chain";
  EXPECT_EQ(row.Text(2), "tenant.create");
  EXPECT_EQ(row.Text(3), "denied");
  EXPECT_EQ(row.Int(4), 401);
  EXPECT_TRUE(StartsWith(row.Text(5),
                         "unauthenticated: 200 requests from 1 address (unauthenticated) in ["))
      << row.Text(5);
}

TEST_F(ApiBehaviourTest, LogoutEndsTheSession) {
  std::string token = h().Login(Member());
  http::Response who = h().Call("GET", "/api/v1/whoami", token);
  ASSERT_EQ(who.status, 200);
  EXPECT_TRUE(StartsWith(BodyOf(who)["credential"].get<std::string>(), "session:"));
  EXPECT_EQ(h().Call("POST", "/api/v1/auth/logout", token).status, 204);
  EXPECT_EQ(h().Call("GET", "/api/v1/whoami", token).status, 401);
  EXPECT_EQ(h().Call("POST", "/api/v1/auth/logout", token).status, 401);
  // An API key has no session to end.
  http::Response key = h().Call("POST", "/api/v1/auth/logout", Member().key);
  EXPECT_EQ(key.status, 400);
  EXPECT_EQ(h().Call("GET", "/api/v1/whoami", Member().key).status, 200);
}

TEST_F(ApiBehaviourTest, AccessTokenWorksForWhoAmI) {
  ASSERT_FALSE(w().own_admin_token.empty());
  http::Response r = h().Call("GET", "/api/v1/whoami", w().own_admin_token);
  ASSERT_EQ(r.status, 200) << r.body;
  Json j = BodyOf(r);
  EXPECT_EQ(j["user"]["id"], TenantAdmin().user_id);
  EXPECT_EQ(j["role"], "tenant-admin");
  EXPECT_EQ(j["tenant"]["id"], w().own.id);
  http::Response key = h().Call("GET", "/api/v1/whoami", TenantAdmin().key);
  EXPECT_EQ(BodyOf(key)["credential"], "key:" + TenantAdmin().key_id);
  http::Response staff = h().Call("GET", "/api/v1/whoami", PlatformOperator().key);
  EXPECT_TRUE(BodyOf(staff)["tenant"].is_null());
  // A token that was tampered with is no token.
  std::string bad = w().own_admin_token;
  bad[bad.size() / 2] = bad[bad.size() / 2] == 'a' ? 'b' : 'a';
  EXPECT_EQ(h().Call("GET", "/api/v1/whoami", bad).status, 401);
}

TEST_F(ApiBehaviourTest, SigningKeyRotationKeepsExistingTokensValid) {
  std::string before = h().Login(TenantAdmin());
  http::Response rotated =
      h().Call("POST", "/api/v1/auth/signing-keys/rotate", PlatformAdmin().key);
  ASSERT_EQ(rotated.status, 200) << rotated.body;
  std::string kid = BodyOf(rotated)["active_key_id"].get<std::string>();
  EXPECT_FALSE(kid.empty());
  EXPECT_EQ(h().Call("GET", "/api/v1/whoami", before).status, 200);
  std::string after = h().Login(TenantAdmin());
  EXPECT_EQ(h().Call("GET", "/api/v1/whoami", after).status, 200);
  ASSERT_EQ(h().Call("POST", "/api/v1/auth/signing-keys/rotate", PlatformAdmin().key).status, 200);
  EXPECT_EQ(h().Call("GET", "/api/v1/whoami", before).status, 200);
  EXPECT_EQ(h().Call("GET", "/api/v1/whoami", after).status, 200);
  // Only platform admins rotate.
  EXPECT_EQ(h().Call("POST", "/api/v1/auth/signing-keys/rotate", PlatformOperator().key).status,
            403);
  EXPECT_EQ(h().Call("POST", "/api/v1/auth/signing-keys/rotate", TenantAdmin().key).status, 403);
  // The audit names the new key.
  auto rows = h().store().database().Exec("SELECT target FROM audit_log WHERE action = $1",
                                          {std::string("signing_key.rotate")});
  ASSERT_TRUE(rows.has_value());
  bool named = false;
  for (const auto& row : rows->rows) named = named || row.Text(0) == "signing-key/" + kid;
  EXPECT_TRUE(named);
}

// --- The tenant lifecycle ---

TEST_F(ApiBehaviourTest, TenantLifecycle) {
  std::string admin = PlatformAdmin().key;
  std::string name = h().UniqueName("lifecycle");
  http::Response created = h().CallJson("POST", "/api/v1/tenants", admin,
                                        {{"name", name}, {"labels", {{"stage", "trial"}}}});
  ASSERT_EQ(created.status, 201) << created.body;
  std::string id = BodyOf(created)["id"].get<std::string>();
  std::string path = "/api/v1/tenants/" + id;
  EXPECT_EQ(BodyOf(created)["state"], "active");
  Actor user = h().CreateActor(id, name, Role::kTenantAdmin, true);
  std::string token = h().Login(user);
  EXPECT_EQ(h().Call("GET", "/api/v1/whoami", user.key).status, 200);
  EXPECT_EQ(h().Call("GET", "/api/v1/whoami", token).status, 200);

  // Suspended: every credential of the tenant stops at once.
  http::Response suspended = h().Call("POST", path + "/suspend", admin);
  ASSERT_EQ(suspended.status, 200);
  EXPECT_EQ(BodyOf(suspended)["state"], "suspended");
  EXPECT_EQ(h().Call("GET", "/api/v1/whoami", user.key).status, 401);
  EXPECT_EQ(h().Call("GET", "/api/v1/whoami", token).status, 401);
  EXPECT_EQ(h().Call("GET", path + "/users", user.key).status, 401);
  EXPECT_EQ(
      h().CallJson("POST", "/api/v1/auth/login", "",
                   {{"tenant", name}, {"username", user.username}, {"password", kTestPassword}})
          .status,
      401);
  http::Response listed = h().Call("GET", "/api/v1/tenants?state=suspended&limit=1000", admin);
  bool found = false;
  Json suspended_page = BodyOf(listed);
  for (const auto& t : suspended_page["items"]) found = found || t["id"] == id;
  EXPECT_TRUE(found) << listed.body;
  EXPECT_EQ(h().Call("POST", path + "/suspend", admin).status, 200);  // idempotent

  // Resumed: they work again.
  ASSERT_EQ(h().Call("POST", path + "/resume", admin).status, 200);
  EXPECT_EQ(h().Call("GET", "/api/v1/whoami", user.key).status, 200);
  EXPECT_EQ(h().Call("GET", "/api/v1/whoami", token).status, 200);
  EXPECT_EQ(h().Call("GET", path + "/users", user.key).status, 200);
  std::string token2 = h().Login(user);

  // Evicted: gone, and its users with it.
  http::Response evicted = h().Call("POST", path + "/evict", admin);
  ASSERT_EQ(evicted.status, 200) << evicted.body;
  Json summary = BodyOf(evicted);
  EXPECT_EQ(summary["state"], "evicted");
  EXPECT_EQ(summary["removed"]["users"], 1);
  EXPECT_GE(summary["removed"]["api_keys"].get<int>(), 1);
  EXPECT_GE(summary["removed"]["sessions"].get<int>(), 1);
  EXPECT_EQ(summary["kept"]["usage_records"], 0);
  // Staff still find the tenant, as evicted and read-only.
  http::Response gone = h().Call("GET", path, admin);
  ASSERT_EQ(gone.status, 200) << gone.body;
  EXPECT_EQ(BodyOf(gone)["state"], "evicted");
  EXPECT_EQ(BodyOf(gone)["name"], name);
  http::Response no_users = h().Call("GET", path + "/users", admin);
  ASSERT_EQ(no_users.status, 200);
  EXPECT_TRUE(BodyOf(no_users)["items"].empty());
  EXPECT_EQ(h().Call("POST", path + "/resume", admin).status, 409);
  EXPECT_EQ(h().CallJson("PATCH", path, admin, {{"display_name", "back"}}).status, 409);
  EXPECT_EQ(UserCount(id), 0);
  EXPECT_EQ(h().Call("GET", "/api/v1/whoami", user.key).status, 401);
  EXPECT_EQ(h().Call("GET", "/api/v1/whoami", token2).status, 401);

  // A new tenant with the same name starts empty.
  http::Response again = h().CallJson("POST", "/api/v1/tenants", admin, {{"name", name}});
  ASSERT_EQ(again.status, 201) << again.body;
  std::string new_id = BodyOf(again)["id"].get<std::string>();
  EXPECT_NE(new_id, id);
  http::Response users = h().Call("GET", "/api/v1/tenants/" + new_id + "/users", admin);
  ASSERT_EQ(users.status, 200);
  EXPECT_TRUE(BodyOf(users)["items"].empty());
  EXPECT_EQ(h().Call("GET", "/api/v1/whoami", user.key).status, 401);
  EXPECT_EQ(
      h().CallJson("POST", "/api/v1/auth/login", "",
                   {{"tenant", name}, {"username", user.username}, {"password", kTestPassword}})
          .status,
      401);
  // The evicted tenant's audit trail is kept.
  auto rows = h().store().database().Exec(
      "SELECT COUNT(*) FROM audit_log WHERE tenant_id = $1 AND action = 'tenant.evict'", {id});
  ASSERT_TRUE(rows.has_value());
  EXPECT_EQ(rows->rows[0].Int(0), 1);
}

TEST_F(ApiBehaviourTest, DisabledUserIsLockedOutAtOnce) {
  Actor user = h().CreateActor(w().own.id, w().own.name, Role::kTenantMember, true);
  std::string token = h().Login(user);
  std::string path = TenantPath() + "/users/" + user.user_id;
  ASSERT_EQ(h().CallJson("PATCH", path, TenantAdmin().key, {{"state", "disabled"}}).status, 200);
  EXPECT_EQ(h().Call("GET", "/api/v1/whoami", user.key).status, 401);
  EXPECT_EQ(h().Call("GET", "/api/v1/whoami", token).status, 401);
  ASSERT_EQ(h().CallJson("PATCH", path, TenantAdmin().key, {{"state", "active"}}).status, 200);
  EXPECT_EQ(h().Call("GET", "/api/v1/whoami", user.key).status, 200);
}

// --- The audit trail ---

TEST_F(ApiBehaviourTest, EveryMutatingCallIsAuditedWithoutSecrets) {
  h().clock().AdvanceSeconds(61);  // a fresh minute of refusal counts
  std::string admin = PlatformAdmin().key;
  std::string new_password = "a-brand-new-passphrase";
  struct Expect {
    std::string request_id, actor, tenant_id, action, target, outcome, source;
    int status;
    // A refusal without a principal: counted, and recorded as the minute's
    // summary, which carries the first such request's id.
    bool summarized = false;
  };
  std::vector<Expect> expects;
  std::vector<std::string> secrets = {kTestPassword, new_password};
  auto key_actor = [](const Actor& a) { return "key:" + a.key_id; };
  auto record = [&](const http::Response& r, int status, std::string actor, std::string tenant,
                    std::string action, std::string target, std::string outcome,
                    std::string source = kTestSource) {
    EXPECT_EQ(r.status, status) << action << " " << r.body;
    expects.push_back({h().last_request_id(), std::move(actor), std::move(tenant),
                       std::move(action), std::move(target), std::move(outcome), std::move(source),
                       status});
  };
  const std::string a = w().own.id;
  const std::string tp = "tenant/" + a;

  std::string tname = h().UniqueName("audited");
  http::Response r = h().CallJson("POST", "/api/v1/tenants", admin, {{"name", tname}});
  std::string tid = BodyOf(r).value("id", "");
  record(r, 201, key_actor(PlatformAdmin()), tid, "tenant.create", "tenant/" + tid, "allowed");
  r = h().CallJson("POST", "/api/v1/tenants", TenantAdmin().key, {{"name", h().UniqueName("x")}});
  record(r, 403, key_actor(TenantAdmin()), a, "tenant.create", "platform", "denied");
  r = h().CallJson("POST", "/api/v1/tenants/" + a + "/users", "",
                   {{"username", "anon"}, {"role", "tenant-member"}, {"kind", "service"}});
  record(r, 401, "anonymous", "", "user.create", "unauthenticated: 1 request", "denied");
  expects.back().summarized = true;
  r = h().CallJson("POST", "/api/v1/tenants/" + a + "/users", TenantAdmin().key,
                   {{"username", h().UniqueName("audited-user")},
                    {"role", "tenant-member"},
                    {"password", kTestPassword}});
  std::string uid = BodyOf(r).value("id", "");
  std::string uname = BodyOf(r).value("username", "");
  record(r, 201, key_actor(TenantAdmin()), a, "user.create", tp + "/user/" + uid, "allowed");
  r = h().CallJson("POST", "/api/v1/tenants/" + a + "/users", Member().key,
                   {{"username", "nope"}, {"role", "tenant-member"}, {"kind", "service"}});
  record(r, 403, key_actor(Member()), a, "user.create", tp, "denied");
  r = h().CallJson("POST", "/api/v1/tenants/" + w().other.id + "/users", TenantAdmin().key,
                   {{"username", "probe"}, {"role", "tenant-member"}, {"kind", "service"}});
  record(r, 404, key_actor(TenantAdmin()), a, "user.create", "tenant/" + w().other.id, "failed");
  r = h().CallJson("PATCH", "/api/v1/tenants/" + a + "/users/" + uid, TenantAdmin().key,
                   {{"password", new_password}});
  record(r, 200, key_actor(TenantAdmin()), a, "user.update", tp + "/user/" + uid, "allowed");
  r = h().CallJson("POST", "/api/v1/tenants/" + a + "/keys", TenantAdmin().key,
                   {{"name", "ci"}, {"owner_user_id", uid}});
  std::string kid = BodyOf(r).value("id", "");
  secrets.push_back(BodyOf(r).value("key", "<none>"));
  record(r, 201, key_actor(TenantAdmin()), a, "key.create", tp + "/key/" + kid, "allowed");
  r = h().Call("POST", "/api/v1/tenants/" + a + "/keys/" + kid + "/revoke", Member().key);
  record(r, 403, key_actor(Member()), a, "key.revoke", tp + "/key/" + kid, "denied");
  CallOptions elsewhere;
  elsewhere.source = "198.51.100.9";
  r = h().Call("POST", "/api/v1/tenants/" + a + "/keys/" + kid + "/revoke", TenantAdmin().key, "",
               elsewhere);
  record(r, 200, key_actor(TenantAdmin()), a, "key.revoke", tp + "/key/" + kid, "allowed",
         "198.51.100.9");
  r = h().CallJson("POST", "/api/v1/auth/login", "",
                   {{"tenant", w().own.name}, {"username", uname}, {"password", new_password}});
  std::string token = BodyOf(r).value("access_token", "<none>");
  secrets.push_back(token);
  record(r, 200, "user:" + uid, a, "auth.login", "session", "allowed");
  r = h().CallJson("POST", "/api/v1/auth/login", "",
                   {{"tenant", w().own.name}, {"username", uname}, {"password", kTestPassword}});
  record(r, 401, "anonymous", "", "auth.login", "unauthenticated: 1 request", "denied");
  expects.back().summarized = true;
  http::Response who = h().Call("GET", "/api/v1/whoami", token);
  std::string session_actor = BodyOf(who).value("credential", "");
  r = h().Call("POST", "/api/v1/auth/logout", token);
  record(r, 204, session_actor, a, "auth.logout", "self", "allowed");
  r = h().Call("POST", "/api/v1/auth/signing-keys/rotate", admin);
  record(r, 200, key_actor(PlatformAdmin()), "", "signing_key.rotate",
         "signing-key/" + BodyOf(r).value("active_key_id", ""), "allowed");
  r = h().Call("POST", "/api/v1/tenants/" + tid + "/suspend", PlatformOperator().key);
  record(r, 200, key_actor(PlatformOperator()), tid, "tenant.suspend", "tenant/" + tid, "allowed");
  r = h().Call("POST", "/api/v1/tenants/" + tid + "/evict", PlatformOperator().key);
  record(r, 403, key_actor(PlatformOperator()), "", "tenant.evict", "tenant/" + tid, "denied");
  r = h().Call("DELETE", "/api/v1/tenants/" + a + "/users/" + uid, TenantAdmin().key);
  record(r, 204, key_actor(TenantAdmin()), a, "user.delete", tp + "/user/" + uid, "allowed");
  // A minute on, the next audited request writes the refusal summaries.
  h().clock().AdvanceSeconds(61);
  r = h().CallJson("PATCH", TenantPath(), PlatformAdmin().key, {{"display_name", "Audited"}});
  record(r, 200, key_actor(PlatformAdmin()), a, "tenant.update", tp, "allowed");

  for (const auto& e : expects) {
    auto rows = h().store().database().Exec(
        "SELECT actor, tenant_id, action, target, outcome, status, source, actor_role "
        "FROM audit_log WHERE request_id = $1",
        {e.request_id});
    ASSERT_TRUE(rows.has_value());
    ASSERT_EQ(rows->rows.size(), 1u) << e.action << " " << e.request_id << " has no single record";
    const auto& row = rows->rows[0];
    std::string what = e.action + " (" + e.outcome + ", " + e.request_id + ")";
    EXPECT_EQ(row.Text(0), e.actor) << what;
    EXPECT_EQ(row.Text(1), e.tenant_id) << what;
    EXPECT_EQ(row.Text(2), e.action) << what;
    if (e.summarized) {
      EXPECT_TRUE(StartsWith(row.Text(3), e.target)) << what << ": " << row.Text(3);
    } else {
      EXPECT_EQ(row.Text(3), e.target) << what;
    }
    EXPECT_FALSE(row.Text(3).empty()) << what << ": a record must name its target";
    EXPECT_EQ(row.Text(4), e.outcome) << what;
    EXPECT_EQ(row.Int(5), e.status) << what;
    EXPECT_EQ(row.Text(6), e.source) << what;
  }

  // No record anywhere holds a password, key text, key secret or token.
  for (const auto& [role, actor] : w().platform) secrets.push_back(actor.key);
  for (const auto& [role, actor] : w().own.members) secrets.push_back(actor.key);
  for (const auto& [role, key] : w().revoked_key) secrets.push_back(key);
  secrets.push_back(w().own_admin_token);
  std::vector<std::string> needles;
  for (const auto& s : secrets) {
    needles.push_back(s);
    if (StartsWith(s, "atr_")) needles.push_back(s.substr(s.rfind('_') + 1));  // the secret part
  }
  auto all = h().store().database().Exec("SELECT * FROM audit_log", {});
  ASSERT_TRUE(all.has_value());
  ASSERT_FALSE(all->rows.empty());
  for (const auto& row : all->rows) {
    for (const auto& col : row.columns) {
      if (!col) continue;
      for (const auto& needle : needles) {
        EXPECT_FALSE(Contains(*col, needle)) << "an audit record holds a secret: " << *col;
      }
    }
  }
}

TEST_F(ApiBehaviourTest, TenantAdminReadsOnlyItsOwnCompleteChain) {
  // Make sure the chain has records of several kinds first.
  ASSERT_EQ(h().CallJson("PATCH", TenantPath(), PlatformAdmin().key,
                         {{"display_name", "Tenant A, renamed"}})
                .status,
            200);
  ASSERT_EQ(h().CallJson("POST", TenantPath() + "/users", Member().key,
                         {{"username", "denied"}, {"role", "tenant-member"}, {"kind", "service"}})
                .status,
            403);
  std::vector<Json> items = AllPages(TenantPath() + "/audit", TenantAdmin().key);
  ASSERT_FALSE(items.empty());
  std::vector<AuditRecord> records;
  for (const auto& item : items) {
    EXPECT_EQ(item["tenant_id"], w().own.id) << item.dump();
    EXPECT_EQ(item["chain"], w().own.id) << item.dump();
    auto rec = audit::FromJson(item);
    ASSERT_TRUE(rec.has_value()) << rec.error().message;
    records.push_back(*rec);
  }
  audit::VerifyReport report = audit::Verify(records, /*allow_partial_start=*/false);
  EXPECT_TRUE(report.ok) << report.reason << " at chain_seq " << report.broken_chain_seq;
  EXPECT_EQ(report.chains, 1);
  EXPECT_EQ(records.front().chain_seq, 1);
  EXPECT_EQ(records.back().chain_seq, static_cast<int64_t>(records.size()));
  // Tampering with one record's text breaks the verification.
  records[records.size() / 2].target += "x";
  EXPECT_FALSE(audit::Verify(records, false).ok);

  // Not another tenant's chain, not the whole trail.
  http::Response other =
      h().Call("GET", "/api/v1/tenants/" + w().other.id + "/audit", TenantAdmin().key);
  EXPECT_EQ(other.status, 404);
  EXPECT_EQ(h().Call("GET", "/api/v1/audit", TenantAdmin().key).status, 403);
  EXPECT_EQ(h().Call("GET", TenantPath() + "/audit", Member().key).status, 403);
}

TEST_F(ApiBehaviourTest, PlatformOperatorReadsButDoesNotOnboardOrSeeSecrets) {
  const Actor& op = PlatformOperator();
  std::vector<Json> all = AllPages("/api/v1/audit", op.key);
  EXPECT_FALSE(all.empty());
  std::set<std::string> chains;
  for (const auto& item : all) chains.insert(item["chain"].get<std::string>());
  EXPECT_GT(chains.size(), 1u) << "the whole trail spans every chain";

  std::string name = h().UniqueName("operator-made");
  http::Response r = h().CallJson("POST", "/api/v1/tenants", op.key, {{"name", name}});
  EXPECT_EQ(r.status, 403);
  EXPECT_FALSE(TenantNamed(name));

  // No GET shows a key's text (or a hash) to anyone, operator included.
  std::vector<std::string> keys;
  for (const auto& [role, actor] : w().platform) keys.push_back(actor.key);
  for (const auto& [role, actor] : w().own.members) keys.push_back(actor.key);
  keys.push_back(w().own.object.key);
  keys.push_back(w().platform_object.key);
  std::vector<std::pair<std::string, std::string>> callers = {{"platform-operator", op.key}};
  for (const auto& [role, actor] : w().platform) callers.emplace_back(RoleName(role), actor.key);
  for (const auto& [role, actor] : w().own.members) callers.emplace_back(RoleName(role), actor.key);
  int checked = 0;
  for (const auto& route : h().api().router().routes()) {
    if (route.method != "GET") continue;
    bool platform = StartsWith(route.pattern, "/api/v1/platform/");
    const Actor& object = platform ? w().platform_object : w().own.object;
    std::string target = route.pattern;
    auto sub = [&](const std::string& from, const std::string& to) {
      auto pos = target.find(from);
      if (pos != std::string::npos) target.replace(pos, from.size(), to);
    };
    sub("{tenant_id}", w().own.id);
    sub("{user_id}", object.user_id);
    sub("{key_id}", object.key_id);
    for (const auto& [role, bearer] : callers) {
      http::Response g = h().Call("GET", target, bearer);
      if (g.status != 200) continue;
      ++checked;
      Json body = BodyOf(g);
      if (route.pattern != "/api/v1/openapi.json") {
        for (const char* field : {"key", "secret", "secret_hash", "password", "password_hash"}) {
          EXPECT_FALSE(HasFieldNamed(body, field))
              << role << " GET " << target << " shows a '" << field << "' field";
        }
      }
      for (const auto& k : keys) {
        EXPECT_FALSE(Contains(g.body, k.substr(k.rfind('_') + 1)))
            << role << " GET " << target << " shows a key secret";
      }
    }
  }
  EXPECT_GT(checked, 40);
  // The operator's reads include keys, without their text.
  http::Response list = h().Call("GET", TenantPath() + "/keys?limit=1000", op.key);
  ASSERT_EQ(list.status, 200);
  EXPECT_FALSE(BodyOf(list)["items"].empty());
}

TEST_F(ApiBehaviourTest, NameFiltersFindOneTenantOrUser) {
  // Platform staff find a tenant by its unique name.
  http::Response t =
      h().Call("GET", "/api/v1/tenants?name=" + TenantAdmin().tenant_name, PlatformAdmin().key);
  ASSERT_EQ(t.status, 200) << t.body;
  Json tenants = Json::parse(t.body)["items"];
  ASSERT_EQ(tenants.size(), 1u);
  EXPECT_EQ(tenants[0]["id"], w().own.id);
  EXPECT_EQ(
      Json::parse(
          h().Call("GET", "/api/v1/tenants?name=nobody-here", PlatformAdmin().key).body)["items"]
          .size(),
      0u);
  // A tenant admin finds any user of the tenant by username.
  http::Response u =
      h().Call("GET", TenantPath() + "/users?username=" + Member().username, TenantAdmin().key);
  ASSERT_EQ(u.status, 200) << u.body;
  Json users = Json::parse(u.body)["items"];
  ASSERT_EQ(users.size(), 1u);
  EXPECT_EQ(users[0]["id"], Member().user_id);
  // A viewer, who may read only itself, finds itself and nobody else.
  const Actor& viewer = w().own.members.at(Role::kTenantViewer);
  EXPECT_EQ(
      Json::parse(h().Call("GET", TenantPath() + "/users?username=" + Member().username, viewer.key)
                      .body)["items"]
          .size(),
      0u);
  EXPECT_EQ(
      Json::parse(h().Call("GET", TenantPath() + "/users?username=" + viewer.username, viewer.key)
                      .body)["items"]
          .size(),
      1u);
}

}  // namespace
}  // namespace atrium::api
