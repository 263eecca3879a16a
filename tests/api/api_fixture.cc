#include "api/api_fixture.h"

#include <stdlib.h>

#include <stdexcept>
#include <string_view>
#include <system_error>

#include "common/strings.h"
#include "crypto/crypto.h"
#include "jobs/archive_test_util.h"

namespace atrium::api::fixture {
namespace {

std::string Decoded(std::string_view s) {
  std::string out;
  if (!UrlDecode(s, out)) return std::string(s);
  return out;
}

void ParseTarget(const std::string& target, http::Request& req) {
  req.target = target;
  auto q = target.find('?');
  req.path = Decoded(std::string_view(target).substr(0, q));
  if (q == std::string::npos) return;
  std::string_view rest = std::string_view(target).substr(q + 1);
  while (!rest.empty()) {
    auto amp = rest.find('&');
    std::string_view pair = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    if (pair.empty()) continue;
    auto eq = pair.find('=');
    std::string name = Decoded(pair.substr(0, eq));
    std::string value = eq == std::string_view::npos ? "" : Decoded(pair.substr(eq + 1));
    req.query.emplace(name, value);  // the first value wins
    req.query_all.emplace_back(std::move(name), std::move(value));
  }
}

}  // namespace

Json SmallShareBody() {
  return {{"kind", "share"}, {"model", "L40S"}, {"milli", 1}, {"gpu_memory_mib", 16}};
}

Json SmallJobBody(const std::string& name) {
  Json resources = SmallShareBody();
  return {{"name", name}, {"command", "true"}, {"resources", resources}};
}

std::string SmallArchive() {
  return jobs::testing::MakeTar({jobs::testing::File("run.sh", "echo from the archive\n", 0755)});
}

Json BodyOf(const http::Response& response) {
  Json j = Json::parse(response.body, nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? Json(nullptr) : j;
}

IdentityOptions ApiHarness::DefaultIdentityOptions() {
  IdentityOptions o;
  o.fast_password_hashing = true;
  return o;
}

ApiHarness::ApiHarness(IdentityOptions identity_options) {
  std::string templ = (std::filesystem::temp_directory_path() / "atrium-api-XXXXXX").string();
  if (mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  dir_ = templ;
  auto store = Store::Open("sqlite://" + (dir_ / "api.db").string());
  if (!store.has_value()) throw std::runtime_error("Store::Open: " + store.error().message);
  store_ = std::move(store).value();
  identity_ = std::make_unique<IdentityService>(*store_, clock_, identity_options);
  if (auto s = identity_->Init(); !s.has_value()) {
    throw std::runtime_error("IdentityService::Init: " + s.error().message);
  }
  tenants_ = std::make_unique<TenantService>(*store_, *identity_, clock_);
  scheduling::SchedulingOptions sched_opts;
  sched_opts.fleet_spec = kTestFleet;
  sched_opts.tick_ms = 0;  // tests move time and call Tick themselves
  scheduling_ = std::make_unique<scheduling::SchedulingService>(*store_, clock_, sched_opts);
  if (auto s = scheduling_->Start(); !s.has_value()) {
    throw std::runtime_error("SchedulingService::Start: " + s.error().message);
  }
  backend_ = std::make_unique<jobs::testing::FakeBackend>(clock_);
  jobs::ArchiveServiceOptions archive_options;
  archive_options.root_dir = (dir_ / "archives").string();
  archive_options.max_archive_bytes = int64_t{1} << 20;
  archive_options.limits.max_unpacked_bytes = int64_t{4} << 20;
  auto archives = jobs::ArchiveService::Create(*store_, clock_, archive_options);
  if (!archives.has_value()) {
    throw std::runtime_error("ArchiveService::Create: " + archives.error().message);
  }
  archives_ = std::move(archives).value();
  StartJobs();
  gateway::EgressRules rules;
  rules.allowed_networks = {*gateway::ParseIpNetwork("10.0.0.0/8")};
  egress_ = std::make_shared<gateway::EgressPolicy>(rules);
  egress_->AddPlatformListener({"10.0.0.1", 8080});  // where the rig's API would listen
  templates_ = std::make_unique<templates::TemplateService>(*store_, clock_,
                                                            templates::TemplateServiceOptions{});
  services_ = Services{.store = store_.get(),
                       .identity = identity_.get(),
                       .tenants = tenants_.get(),
                       .clock = &clock_,
                       .scheduling = scheduling_.get(),
                       .templates = templates_.get()};
  services_.egress = egress_.get();
  services_.jobs = jobs_.get();
  services_.archives = archives_.get();
  StartServing();
  billing::BillingOptions billing_options;
  billing_options.interval_ms = 0;  // tests call the rounds
  billing_options.finalize_after_ms = 0;
  billing_ = std::make_unique<billing::BillingService>(*store_, clock_, billing_options);
  services_.billing = billing_.get();
  api_ = std::make_unique<ControlPlaneApi>(services_);
  auto root = identity_->BootstrapAdminKey("root");
  if (!root.has_value()) throw std::runtime_error("BootstrapAdminKey: " + root.error().message);
  root_key_ = *root;
}

void ApiHarness::Reconfigure(const std::function<void(Services&)>& change) {
  change(services_);
  api_ = std::make_unique<ControlPlaneApi>(services_);
}

void ApiHarness::StartJobs() {
  jobs::JobServiceOptions options;
  options.tick_ms = 0;  // tests call Tick
  options.resolve_archive = [archives = archives_.get()](const std::string& tenant_id,
                                                         const std::string& id, int64_t bytes) {
    return archives->Resolve(tenant_id, id, bytes);
  };
  jobs_ = std::make_unique<jobs::JobService>(*store_, *scheduling_, *backend_, clock_, options);
  if (auto s = jobs_->Start(); !s.has_value()) {
    throw std::runtime_error("JobService::Start: " + s.error().message);
  }
  tenant_observer_ = std::make_unique<jobs::JobsTenantObserver>(*jobs_, *scheduling_);
  archives_observer_ =
      std::make_unique<jobs::ArchivesTenantObserver>(*archives_, *tenant_observer_);
  tenants_->SetObserver(archives_observer_.get());
}

void ApiHarness::StartServing() {
  serving::ServingOptions options;
  options.tick_ms = 0;
  options.platform_tenant = kServingTenant;
  options.adapter_root = (dir_ / "adapters").string();
  options.adapter_dir_inside = "/opt/atrium/adapters";
  serving_ =
      std::make_unique<serving::DeploymentController>(*store_, *jobs_, clock_, std::move(options));
  services_.serving = serving_.get();
}

void ApiHarness::RestartScheduling() {
  tenants_->SetObserver(nullptr);
  serving_.reset();
  jobs_.reset();
  scheduling_->Stop();
  scheduling_.reset();
  scheduling::SchedulingOptions sched_opts;
  sched_opts.fleet_spec = kTestFleet;
  sched_opts.tick_ms = 0;
  scheduling_ = std::make_unique<scheduling::SchedulingService>(*store_, clock_, sched_opts);
  if (auto s = scheduling_->Start(); !s.has_value()) {
    throw std::runtime_error("SchedulingService::Start: " + s.error().message);
  }
  StartJobs();
  StartServing();
  services_.scheduling = scheduling_.get();
  services_.jobs = jobs_.get();
  api_ = std::make_unique<ControlPlaneApi>(services_);
}

ApiHarness::~ApiHarness() {
  api_.reset();
  billing_.reset();
  serving_.reset();
  if (tenants_) tenants_->SetObserver(nullptr);
  jobs_.reset();
  scheduling_.reset();
  tenants_.reset();
  identity_.reset();
  store_.reset();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

http::Response ApiHarness::Call(const std::string& method, const std::string& target,
                                const std::string& bearer, const std::string& body,
                                const CallOptions& options) {
  http::Request req;
  req.method = method;
  ParseTarget(target, req);
  if (!bearer.empty()) req.headers["authorization"] = "Bearer " + bearer;
  if (!body.empty()) {
    req.body = body;
    if (!options.content_type.empty()) req.headers["content-type"] = options.content_type;
  }
  for (const auto& [name, value] : options.headers) req.headers[name] = value;
  req.remote_address = options.source;
  req.request_id = "req-" + std::to_string(++next_request_);
  last_request_id_ = req.request_id;
  http::Response response = api_->Handle(req);
  CheckErrorShape(response, req.request_id, method + " " + target);
  return response;
}

http::Response ApiHarness::CallJson(const std::string& method, const std::string& target,
                                    const std::string& bearer, const Json& body,
                                    const CallOptions& options) {
  return Call(method, target, bearer, body.is_null() ? "" : body.dump(), options);
}

void ApiHarness::CheckErrorShape(const http::Response& response, const std::string& request_id,
                                 const std::string& what) {
  if (response.status < 400) return;
  Json j = BodyOf(response);
  bool ok = j.is_object() && j.size() == 1 && j.contains("error") && j["error"].is_object();
  if (ok) {
    const Json& e = j["error"];
    ok = e.size() == 3 && e.contains("code") && e["code"].is_string() &&
         !e["code"].get<std::string>().empty() && e.contains("message") &&
         e["message"].is_string() && !e["message"].get<std::string>().empty() &&
         e.contains("request_id") && e["request_id"] == request_id;
  }
  if (!ok) {
    violations_.push_back(what + " -> " + std::to_string(response.status) + " " + response.body);
  }
}

std::string ApiHarness::UniqueName(const std::string& prefix) {
  return prefix + "-" + std::to_string(++next_name_);
}

std::string ApiHarness::ScopeBase(const std::string& tenant_id) {
  return tenant_id.empty() ? "/api/v1/platform" : "/api/v1/tenants/" + tenant_id;
}

Json ApiHarness::MustCall(const std::string& method, const std::string& target, const Json& body,
                          int want) {
  http::Response r = CallJson(method, target, root_key_, body);
  if (r.status != want) {
    throw std::runtime_error("seeding " + method + " " + target + " answered " +
                             std::to_string(r.status) + " (wanted " + std::to_string(want) +
                             "): " + r.body);
  }
  return BodyOf(r);
}

TenantSeed ApiHarness::CreateTenant(const std::string& name_prefix) {
  Json t = MustCall("POST", "/api/v1/tenants", {{"name", UniqueName(name_prefix)}}, 201);
  TenantSeed seed;
  seed.id = t["id"].get<std::string>();
  seed.name = t["name"].get<std::string>();
  return seed;
}

Actor ApiHarness::CreateActor(const std::string& tenant_id, const std::string& tenant_name,
                              Role role, bool human) {
  Actor a;
  a.role = role;
  a.tenant_id = tenant_id;
  a.tenant_name = tenant_name;
  a.username = UniqueName(std::string(RoleName(role)));
  Json body = {{"username", a.username},
               {"role", std::string(RoleName(role))},
               {"kind", human ? "human" : "service"}};
  if (human) {
    a.password = kTestPassword;
    body["password"] = a.password;
  }
  Json u = MustCall("POST", ScopeBase(tenant_id) + "/users", body, 201);
  a.user_id = u["id"].get<std::string>();
  auto [key_id, key] = CreateKey(a);
  a.key_id = key_id;
  a.key = key;
  return a;
}

std::pair<std::string, std::string> ApiHarness::CreateKey(const Actor& owner,
                                                          std::optional<int64_t> expires_in_s) {
  Json body = {{"name", UniqueName("key")}, {"owner_user_id", owner.user_id}};
  if (expires_in_s) body["expires_in_seconds"] = *expires_in_s;
  Json k = MustCall("POST", ScopeBase(owner.tenant_id) + "/keys", body, 201);
  return {k["id"].get<std::string>(), k["key"].get<std::string>()};
}

void ApiHarness::RevokeKey(const std::string& tenant_id, const std::string& key_id) {
  MustCall("POST", ScopeBase(tenant_id) + "/keys/" + key_id + "/revoke", nullptr, 200);
}

void ApiHarness::SuspendTenant(const std::string& tenant_id) {
  MustCall("POST", "/api/v1/tenants/" + tenant_id + "/suspend", nullptr, 200);
}

std::string ApiHarness::CreateAllocation(const Actor& actor) {
  http::Response r = CallJson("POST", "/api/v1/allocations", actor.key, SmallShareBody());
  if (r.status != 201) {
    throw std::runtime_error("allocation of " + actor.username + " answered " +
                             std::to_string(r.status) + ": " + r.body);
  }
  return BodyOf(r)["id"].get<std::string>();
}

std::string ApiHarness::CreateJob(const Actor& actor) {
  http::Response r = CallJson("POST", "/api/v1/jobs", actor.key, SmallJobBody());
  if (r.status != 201) {
    throw std::runtime_error("job of " + actor.username + " answered " + std::to_string(r.status) +
                             ": " + r.body);
  }
  return BodyOf(r)["id"].get<std::string>();
}

std::string ApiHarness::CreateArchive(const Actor& actor) {
  http::Response r = Call("POST", "/api/v1/jobs/archives", actor.key, SmallArchive(),
                          {.content_type = "application/x-tar"});
  if (r.status != 201) {
    throw std::runtime_error("archive of " + actor.username + " answered " +
                             std::to_string(r.status) + ": " + r.body);
  }
  return BodyOf(r)["id"].get<std::string>();
}

std::string ApiHarness::CreateDeployment(const std::string& model, const std::string& tenant_id) {
  // A tenant's own server elsewhere than the shared ones: a shared
  // deployment's endpoint is never a tenant's.
  const std::string url = tenant_id.empty() ? "http://10.0.0.9:8000" : "http://10.0.1.9:8000";
  Json body = {
      {"model", model}, {"endpoints", {{{"url", url}, {"capacity", 4}}}}, {"region", "local"}};
  if (!tenant_id.empty()) body["tenant_id"] = tenant_id;
  return MustCall("POST", "/api/v1/deployments", body, 201)["id"].get<std::string>();
}

std::string ApiHarness::PublishTemplate(const std::string& tenant_id, const std::string& name) {
  const std::string base = tenant_id.empty()
                               ? "/api/v1/platform/environment-templates"
                               : "/api/v1/tenants/" + tenant_id + "/environment-templates";
  Json t = MustCall("POST", base,
                    {{"name", name}, {"rootfs_digest", "sha256:" + std::string(64, 'f')}}, 201);
  return t.value("reference", "");
}

std::string ApiHarness::AddUsage(const Actor& key_owner, const std::string& model) {
  UsageRecord u;
  u.id = UniqueName("req");
  u.tenant_id = key_owner.tenant_id;
  u.key_id = key_owner.key_id;
  u.model = model;
  u.deployment_id = "dep_fixture";
  u.endpoint = "http://10.0.0.9:8000";
  u.api = "chat.completions";
  u.input_tokens = 12;
  u.output_tokens = 34;
  u.total_ms = 250;
  u.status = "completed";
  u.http_status = 200;
  u.created_at = clock_.NowMillis();
  auto stored = store_->InsertUsageRecords({u});
  if (!stored.has_value()) throw std::runtime_error("usage insert: " + stored.error().message);
  return u.id;
}

std::string ApiHarness::AddGpuUsage(const std::string& tenant_id, const std::string& project,
                                    const std::string& subject_id) {
  GpuUsageRecord g;
  g.subject_kind = "allocation";
  g.subject_id = subject_id;
  g.tenant_id = tenant_id;
  g.project = project;
  g.model = "H100-80GB";
  g.kind = "whole";
  g.milli = 1000;
  g.to_ms = clock_.NowMillis();
  g.from_ms = g.to_ms - 60'000;
  g.id = "allocation:" + subject_id + ":" + std::to_string(g.from_ms);
  g.gpu_milli_ms = g.milli * (g.to_ms - g.from_ms);
  g.closes_subject = true;
  g.created_at = g.to_ms;
  auto stored = store_->InsertGpuUsageRecords({g});
  if (!stored.has_value()) throw std::runtime_error("GPU usage insert: " + stored.error().message);
  return g.id;
}

std::string ApiHarness::Login(const Actor& actor) {
  Json body = {{"username", actor.username}, {"password", actor.password}};
  if (!actor.tenant_name.empty()) body["tenant"] = actor.tenant_name;
  http::Response r = CallJson("POST", "/api/v1/auth/login", "", body);
  if (r.status != 200) {
    throw std::runtime_error("login of " + actor.username + " answered " +
                             std::to_string(r.status) + ": " + r.body);
  }
  return BodyOf(r)["access_token"].get<std::string>();
}

World ApiHarness::BuildWorld(const WorldOptions& options) {
  World w;
  w.shared_deployment_id = CreateDeployment(kSharedModel, "");
  w.platform_template_ref = PublishTemplate("", "platform-env");
  auto seed_tenant = [&](const std::string& prefix, bool members) {
    TenantSeed t = CreateTenant(prefix);
    if (members) {
      for (Role role : options.roles) {
        if (!IsPlatformRole(role))
          t.members[role] = CreateActor(t.id, t.name, role, options.humans);
      }
    }
    t.object = CreateActor(t.id, t.name, Role::kTenantMember, /*human=*/false);
    MustCall("PUT", "/api/v1/tenants/" + t.id + "/quotas",
             {{"model", "L40S"},
              {"kind", "share"},
              {"guarantee_milli", 100'000},
              {"limit_milli", 100'000}},
             200);
    t.project = "research";
    MustCall("POST", "/api/v1/tenants/" + t.id + "/projects", {{"name", t.project}}, 201);
    MustCall(
        "PUT", "/api/v1/tenants/" + t.id + "/projects/" + t.project + "/quotas",
        {{"model", "L40S"}, {"kind", "share"}, {"guarantee_milli", 1000}, {"limit_milli", 2000}},
        200);
    t.allocation_id = CreateAllocation(t.object);
    t.job_id = CreateJob(t.object);
    t.archive_id = CreateArchive(t.object);
    t.archive_sha256 = crypto::Sha256Hex(SmallArchive());
    t.deployment_id = CreateDeployment(kDedicatedModel, t.id);
    Json resources = SmallShareBody();
    t.managed_deployment_id = MustCall("POST", "/api/v1/deployments",
                                       {{"model", kManagedModel},
                                        {"region", "local"},
                                        {"tenant_id", t.id},
                                        {"serving",
                                         {{"template", "engine-sim"},
                                          {"replicas", 0},
                                          {"min_replicas", 0},
                                          {"max_adapters", 64},
                                          {"resources", resources}}}},
                                       201)["id"]
                                  .get<std::string>();
    http::Response adapter = CallJson("POST", "/api/v1/tenants/" + t.id + "/adapters", t.object.key,
                                      {{"name", "support"},
                                       {"deployment", t.managed_deployment_id},
                                       {"artifact", "archive:" + t.archive_id},
                                       {"sha256", t.archive_sha256}});
    if (adapter.status != 201) throw std::runtime_error("adapter answered " + adapter.body);
    t.adapter_id = BodyOf(adapter)["id"].get<std::string>();
    t.template_ref = PublishTemplate(t.id, "tenant-env");
    MustCall("PUT", "/api/v1/tenants/" + t.id + "/entitlements/" + kSharedModel, nullptr, 200);
    t.usage_ids.push_back(AddUsage(t.object, kSharedModel));
    t.usage_ids.push_back(AddUsage(t.object, kDedicatedModel));
    AddGpuUsage(t.id, t.project, "al_past_" + t.name);
    t.invoice_id = MustCall("POST", "/api/v1/tenants/" + t.id + "/invoices/finalize",
                            {{"period", "2020-01"}}, 201)["id"]
                       .get<std::string>();
    t.budget_id =
        MustCall("POST", "/api/v1/tenants/" + t.id + "/budgets",
                 {{"scope", "project"}, {"subject", t.project}, {"amount_minor", 1'000'000'000}},
                 201)["id"]
            .get<std::string>();
    for (auto& [role, actor] : t.members) {
      if (role == Role::kTenantAdmin || role == Role::kTenantMember) {
        actor.allocation_id = CreateAllocation(actor);
        actor.job_id = CreateJob(actor);
      }
    }
    return t;
  };
  w.book_id =
      MustCall("POST", "/api/v1/price-books",
               {{"name", UniqueName("standard")},
                {"currency", "USD"},
                {"entries", Json::parse(R"([{"meter": "tokens.output", "price_minor": "300"},
                            {"meter": "gpu.share", "price_minor": "0.5"}])")}},
               201)["id"]
          .get<std::string>();
  MustCall("PUT", "/api/v1/billing/default-price-book", {{"price_book", w.book_id}}, 201);
  w.own = seed_tenant("tenant-a", true);
  w.other = seed_tenant("tenant-b", options.other_members);
  for (Role role : options.roles) {
    if (IsPlatformRole(role)) w.platform[role] = CreateActor("", "", role, options.humans);
  }
  w.platform_object = CreateActor("", "", Role::kPlatformOperator, /*human=*/false);
  if (options.humans && w.own.members.count(Role::kTenantAdmin)) {
    w.own_admin_token = Login(w.own.members[Role::kTenantAdmin]);
  }
  if (options.bad_credentials) {
    for (Role role : options.roles) {
      const Actor& caller = IsPlatformRole(role) ? w.platform[role] : w.own.members[role];
      auto revoked = CreateKey(caller);
      RevokeKey(caller.tenant_id, revoked.first);
      w.revoked_key[role] = revoked.second;
      w.expired_key[role] = CreateKey(caller, 60).second;
    }
    w.suspended = seed_tenant("tenant-s", true);
    SuspendTenant(w.suspended.id);
    clock_.AdvanceSeconds(61);
  }
  return w;
}

}  // namespace atrium::api::fixture
