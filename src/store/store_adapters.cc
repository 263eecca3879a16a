// Tenants' LoRA adapters on managed deployments. See store.h for the
// contracts and src/serving/adapters.h for what the rows drive.
#include "store/store.h"
#include "store/store_internal.h"

namespace atrium {
namespace {

using sql::Row;
using store_internal::BumpGatewayPolicyMarker;
using store_internal::ExpectOneRowOn;
using store_internal::StatusOf;

constexpr char kAdapterColumns[] =
    "id, tenant_id, deployment_id, name, artifact, sha256, status, detail, created_by, "
    "created_at, updated_at";

AdapterRecord AdapterFromRow(const Row& r) {
  AdapterRecord a;
  a.id = r.Text(0);
  a.tenant_id = r.Text(1);
  a.deployment_id = r.Text(2);
  a.name = r.Text(3);
  a.artifact = r.Text(4);
  a.sha256 = r.Text(5);
  a.status = r.Text(6);
  a.detail = r.Text(7);
  a.created_by = r.Text(8);
  a.created_at = r.Int(9);
  a.updated_at = r.Int(10);
  return a;
}

std::vector<AdapterRecord> AdaptersOf(const sql::Rows& rows) {
  std::vector<AdapterRecord> out;
  out.reserve(rows.rows.size());
  for (const auto& r : rows.rows) out.push_back(AdapterFromRow(r));
  return out;
}

}  // namespace

namespace store_internal {

Result<std::vector<AdapterRecord>> ReadyAdaptersOn(sql::Connection& c) {
  ATRIUM_ASSIGN_OR_RETURN(auto rows, c.Exec(std::string("SELECT ") + kAdapterColumns +
                                                " FROM adapters WHERE status = 'ready' ORDER BY id",
                                            {}));
  return AdaptersOf(rows);
}

}  // namespace store_internal

Result<AdapterRecord> Store::CreateAdapter(const TenantScope& scope, AdapterRecord a,
                                           int64_t max_per_deployment, int64_t max_per_tenant) {
  a.tenant_id = scope.tenant_id;
  return db_->Transact<AdapterRecord>([&](sql::Connection& c) -> Result<AdapterRecord> {
    ATRIUM_ASSIGN_OR_RETURN(
        auto deployment,
        c.Exec("SELECT id FROM deployments WHERE id = $1 AND serving <> ''", {a.deployment_id}));
    if (deployment.rows.empty()) return Error::NotFound("deployment not found");
    ATRIUM_ASSIGN_OR_RETURN(
        auto on_deployment,
        c.Exec("SELECT COUNT(*) FROM adapters WHERE deployment_id = $1", {a.deployment_id}));
    if (on_deployment.rows.at(0).Int(0) >= max_per_deployment) {
      return Error::FailedPrecondition("the deployment holds " +
                                       std::to_string(max_per_deployment) +
                                       " adapters already, the most it allows");
    }
    ATRIUM_ASSIGN_OR_RETURN(
        auto held, c.Exec("SELECT COUNT(*) FROM adapters WHERE tenant_id = $1", {a.tenant_id}));
    if (held.rows.at(0).Int(0) >= max_per_tenant) {
      return Error::FailedPrecondition("the tenant holds " + std::to_string(max_per_tenant) +
                                       " adapters already, the most it may; delete one first");
    }
    auto inserted = c.Exec(std::string("INSERT INTO adapters (") + kAdapterColumns +
                               ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                           {a.id, a.tenant_id, a.deployment_id, a.name, a.artifact, a.sha256,
                            a.status, a.detail, a.created_by, a.created_at, a.updated_at});
    if (!inserted.has_value()) {
      Error e = std::move(inserted).error();
      if (e.code == ErrorCode::kAlreadyExists) {
        e.message = "an adapter named '" + a.name + "' is on this deployment already";
      }
      return e;
    }
    return a;
  });
}

Result<AdapterRecord> Store::GetAdapter(const TenantScope& scope, const std::string& id) {
  ATRIUM_ASSIGN_OR_RETURN(auto rows,
                          db_->Exec(std::string("SELECT ") + kAdapterColumns +
                                        " FROM adapters WHERE tenant_id = $1 AND id = $2",
                                    {scope.tenant_id, id}));
  if (rows.rows.empty()) return Error::NotFound("adapter not found");
  return AdapterFromRow(rows.rows[0]);
}

Result<std::vector<AdapterRecord>> Store::ListAdapters(const TenantScope& scope,
                                                       const std::string& deployment_id) {
  ATRIUM_ASSIGN_OR_RETURN(
      auto rows,
      deployment_id.empty()
          ? db_->Exec(std::string("SELECT ") + kAdapterColumns +
                          " FROM adapters WHERE tenant_id = $1 ORDER BY id",
                      {scope.tenant_id})
          : db_->Exec(std::string("SELECT ") + kAdapterColumns +
                          " FROM adapters WHERE tenant_id = $1 AND deployment_id = $2 ORDER BY id",
                      {scope.tenant_id, deployment_id}));
  return AdaptersOf(rows);
}

Status Store::DeleteAdapter(const TenantScope& scope, const std::string& id) {
  return StatusOf(db_->Transact<bool>([&](sql::Connection& c) -> Result<bool> {
    ATRIUM_RETURN_IF_ERROR(ExpectOneRowOn(c,
                                          "DELETE FROM adapters WHERE tenant_id = $1 AND id = $2",
                                          {scope.tenant_id, id}, "adapter"));
    ATRIUM_RETURN_IF_ERROR(BumpGatewayPolicyMarker(c));
    return true;
  }));
}

Result<std::vector<AdapterRecord>> Store::ListAdaptersForServing(const std::string& deployment_id) {
  ATRIUM_ASSIGN_OR_RETURN(auto rows,
                          db_->Exec(std::string("SELECT ") + kAdapterColumns +
                                        " FROM adapters WHERE deployment_id = $1 ORDER BY id",
                                    {deployment_id}));
  return AdaptersOf(rows);
}

Status Store::SetAdapterStatusForServing(const std::string& id, const std::string& status,
                                         const std::string& detail, int64_t at) {
  return StatusOf(db_->Transact<bool>([&](sql::Connection& c) -> Result<bool> {
    ATRIUM_ASSIGN_OR_RETURN(auto was, c.Exec("SELECT status FROM adapters WHERE id = $1", {id}));
    if (was.rows.empty()) return Error::NotFound("adapter not found");
    ATRIUM_RETURN_IF_ERROR(
        c.Exec("UPDATE adapters SET status = $2, detail = $3, updated_at = $4 WHERE id = $1",
               {id, status, detail, at}));
    // The gateway routes ready adapters only: entering or leaving ready
    // changes its policy.
    if ((was.rows[0].Text(0) == "ready") != (status == "ready")) {
      ATRIUM_RETURN_IF_ERROR(BumpGatewayPolicyMarker(c));
    }
    return true;
  }));
}

}  // namespace atrium
