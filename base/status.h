// Status and StatusOr<T>: how errors cross module boundaries in kvtrain.
// A Status carries a code and a message that names what was wrong (which
// variable, which key, which shape, which peer). No exceptions are used.
#ifndef KVTRAIN_BASE_STATUS_H_
#define KVTRAIN_BASE_STATUS_H_

#include <optional>
#include <ostream>
#include <string>
#include <utility>

#include <glog/logging.h>

namespace kvtrain {

// Value type; cheap to copy when ok. Thread-compatible.
class Status {
 public:
  enum class Code {
    kOk = 0,
    kInvalidArgument,    // the caller's input is wrong (shape, name, value)
    kNotFound,           // a named thing (file, key, interface) does not exist
    kUnavailable,        // a peer, device or resource cannot be reached now
    kDeadlineExceeded,   // a wait ran out of time
    kInternal,           // an invariant broke; a bug in kvtrain
    kAlreadyExists,      // e.g. a port already in use, a key initialised twice
    kFailedPrecondition, // the system is not in the state the call needs
    kDataLoss,           // a file or message is truncated or corrupt
    kAborted,            // the job is being torn down (a peer died, terminate)
  };

  Status() = default;  // ok

  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string msg) {
    return Status(Code::kInvalidArgument, std::move(msg));
  }
  static Status NotFound(std::string msg) {
    return Status(Code::kNotFound, std::move(msg));
  }
  static Status Unavailable(std::string msg) {
    return Status(Code::kUnavailable, std::move(msg));
  }
  static Status DeadlineExceeded(std::string msg) {
    return Status(Code::kDeadlineExceeded, std::move(msg));
  }
  static Status Internal(std::string msg) {
    return Status(Code::kInternal, std::move(msg));
  }
  static Status AlreadyExists(std::string msg) {
    return Status(Code::kAlreadyExists, std::move(msg));
  }
  static Status FailedPrecondition(std::string msg) {
    return Status(Code::kFailedPrecondition, std::move(msg));
  }
  static Status DataLoss(std::string msg) {
    return Status(Code::kDataLoss, std::move(msg));
  }
  static Status Aborted(std::string msg) {
    return Status(Code::kAborted, std::move(msg));
  }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

  // "Invalid argument: DMLC_NUM_WORKER=\"two\": expected a positive integer".
  std::string ToString() const;

  // The same code with "context: " put in front of the message; ok stays ok.
  Status Annotate(const std::string& context) const;

  bool operator==(const Status& o) const {
    return code_ == o.code_ && message_ == o.message_;
  }
  bool operator!=(const Status& o) const { return !(*this == o); }

 private:
  Status(Code code, std::string msg) : code_(code), message_(std::move(msg)) {}

  Code code_ = Code::kOk;
  std::string message_;
};

const char* StatusCodeName(Status::Code code);
std::ostream& operator<<(std::ostream& os, const Status& s);

// Either a value or a non-ok Status. Accessing the value of an error is a
// programmer bug and CHECK-fails with the status message.
template <typename T>
class StatusOr {
 public:
  StatusOr(const Status& status) : status_(status) {  // NOLINT: implicit
    CHECK(!status_.ok()) << "StatusOr constructed from an ok Status";
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  T& value() & {
    CHECK(ok()) << status_;
    return *value_;
  }
  const T& value() const& {
    CHECK(ok()) << status_;
    return *value_;
  }
  T&& value() && {
    CHECK(ok()) << status_;
    return std::move(*value_);
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace kvtrain

#define KV_STATUS_CONCAT_INNER(a, b) a##b
#define KV_STATUS_CONCAT(a, b) KV_STATUS_CONCAT_INNER(a, b)

// Returns the Status of `expr` from the enclosing function if it is not ok.
#define KV_RETURN_IF_ERROR(expr)                  \
  do {                                            \
    const ::kvtrain::Status kv_status_ = (expr);  \
    if (!kv_status_.ok()) return kv_status_;      \
  } while (0)

// `KV_ASSIGN_OR_RETURN(auto x, F());` declares x from F()'s value, or returns
// F()'s error from the enclosing function.
#define KV_ASSIGN_OR_RETURN(lhs, expr) \
  KV_ASSIGN_OR_RETURN_IMPL(KV_STATUS_CONCAT(kv_statusor_, __LINE__), lhs, expr)
#define KV_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()

#endif  // KVTRAIN_BASE_STATUS_H_
