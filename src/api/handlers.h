// Every handler of the control-plane API; routes.cc binds them to paths.
#pragma once

#include "api/api.h"

namespace atrium::api {

Result<http::Response> Healthz(Context& ctx);
Result<http::Response> Readyz(Context& ctx);
Result<http::Response> GetOpenApi(Context& ctx);

Result<http::Response> Login(Context& ctx);
Result<http::Response> Logout(Context& ctx);
Result<http::Response> WhoAmI(Context& ctx);
Result<http::Response> RotateSigningKey(Context& ctx);

Result<http::Response> CreateTenant(Context& ctx);
Result<http::Response> ListTenants(Context& ctx);
Result<http::Response> GetTenant(Context& ctx);
Result<http::Response> UpdateTenant(Context& ctx);
Result<http::Response> SuspendTenant(Context& ctx);
Result<http::Response> ResumeTenant(Context& ctx);
Result<http::Response> EvictTenant(Context& ctx);

Result<http::Response> CreateUser(Context& ctx);
Result<http::Response> ListUsers(Context& ctx);
Result<http::Response> GetUser(Context& ctx);
Result<http::Response> UpdateUser(Context& ctx);
Result<http::Response> DeleteUser(Context& ctx);

Result<http::Response> CreateKey(Context& ctx);
Result<http::Response> ListKeys(Context& ctx);
Result<http::Response> GetKey(Context& ctx);
Result<http::Response> RevokeKey(Context& ctx);

Result<http::Response> ListAllAudit(Context& ctx);
Result<http::Response> ListTenantAudit(Context& ctx);
Result<http::Response> AuditHeads(Context& ctx);
Result<http::Response> TenantAuditHeads(Context& ctx);

Result<http::Response> ListNodes(Context& ctx);
Result<http::Response> GetNode(Context& ctx);
Result<http::Response> CordonNode(Context& ctx);
Result<http::Response> SetGpuHealth(Context& ctx);
Result<http::Response> DrainNode(Context& ctx);
Result<http::Response> UncordonNode(Context& ctx);
Result<http::Response> ListGpus(Context& ctx);
Result<http::Response> GetCapacity(Context& ctx);

Result<http::Response> GetQuotas(Context& ctx);
Result<http::Response> SetQuota(Context& ctx);
Result<http::Response> ListProjects(Context& ctx);
Result<http::Response> CreateProject(Context& ctx);
Result<http::Response> GetProject(Context& ctx);
Result<http::Response> SetProjectQuota(Context& ctx);
Result<http::Response> ClearProjectQuota(Context& ctx);
Result<http::Response> DeleteProject(Context& ctx);

Result<http::Response> CreateAllocation(Context& ctx);
Result<http::Response> ListAllocations(Context& ctx);
Result<http::Response> GetAllocation(Context& ctx);
Result<http::Response> ReleaseAllocation(Context& ctx);
Result<http::Response> ExplainAllocation(Context& ctx);

Result<http::Response> CreateJob(Context& ctx);
Result<http::Response> ListJobs(Context& ctx);
Result<http::Response> GetJob(Context& ctx);
Result<http::Response> CancelJob(Context& ctx);
Result<http::Response> ListJobEvents(Context& ctx);
Result<http::Response> GetJobLogs(Context& ctx);
Result<http::Response> ExplainJob(Context& ctx);
Result<http::Response> UploadJobArchive(Context& ctx);
Result<http::Response> ListJobArchives(Context& ctx);
Result<http::Response> GetJobArchive(Context& ctx);
Result<http::Response> DeleteJobArchive(Context& ctx);

Result<http::Response> CreateDeployment(Context& ctx);
Result<http::Response> ListDeployments(Context& ctx);
Result<http::Response> GetDeployment(Context& ctx);
Result<http::Response> UpdateDeployment(Context& ctx);
Result<http::Response> DeleteDeployment(Context& ctx);
Result<http::Response> ScaleDeployment(Context& ctx);
Result<http::Response> ListDeploymentReplicas(Context& ctx);
Result<http::Response> CreateAdapter(Context& ctx);
Result<http::Response> ListAdapters(Context& ctx);
Result<http::Response> GetAdapter(Context& ctx);
Result<http::Response> DeleteAdapter(Context& ctx);
Result<http::Response> CreatePriceBook(Context& ctx);
Result<http::Response> ListPriceBooks(Context& ctx);
Result<http::Response> GetPriceBook(Context& ctx);
Result<http::Response> AddPriceBookVersion(Context& ctx);
Result<http::Response> GetDefaultPriceBook(Context& ctx);
Result<http::Response> SetDefaultPriceBook(Context& ctx);
Result<http::Response> SetBillingPlan(Context& ctx);
Result<http::Response> GetBillingPlan(Context& ctx);
Result<http::Response> GetDraftInvoice(Context& ctx);
Result<http::Response> ListInvoices(Context& ctx);
Result<http::Response> GetInvoice(Context& ctx);
Result<http::Response> GetInvoiceCsv(Context& ctx);
Result<http::Response> FinalizeInvoice(Context& ctx);
Result<http::Response> VerifyBilling(Context& ctx);
Result<http::Response> GrantCredit(Context& ctx);
Result<http::Response> ListCredits(Context& ctx);
Result<http::Response> CreateBudget(Context& ctx);
Result<http::Response> ListBudgets(Context& ctx);
Result<http::Response> GetBudget(Context& ctx);
Result<http::Response> UpdateBudget(Context& ctx);
Result<http::Response> DeleteBudget(Context& ctx);

Result<http::Response> ListEntitlements(Context& ctx);
Result<http::Response> GrantEntitlement(Context& ctx);
Result<http::Response> RevokeEntitlement(Context& ctx);

Result<http::Response> GetGatewayLimits(Context& ctx);
Result<http::Response> SetTenantGatewayLimits(Context& ctx);
Result<http::Response> SetKeyGatewayLimits(Context& ctx);

Result<http::Response> ListUsage(Context& ctx);
Result<http::Response> SummarizeUsage(Context& ctx);
Result<http::Response> SummarizeRefusals(Context& ctx);

Result<http::Response> ListTemplates(Context& ctx);
Result<http::Response> GetTemplate(Context& ctx);
Result<http::Response> PublishTemplate(Context& ctx);
Result<http::Response> RetireTemplate(Context& ctx);
Result<http::Response> ListGpuUsage(Context& ctx);
Result<http::Response> SummarizeGpuUsage(Context& ctx);

}  // namespace atrium::api
