// AttrReader: an op's attributes parsed from their text, each checked
// against its range, with what it read recorded for the op's docs.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "ops/operator.h"

namespace kvtrain {

const std::string* AttrReader::Find(const std::string& key) {
  asked_.push_back(key);
  auto it = attrs_.find(key);
  return it == attrs_.end() ? nullptr : &it->second;
}

namespace {

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

bool ParseInt64(const std::string& text, int64_t* out) {
  const std::string s = Trim(text);
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (*end != '\0' || errno != 0) return false;
  *out = v;
  return true;
}

}  // namespace

thread_local std::vector<AttrDoc>* AttrReader::recorder_ = nullptr;

void AttrReader::Record(const std::string& key, std::string kind,
                        std::string fallback, bool required) {
  for (const AttrDoc& d : *recorder_) {
    if (d.key == key) return;
  }
  recorder_->push_back({key, std::move(kind), std::move(fallback), required});
}

bool AttrReader::Absent(const std::string& key) {
  if (attrs_.count(key) != 0) return false;
  asked_.push_back(key);
  return true;
}

namespace {

std::string RangeText(int64_t min, int64_t max) {
  std::string out = "int";
  if (min > std::numeric_limits<int64_t>::min() / 2)
    out += " >= " + std::to_string(min);
  if (max < std::numeric_limits<int64_t>::max() / 2)
    out += ", <= " + std::to_string(max);
  return out;
}

}  // namespace

Status AttrReader::Int(const std::string& key, int64_t* out, int64_t min,
                       int64_t max) {
  if (recorder_ != nullptr) {
    Record(key, RangeText(min, max), "", true);
    if (Absent(key)) {
      *out = std::max<int64_t>(min, std::min<int64_t>(max, 1));
      return Status::OK();
    }
  }
  const std::string* v = Find(key);
  if (v == nullptr) {
    return Status::InvalidArgument(desc_ + ": missing attribute " + key);
  }
  int64_t x = 0;
  if (!ParseInt64(*v, &x) || x < min || x > max) {
    return Status::InvalidArgument(desc_ + ": attribute " + key + "=\"" + *v +
                                   "\": expected an integer in [" +
                                   std::to_string(min) + ", " +
                                   std::to_string(max) + "]");
  }
  *out = x;
  return Status::OK();
}

Status AttrReader::Int(const std::string& key, int64_t* out, int64_t min,
                       int64_t max, int64_t fallback) {
  if (recorder_ != nullptr)
    Record(key, RangeText(min, max), std::to_string(fallback), false);
  if (Absent(key)) {
    *out = fallback;
    return Status::OK();
  }
  return Int(key, out, min, max);
}

Status AttrReader::Float(const std::string& key, double* out, double min,
                         double max, double fallback) {
  if (recorder_ != nullptr) {
    // A fallback outside [min, max] marks a required value.
    const bool required = !(fallback >= min && fallback <= max);
    std::ostringstream f;
    if (!required) f << fallback;
    Record(key, "float", f.str(), required);
    if (required && Absent(key)) {
      *out = std::min(max, std::max(min, 1.0));
      return Status::OK();
    }
  }
  const std::string* v = Find(key);
  if (v == nullptr) {
    *out = fallback;
    return Status::OK();
  }
  const std::string s = Trim(*v);
  errno = 0;
  char* end = nullptr;
  const double x = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || errno != 0 || !std::isfinite(x) || x < min ||
      x > max) {
    std::ostringstream os;
    os << desc_ << ": attribute " << key << "=\"" << *v
       << "\": expected a number in [" << min << ", " << max << "]";
    return Status::InvalidArgument(os.str());
  }
  *out = x;
  return Status::OK();
}

Status AttrReader::Bool(const std::string& key, bool* out, bool fallback) {
  if (recorder_ != nullptr)
    Record(key, "bool", fallback ? "true" : "false", false);
  const std::string* v = Find(key);
  if (v == nullptr) {
    *out = fallback;
    return Status::OK();
  }
  const std::string s = Trim(*v);
  if (s == "1" || s == "true" || s == "True") {
    *out = true;
  } else if (s == "0" || s == "false" || s == "False") {
    *out = false;
  } else {
    return Status::InvalidArgument(desc_ + ": attribute " + key + "=\"" + *v +
                                   "\": expected true or false");
  }
  return Status::OK();
}

Status AttrReader::Enum(const std::string& key,
                        const std::vector<std::string>& choices, int* out,
                        int fallback) {
  if (recorder_ != nullptr) {
    std::string list;
    for (const std::string& c : choices) list += (list.empty() ? "" : ", ") + c;
    const bool required =
        fallback < 0 || fallback >= static_cast<int>(choices.size());
    Record(key, "one of " + list, required ? "" : choices[fallback], required);
    if (required && Absent(key)) {
      *out = 0;
      return Status::OK();
    }
  }
  const std::string* v = Find(key);
  if (v == nullptr) {
    *out = fallback;
    return Status::OK();
  }
  const std::string s = Trim(*v);
  for (size_t i = 0; i < choices.size(); ++i) {
    if (choices[i] == s) {
      *out = static_cast<int>(i);
      return Status::OK();
    }
  }
  std::string list;
  for (const std::string& c : choices) list += (list.empty() ? "" : ", ") + c;
  return Status::InvalidArgument(desc_ + ": attribute " + key + "=\"" + *v +
                                 "\": expected one of " + list);
}

namespace {

// "(5, 5)", "5,5", "(5,)" -> integers >= min; false on anything else.
bool ParseIntList(const std::string& text, int64_t min,
                  std::vector<int64_t>* out) {
  std::string s = Trim(text);
  if (!s.empty() && s.front() == '(' && s.back() == ')') {
    s = s.substr(1, s.size() - 2);
  }
  out->clear();
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, ',')) {
    int64_t x = 0;
    if (Trim(part).empty() && ss.eof() && !out->empty()) break;  // "(5,)"
    if (!ParseInt64(part, &x) || x < min) return false;
    out->push_back(x);
  }
  return !out->empty();
}

}  // namespace

Status AttrReader::IntList(const std::string& key, int64_t min,
                           std::vector<int64_t>* out, bool* present) {
  if (recorder_ != nullptr) {
    Record(key, "list of ints >= " + std::to_string(min), "", false);
    if (Absent(key)) {
      *present = true;
      out->assign(1, std::max<int64_t>(min, 1));
      return Status::OK();
    }
  }
  const std::string* v = Find(key);
  *present = v != nullptr;
  if (v == nullptr) return Status::OK();
  if (!ParseIntList(*v, min, out)) {
    return Status::InvalidArgument(desc_ + ": attribute " + key + "=\"" + *v +
                                   "\": expected a list of integers >= " +
                                   std::to_string(min) + ", e.g. (2, 3)");
  }
  return Status::OK();
}

Status AttrReader::Tuple(const std::string& key, int n, int64_t min,
                         std::vector<int64_t>* out, bool* present) {
  if (recorder_ != nullptr) {
    Record(key,
           "tuple of " + std::to_string(n) + " ints >= " + std::to_string(min),
           "", false);
    // A placeholder, so that the factory reads on (it decides whether the
    // key is required; the docs say "optional" for every tuple).
    if (Absent(key)) {
      *present = true;
      out->assign(n, std::max<int64_t>(min, 0));
      return Status::OK();
    }
  }
  const std::string* v = Find(key);
  *present = v != nullptr;
  if (v == nullptr) return Status::OK();
  std::vector<int64_t> vals;
  const bool ok = ParseIntList(*v, min, &vals);
  if (vals.size() == 1 && n > 1) vals.assign(n, vals[0]);
  if (!ok || static_cast<int>(vals.size()) != n) {
    return Status::InvalidArgument(
        desc_ + ": attribute " + key + "=\"" + *v + "\": expected " +
        std::to_string(n) + " integers >= " + std::to_string(min) + ", e.g. (" +
        std::to_string(std::max<int64_t>(min, 2)) +
        (n == 2 ? ", " + std::to_string(std::max<int64_t>(min, 2)) : "") + ")");
  }
  *out = std::move(vals);
  return Status::OK();
}

Status AttrReader::Finish() const {
  for (const auto& [key, value] : attrs_) {
    if (std::find(asked_.begin(), asked_.end(), key) != asked_.end()) continue;
    std::vector<std::string> accepted = asked_;
    std::sort(accepted.begin(), accepted.end());
    accepted.erase(std::unique(accepted.begin(), accepted.end()),
                   accepted.end());
    std::string list;
    for (const std::string& a : accepted)
      list += (list.empty() ? "" : ", ") + a;
    return Status::InvalidArgument(
        desc_ + ": unknown attribute \"" + key +
        "\"; accepted: " + (list.empty() ? "none" : list));
  }
  return Status::OK();
}

}  // namespace kvtrain
