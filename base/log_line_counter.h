// LogLineCounter: counts the WARNING and ERROR lines that one source file
// logs while it lives (tests of rate-limited logging).
#ifndef KVTRAIN_BASE_LOG_LINE_COUNTER_H_
#define KVTRAIN_BASE_LOG_LINE_COUNTER_H_

#include <atomic>
#include <ctime>
#include <string>

#include <glog/logging.h>

namespace kvtrain {

class LogLineCounter : public google::LogSink {
 public:
  // `file`: the logging file's base name, e.g. "mesh.cc".
  explicit LogLineCounter(const char* file) : file_(file) { google::AddLogSink(this); }
  ~LogLineCounter() override { google::RemoveLogSink(this); }
  void send(google::LogSeverity severity, const char* /*full*/, const char* base,
            int /*line*/, const struct ::tm* /*time*/, const char* /*msg*/,
            size_t /*len*/) override {
    if (severity >= google::GLOG_WARNING && file_ == base) ++lines_;
  }
  int lines() const { return lines_.load(); }

 private:
  const std::string file_;
  std::atomic<int> lines_{0};
};

}  // namespace kvtrain

#endif  // KVTRAIN_BASE_LOG_LINE_COUNTER_H_
