// The power property: whatever a call creates or changes never has more
// power, scope or lifetime than the credential that made it.
//
// Like the isolation matrix, this walks the server's own route table: every
// route that changes something (it names an audit action) × every kind of
// credential (a login session, an API key of every role its owner's role
// covers, a scoped key, a key that expires in two minutes) × the bodies the
// route's OpenAPI schema allows, with every power-bearing field set to each
// value worth trying (each role, each state, a password with and without the
// current one, no scopes and foreign scopes, no expiry and the longest one,
// the caller and a stronger user as owner) × the caller's own user or key
// and a stronger user's. A new route, or a new field in a route's schema, is
// covered without writing a test.
//
// Each case runs in a fresh tenant with a fresh owner and credential. The
// store's power-bearing rows (users, API keys, sessions, the tenant's own
// grants) are read before and after the call; every row created or changed
// must satisfy the rules in CheckPower(). The answer's status does not
// matter: a refusal that changed nothing passes, a 2xx that granted too much
// fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "api/api_fixture.h"
#include "common/strings.h"

namespace atrium::api {
namespace {

using fixture::Actor;
using fixture::ApiHarness;
using fixture::BodyOf;

// The model a scoped key may call (any name will do: scopes are not
// checked against deployments).
constexpr char kCallerScope[] = "shared-model";
constexpr int64_t kExpiringKeyLifetimeS = 120;
constexpr char kNewPassword[] = "a brand new passphrase";

// ------------------------------------------------------------ credentials

struct CredentialKind {
  Role owner_role = Role::kTenantViewer;
  Role key_role = Role::kTenantViewer;  // the owner's role for sessions
  bool session = false;
  bool scoped = false;
  bool expiring = false;

  std::string Name() const {
    std::string kind = session    ? "session"
                       : scoped   ? "scoped key"
                       : expiring ? "expiring key"
                                  : std::string(RoleName(key_role)) + " key";
    return kind + " of a " + std::string(RoleName(owner_role));
  }
};

std::vector<CredentialKind> AllCredentialKinds() {
  std::vector<CredentialKind> kinds;
  for (Role owner : AllRoles()) {
    kinds.push_back({owner, owner, /*session=*/true});
    for (Role key : AllRoles()) {
      if (IsPlatformRole(key) == IsPlatformRole(owner) && RoleCovers(owner, key)) {
        kinds.push_back({owner, key});
      }
    }
    kinds.push_back({owner, owner, false, /*scoped=*/true});
    kinds.push_back({owner, owner, false, false, /*expiring=*/true});
  }
  return kinds;
}

// What the caller may hand out: its role, scopes and lifetime.
struct Caller {
  CredentialKind kind;
  Actor owner;  // tenant_id "" for platform staff
  std::string bearer;
  std::string key_id;  // the key used, or (for a session) another key of the owner
  std::vector<std::string> scopes;
  int64_t expires_at = 0;  // ms; 0 = never

  Role role() const { return kind.key_role; }
  bool is_key() const { return !kind.session; }
  bool restricted() const { return kind.scoped || kind.expiring; }
};

// One case's world: a fresh tenant, the caller, and a stronger user of the
// same scope (tenant-admin, or platform-admin for staff) with a key.
struct World {
  std::string tenant_id;
  std::string tenant_name;
  Caller caller;
  Actor peer;
};

Json MustRoot(ApiHarness& h, const std::string& method, const std::string& target, const Json& body,
              int want) {
  http::Response r = h.CallJson(method, target, h.root_key(), body);
  if (r.status != want) {
    throw std::runtime_error("seeding " + method + " " + target + " answered " +
                             std::to_string(r.status) + ": " + r.body);
  }
  return BodyOf(r);
}

Actor MakeHuman(ApiHarness& h, const std::string& tenant_id, const std::string& tenant_name,
                Role role) {
  Actor a;
  a.role = role;
  a.tenant_id = tenant_id;
  a.tenant_name = tenant_name;
  a.username = h.UniqueName("power-user");
  a.password = fixture::kTestPassword;
  Json u = MustRoot(h, "POST", ApiHarness::ScopeBase(tenant_id) + "/users",
                    {{"username", a.username},
                     {"role", std::string(RoleName(role))},
                     {"kind", "human"},
                     {"password", a.password}},
                    201);
  a.user_id = u["id"].get<std::string>();
  auto [key_id, key] = h.CreateKey(a);
  a.key_id = key_id;
  a.key = key;
  return a;
}

World MakeWorld(ApiHarness& h, const CredentialKind& kind) {
  World w;
  Json t = MustRoot(h, "POST", "/api/v1/tenants", {{"name", h.UniqueName("power")}}, 201);
  w.tenant_id = t["id"].get<std::string>();
  w.tenant_name = t["name"].get<std::string>();
  const bool staff = IsPlatformRole(kind.owner_role);
  const std::string scope_tenant = staff ? "" : w.tenant_id;
  const std::string scope_name = staff ? "" : w.tenant_name;
  Caller& c = w.caller;
  c.kind = kind;
  c.owner = MakeHuman(h, scope_tenant, scope_name, kind.owner_role);
  if (kind.session) {
    c.bearer = h.Login(c.owner);
    c.key_id = c.owner.key_id;
  } else {
    Json body = {{"name", h.UniqueName("caller-key")},
                 {"owner_user_id", c.owner.user_id},
                 {"role", std::string(RoleName(kind.key_role))}};
    if (kind.scoped) {
      c.scopes = {kCallerScope};
      body["scopes"] = c.scopes;
    }
    if (kind.expiring) {
      body["expires_in_seconds"] = kExpiringKeyLifetimeS;
      c.expires_at = h.clock().NowMillis() + kExpiringKeyLifetimeS * 1000;
    }
    Json k = MustRoot(h, "POST", ApiHarness::ScopeBase(scope_tenant) + "/keys", body, 201);
    c.bearer = k["key"].get<std::string>();
    c.key_id = k["id"].get<std::string>();
  }
  w.peer =
      MakeHuman(h, scope_tenant, scope_name, staff ? Role::kPlatformAdmin : Role::kTenantAdmin);
  return w;
}

// ------------------------------------------------------------ requests

// The value at `path` in nested objects; null when a step is missing.
Json JsonAt(const Json& j, std::initializer_list<std::string> path) {
  const Json* at = &j;
  for (const auto& step : path) {
    if (!at->is_object() || !at->contains(step)) return nullptr;
    at = &(*at)[step];
  }
  return *at;
}

// The request body schema of a route in the server's OpenAPI document
// (components resolved), or null when the route takes no body.
Json BodySchemaOf(const Json& openapi, const std::string& method, const std::string& pattern) {
  std::string lower = method;
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  Json schema = JsonAt(
      openapi, {"paths", pattern, lower, "requestBody", "content", "application/json", "schema"});
  if (schema.is_object() && schema.contains("$ref")) {
    std::string ref = schema["$ref"].get<std::string>();
    schema = JsonAt(openapi, {"components", "schemas", ref.substr(ref.rfind('/') + 1)});
  }
  return schema;
}

// The fields that carry power, and the values worth trying for each. A
// route whose schema has one of them gets a variant per value.
std::vector<Json> ValuesToTry(const std::string& field, const World& w) {
  std::vector<Json> values;
  if (field == "role") {
    for (Role r : AllRoles()) values.emplace_back(std::string(RoleName(r)));
  } else if (field == "state") {
    values = {"active", "disabled"};
  } else if (field == "scopes") {
    values = {Json::array(), Json::array({kCallerScope}), Json::array({"another-model"})};
  } else if (field == "expires_in_seconds") {
    values = {int64_t{315'360'000}, kExpiringKeyLifetimeS + 60};
  } else if (field == "owner_user_id") {
    values = {w.caller.owner.user_id, w.peer.user_id};
  } else if (field == "password") {
    values = {kNewPassword};
  } else if (field == "kind") {
    values = {"service", "human"};
  }
  return values;
}

const std::set<std::string>& PowerFields() {
  static const std::set<std::string> fields = {
      "role",          "state",    "scopes",           "expires_in_seconds",
      "owner_user_id", "password", "current_password", "kind"};
  return fields;
}

// The schema's example without its power fields, made unique and pointed at
// the case's tenant; power fields the schema requires get a harmless value.
Json BaseBody(ApiHarness& h, const Json& schema, const std::string& pattern, const World& w) {
  Json body = schema.value("example", Json::object());
  for (const auto& field : PowerFields()) body.erase(field);
  for (const char* unique : {"name", "username"}) {
    if (body.contains(unique)) body[unique] = h.UniqueName("power");
  }
  if (body.contains("tenant_id")) body["tenant_id"] = w.tenant_id;
  for (const auto& required : schema.value("required", Json::array())) {
    std::string field = required.get<std::string>();
    if (field == "role") {
      body["role"] =
          StartsWith(pattern, "/api/v1/platform/") ? "platform-operator" : "tenant-viewer";
    }
  }
  const Json properties = schema.value("properties", Json::object());
  if (properties.contains("kind")) body["kind"] = "service";
  return body;
}

std::vector<Json> BodiesFor(ApiHarness& h, const Json& schema, const std::string& pattern,
                            const World& w) {
  if (!schema.is_object()) return {Json(nullptr)};
  Json base = BaseBody(h, schema, pattern, w);
  std::vector<Json> bodies = {base};
  const Json properties = schema.value("properties", Json::object());
  for (const auto& [field, unused] : properties.items()) {
    for (const Json& value : ValuesToTry(field, w)) {
      Json b = base;
      b[field] = value;
      if (field == "kind" && value == "human" && properties.contains("password")) {
        b["password"] = kNewPassword;
      }
      if (field == "password" && properties.contains("kind")) b["kind"] = "human";
      bodies.push_back(b);
      if (field == "password" && properties.contains("current_password")) {
        b["current_password"] = fixture::kTestPassword;
        bodies.push_back(b);
      }
    }
  }
  return bodies;
}

// {user_id} and {key_id}: the caller's own, and the stronger peer's.
struct Target {
  const char* name;
  std::string user_id;
  std::string key_id;
};

std::vector<Target> TargetsFor(const std::string& pattern, const World& w) {
  Target self{"own", w.caller.owner.user_id, w.caller.key_id};
  Target peer{"peer's", w.peer.user_id, w.peer.key_id};
  bool has_object = pattern.find("{user_id}") != std::string::npos ||
                    pattern.find("{key_id}") != std::string::npos;
  if (!has_object) return {self};
  return {self, peer};
}

std::string Expand(const std::string& pattern, const World& w, const Target& t) {
  std::string out = pattern;
  auto sub = [&](const std::string& name, const std::string& value) {
    for (auto pos = out.find(name); pos != std::string::npos; pos = out.find(name)) {
      out.replace(pos, name.size(), value);
    }
  };
  sub("{tenant_id}", w.tenant_id);
  sub("{user_id}", t.user_id);
  sub("{key_id}", t.key_id);
  // Objects no case creates: the call is refused, and must change nothing.
  sub("{allocation_id}", "alloc_0000000000000000000000000");
  sub("{job_id}", "job_00000000000000000000000000");
  sub("{archive_id}", "arc_00000000000000000000000000");
  sub("{deployment_id}", "dep_0000000000000000000000000");
  sub("{project}", "research");
  sub("{node}", fixture::kTestNode);
  sub("{model}", "power-model");
  sub("{template}", "no-such-template@1");
  return out;
}

// ------------------------------------------------------------ the property

struct UserRow {
  std::string tenant_id, role, kind, password_hash, state;
};
struct KeyRow {
  std::string tenant_id, owner_user_id, role;
  std::vector<std::string> scopes;
  int64_t expires_at = 0, revoked_at = 0;
};

// The power-bearing rows of the store.
struct PowerState {
  std::map<std::string, UserRow> users;
  std::map<std::string, KeyRow> keys;
  int64_t sessions = 0;
  // Per tenant: its row's tier, weight and state, its tenant-wide quotas,
  // entitlements and tenant-wide gateway limits, as text.
  std::map<std::string, std::string> tenant_grants;
};

PowerState ReadPower(Store& store) {
  auto& db = store.database();
  PowerState s;
  auto users = db.Exec("SELECT id, tenant_id, role, kind, password_hash, state FROM users", {});
  if (users.has_value()) {
    for (const auto& r : users->rows) {
      s.users[r.Text(0)] = {r.Text(1), r.Text(2), r.Text(3), r.Text(4), r.Text(5)};
    }
  }
  auto keys = db.Exec(
      "SELECT id, tenant_id, owner_user_id, role, scopes, expires_at, revoked_at FROM api_keys",
      {});
  if (keys.has_value()) {
    for (const auto& r : keys->rows) {
      KeyRow k{r.Text(1), r.Text(2), r.Text(3), {}, r.Int(5), r.Int(6)};
      Json scopes = Json::parse(r.Text(4), nullptr, false);
      if (scopes.is_array()) {
        for (const auto& scope : scopes) k.scopes.push_back(scope.get<std::string>());
      }
      s.keys[r.Text(0)] = std::move(k);
    }
  }
  auto sessions = db.Exec("SELECT COUNT(*) FROM sessions", {});
  if (sessions.has_value()) s.sessions = sessions->rows[0].Int(0);
  auto dump = [&](const std::string& sql) {
    auto rows = db.Exec(sql, {});
    if (!rows.has_value()) return;
    for (const auto& r : rows->rows) {
      std::string line;
      for (size_t i = 1; i < r.columns.size(); ++i)
        line += (r.columns[i] ? *r.columns[i] : "") + "|";
      s.tenant_grants[r.Text(0)] += line + "\n";
    }
  };
  dump("SELECT id, tier, weight, state FROM tenants ORDER BY id");
  dump(
      "SELECT tenant_id, project, model, kind, guarantee_milli, limit_milli FROM quotas WHERE "
      "project = '' ORDER BY tenant_id, model, kind");
  dump("SELECT tenant_id, model FROM entitlements ORDER BY tenant_id, model");
  dump(
      "SELECT tenant_id, requests_per_minute, tokens_per_minute, max_concurrent, max_queued, "
      "priority FROM gateway_limits WHERE key_id = '' ORDER BY tenant_id");
  return s;
}

bool Covers(Role caller, const std::string& role_name) {
  auto role = ParseRole(role_name);
  return role && RoleCovers(caller, *role);
}

bool SubsetOf(const std::vector<std::string>& inner, const std::vector<std::string>& outer) {
  if (outer.empty()) return true;   // an unscoped caller holds every scope
  if (inner.empty()) return false;  // unscoped is wider than any scope list
  return std::all_of(inner.begin(), inner.end(), [&](const std::string& s) {
    return std::find(outer.begin(), outer.end(), s) != outer.end();
  });
}

// Every row the call created or changed, against the caller's power. Returns
// what broke, "" when nothing did.
std::string CheckPower(const PowerState& before, const PowerState& after, const Caller& c) {
  std::vector<std::string> broken;
  const std::string& self = c.owner.user_id;
  for (const auto& [id, u] : after.users) {
    auto was = before.users.find(id);
    if (was == before.users.end()) {
      if (!Covers(c.role(), u.role)) broken.push_back("created user " + id + " as " + u.role);
      if (!u.password_hash.empty() && c.restricted()) {
        broken.push_back("a scoped or expiring key created user " + id + " with a password");
      }
      continue;
    }
    const UserRow& old = was->second;
    bool role_changed = old.role != u.role;
    bool password_changed = old.password_hash != u.password_hash;
    bool state_changed = old.state != u.state;
    if (!role_changed && !password_changed && !state_changed) continue;
    std::string what = std::string(role_changed ? "role " : "") +
                       (password_changed ? "password " : "") + (state_changed ? "state " : "") +
                       "of " + (id == self ? "its own owner " : "user ") + id;
    if (id == self && c.is_key()) broken.push_back("a key changed the " + what);
    if (id != self && !Covers(c.role(), old.role)) {
      broken.push_back("changed the " + what + ", whose role " + old.role + " is above it");
    }
    if (role_changed && !Covers(c.role(), u.role)) {
      broken.push_back("raised the " + what + " to " + u.role);
    }
    if (password_changed && c.restricted()) {
      broken.push_back("a scoped or expiring key set the " + what);
    }
  }
  for (const auto& [id, k] : after.keys) {
    auto was = before.keys.find(id);
    if (was != before.keys.end()) {
      const KeyRow& old = was->second;
      if (old.revoked_at != 0 && k.revoked_at == 0) broken.push_back("un-revoked key " + id);
      bool wider = old.role != k.role || old.scopes != k.scopes || old.expires_at != k.expires_at;
      if (!wider) continue;
    }
    std::string what = (was == before.keys.end() ? "created key " : "changed key ") + id;
    if (!Covers(c.role(), k.role)) broken.push_back(what + " with role " + k.role);
    if (auto owner = after.users.find(k.owner_user_id);
        owner != after.users.end() && !Covers(*ParseRole(owner->second.role), k.role)) {
      broken.push_back(what + " above its owner's role");
    }
    if (!SubsetOf(k.scopes, c.scopes)) {
      broken.push_back(what + " with scopes beyond the caller's " + Json(c.scopes).dump());
    }
    if (c.expires_at != 0 && (k.expires_at == 0 || k.expires_at > c.expires_at)) {
      broken.push_back(what + " that outlives the caller (expires_at " +
                       std::to_string(k.expires_at) + ")");
    }
  }
  if (after.sessions > before.sessions) broken.push_back("created a login session");
  if (!IsPlatformRole(c.role())) {
    auto grants = [&](const PowerState& s) {
      auto it = s.tenant_grants.find(c.owner.tenant_id);
      return it == s.tenant_grants.end() ? std::string() : it->second;
    };
    if (grants(before) != grants(after)) {
      broken.push_back(
          "a tenant credential changed its own tenant's tier, weight, state, quotas, "
          "entitlements or tenant-wide limits");
    }
  }
  std::string out;
  for (const auto& b : broken) out += (out.empty() ? "" : "; ") + b;
  return out;
}

std::string RouteKey(const ApiRouter::Route& r) { return r.method + " " + r.pattern; }

bool Mutates(const ApiRouter::Route& r) {
  return !r.payload.audit_action.empty() && r.payload.target != TargetKind::kPublic;
}

TEST(CredentialPowerTest, NothingACallCreatesOrChangesOutranksTheCaller) {
  const auto kinds = AllCredentialKinds();
  std::vector<std::string> failures;
  std::map<std::string, int> allowed;  // per route: calls answered 2xx
  size_t cases = 0;

  // A store per credential kind keeps each snapshot small.
  for (const CredentialKind& kind : kinds) {
    ApiHarness h;
    Json openapi = BodyOf(h.Call("GET", "/api/v1/openapi.json"));
    ASSERT_TRUE(openapi.is_object());
    for (const auto& route : h.api().router().routes()) {
      if (!Mutates(route)) continue;
      allowed[RouteKey(route)];
      const Json schema = BodySchemaOf(openapi, route.method, route.pattern);
      // Cases share a world until a call is allowed (and so may have
      // changed it); the next case then starts in a fresh one.
      std::optional<World> world;
      size_t body_count = 1, target_count = 1;
      for (size_t bi = 0; bi < body_count; ++bi) {
        for (size_t ti = 0; ti < target_count; ++ti) {
          if (!world) world = MakeWorld(h, kind);
          const World& w = *world;
          auto bodies = BodiesFor(h, schema, route.pattern, w);
          auto targets = TargetsFor(route.pattern, w);
          body_count = bodies.size();
          target_count = targets.size();
          std::string target = Expand(route.pattern, w, targets[ti]);
          PowerState before = ReadPower(h.store());
          http::Response r = h.CallJson(route.method, target, w.caller.bearer, bodies[bi]);
          PowerState after = ReadPower(h.store());
          ++cases;
          bool ok = r.status >= 200 && r.status < 300;
          if (ok) ++allowed[RouteKey(route)];
          std::string broken = CheckPower(before, after, w.caller);
          if (!broken.empty()) {
            failures.push_back(RouteKey(route) + " | " + kind.Name() + " | on the " +
                               targets[ti].name + " object | body " + bodies[bi].dump() + " -> " +
                               std::to_string(r.status) + ": " + broken);
          }
          if (ok) world.reset();
        }
      }
    }
  }

  std::cout << "credential power: " << cases << " calls over " << allowed.size()
            << " mutating routes and " << kinds.size() << " credential kinds, " << failures.size()
            << " broke the rule\n";
  std::ostringstream list;
  for (size_t i = 0; i < failures.size() && i < 40; ++i) list << "  " << failures[i] << "\n";
  if (failures.size() > 40) list << "  ... and " << failures.size() - 40 << " more\n";
  EXPECT_TRUE(failures.empty()) << failures.size()
                                << " calls made something more powerful than their caller:\n"
                                << list.str();
  // Not vacuous: every route that hands out power was allowed somewhere, so
  // its rows were really created or changed and checked.
  for (const char* route :
       {"POST /api/v1/tenants/{tenant_id}/users",
        "PATCH /api/v1/tenants/{tenant_id}/users/{user_id}",
        "POST /api/v1/tenants/{tenant_id}/keys", "POST /api/v1/platform/users",
        "PATCH /api/v1/platform/users/{user_id}", "POST /api/v1/platform/keys"}) {
    EXPECT_GT(allowed[route], 0) << route << " was never allowed: the property checked nothing";
  }
}

}  // namespace
}  // namespace atrium::api
