// Timeline tracing across processes: with KVTRAIN_TRACE=PREFIX set, every
// process of a job writes PREFIX.<pid>.json, Chrome trace-event JSON
// (chrome://tracing, Perfetto) stamped with CLOCK_MONOTONIC, which all
// processes of one host share, so a job's files merge into one timeline
// (tools/trace_report.py merges them and prints a per-step breakdown).
// Unset, every call is one relaxed load and a branch.
#ifndef KVTRAIN_BASE_TRACE_H_
#define KVTRAIN_BASE_TRACE_H_

#include <atomic>
#include <cstdint>
#include <string>

namespace kvtrain {
namespace trace {

namespace internal {
extern std::atomic<bool> enabled;
void Record(char phase, const char* cat, std::string name, int64_t begin_us, int64_t dur_us,
            int64_t arg);
}  // namespace internal

// Whether this process traces (KVTRAIN_TRACE was set at start-up).
inline bool Enabled() { return internal::enabled.load(std::memory_order_relaxed); }
// Microseconds on CLOCK_MONOTONIC.
int64_t NowUs();
// Names this process's track ("worker 0", "server 1").
void SetProcessName(const std::string& name);
// A point in time named `prefix` + `suffix` (joined only when tracing, so
// an untraced call allocates nothing); `arg` (e.g. bytes) is shown with it
// (-1: none). `cat` and `prefix` must outlive the call.
inline void Instant(const char* cat, const char* prefix, const std::string& suffix = "",
                    int64_t arg = -1) {
  if (Enabled()) internal::Record('i', cat, prefix + suffix, NowUs(), 0, arg);
}
// As Instant, stamped `at_us` (a NowUs() taken earlier): for an event whose
// name or argument is known only after the thing it marks (a request's
// timestamp is known once it is sent, and by then a peer may have handled it).
inline void InstantAt(int64_t at_us, const char* cat, const char* prefix,
                      const std::string& suffix = "", int64_t arg = -1) {
  if (Enabled()) internal::Record('i', cat, prefix + suffix, at_us, 0, arg);
}
// Writes what was recorded so far (also done at exit).
void Flush();

// A span on the calling thread, from construction to destruction, named
// `prefix` + `suffix` as Instant. Thread-compatible; `cat` must be a string
// literal.
class Scope {
 public:
  Scope(const char* cat, const char* prefix, const std::string& suffix = "",
        int64_t arg = -1) {
    if (Enabled()) {
      cat_ = cat;
      name_ = prefix + suffix;
      arg_ = arg;
      begin_ = NowUs();
    }
  }
  ~Scope() {
    if (cat_ != nullptr) internal::Record('X', cat_, std::move(name_), begin_, NowUs() - begin_, arg_);
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* cat_ = nullptr;
  std::string name_;
  int64_t arg_ = -1;
  int64_t begin_ = 0;
};

}  // namespace trace
}  // namespace kvtrain

#endif  // KVTRAIN_BASE_TRACE_H_
