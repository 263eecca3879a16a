// Errors as values. Result<T> follows std::expected's names so that moving to
// C++23's std::expected later is a rename (g++ 12 has no std::expected).
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace atrium {

// One code per kind of expected failure. Each maps, in one table
// (error.cc), to an HTTP status and a stable wire name.
enum class ErrorCode {
  kInvalidArgument,     // 400: malformed or semantically invalid input
  kUnauthenticated,     // 401: no, bad, expired or revoked credential
  kPermissionDenied,    // 403: authenticated but not allowed
  kNotFound,            // 404: missing, or belongs to another tenant
  kMethodNotAllowed,    // 405
  kDeadlineExceeded,    // 408
  kAlreadyExists,       // 409: unique name taken
  kFailedPrecondition,  // 409: object in the wrong state for this action
  kPayloadTooLarge,     // 413
  kUnsupportedMedia,    // 415
  kResourceExhausted,   // 429: throttled; retry_after_s says when to retry
  kInternal,            // 500: a bug or a broken invariant
  kUnavailable,         // 503: a dependency (store) is down; retry later
};

struct Error {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
  int retry_after_s = 0;  // only meaningful with kResourceExhausted

  static Error InvalidArgument(std::string m) {
    return {ErrorCode::kInvalidArgument, std::move(m)};
  }
  static Error Unauthenticated(std::string m) {
    return {ErrorCode::kUnauthenticated, std::move(m)};
  }
  static Error PermissionDenied(std::string m) {
    return {ErrorCode::kPermissionDenied, std::move(m)};
  }
  static Error NotFound(std::string m) { return {ErrorCode::kNotFound, std::move(m)}; }
  static Error AlreadyExists(std::string m) { return {ErrorCode::kAlreadyExists, std::move(m)}; }
  static Error FailedPrecondition(std::string m) {
    return {ErrorCode::kFailedPrecondition, std::move(m)};
  }
  static Error ResourceExhausted(std::string m, int retry_after_s) {
    return {ErrorCode::kResourceExhausted, std::move(m), retry_after_s};
  }
  static Error Internal(std::string m) { return {ErrorCode::kInternal, std::move(m)}; }
  static Error Unavailable(std::string m) { return {ErrorCode::kUnavailable, std::move(m)}; }
};

// HTTP status for an error code (the one table lives in error.cc).
int HttpStatusOf(ErrorCode code);
// Stable machine-readable name, e.g. "not_found".
std::string_view WireNameOf(ErrorCode code);

template <typename E>
class Unexpected {
 public:
  explicit Unexpected(E e) : error_(std::move(e)) {}
  E& error() & { return error_; }
  E&& error() && { return std::move(error_); }

 private:
  E error_;
};

inline Unexpected<Error> MakeUnexpected(Error e) { return Unexpected<Error>(std::move(e)); }

// Result<T>: either a value or an Error. Check has_value() (or operator bool)
// before value(); value() on an error is a programming bug and asserts.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}                  // NOLINT
  Result(Error error) : v_(std::in_place_index<1>, std::move(error)) {}              // NOLINT
  Result(Unexpected<Error> u) : v_(std::in_place_index<1>, std::move(u).error()) {}  // NOLINT

  bool has_value() const { return v_.index() == 0; }
  explicit operator bool() const { return has_value(); }

  T& value() & {
    assert(has_value());
    return std::get<0>(v_);
  }
  const T& value() const& {
    assert(has_value());
    return std::get<0>(v_);
  }
  T&& value() && {
    assert(has_value());
    return std::get<0>(std::move(v_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const& {
    assert(!has_value());
    return std::get<1>(v_);
  }
  Error&& error() && {
    assert(!has_value());
    return std::get<1>(std::move(v_));
  }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), ok_(false) {}              // NOLINT
  Result(Unexpected<Error> u) : error_(std::move(u).error()), ok_(false) {}  // NOLINT
  bool has_value() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const& {
    assert(!ok_);
    return error_;
  }
  Error&& error() && {
    assert(!ok_);
    return std::move(error_);
  }

 private:
  Error error_;
  bool ok_ = true;
};

using Status = Result<void>;
inline Status OkStatus() { return {}; }

}  // namespace atrium

// Propagates an error from an expression returning Result<...>.
#define ATRIUM_CONCAT_INNER(a, b) a##b
#define ATRIUM_CONCAT(a, b) ATRIUM_CONCAT_INNER(a, b)
#define ATRIUM_RETURN_IF_ERROR(expr)                                           \
  do {                                                                         \
    auto _atrium_status = (expr);                                              \
    if (!_atrium_status.has_value()) return std::move(_atrium_status).error(); \
  } while (0)
// `tmp` is a name and `lhs` a declaration or an lvalue (`auto x`, `y.z`):
// neither can be parenthesized.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define ATRIUM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr)   \
  auto tmp = (expr);                                   \
  if (!tmp.has_value()) return std::move(tmp).error(); \
  lhs = std::move(tmp).value()
#define ATRIUM_ASSIGN_OR_RETURN(lhs, expr) \
  ATRIUM_ASSIGN_OR_RETURN_IMPL(ATRIUM_CONCAT(_atrium_result_, __LINE__), lhs, expr)
// NOLINTEND(bugprone-macro-parentheses)
