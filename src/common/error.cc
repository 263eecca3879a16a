#include "common/result.h"

namespace atrium {
namespace {

struct ErrorInfo {
  ErrorCode code;
  int http_status;
  std::string_view wire_name;
};

// The one table from error code to HTTP status and wire name.
constexpr ErrorInfo kErrorTable[] = {
    {ErrorCode::kInvalidArgument, 400, "invalid_argument"},
    {ErrorCode::kUnauthenticated, 401, "unauthenticated"},
    {ErrorCode::kPermissionDenied, 403, "permission_denied"},
    {ErrorCode::kNotFound, 404, "not_found"},
    {ErrorCode::kMethodNotAllowed, 405, "method_not_allowed"},
    {ErrorCode::kDeadlineExceeded, 408, "deadline_exceeded"},
    {ErrorCode::kAlreadyExists, 409, "already_exists"},
    {ErrorCode::kFailedPrecondition, 409, "failed_precondition"},
    {ErrorCode::kPayloadTooLarge, 413, "payload_too_large"},
    {ErrorCode::kUnsupportedMedia, 415, "unsupported_media_type"},
    {ErrorCode::kResourceExhausted, 429, "resource_exhausted"},
    {ErrorCode::kInternal, 500, "internal"},
    {ErrorCode::kUnavailable, 503, "unavailable"},
};

const ErrorInfo& InfoOf(ErrorCode code) {
  for (const auto& info : kErrorTable) {
    if (info.code == code) return info;
  }
  return kErrorTable[11];  // kInternal
}

}  // namespace

int HttpStatusOf(ErrorCode code) { return InfoOf(code).http_status; }
std::string_view WireNameOf(ErrorCode code) { return InfoOf(code).wire_name; }

}  // namespace atrium
