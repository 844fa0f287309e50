// Status and StatusOr: errors as values (LevelDB/Abseil style).
//
// A Status names what went wrong in words a user can act on ("jobs[0].tasks[1].replicas:
// must be >= 1, got -2"), and its code says whether retrying can help. Exceptions never
// cross a module boundary; functions that can fail return one of these. Thread-compatible.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace tessera {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // the request is malformed; retrying the same request cannot help
  kNotFound,            // a named object does not exist
  kAlreadyExists,       // a create collided with an existing object
  kFailedPrecondition,  // the system is not in a state where this can happen (e.g. cancel a
                        // finished job)
  kPermissionDenied,    // the caller may not do this
  kUnauthenticated,     // the caller did not prove who it is
  kResourceExhausted,   // a size limit was hit (body too large): the same request never fits
  kUnavailable,         // transient: a dependency is down; retry with back-off
  kInternal,            // a bug or a broken invariant
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // True where the same request may succeed later without change.
  bool retryable() const { return code_ == StatusCode::kUnavailable; }
  std::string ToString() const;
  // Prefixes the message with context, e.g. a field path: "spec.tasks[0]: " + message.
  Status WithContext(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
inline Status FailedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status PermissionDenied(std::string m) {
  return {StatusCode::kPermissionDenied, std::move(m)};
}
inline Status Unauthenticated(std::string m) { return {StatusCode::kUnauthenticated, std::move(m)}; }
inline Status ResourceExhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  StatusOr(Status status) : v_(std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).ok()) v_ = Status(StatusCode::kInternal, "StatusOr built from OK");
  }
  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

#define TESSERA_RETURN_IF_ERROR(expr)            \
  do {                                           \
    ::tessera::Status _st = (expr);              \
    if (!_st.ok()) return _st;                   \
  } while (0)

}  // namespace tessera
