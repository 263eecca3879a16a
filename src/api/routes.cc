// The route table: the single place where a path meets its permission.
// The isolation-matrix test enumerates this table, so a route added here is
// tested for every role and tenant boundary automatically.
#include "api/api.h"
#include "api/handlers.h"

namespace atrium::api {

ApiRouter BuildRoutes() {
  using P = Permission;
  using T = TargetKind;
  ApiRouter r;
  // Per-route extras beyond the always-present ones.
  struct Extras {
    bool body = false;           // reads a JSON body
    bool upload = false;         // reads a file as the body
    bool self_listable = false;  // a kSelf reach sees only its own objects
    std::vector<std::string> query;
  };
  const std::vector<std::string> kPaging = {"limit", "cursor"};
  auto add = [&r](const std::string& method, const std::string& path, P perm, T target,
                  const char* action, HandlerFn fn, std::string summary, Extras extras = {}) {
    RouteSpec spec{.permission = perm,
                   .target = target,
                   .audit_action = action,
                   .handler = std::move(fn),
                   .self_listable = extras.self_listable,
                   .summary = std::move(summary),
                   .takes_body = extras.body,
                   .takes_upload = extras.upload,
                   .query_params = std::move(extras.query)};
    r.Add(method, path, std::move(spec));
  };

  add("GET", "/healthz", P::kNone, T::kPublic, "", Healthz, "Liveness");
  add("GET", "/readyz", P::kNone, T::kPublic, "", Readyz, "Readiness (store reachable)");
  add("GET", "/api/v1/openapi.json", P::kNone, T::kPublic, "", GetOpenApi,
      "This API's OpenAPI 3 document");

  add("POST", "/api/v1/auth/login", P::kNone, T::kPublic, "auth.login", Login,
      "Exchange a username and password for a short-lived access token", {.body = true});
  add("POST", "/api/v1/auth/logout", P::kSelfRead, T::kSelf, "auth.logout", Logout,
      "End the current login session");
  add("GET", "/api/v1/whoami", P::kSelfRead, T::kSelf, "", WhoAmI, "The caller's identity");
  add("POST", "/api/v1/auth/signing-keys/rotate", P::kSigningKeyRotate, T::kPlatformWide,
      "signing_key.rotate", RotateSigningKey,
      "Start signing access tokens with a new key (older tokens stay valid until they expire)");

  add("POST", "/api/v1/tenants", P::kTenantCreate, T::kPlatformWide, "tenant.create", CreateTenant,
      "Onboard a tenant", {.body = true});
  add("GET", "/api/v1/tenants", P::kTenantList, T::kPlatformWide, "", ListTenants,
      "List tenants (paginated; filter by state and label)",
      {.query = {"limit", "cursor", "state", "label", "name"}});
  add("GET", "/api/v1/tenants/{tenant_id}", P::kTenantRead, T::kTenant, "", GetTenant,
      "Get a tenant");
  add("PATCH", "/api/v1/tenants/{tenant_id}", P::kTenantUpdate, T::kTenant, "tenant.update",
      UpdateTenant, "Update a tenant", {.body = true});
  add("POST", "/api/v1/tenants/{tenant_id}/suspend", P::kTenantSuspend, T::kTenant,
      "tenant.suspend", SuspendTenant, "Suspend a tenant: every credential rejected at once");
  add("POST", "/api/v1/tenants/{tenant_id}/resume", P::kTenantSuspend, T::kTenant, "tenant.resume",
      ResumeTenant, "Resume a suspended tenant");
  add("POST", "/api/v1/tenants/{tenant_id}/evict", P::kTenantEvict, T::kTenant, "tenant.evict",
      EvictTenant, "Evict a tenant: revoke credentials, then remove its data");

  for (bool platform : {false, true}) {
    std::string base = platform ? "/api/v1/platform" : "/api/v1/tenants/{tenant_id}";
    T coll = platform ? T::kPlatform : T::kTenant;
    T user = platform ? T::kPlatformUser : T::kTenantUser;
    T key = platform ? T::kPlatformKey : T::kTenantKey;
    std::string who = platform ? "platform staff" : "the tenant";
    add("POST", base + "/users", P::kUserCreate, coll, "user.create", CreateUser,
        "Create a user or service account of " + who, {.body = true});
    add("GET", base + "/users", P::kUserRead, coll, "", ListUsers, "List users of " + who,
        {.self_listable = true, .query = {"limit", "cursor", "username"}});
    add("GET", base + "/users/{user_id}", P::kUserRead, user, "", GetUser, "Get a user");
    add("PATCH", base + "/users/{user_id}", P::kUserUpdate, user, "user.update", UpdateUser,
        "Update a user (role, state, password, names)", {.body = true});
    add("DELETE", base + "/users/{user_id}", P::kUserDelete, user, "user.delete", DeleteUser,
        "Delete a user with its keys and sessions");
    add("POST", base + "/keys", P::kKeyCreate, coll, "key.create", CreateKey,
        "Create an API key (the key text is shown once)", {.body = true, .self_listable = true});
    add("GET", base + "/keys", P::kKeyRead, coll, "", ListKeys, "List API keys of " + who,
        {.self_listable = true, .query = {"limit", "cursor", "owner_user_id"}});
    add("GET", base + "/keys/{key_id}", P::kKeyRead, key, "", GetKey, "Get an API key");
    add("POST", base + "/keys/{key_id}/revoke", P::kKeyRevoke, key, "key.revoke", RevokeKey,
        "Revoke an API key, effective at once");
  }

  add("GET", "/api/v1/tenants/{tenant_id}/audit", P::kAuditRead, T::kTenant, "", ListTenantAudit,
      "The tenant's audit trail (its own hash chain)", {.query = kPaging});
  add("GET", "/api/v1/audit", P::kAuditRead, T::kPlatformWide, "", ListAllAudit,
      "The whole audit trail (operators)", {.query = kPaging});
  add("GET", "/api/v1/tenants/{tenant_id}/audit/heads", P::kAuditRead, T::kTenant, "",
      TenantAuditHeads, "The tenant chain's head and its last signed checkpoint");
  add("GET", "/api/v1/audit/heads", P::kAuditRead, T::kPlatformWide, "", AuditHeads,
      "Every chain's head, the global sequence number and the last signed checkpoint");

  // The fleet: everyone reads it (tenants see only their own allocations on
  // it); operators cordon and drain nodes and set GPU health.
  const std::vector<std::string> kNodeFilters = {"limit", "cursor", "pool", "model"};
  add("GET", "/api/v1/nodes", P::kNodeRead, T::kCaller, "", ListNodes,
      "List GPU nodes with their state and free GPUs", {.query = kNodeFilters});
  add("GET", "/api/v1/nodes/{node}", P::kNodeRead, T::kCaller, "", GetNode,
      "Get a node with its GPUs and what is allocated on them");
  add("POST", "/api/v1/nodes/{node}/cordon", P::kNodeManage, T::kPlatformWide, "node.cordon",
      CordonNode, "Cordon a node: no new work; running work stays");
  add("POST", "/api/v1/nodes/{node}/drain", P::kNodeManage, T::kPlatformWide, "node.drain",
      DrainNode, "Drain a node: no new work, and its allocations are asked to move");
  add("POST", "/api/v1/nodes/{node}/uncordon", P::kNodeManage, T::kPlatformWide, "node.uncordon",
      UncordonNode, "Uncordon a node: it takes new work again");
  add("PUT", "/api/v1/nodes/{node}/gpus/{gpu}/health", P::kNodeManage, T::kPlatformWide,
      "gpu.health", SetGpuHealth,
      "Mark a GPU healthy or unhealthy: an unhealthy GPU takes no new work, its preemptible work "
      "is preempted and the rest asked to move",
      {.body = true});
  add("GET", "/api/v1/gpus", P::kNodeRead, T::kCaller, "", ListGpus,
      "List GPUs with their health, MIG mode and use",
      {.query = {"limit", "cursor", "pool", "model", "node"}});
  add("GET", "/api/v1/capacity", P::kNodeRead, T::kCaller, "", GetCapacity,
      "Free capacity per pool, GPU model and MIG profile", {.query = {"pool", "model"}});

  // Environment templates: the platform's (every tenant reads them through
  // its own list) and each tenant's own. {template} is NAME (the newest
  // active version) or NAME@VERSION; retiring names a version.
  for (bool platform : {false, true}) {
    std::string base = platform ? "/api/v1/platform/environment-templates"
                                : "/api/v1/tenants/{tenant_id}/environment-templates";
    T coll = platform ? T::kPlatform : T::kTenant;
    std::string whose = platform ? "the platform's" : "the tenant's";
    add("GET", base, P::kTemplateRead, coll, "", ListTemplates,
        platform ? "List the platform's environment templates (every version)"
                 : "List the environment templates the tenant may use: the platform's and its own");
    add("POST", base, P::kTemplateManage, coll, "template.publish", PublishTemplate,
        "Publish the next version of one of " + whose + " environment templates", {.body = true});
    add("GET", base + "/{template}", P::kTemplateRead, coll, "", GetTemplate,
        "Get an environment template version (NAME: the newest active one; NAME@VERSION)");
    add("DELETE", base + "/{template}", P::kTemplateManage, coll, "template.retire", RetireTemplate,
        "Retire one version of " + whose +
            " environment templates (refused while pending or running work uses it)");
  }

  // Quotas per tenant and resource class; projects split them.
  add("GET", "/api/v1/tenants/{tenant_id}/quotas", P::kQuotaRead, T::kTenant, "", GetQuotas,
      "The tenant's quotas per GPU model and kind, with usage");
  add("PUT", "/api/v1/tenants/{tenant_id}/quotas", P::kQuotaSet, T::kTenant, "quota.set", SetQuota,
      "Set the tenant's guarantee and limit for one GPU model and kind", {.body = true});
  add("GET", "/api/v1/tenants/{tenant_id}/projects", P::kProjectRead, T::kTenant, "", ListProjects,
      "List the tenant's projects with their quota split");
  add("POST", "/api/v1/tenants/{tenant_id}/projects", P::kProjectManage, T::kTenant,
      "project.create", CreateProject, "Create a project", {.body = true});
  add("GET", "/api/v1/tenants/{tenant_id}/projects/{project}", P::kProjectRead, T::kTenant, "",
      GetProject, "Get a project with its quota split");
  add("PUT", "/api/v1/tenants/{tenant_id}/projects/{project}/quotas", P::kProjectManage, T::kTenant,
      "project.quota.set", SetProjectQuota,
      "Set a project's share of the tenant's quota for one GPU model and kind", {.body = true});
  add("DELETE", "/api/v1/tenants/{tenant_id}/projects/{project}/quotas/{model}/{kind}",
      P::kProjectManage, T::kTenant, "project.quota.clear", ClearProjectQuota,
      "Remove a project's row for one GPU model and kind: the project is then limited by the "
      "tenant's quota only");
  add("DELETE", "/api/v1/tenants/{tenant_id}/projects/{project}", P::kProjectManage, T::kTenant,
      "project.delete", DeleteProject, "Delete a project that holds no allocations");

  // Allocations of the caller's tenant.
  add("POST", "/api/v1/allocations", P::kAllocationCreate, T::kCaller, "allocation.create",
      CreateAllocation, "Request GPUs: whole GPUs, a gang, a MIG slice, a share or a node",
      {.body = true});
  add("GET", "/api/v1/allocations", P::kAllocationRead, T::kCaller, "", ListAllocations,
      "List allocations (the caller's tenant; platform staff may filter by tenant)",
      {.query = {"limit", "cursor", "state", "tenant_id"}});
  add("GET", "/api/v1/allocations/{allocation_id}", P::kAllocationRead, T::kAllocation, "",
      GetAllocation, "Get an allocation");
  add("DELETE", "/api/v1/allocations/{allocation_id}", P::kAllocationRelease, T::kAllocation,
      "allocation.release", ReleaseAllocation,
      "Release an allocation (or cancel it while it waits)");
  add("GET", "/api/v1/allocations/{allocation_id}/why", P::kAllocationRead, T::kAllocation, "",
      ExplainAllocation, "Why an allocation waits, or where it runs, in words");

  // Jobs of the caller's tenant: workloads run on what the scheduler
  // allocates, through the execution backend.
  add("POST", "/api/v1/jobs", P::kJobCreate, T::kCaller, "job.submit", CreateJob,
      "Submit a job: a command or script run on the GPUs it asks for (Idempotency-Key header "
      "returns the first job of a retried submission)",
      {.body = true});
  add("GET", "/api/v1/jobs", P::kJobRead, T::kCaller, "", ListJobs,
      "List jobs (the caller's tenant; platform staff may filter by tenant)",
      {.query = {"limit", "cursor", "state", "project", "tenant_id"}});
  // Archives before /jobs/{job_id}: the router takes the first match. An
  // archive is a job's input: those who may submit jobs manage them.
  add("POST", "/api/v1/jobs/archives", P::kJobCreate, T::kCaller, "job.archive.upload",
      UploadJobArchive,
      "Upload a job archive (the body: a tar or tar.gz, at most [jobs] max_archive_bytes); a "
      "job names it by id and size",
      {.upload = true, .query = {"name"}});
  add("GET", "/api/v1/jobs/archives", P::kJobCreate, T::kCaller, "", ListJobArchives,
      "List the tenant's job archives");
  add("GET", "/api/v1/jobs/archives/{archive_id}", P::kJobCreate, T::kCaller, "", GetJobArchive,
      "Get a job archive's id, SHA-256 and sizes");
  add("DELETE", "/api/v1/jobs/archives/{archive_id}", P::kJobCreate, T::kCaller,
      "job.archive.delete", DeleteJobArchive,
      "Delete a job archive (a pending job that names it fails to start)");
  add("GET", "/api/v1/jobs/{job_id}", P::kJobRead, T::kJob, "", GetJob, "Get a job");
  add("POST", "/api/v1/jobs/{job_id}/cancel", P::kJobCancel, T::kJob, "job.cancel", CancelJob,
      "Cancel a job: SIGTERM, a grace period, then SIGKILL; its GPUs go back once it is gone");
  add("GET", "/api/v1/jobs/{job_id}/events", P::kJobRead, T::kJob, "", ListJobEvents,
      "A job's transitions, oldest first, each with its reason and actor", {.query = kPaging});
  add("GET", "/api/v1/jobs/{job_id}/logs", P::kJobLogRead, T::kJob, "", GetJobLogs,
      "A piece of a job's stdout and stderr from an offset; follow waits for more",
      {.query = {"offset", "max_bytes", "attempt", "follow"}});
  add("GET", "/api/v1/jobs/{job_id}/why", P::kJobRead, T::kJob, "", ExplainJob,
      "Why a job waits, or where it runs, in words");

  // Model deployments behind the inference gateway: platform staff run the
  // shared ones, a tenant admin its tenant's dedicated ones. Tenants see what
  // they may use.
  add("POST", "/api/v1/deployments", P::kDeploymentManage, T::kCaller, "deployment.create",
      CreateDeployment,
      "Create a model deployment: shared (platform staff) or dedicated to one tenant",
      {.body = true});
  add("GET", "/api/v1/deployments", P::kDeploymentRead, T::kCaller, "", ListDeployments,
      "List model deployments (a tenant's dedicated ones and the shared ones it is entitled to)",
      {.query = {"limit", "cursor", "model", "tenant_id"}});
  add("GET", "/api/v1/deployments/{deployment_id}", P::kDeploymentRead, T::kDeployment, "",
      GetDeployment, "Get a model deployment");
  add("PATCH", "/api/v1/deployments/{deployment_id}", P::kDeploymentManage, T::kDeployment,
      "deployment.update", UpdateDeployment,
      "Update a deployment's model, version, endpoints, region or latency tier", {.body = true});
  add("DELETE", "/api/v1/deployments/{deployment_id}", P::kDeploymentManage, T::kDeployment,
      "deployment.delete", DeleteDeployment,
      "Delete a model deployment (a managed one's replicas are stopped)");
  add("POST", "/api/v1/deployments/{deployment_id}/scale", P::kDeploymentManage, T::kDeployment,
      "deployment.scale", ScaleDeployment,
      "Set a managed deployment's replicas (scale-down drains before it stops)", {.body = true});
  add("GET", "/api/v1/deployments/{deployment_id}/replicas", P::kDeploymentRead, T::kDeployment, "",
      ListDeploymentReplicas, "A managed deployment's replicas: state, endpoint, generation, why");

  // What a tenant may call, how much, and what it used.
  add("POST", "/api/v1/tenants/{tenant_id}/adapters", P::kAdapterManage, T::kTenant,
      "adapter.create", CreateAdapter,
      "Register a LoRA adapter (an uploaded archive, pinned by its SHA-256) on a managed "
      "deployment that allows adapters",
      {.body = true});
  add("GET", "/api/v1/tenants/{tenant_id}/adapters", P::kAdapterRead, T::kTenant, "", ListAdapters,
      "The tenant's LoRA adapters and whether each is served yet", {.query = {"deployment"}});
  add("GET", "/api/v1/tenants/{tenant_id}/adapters/{adapter_id}", P::kAdapterRead, T::kTenant, "",
      GetAdapter, "Get a LoRA adapter");
  add("DELETE", "/api/v1/tenants/{tenant_id}/adapters/{adapter_id}", P::kAdapterManage, T::kTenant,
      "adapter.delete", DeleteAdapter,
      "Delete a LoRA adapter: no longer routed at once, unloaded from the replicas");
  add("GET", "/api/v1/tenants/{tenant_id}/entitlements", P::kEntitlementRead, T::kTenant, "",
      ListEntitlements, "The models the tenant may call on shared deployments");
  add("PUT", "/api/v1/tenants/{tenant_id}/entitlements/{model}", P::kEntitlementManage, T::kTenant,
      "entitlement.grant", GrantEntitlement, "Entitle the tenant to a model (idempotent)");
  add("DELETE", "/api/v1/tenants/{tenant_id}/entitlements/{model}", P::kEntitlementManage,
      T::kTenant, "entitlement.revoke", RevokeEntitlement,
      "Revoke the tenant's entitlement to a model");
  add("GET", "/api/v1/tenants/{tenant_id}/gateway-limits", P::kGatewayLimitRead, T::kTenant, "",
      GetGatewayLimits, "The tenant's gateway limits: the tenant-wide row, then each key's");
  add("PUT", "/api/v1/tenants/{tenant_id}/gateway-limits", P::kGatewayLimitSet, T::kTenant,
      "gateway_limit.set", SetTenantGatewayLimits,
      "Set the tenant-wide request, token, concurrency and queue limits (platform staff)",
      {.body = true});
  add("PUT", "/api/v1/tenants/{tenant_id}/keys/{key_id}/gateway-limits", P::kGatewayLimitSet,
      T::kTenantKey, "key.gateway_limit.set", SetKeyGatewayLimits,
      "Set an API key's limits and default priority (within the tenant's limits)", {.body = true});
  add("GET", "/api/v1/tenants/{tenant_id}/usage", P::kUsageRead, T::kTenant, "", ListUsage,
      "The tenant's gateway usage records, newest first",
      {.query = {"limit", "cursor", "from", "to", "model", "key_id", "deployment"}});
  add("GET", "/api/v1/tenants/{tenant_id}/usage/summary", P::kUsageRead, T::kTenant, "",
      SummarizeUsage, "The tenant's gateway usage totals, overall or per model, key or deployment",
      {.query = {"group_by", "from", "to", "model", "key_id", "deployment"}});
  add("GET", "/api/v1/tenants/{tenant_id}/usage/refusals", P::kUsageRead, T::kTenant, "",
      SummarizeRefusals,
      "The tenant's requests the gateway refused before serving them, counted per key and reason",
      {.query = {"from", "to", "key_id"}});
  add("GET", "/api/v1/tenants/{tenant_id}/usage/gpu", P::kUsageRead, T::kTenant, "", ListGpuUsage,
      "The tenant's GPU usage records (GPU time its allocations held and its jobs ran, per "
      "hour), newest first",
      {.query = {"limit", "cursor", "from", "to", "model", "project", "subject_kind", "job",
                 "deployment"}});
  add("GET", "/api/v1/tenants/{tenant_id}/usage/gpu/summary", P::kUsageRead, T::kTenant, "",
      SummarizeGpuUsage,
      "The tenant's GPU usage totals (time held, which is billed, and apart from it time run by "
      "jobs), overall or per GPU model and kind, per project or per managed deployment",
      {.query = {"group_by", "from", "to", "model", "project", "deployment"}});

  // Billing: the platform's price books and default book; a tenant's plan,
  // drafts and invoices (docs/billing.md).
  add("POST", "/api/v1/price-books", P::kPriceManage, T::kPlatformWide, "price_book.create",
      CreatePriceBook,
      "Make a price book: a currency and its first version of prices (per GPU-hour, MIG "
      "instance-hour, milli-GPU-hour, node-hour, million tokens; flat, volume or graduated)",
      {.body = true});
  add("GET", "/api/v1/price-books", P::kPriceRead, T::kPlatformWide, "", ListPriceBooks,
      "The price books, with the version in force of each");
  add("GET", "/api/v1/price-books/{book_id}", P::kPriceRead, T::kPlatformWide, "", GetPriceBook,
      "A price book with every version of its prices");
  add("POST", "/api/v1/price-books/{book_id}/versions", P::kPriceManage, T::kPlatformWide,
      "price_book.version", AddPriceBookVersion,
      "Add a version of a price book's prices, in force from now or later (never earlier)",
      {.body = true});
  add("GET", "/api/v1/billing/default-price-book", P::kPriceRead, T::kPlatformWide, "",
      GetDefaultPriceBook,
      "The price book of tenants without a plan of their own, and its history");
  add("PUT", "/api/v1/billing/default-price-book", P::kPriceManage, T::kPlatformWide,
      "billing.default_price_book", SetDefaultPriceBook,
      "Bill tenants without a plan of their own on a price book, from now or later",
      {.body = true});
  add("POST", "/api/v1/billing/verify", P::kBillingRead, T::kPlatformWide, "", VerifyBilling,
      "Prove a period's books: re-rate every usage record from the raw records and check each was "
      "rated exactly once and each final invoice sums its rows",
      {.body = true});
  add("GET", "/api/v1/tenants/{tenant_id}/billing/plan", P::kBillingRead, T::kTenant, "",
      GetBillingPlan, "The tenant's billing plan: its price book, terms and prices in force");
  add("PUT", "/api/v1/tenants/{tenant_id}/billing/plan", P::kBillingManage, T::kTenant,
      "billing.plan", SetBillingPlan,
      "Set the tenant's next billing plan version: price book, anchor day, discount, committed "
      "spend, contract prices; in force from now or later",
      {.body = true});
  add("GET", "/api/v1/tenants/{tenant_id}/invoices", P::kBillingRead, T::kTenant, "", ListInvoices,
      "The tenant's final invoices, newest first");
  add("GET", "/api/v1/tenants/{tenant_id}/invoices/draft", P::kBillingRead, T::kTenant, "",
      GetDraftInvoice,
      "The tenant's invoice for a period as it stands now (the current period by default): lines "
      "per price and item, spend per project and API key",
      {.query = {"period"}});
  add("POST", "/api/v1/tenants/{tenant_id}/invoices/finalize", P::kBillingManage, T::kTenant,
      "invoice.finalize", FinalizeInvoice,
      "Finalise the tenant's invoice for an ended period (periods are finalised in order; the "
      "billing service does it on its own an hour after a period ends)",
      {.body = true});
  add("GET", "/api/v1/tenants/{tenant_id}/invoices/{invoice_id}", P::kBillingRead, T::kTenant, "",
      GetInvoice, "A final invoice, as it was finalised");
  add("GET", "/api/v1/tenants/{tenant_id}/invoices/{invoice_id}/csv", P::kBillingRead, T::kTenant,
      "", GetInvoiceCsv, "A final invoice as CSV: its lines, then each line per project and key");
  // Credits: prepaid money and grants, used up by final invoices.
  add("GET", "/api/v1/tenants/{tenant_id}/credits", P::kBillingRead, T::kTenant, "", ListCredits,
      "The tenant's credit grants, what remains of each, and the live balance");
  add("POST", "/api/v1/tenants/{tenant_id}/credits", P::kBillingManage, T::kTenant, "credit.grant",
      GrantCredit,
      "Grant the tenant credit (prepaid or given), optionally expiring: final invoices use it up, "
      "the earliest to expire first",
      {.body = true});
  // Budgets: caps on a tenant's, project's or API key's spend per period.
  add("GET", "/api/v1/tenants/{tenant_id}/budgets", P::kBillingRead, T::kTenant, "", ListBudgets,
      "The tenant's budgets, each with what it counted this period");
  add("POST", "/api/v1/tenants/{tenant_id}/budgets", P::kBudgetManage, T::kTenant, "budget.create",
      CreateBudget,
      "Cap what the tenant, a project or an API key spends per billing period: thresholds that "
      "notify, and (hard) refusal of new spend at 100 %",
      {.body = true});
  add("GET", "/api/v1/tenants/{tenant_id}/budgets/{budget_id}", P::kBillingRead, T::kTenant, "",
      GetBudget, "A budget and what it counted this period");
  add("PUT", "/api/v1/tenants/{tenant_id}/budgets/{budget_id}", P::kBudgetManage, T::kTenant,
      "budget.update", UpdateBudget, "Change a budget's amount, thresholds or hardness",
      {.body = true});
  add("DELETE", "/api/v1/tenants/{tenant_id}/budgets/{budget_id}", P::kBudgetManage, T::kTenant,
      "budget.delete", DeleteBudget, "Delete a budget");
  return r;
}

}  // namespace atrium::api
