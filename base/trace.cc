// The process's trace buffer and its JSON file (see trace.h).
#include "base/trace.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "base/env.h"

namespace kvtrain {
namespace trace {
namespace {

struct Event {
  char phase;
  const char* cat;
  std::string name;
  int64_t ts, dur, arg;
  int tid;
};

// Buffers events; written to PREFIX.<pid>.json at Flush / exit.
struct Tracer {
  std::mutex mu;
  std::string path;
  // Opened once, as a new file (never through a link or over an existing
  // file: the name is predictable), and kept open.
  std::FILE* file = nullptr;
  bool failed = false;
  std::string process_name;
  std::vector<Event> events;
  bool written_header = false;
};

Tracer* Get() {
  static Tracer* t = new Tracer;  // never destroyed: used from atexit
  return t;
}

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out;
}

void WriteOut() {
  Tracer* t = Get();
  std::lock_guard<std::mutex> l(t->mu);
  if (t->path.empty() || t->failed) return;
  if (t->file == nullptr) {
    const int fd = open(t->path.c_str(),
                        O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    t->file = fd < 0 ? nullptr : fdopen(fd, "w");
    if (t->file == nullptr) {
      std::fprintf(stderr, "%s: cannot create %s (%s); no trace is written%s\n",
                   env::kTrace, t->path.c_str(), std::strerror(errno),
                   errno == EEXIST ? ": a file or link is already there" : "");
      if (fd >= 0) close(fd);
      t->failed = true;
      t->events.clear();
      return;
    }
  }
  std::FILE* f = t->file;
  if (!t->written_header) {
    std::fprintf(f, "{\"traceEvents\":[\n");
    std::fprintf(f,
                 "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"tid\":0,"
                 "\"args\":{\"name\":\"%s\"}}",
                 static_cast<int>(getpid()), Escape(t->process_name).c_str());
    t->written_header = true;
  } else {
    std::fseek(f, -3, SEEK_END);  // over the closing "]}\n"
  }
  for (const Event& e : t->events) {
    std::fprintf(f, ",\n{\"ph\":\"%c\",\"cat\":\"%s\",\"name\":\"%s\",\"pid\":%d,\"tid\":%d,"
                 "\"ts\":%lld",
                 e.phase, e.cat, Escape(e.name).c_str(), static_cast<int>(getpid()), e.tid,
                 static_cast<long long>(e.ts));
    if (e.phase == 'X') std::fprintf(f, ",\"dur\":%lld", static_cast<long long>(e.dur));
    if (e.phase == 'i') std::fprintf(f, ",\"s\":\"t\"");
    if (e.arg >= 0) std::fprintf(f, ",\"args\":{\"n\":%lld}", static_cast<long long>(e.arg));
    std::fprintf(f, "}");
  }
  std::fprintf(f, "]}\n");
  std::fflush(f);
  t->events.clear();
}

bool Init() {
  const char* prefix = std::getenv(env::kTrace);
  if (prefix == nullptr || *prefix == '\0') return false;
  Get()->path = std::string(prefix) + "." + std::to_string(getpid()) + ".json";
  Get()->process_name = "pid " + std::to_string(getpid());
  std::atexit(WriteOut);
  return true;
}

}  // namespace

namespace internal {

std::atomic<bool> enabled{Init()};

void Record(char phase, const char* cat, std::string name, int64_t begin_us, int64_t dur_us,
            int64_t arg) {
  static thread_local int tid = static_cast<int>(syscall(SYS_gettid));
  Tracer* t = Get();
  bool flush;
  {
    std::lock_guard<std::mutex> l(t->mu);
    t->events.push_back({phase, cat, std::move(name), begin_us, dur_us, arg, tid});
    flush = t->events.size() >= (1 << 16);
  }
  if (flush) WriteOut();
}

}  // namespace internal

int64_t NowUs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

void SetProcessName(const std::string& name) {
  if (!Enabled()) return;
  std::lock_guard<std::mutex> l(Get()->mu);
  Get()->process_name = name;
}

void Flush() {
  if (Enabled()) WriteOut();
}

}  // namespace trace
}  // namespace kvtrain
