// /api/v1/jobs/archives: a tenant uploads the working files its jobs name
// (a tar or tar.gz body), lists, reads and deletes them. Always the
// caller's tenant: another tenant's archive id answers like a missing one.
#include "api/handler_util.h"
#include "api/handlers.h"

namespace atrium::api {
namespace {

Result<jobs::ArchiveService*> ArchivesOf(const Context& ctx) {
  if (ctx.services.archives == nullptr) {
    return Error::Unavailable("this server takes no job archives (no execution backend)");
  }
  return ctx.services.archives;
}

// The media types an upload may declare (none, too: curl --data-binary).
bool IsArchiveMediaType(std::string_view content_type) {
  const std::string_view type = content_type.substr(0, content_type.find(';'));
  for (std::string_view ok : {"", "application/x-tar", "application/tar", "application/gzip",
                              "application/x-gzip", "application/octet-stream"}) {
    if (type == ok) return true;
  }
  return false;
}

Json ArchiveView(const JobArchiveRecord& a) {
  return {{"id", a.id},
          {"name", a.name},
          {"sha256", a.sha256},
          {"size_bytes", a.size_bytes},
          {"unpacked_bytes", a.unpacked_bytes},
          {"entries", a.entries},
          {"created_by", a.created_by},
          {"created_at", FormatTimestamp(a.created_at)}};
}

}  // namespace

Result<http::Response> UploadJobArchive(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto* archives, ArchivesOf(ctx));
  if (!IsArchiveMediaType(ctx.request.Header("content-type"))) {
    return Error{ErrorCode::kUnsupportedMedia,
                 "send the archive's bytes as application/x-tar or application/gzip"};
  }
  ATRIUM_ASSIGN_OR_RETURN(JobArchiveRecord a,
                          archives->Upload(ctx.scope.tenant_id, ctx.principal->user_id,
                                           QueryOf(ctx.request, "name"), ctx.request.body));
  ctx.audit_target = "tenant/" + a.tenant_id + "/job_archive/" + a.id;
  return JsonResponse(201, ArchiveView(a));
}

Result<http::Response> ListJobArchives(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto* archives, ArchivesOf(ctx));
  ATRIUM_ASSIGN_OR_RETURN(auto list, archives->List(ctx.scope.tenant_id));
  Json items = Json::array();
  for (const auto& a : list) items.push_back(ArchiveView(a));
  return JsonResponse(200, {{"items", items}});
}

Result<http::Response> GetJobArchive(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto* archives, ArchivesOf(ctx));
  ATRIUM_ASSIGN_OR_RETURN(auto a,
                          archives->Get(ctx.scope.tenant_id, ctx.request.PathParam("archive_id")));
  return JsonResponse(200, ArchiveView(a));
}

Result<http::Response> DeleteJobArchive(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto* archives, ArchivesOf(ctx));
  const std::string& id = ctx.request.PathParam("archive_id");
  ctx.audit_target = "tenant/" + ctx.scope.tenant_id + "/job_archive/" + id;
  ATRIUM_RETURN_IF_ERROR(archives->Delete(ctx.scope.tenant_id, id));
  http::Response r;
  r.status = 204;
  return r;
}

}  // namespace atrium::api
