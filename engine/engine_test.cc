// The dependency engine: ordering by read/write dependencies, concurrent
// readers, the I/O pool beside the compute worker, error propagation,
// timeouts, naive mode, KVTRAIN_ENGINE parsing.
#include "engine/engine.h"

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

namespace kvtrain {
namespace {

using std::chrono::milliseconds;

std::unique_ptr<Engine> Make(Engine::Mode mode) {
  Engine::Options o;
  o.mode = mode;
  auto e = Engine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status();
  return std::move(e).value();
}

const auto kCompute = Engine::Queue::kCompute;
const auto kIo = Engine::Queue::kIo;

TEST(EngineTest, ReadsAndWritesRunInDependencyOrder) {
  for (auto mode : {Engine::Mode::kThreaded, Engine::Mode::kNaive}) {
    auto engine = Make(mode);
    Engine::Var* x = engine->NewVar("x");
    int value = 0;
    std::vector<int> seen;
    std::mutex mu;
    for (int round = 1; round <= 50; ++round) {
      // A slow writer on the I/O pool, then readers on the compute worker:
      // each reader must see its round's value.
      engine->Push([&, round] {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        value = round;
        return Status::OK();
      }, {}, {x}, Device::CPU(), kIo, "write");
      engine->Push([&] {
        std::lock_guard<std::mutex> lock(mu);
        seen.push_back(value);
        return Status::OK();
      }, {x}, {}, Device::CPU(), kCompute, "read");
    }
    ASSERT_TRUE(engine->WaitForAll(milliseconds(20000)).ok());
    ASSERT_EQ(seen.size(), 50u);
    for (int i = 0; i < 50; ++i) EXPECT_EQ(seen[i], i + 1);
    engine->DeleteVar(x);
  }
}

TEST(EngineTest, ReadersOfOneVarRunConcurrently) {
  Engine::Options o;
  o.mode = Engine::Mode::kThreaded;
  o.io_threads = 2;
  auto engine = std::move(Engine::Create(o)).value();
  Engine::Var* x = engine->NewVar("x");
  std::atomic<int> inside{0};
  std::atomic<bool> both{false};
  auto reader = [&] {
    ++inside;
    // Each waits (bounded) for the other: only possible if they overlap.
    for (int i = 0; i < 2000 && inside.load() < 2; ++i) {
      std::this_thread::sleep_for(milliseconds(1));
    }
    if (inside.load() == 2) both = true;
    return Status::OK();
  };
  Completion a = engine->Push(reader, {x}, {}, Device::CPU(), kIo, "r1");
  Completion b = engine->Push(reader, {x}, {}, Device::CPU(), kIo, "r2");
  ASSERT_TRUE(a.Wait(milliseconds(10000)).ok());
  ASSERT_TRUE(b.Wait(milliseconds(10000)).ok());
  EXPECT_TRUE(both.load());
  engine->DeleteVar(x);
}

TEST(EngineTest, IoOpRunsWhileComputeWorkerIsBusy) {
  auto engine = Make(Engine::Mode::kThreaded);
  Engine::Var* grad = engine->NewVar("grad");
  Engine::Var* below = engine->NewVar("below");
  std::atomic<bool> sent{false};
  // "Layer k's gradient", then "layer k-1's backward", which can only finish
  // once the I/O op that reads layer k's gradient has run beside it.
  engine->Push([] { return Status::OK(); }, {}, {grad}, Device::CPU(), kCompute,
               "backward k");
  Completion compute = engine->Push([&] {
    for (int i = 0; i < 5000 && !sent.load(); ++i) {
      std::this_thread::sleep_for(milliseconds(1));
    }
    return sent.load() ? Status::OK() : Status::Internal("no overlap");
  }, {}, {below}, Device::CPU(), kCompute, "backward k-1");
  engine->Push([&] {
    sent = true;
    return Status::OK();
  }, {grad}, {}, Device::CPU(), kIo, "push gradient k");
  EXPECT_TRUE(compute.Wait(milliseconds(20000)).ok());
  engine->DeleteVar(grad);
  engine->DeleteVar(below);
}

TEST(EngineTest, ErrorsSkipDependentsAndClearOnRewrite) {
  for (auto mode : {Engine::Mode::kThreaded, Engine::Mode::kNaive}) {
    auto engine = Make(mode);
    Engine::Var* x = engine->NewVar("x");
    Engine::Var* y = engine->NewVar("y");
    bool ran = false;
    engine->Push([] { return Status::InvalidArgument("bad input"); }, {}, {x},
                 Device::CPU(), kCompute, "producer");
    Completion c = engine->Push([&] {
      ran = true;
      return Status::OK();
    }, {x}, {y}, Device::CPU(), kCompute, "consumer");
    EXPECT_EQ(c.Wait(milliseconds(10000)).message(), "bad input");
    EXPECT_FALSE(ran);
    EXPECT_EQ(engine->WaitForVar(y, milliseconds(10000)).message(), "bad input");
    engine->ClearErrors({x, y});
    EXPECT_TRUE(engine->WaitForVar(y, milliseconds(10000)).ok());
    // A successful write clears a var's error too.
    engine->Push([] { return Status::Internal("again"); }, {}, {x},
                 Device::CPU(), kCompute, "p2");
    engine->Push([] { return Status::OK(); }, {}, {x}, Device::CPU(), kCompute,
                 "p3");
    EXPECT_TRUE(engine->WaitForVar(x, milliseconds(10000)).ok());
    engine->DeleteVar(x);
    engine->DeleteVar(y);
  }
}

TEST(EngineTest, WaitsTimeOutNamingTheOp) {
  auto engine = Make(Engine::Mode::kThreaded);
  std::atomic<bool> release{false};
  Completion c = engine->Push([&] {
    while (!release.load()) std::this_thread::sleep_for(milliseconds(1));
    return Status::OK();
  }, {}, {}, Device::CPU(), kIo, "slow op");
  EXPECT_EQ(c.Wait(milliseconds(20)).message(),
            "engine: op \"slow op\" not finished after 20 ms");
  const Status all = engine->WaitForAll(milliseconds(20));
  EXPECT_EQ(all.code(), Status::Code::kDeadlineExceeded);
  EXPECT_NE(all.message().find("slow op"), std::string::npos) << all;
  release = true;
  EXPECT_TRUE(c.Wait(milliseconds(10000)).ok());
}

TEST(EngineTest, NaiveModeRunsInTheCallersThread) {
  auto engine = Make(Engine::Mode::kNaive);
  std::thread::id where;
  Completion c = engine->Push([&] {
    where = std::this_thread::get_id();
    return Status::OK();
  }, {}, {}, Device::CPU(), kIo, "op");
  EXPECT_TRUE(c.done());
  EXPECT_EQ(where, std::this_thread::get_id());
}

TEST(EngineTest, ModeFromEnvironment) {
  EXPECT_EQ(*EngineModeFromEnv(MapEnv({})), Engine::Mode::kThreaded);
  EXPECT_EQ(*EngineModeFromEnv(MapEnv({{"KVTRAIN_ENGINE", "naive"}})),
            Engine::Mode::kNaive);
  Engine::Options o;
  o.env = MapEnv({{"KVTRAIN_ENGINE", "fast"}});
  EXPECT_EQ(Engine::Create(o).status().message(),
            "KVTRAIN_ENGINE=\"fast\": expected threaded or naive");
}

}  // namespace
}  // namespace kvtrain
