// KVWorker/KVServer over the in-process van, when requests go wrong: bad
// requests refused before anything is sent, errors and deadlines naming the
// server, and answers that come after their Wait gave up.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "transport/ps/inproc_job.h"
#include "transport/ps/kv_app_testlib.h"
#include "transport/ps/postoffice_impl.h"

namespace kvtrain {
namespace ps {
namespace {

using kvapp_test::Cluster;
using kvapp_test::kLong;
using ::testing::HasSubstr;

TEST(KVAppTest, BadRequestsAreRejectedUpFront) {
  Cluster c(1, 1);
  KVWorker* w = c.workers_[0].get();
  auto unsorted = w->Push(
      KVPairs::From({5, 3}, Blob::FromVector(std::vector<float>{1, 2})));
  EXPECT_THAT(unsorted.status().message(), HasSubstr("sorted and unique"));
  auto uneven = w->Push(KVPairs::From({1, 2}, Blob::FromString("abc")));
  EXPECT_THAT(uneven.status().message(), HasSubstr("do not split equally"));
  auto lens = w->Push(
      KVPairs::From({1, 2}, Blob::FromVector(std::vector<float>{1}), {4, 4}));
  EXPECT_THAT(lens.status().message(), HasSubstr("lens add up to 8 bytes"));
  std::vector<char> buf(10);
  PullDest dest{buf.data(), buf.size(), Blob()};
  auto pull =
      w->Pull(Blob::FromVector(std::vector<uint64_t>{1, 2, 3}), {}, dest);
  EXPECT_THAT(pull.status().message(), HasSubstr("does not split equally"));
  // Per-key lengths that add up to the buffer's size only through a
  // negative entry or by wrapping around 2^64 would place a key's answer
  // past the buffer: refused before anything is sent.
  std::vector<char> buf16(16);
  const std::vector<std::pair<std::vector<int64_t>, std::string>> bad_lens = {
      {{24, -8}, "PullDest.lens: entry 1 is negative (-8)"},
      {{INT64_MAX, INT64_MAX, 18},
       "PullDest.lens add up to more than 2^64 bytes (at entry 2)"},
  };
  for (const auto& [l, want] : bad_lens) {
    PullDest d{buf16.data(), buf16.size(), Blob::FromVector(l)};
    std::vector<uint64_t> keys;
    for (size_t i = 0; i < l.size(); ++i) keys.push_back(i + 1);
    auto r = w->Pull(Blob::FromVector(keys), {}, d);
    EXPECT_THAT(r.status().message(), HasSubstr(want));
  }
  auto negative = w->Push(KVPairs::From(
      {1, 2}, Blob::FromVector(std::vector<float>{1, 2}), {12, -4}));
  EXPECT_THAT(negative.status().message(),
              HasSubstr("lens: entry 1 is negative (-4)"));
  EXPECT_EQ(w->Wait(12345, kLong).code(), Status::Code::kNotFound);
  EXPECT_EQ(KVServer::Create(c.job.worker(0), 1, [](auto&, auto&, auto*) {})
                .status()
                .code(),
            Status::Code::kFailedPrecondition);
  EXPECT_EQ(KVWorker::Create(c.job.worker(0), 0).status().code(),
            Status::Code::kAlreadyExists);
}

// A server that fails keys it dislikes, and never answers key 666.
void PickyHandler(const RequestMeta& meta, const KVPairs& kv, KVServer* s) {
  if (kv.num_keys() > 0 && kv.key(0) == 666) return;
  if (kv.num_keys() > 0 && kv.key(0) == 13) {
    s->RespondError(meta, Status::NotFound("key 13 was never initialised"));
    return;
  }
  s->Respond(meta);
}

TEST(KVAppTest, ErrorsAndDeadlinesNameTheServer) {
  InprocJobOptions o;
  InprocJob job(o);
  ASSERT_TRUE(job.CreateAll().ok());
  ASSERT_TRUE(job.StartAll().ok());
  auto server = KVServer::Create(job.server(0), 0, PickyHandler);
  ASSERT_TRUE(server.ok());
  auto worker = KVWorker::Create(job.worker(0), 0);
  ASSERT_TRUE(worker.ok());
  const std::string sname = job.server(0)->name();
  auto ts = (*worker)->Push(KVPairs::From({13}, Blob::FromString("abcd")));
  ASSERT_TRUE(ts.ok());
  Status s = (*worker)->Wait(*ts, kLong);
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
  EXPECT_EQ(s.message(), sname + ": key 13 was never initialised");
  auto silent = (*worker)->Pull(Blob::FromVector(std::vector<uint64_t>{666}));
  ASSERT_TRUE(silent.ok());
  s = (*worker)->Wait(*silent, std::chrono::milliseconds(100));
  EXPECT_EQ(s.code(), Status::Code::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("pull request"));
  EXPECT_THAT(s.message(), HasSubstr("by " + sname));
  // The timed-out request is cancelled: it cannot be waited for again.
  EXPECT_EQ((*worker)->Wait(*silent, kLong).code(), Status::Code::kNotFound);
  // The job fails while a request is still pending: Wait says why.
  silent = (*worker)->Pull(Blob::FromVector(std::vector<uint64_t>{666}));
  ASSERT_TRUE(silent.ok());
  job.net()->Isolate(job.server(0)->port());
  s = (*worker)->Wait(*silent, kLong);
  EXPECT_EQ(s.code(), Status::Code::kAborted) << s;
  EXPECT_THAT(s.message(), HasSubstr(sname + " is dead"));
}

// A Wait that times out cancels its request: the answer that arrives later
// is dropped, never copied into the buffer the caller gave (and may have
// freed by then).
// The server's answers, each held until the test lets it go: an answer
// made late by the test's order of events, not by a sleep.
class AnswerGate {
 public:
  // Called by the server's handler: answers `key` on its own thread once
  // Open(key) has been called.
  void Answer(const RequestMeta& meta, uint64_t key, KVServer* s) {
    std::lock_guard<std::mutex> l(mu_);
    threads_.emplace_back([this, meta, key, s] {
      {
        std::unique_lock<std::mutex> w(mu_);
        cv_.wait(w, [&] { return open_.count(key) > 0; });
      }
      EXPECT_TRUE(
          s->Respond(meta, KVPairs::From({key}, Blob::FromVector(std::vector<float>(4, 7))))
              .ok());
      std::lock_guard<std::mutex> d(mu_);
      answered_.insert(key);
      cv_.notify_all();
    });
  }
  void Open(uint64_t key) {
    std::lock_guard<std::mutex> l(mu_);
    open_.insert(key);
    cv_.notify_all();
  }
  // Returns once the answer to `key` has been handed to the transport.
  void WaitAnswered(uint64_t key) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return answered_.count(key) > 0; });
  }
  ~AnswerGate() {
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> l(mu_);
      threads.swap(threads_);
    }
    for (std::thread& t : threads) t.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::set<uint64_t> open_;
  std::set<uint64_t> answered_;
  std::vector<std::thread> threads_;
};

// A Wait that times out cancels its request: the answer that arrives later
// is dropped, never copied into the buffer the caller gave (and may have
// freed by then).
TEST(KVAppTest, AnswersAfterATimedOutWaitAreDropped) {
  InprocJobOptions o;
  InprocJob job(o);
  ASSERT_TRUE(job.CreateAll().ok());
  ASSERT_TRUE(job.StartAll().ok());
  AnswerGate gate;
  auto server = KVServer::Create(
      job.server(0), 0,
      [&](const RequestMeta& meta, const KVPairs& kv, KVServer* s) {
        gate.Answer(meta, kv.key(0), s);
      });
  ASSERT_TRUE(server.ok());
  auto worker = KVWorker::Create(job.worker(0), 0);
  ASSERT_TRUE(worker.ok());
  std::vector<float> buf(4, -1.0f);
  PullDest dest{reinterpret_cast<char*>(buf.data()), 16, Blob()};
  auto ts =
      (*worker)->Pull(Blob::FromVector(std::vector<uint64_t>{777}), {}, dest);
  ASSERT_TRUE(ts.ok());
  Status s = (*worker)->Wait(*ts, std::chrono::milliseconds(50));
  EXPECT_EQ(s.code(), Status::Code::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("(cancelled: a later answer is dropped)"));
  gate.Open(777);
  gate.WaitAnswered(777);
  // Proof that the late answer has been taken in (and dropped): an answer
  // sent after it over the same connection has arrived.
  auto probe = [&] {
    std::vector<float> p(4, -1.0f);
    PullDest pd{reinterpret_cast<char*>(p.data()), 16, Blob()};
    gate.Open(780);
    auto tp = (*worker)->Pull(Blob::FromVector(std::vector<uint64_t>{780}), {}, pd);
    ASSERT_TRUE(tp.ok());
    EXPECT_TRUE((*worker)->Wait(*tp, kLong).ok());
    EXPECT_EQ(p, std::vector<float>(4, 7.0f));
  };
  probe();
  EXPECT_EQ(buf, std::vector<float>(4, -1.0f));
  EXPECT_EQ((*worker)->Wait(*ts, kLong).code(), Status::Code::kNotFound);
  // The caller frees its buffer as soon as Wait gives up: a late answer
  // written there would be a heap-use-after-free (AddressSanitizer reports
  // it under tools/fuzz.sh's --config=fuzz).
  {
    auto heap = std::make_unique<float[]>(4);
    PullDest freed{reinterpret_cast<char*>(heap.get()), 16, Blob()};
    auto t2 = (*worker)->Pull(Blob::FromVector(std::vector<uint64_t>{779}), {},
                              freed);
    ASSERT_TRUE(t2.ok());
    EXPECT_EQ((*worker)->Wait(*t2, std::chrono::milliseconds(50)).code(),
              Status::Code::kDeadlineExceeded);
  }
  gate.Open(779);
  gate.WaitAnswered(779);
  probe();  // the late answer was taken in, and written nowhere
  // A request made after it is answered as usual.
  gate.Open(778);
  auto again =
      (*worker)->Pull(Blob::FromVector(std::vector<uint64_t>{778}), {}, dest);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE((*worker)->Wait(*again, kLong).ok());
  EXPECT_EQ(buf, std::vector<float>(4, 7.0f));
}

}  // namespace
}  // namespace ps
}  // namespace kvtrain
