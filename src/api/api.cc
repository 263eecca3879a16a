#include "api/api.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/strings.h"

namespace atrium::api {
namespace {

std::string BearerOf(const http::Request& req) {
  const std::string& auth = req.Header("authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (auth.size() > kBearer.size() && StartsWith(auth, kBearer)) return auth.substr(kBearer.size());
  return "";
}

bool HasJsonBody(const http::Request& req) {
  const std::string& ct = req.Header("content-type");
  return StartsWith(ct, "application/json");
}

std::string TargetOf(TargetKind kind, const http::Request& req) {
  switch (kind) {
    case TargetKind::kTenant:
      return "tenant/" + req.PathParam("tenant_id");
    case TargetKind::kTenantUser:
      return "tenant/" + req.PathParam("tenant_id") + "/user/" + req.PathParam("user_id");
    case TargetKind::kTenantKey:
      return "tenant/" + req.PathParam("tenant_id") + "/key/" + req.PathParam("key_id");
    case TargetKind::kPlatformUser:
      return "platform/user/" + req.PathParam("user_id");
    case TargetKind::kPlatformKey:
      return "platform/key/" + req.PathParam("key_id");
    case TargetKind::kPlatform:
    case TargetKind::kPlatformWide:
      // Handlers that create something name it instead (tenant.create,
      // signing_key.rotate); a refused request still names what it aimed at.
      return "platform";
    case TargetKind::kSelf:
      return "self";
    case TargetKind::kCaller:
      return "caller";
    case TargetKind::kAllocation:
      return "allocation/" + req.PathParam("allocation_id");
    case TargetKind::kDeployment:
      return "deployment/" + req.PathParam("deployment_id");
    case TargetKind::kJob:
      return "job/" + req.PathParam("job_id");
    case TargetKind::kPublic:
      return "";
  }
  return "";
}

}  // namespace

http::Response JsonResponse(int status, const Json& body) {
  http::Response r;
  r.status = status;
  r.body = body.dump();
  return r;
}

http::Response ErrorResponse(const Error& e, const std::string& request_id) {
  http::Response r =
      JsonResponse(HttpStatusOf(e.code), {{"error",
                                           {{"code", std::string(WireNameOf(e.code))},
                                            {"message", e.message},
                                            {"request_id", request_id}}}});
  if (e.code == ErrorCode::kResourceExhausted && e.retry_after_s > 0) {
    r.headers.emplace_back("Retry-After", std::to_string(e.retry_after_s));
  }
  if (e.code == ErrorCode::kUnauthenticated) {
    r.headers.emplace_back("WWW-Authenticate", "Bearer");
  }
  return r;
}

ControlPlaneApi::ControlPlaneApi(Services services)
    : services_(std::move(services)), router_(BuildRoutes()) {}

ControlPlaneApi::~ControlPlaneApi() {
  std::vector<AuditRecord> rest;
  {
    std::lock_guard lock(denials_mu_);
    rest = denials_.FlushAll();
  }
  AppendSummaries(std::move(rest));
}

size_t ControlPlaneApi::BodyLimitFor(std::string_view method, std::string_view path) const {
  if (services_.archives == nullptr) return 0;
  auto match = router_.Find(method, path);
  if (match.route == nullptr || !match.route->payload.takes_upload) return 0;
  return static_cast<size_t>(services_.archives->max_archive_bytes());
}

int64_t ControlPlaneApi::unauthenticated_denials() const {
  std::lock_guard lock(denials_mu_);
  return denials_.total();
}

void ControlPlaneApi::AppendSummaries(std::vector<AuditRecord> summaries) {
  for (auto& summary : summaries) {
    spdlog::info("audit: {} {} {}", summary.action, summary.status, summary.target);
    if (auto appended = services_.store->AppendAudit(std::move(summary)); !appended.has_value()) {
      spdlog::error("audit append of a refusal summary failed: {}", appended.error().message);
    }
  }
}

http::Response ControlPlaneApi::Handle(http::Request& request) {
  auto match = router_.Find(request.method, request.path);
  if (!match.route) {
    if (match.method_not_allowed) {
      return ErrorResponse({ErrorCode::kMethodNotAllowed, "method not allowed on this path"},
                           request.request_id);
    }
    return ErrorResponse(Error::NotFound("no such route"), request.request_id);
  }
  request.path_params = match.params;
  const RouteSpec& spec = match.route->payload;
  Context ctx{.request = request,
              .services = services_,
              .scope = TenantScope::Platform(),
              .audit_target = TargetOf(spec.target, request)};
  auto result = Dispatch(ctx, spec);
  std::optional<Error> failure;
  if (!result.has_value()) failure = result.error();
  http::Response response =
      failure ? ErrorResponse(*failure, request.request_id) : std::move(result).value();
  if (!spec.audit_action.empty()) {
    std::string outcome = "allowed";
    if (failure) {
      ErrorCode c = failure->code;
      bool denied = c == ErrorCode::kUnauthenticated || c == ErrorCode::kPermissionDenied ||
                    (c == ErrorCode::kNotFound && !ctx.principal) ||
                    c == ErrorCode::kResourceExhausted;
      outcome = denied ? "denied" : "failed";
    }
    std::vector<AuditRecord> closed;
    const int64_t now = services_.clock->NowMillis();
    if (outcome != "allowed" && !ctx.principal) {
      // Anyone can send these: counted, not appended one by one.
      std::lock_guard lock(denials_mu_);
      closed = denials_.Add(
          {spec.audit_action, outcome, response.status, std::string(WireNameOf(failure->code))},
          request.remote_address, request.request_id, now);
    } else {
      Audit(ctx, spec, response.status, outcome);
      std::lock_guard lock(denials_mu_);
      closed = denials_.Flush(now);
    }
    AppendSummaries(std::move(closed));
  }
  return response;
}

Result<http::Response> ControlPlaneApi::Dispatch(Context& ctx, const RouteSpec& spec) {
  const auto& req = ctx.request;
  if ((req.method == "POST" || req.method == "PATCH" || req.method == "PUT") && !req.body.empty() &&
      !spec.takes_upload && !HasJsonBody(req)) {
    return Error{ErrorCode::kUnsupportedMedia, "request body must be application/json"};
  }
  if (!spec.takes_body && !spec.takes_upload && !req.body.empty()) {
    // Many clients send "{}" with every POST; anything more is refused
    // rather than silently ignored.
    auto body = ParseJson(req.body);
    if (!body.has_value() || !body->is_object() || !body->empty()) {
      return Error::InvalidArgument("this route takes no request body");
    }
  }
  for (const auto& [name, value] : req.query_all) {
    if (std::find(spec.query_params.begin(), spec.query_params.end(), name) ==
        spec.query_params.end()) {
      return Error::InvalidArgument("unknown query parameter '" + name + "'");
    }
  }
  ATRIUM_RETURN_IF_ERROR(ResolveAndAuthorize(ctx, spec));
  return spec.handler(ctx);
}

Status ControlPlaneApi::ResolveAndAuthorize(Context& ctx, const RouteSpec& spec) {
  if (spec.target == TargetKind::kPublic) return OkStatus();
  std::string bearer = BearerOf(ctx.request);
  if (bearer.empty()) return Error::Unauthenticated("missing bearer credential");
  auto principal = services_.identity->Authenticate(bearer);
  if (!principal.has_value()) return principal.error();
  ctx.principal = *principal;
  const Principal& p = *ctx.principal;

  Target target;
  switch (spec.target) {
    case TargetKind::kPublic:
      return OkStatus();
    case TargetKind::kSelf:
      target = {p.tenant_id, p.user_id};
      ctx.scope = TenantScope::Of(p.tenant_id);
      break;
    case TargetKind::kPlatformWide:
      // No single tenant: only a platform-wide grant will do. The route
      // itself is public knowledge, so a lesser caller gets 403, not 404.
      if (ReachOf(p.role, spec.permission) != Reach::kPlatform) {
        return Error::PermissionDenied("requires " + std::string(PermissionName(spec.permission)) +
                                       " across the platform");
      }
      return OkStatus();
    case TargetKind::kPlatform:
    case TargetKind::kPlatformUser:
    case TargetKind::kPlatformKey:
      ctx.scope = TenantScope::Platform();
      target.tenant_id = "";
      if (!p.is_platform()) return Error::NotFound("not found");
      break;
    case TargetKind::kCaller:
      ctx.scope = TenantScope::Of(p.tenant_id);
      target.tenant_id = p.tenant_id;
      break;
    case TargetKind::kAllocation: {
      const std::string& id = ctx.request.PathParam("allocation_id");
      // Platform staff may reach any tenant's allocation; a tenant caller
      // looks only in its own tenant, so another's id is simply not found.
      auto allocation = p.is_platform()
                            ? services_.store->GetAllocationForPlatform(id)
                            : services_.store->GetAllocation(TenantScope::Of(p.tenant_id), id);
      if (!allocation.has_value()) return allocation.error();
      ctx.scope = TenantScope::Of(allocation->tenant_id);
      target.tenant_id = allocation->tenant_id;
      target.owner_user_id = allocation->created_by;
      ctx.audit_target = "tenant/" + allocation->tenant_id + "/allocation/" + id;
      ctx.allocation = std::move(allocation).value();
      break;
    }
    case TargetKind::kJob: {
      const std::string& id = ctx.request.PathParam("job_id");
      // As for allocations: another tenant's job answers like a missing id.
      auto job = p.is_platform() ? services_.store->GetJobForPlatform(id)
                                 : services_.store->GetJob(TenantScope::Of(p.tenant_id), id);
      if (!job.has_value()) return job.error();
      ctx.scope = TenantScope::Of(job->tenant_id);
      target.tenant_id = job->tenant_id;
      target.owner_user_id = job->created_by;
      ctx.audit_target = "tenant/" + job->tenant_id + "/job/" + id;
      ctx.job = std::move(job).value();
      break;
    }
    case TargetKind::kDeployment: {
      const std::string& id = ctx.request.PathParam("deployment_id");
      auto deployment = p.is_platform()
                            ? services_.store->GetDeploymentForPlatform(id)
                            : services_.store->GetDeployment(TenantScope::Of(p.tenant_id), id);
      if (!deployment.has_value()) return deployment.error();
      const bool shared = deployment->tenant_id.empty();
      if (shared && !p.is_platform()) {
        // The tenant may use it, so it may read it; changing it is the
        // platform's business.
        if (spec.permission != Permission::kDeploymentRead) {
          return Error::PermissionDenied("shared deployments are managed by platform staff");
        }
        ctx.scope = TenantScope::Of(p.tenant_id);
      } else {
        ctx.scope = TenantScope::Of(deployment->tenant_id);
      }
      target.tenant_id = ctx.scope.tenant_id;
      ctx.audit_target = (shared ? std::string("platform") : "tenant/" + deployment->tenant_id) +
                         "/deployment/" + id;
      ctx.deployment = std::move(deployment).value();
      break;
    }
    case TargetKind::kTenant:
    case TargetKind::kTenantUser:
    case TargetKind::kTenantKey: {
      const std::string& tenant_id = ctx.request.PathParam("tenant_id");
      // Another tenant's id answers exactly like an id that does not exist.
      if (!p.is_platform() && tenant_id != p.tenant_id) return Error::NotFound("tenant not found");
      if (p.is_platform()) {
        auto tenant = services_.store->GetTenant(tenant_id);
        if (!tenant.has_value() && tenant.error().code == ErrorCode::kNotFound) {
          // An evicted tenant's usage, allocations and audit trail are kept
          // for staff to read; nothing of it may change any more.
          auto evicted = services_.store->GetEvictedTenantForPlatform(tenant_id);
          if (evicted.has_value()) {
            if (ctx.request.method != "GET") {
              return Error::FailedPrecondition("tenant " + tenant_id +
                                               " was evicted; its records are read-only");
            }
            tenant = std::move(evicted);
          }
        }
        if (!tenant.has_value()) return tenant.error();
        ctx.tenant = std::move(tenant).value();
      }
      ctx.scope = TenantScope::Of(tenant_id);
      target.tenant_id = tenant_id;
      break;
    }
  }
  if (spec.target == TargetKind::kTenantUser || spec.target == TargetKind::kPlatformUser) {
    target.owner_user_id = ctx.request.PathParam("user_id");
  } else if (spec.target == TargetKind::kTenantKey || spec.target == TargetKind::kPlatformKey) {
    auto key = services_.store->GetApiKey(ctx.scope, ctx.request.PathParam("key_id"));
    if (!key.has_value()) return key.error();
    target.owner_user_id = key->owner_user_id;
  } else if (spec.target == TargetKind::kTenant || spec.target == TargetKind::kPlatform) {
    // Routes on the tenant as a whole (or a collection in it). A kSelf grant
    // reaches them only where the route lists or creates the caller's own.
    if (ReachOf(p.role, spec.permission) == Reach::kSelf && spec.self_listable) {
      ctx.self_only = true;
      return OkStatus();
    }
  }
  switch (Authorize(p, spec.permission, target)) {
    case Decision::kAllow:
      return OkStatus();
    case Decision::kDenyNotFound:
      return Error::NotFound("not found");
    case Decision::kDenyForbidden:
      return Error::PermissionDenied("role " + std::string(RoleName(p.role)) + " may not " +
                                     std::string(PermissionName(spec.permission)));
  }
  return Error::Internal("unreachable");
}

void ControlPlaneApi::Audit(const Context& ctx, const RouteSpec& spec, int status,
                            const std::string& outcome) {
  AuditRecord r;
  r.time = services_.clock->NowMillis();
  if (ctx.principal) {
    r.actor = ctx.principal->actor();
    r.actor_role = std::string(RoleName(ctx.principal->role));
    // Allowed actions land in the chain of the tenant acted on; denied ones
    // in the caller's own, so probing another tenant leaves no trace there.
    r.tenant_id = outcome == "allowed" ? ctx.scope.tenant_id : ctx.principal->tenant_id;
  } else {
    r.actor = ctx.audit_actor.empty() ? "anonymous" : ctx.audit_actor;
  }
  if (ctx.audit_tenant) r.tenant_id = *ctx.audit_tenant;
  r.action = spec.audit_action;
  r.target = ctx.audit_target;
  r.outcome = outcome;
  r.status = status;
  r.request_id = ctx.request.request_id;
  r.source = ctx.request.remote_address;
  // The action is already done; a failed append cannot undo it, so it is
  // logged loudly for the operator rather than turned into an error reply.
  auto appended = services_.store->AppendAudit(std::move(r));
  if (!appended.has_value()) {
    spdlog::error("audit append failed for request {}: {}", ctx.request.request_id,
                  appended.error().message);
  }
}

}  // namespace atrium::api
