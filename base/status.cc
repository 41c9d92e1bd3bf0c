// Status formatting.
#include "base/status.h"

namespace kvtrain {

const char* StatusCodeName(Status::Code code) {
  switch (code) {
    case Status::Code::kOk:
      return "OK";
    case Status::Code::kInvalidArgument:
      return "Invalid argument";
    case Status::Code::kNotFound:
      return "Not found";
    case Status::Code::kUnavailable:
      return "Unavailable";
    case Status::Code::kDeadlineExceeded:
      return "Deadline exceeded";
    case Status::Code::kInternal:
      return "Internal";
    case Status::Code::kAlreadyExists:
      return "Already exists";
    case Status::Code::kFailedPrecondition:
      return "Failed precondition";
    case Status::Code::kDataLoss:
      return "Data loss";
    case Status::Code::kAborted:
      return "Aborted";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

Status Status::Annotate(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

std::ostream& operator<<(std::ostream& os, const Status& s) {
  return os << s.ToString();
}

}  // namespace kvtrain
