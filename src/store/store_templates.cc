// Environment templates: published versions, the platform's and each
// tenant's. See store.h for the contracts and src/templates for the rules.
#include "store/store.h"
#include "store/store_internal.h"

namespace atrium {
namespace {

using sql::Row;
using sql::Value;
using store_internal::DecodeList;
using store_internal::DecodeMap;
using store_internal::EncodeList;
using store_internal::EncodeMap;
using store_internal::ExpectOneRowOn;
using store_internal::StatusOf;

constexpr char kTemplateColumns[] =
    "tenant_id, name, version, description, rootfs_digest, env, min_driver_version, "
    "min_cuda_version, gpu_models, state, created_by, created_at, updated_at";

EnvironmentTemplateRecord TemplateFromRow(const Row& r) {
  EnvironmentTemplateRecord t;
  t.tenant_id = r.Text(0);
  t.name = r.Text(1);
  t.version = r.Int(2);
  t.description = r.Text(3);
  t.rootfs_digest = r.Text(4);
  t.env = DecodeMap(r.Text(5));
  t.min_driver_version = r.Text(6);
  t.min_cuda_version = r.Text(7);
  t.gpu_models = DecodeList(r.Text(8));
  t.state = r.Text(9);
  t.created_by = r.Text(10);
  t.created_at = r.Int(11);
  t.updated_at = r.Int(12);
  return t;
}

}  // namespace

Result<EnvironmentTemplateRecord> Store::PublishEnvironmentTemplate(const TenantScope& scope,
                                                                    EnvironmentTemplateRecord t) {
  t.tenant_id = scope.tenant_id;
  return db_->Transact<EnvironmentTemplateRecord>(
      [&](sql::Connection& c) -> Result<EnvironmentTemplateRecord> {
        // The other side's rows of this name: the platform's for a tenant,
        // any tenant's for the platform.
        ATRIUM_ASSIGN_OR_RETURN(
            auto other,
            c.Exec(scope.is_platform()
                       ? "SELECT COUNT(*) FROM environment_templates WHERE name = $1 AND "
                         "tenant_id <> ''"
                       : "SELECT COUNT(*) FROM environment_templates WHERE name = $1 AND "
                         "tenant_id = ''",
                   {t.name}));
        if (other.rows.at(0).Int(0) > 0) {
          return Error::AlreadyExists("environment template name \"" + t.name + "\" is taken by " +
                                      (scope.is_platform()
                                           ? std::string("a tenant's template")
                                           : std::string("a platform template (use it, or pick "
                                                         "another name)")));
        }
        ATRIUM_ASSIGN_OR_RETURN(
            auto held, c.Exec("SELECT COUNT(*) FROM environment_templates WHERE tenant_id = $1",
                              {scope.tenant_id}));
        if (held.rows.at(0).Int(0) >= kMaxEnvironmentTemplateVersions) {
          return Error::FailedPrecondition(
              "at most " + std::to_string(kMaxEnvironmentTemplateVersions) +
              " environment template versions per owner; retired ones count");
        }
        ATRIUM_ASSIGN_OR_RETURN(
            auto latest, c.Exec("SELECT COALESCE(MAX(version), 0) FROM environment_templates "
                                "WHERE tenant_id = $1 AND name = $2",
                                {scope.tenant_id, t.name}));
        t.version = latest.rows.at(0).Int(0) + 1;
        // Two publishes of one name at once compute the same version; the
        // primary key refuses the second (kAlreadyExists), which may retry.
        ATRIUM_RETURN_IF_ERROR(
            c.Exec(std::string("INSERT INTO environment_templates (") + kTemplateColumns +
                       ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
                   {t.tenant_id, t.name, t.version, t.description, t.rootfs_digest,
                    EncodeMap(t.env), t.min_driver_version, t.min_cuda_version,
                    EncodeList(t.gpu_models), t.state, t.created_by, t.created_at, t.updated_at}));
        return t;
      });
}

Result<std::vector<EnvironmentTemplateRecord>> Store::EnvironmentTemplateVersions(
    const TenantScope& scope, const std::string& name) {
  ATRIUM_ASSIGN_OR_RETURN(
      auto rows, db_->Exec(std::string("SELECT ") + kTemplateColumns +
                               " FROM environment_templates WHERE name = $1 AND (tenant_id = '' OR "
                               "tenant_id = $2) ORDER BY tenant_id, version",
                           {name, scope.tenant_id}));
  std::vector<EnvironmentTemplateRecord> out;
  for (const auto& r : rows.rows) out.push_back(TemplateFromRow(r));
  return out;
}

Result<std::vector<EnvironmentTemplateRecord>> Store::ListEnvironmentTemplates(
    const TenantScope& scope, bool include_platform) {
  std::string where = include_platform || scope.is_platform() ? "(tenant_id = '' OR tenant_id = $1)"
                                                              : "tenant_id = $1";
  ATRIUM_ASSIGN_OR_RETURN(auto rows, db_->Exec(std::string("SELECT ") + kTemplateColumns +
                                                   " FROM environment_templates WHERE " + where +
                                                   " ORDER BY tenant_id, name, version",
                                               {scope.tenant_id}));
  std::vector<EnvironmentTemplateRecord> out;
  for (const auto& r : rows.rows) out.push_back(TemplateFromRow(r));
  return out;
}

Status Store::RetireEnvironmentTemplate(const TenantScope& scope, const std::string& name,
                                        int64_t version, int64_t at) {
  return StatusOf(db_->Transact<bool>([&](sql::Connection& c) -> Result<bool> {
    ATRIUM_RETURN_IF_ERROR(
        ExpectOneRowOn(c,
                       "UPDATE environment_templates SET state = 'retired', updated_at = $4 "
                       "WHERE tenant_id = $1 AND name = $2 AND version = $3",
                       {scope.tenant_id, name, version, at}, "environment template"));
    return true;
  }));
}

}  // namespace atrium
