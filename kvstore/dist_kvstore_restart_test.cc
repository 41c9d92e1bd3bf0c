// Workers started again (KVTRAIN_WORKER_RESTARTS) inside one process: a
// worker cut off the network mid-step, after pushing some of its keys, and
// a new one put in its place that rejoins the running job at the step the
// servers are at; the job ends with the weights and optimizer states of a
// job where nothing died. The same with real processes, SIGKILL and
// launch.py --max-restarts: tests/faults/worker_restart_test.py.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <future>
#include <thread>

#include <gmock/gmock.h>

#include "base/file.h"
#include "kvstore/dist_fixture_testlib.h"
#include "kvstore/kvstore.h"
#include "proto/optimizer.pb.h"

namespace kvtrain {
namespace {

using testing::HasSubstr;

constexpr int kSteps = 8;
const std::vector<int64_t> kSizes = {1, 37, 5000};  // the bound below is 1000

struct Outcome {
  std::vector<std::vector<float>> values;  // worker 0's last pull, by key
  std::string states;
  std::string table;  // a row-sparse table saved at the end (some tests)
  std::vector<int64_t> resumed;  // ResumeStep of each worker process
};

// Where a worker dies: at step `at`, after pushing its first `pushed`
// keys of that step (then cut off the network).
struct Death {
  int rank = -1;
  int at = 0;
  int pushed = 0;
};

std::vector<Key> Keys() {
  std::vector<Key> keys;
  for (size_t i = 0; i < kSizes.size(); ++i) keys.push_back("k" + std::to_string(i));
  return keys;
}

// The gradient of step t depends on the weights it was computed on, so a
// worker that went on from the wrong ones would change the result.
Tensor Gradient(const Tensor& w, int rank, int t) {
  Tensor g = Tensor::Empty(w.shape());
  const float* pw = w.data<float>();
  float* p = g.data<float>();
  for (int64_t j = 0; j < w.size(); ++j) {
    p[j] = 0.05f * pw[j] + 0.1f * (rank + 1) / (t + j % 7) + 1e-3f * j;
  }
  return g;
}

// One worker process's life: Init, the optimizer, then steps until the
// end or its death. `po` is its node.
Status WorkerLife(KVStore* kv, const Death& death, std::atomic<bool>* died, std::vector<int64_t>* resumed,
                  Outcome* out, const std::string& states, ps::InprocJob* job,
                  ps::Postoffice* po) {
  const std::vector<Key> keys = Keys();
  std::vector<Tensor> init;
  for (int64_t n : kSizes) init.push_back(kv_test::Filled(n, 0.25f));
  KV_RETURN_IF_ERROR(kv->Init(keys, init));
  proto::OptimizerSpec sgd;
  sgd.set_type(proto::OptimizerSpec::SGD);
  sgd.set_learning_rate(0.1f);
  sgd.set_momentum(0.9f);
  KV_RETURN_IF_ERROR(kv->SetOptimizer(sgd));
  std::vector<Tensor> w;
  for (int64_t n : kSizes) w.push_back(Tensor::Zeros({n}));
  KV_RETURN_IF_ERROR(kv->Pull(keys, w));
  const int64_t resume = kv->ResumeStep();
  resumed->push_back(resume);
  const int rank = kv->rank();
  for (int t = static_cast<int>(resume < 0 ? 1 : resume + 1); t <= kSteps; ++t) {
    std::vector<Tensor> grads;
    for (const Tensor& wk : w) grads.push_back(Gradient(wk, rank, t));
    if (rank == death.rank && t == death.at && !*died) {
      *died = true;
      for (int k = 0; k < death.pushed; ++k) {
        KV_RETURN_IF_ERROR(kv->PushAsync({keys[k]}, {grads[k]}, 0).status());
      }
      kv->Flush();
      // Delivered (the in-process network queues at once), then cut off.
      job->net()->Isolate(po->port());
      return Status::OK();
    }
    KV_RETURN_IF_ERROR(kv->PushPull(keys, grads, w, -t));
  }
  if (rank == 0) {
    KV_RETURN_IF_ERROR(kv->SaveOptimizerStates(states));
    for (const Tensor& o : w) out->values.push_back(o.ToVector());
  }
  return Status::OK();
}

Outcome Train(const Death& death, const std::string& name, int servers = 2, int replicas = 0) {
  const std::string states = std::string(std::getenv("TEST_TMPDIR")) + "/restart_" + name;
  ps::InprocJobOptions o = kv_test::DistFixture::Options(servers, 2, replicas);
  o.worker_restarts = 1;
  o.rejoin_timeout_s = 30;
  ps::InprocJob job(o);
  Outcome out;
  EXPECT_TRUE(job.CreateAll().ok());
  EXPECT_TRUE(job.StartAll().ok());
  const std::map<std::string, std::string> env = {{"KVTRAIN_BIGARRAY_BOUND", "1000"}};
  auto store = [&](ps::Postoffice* po) {
    KVStoreOptions opts;
    opts.env = MapEnv(env);
    opts.postoffice = po;
    return KVStore::Create("dist_sync", opts);
  };
  std::mutex mu;
  std::atomic<bool> died{false};
  std::vector<std::future<Status>> done;
  std::vector<ps::Postoffice*> nodes;
  for (const auto& node : job.nodes()) nodes.push_back(node.get());
  for (ps::Postoffice* po : nodes) {
    done.push_back(std::async(std::launch::async, [&, po]() -> Status {
      KV_ASSIGN_OR_RETURN(std::unique_ptr<KVStore> kv, store(po));
      if (!kv->is_worker()) return kv->RunServer();
      std::vector<int64_t> resumed;
      KV_RETURN_IF_ERROR(WorkerLife(kv.get(), death, &died, &resumed, &out, states, &job, po));
      {
        std::lock_guard<std::mutex> l(mu);
        out.resumed.insert(out.resumed.end(), resumed.begin(), resumed.end());
      }
      if (kv->rank() == death.rank && died && po->incarnation() == 0) return Status::OK();
      return kv->Finalize();
    }));
  }
  Status again;
  if (death.rank >= 0) {
    // The dead worker's place: a new process (node) of the same role.
    while (!died) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    StatusOr<ps::Postoffice*> po = job.AddNode(job.ConfigFor(Role::kWorker));
    EXPECT_TRUE(po.ok()) << po.status();
    again = (*po)->Start();
    EXPECT_TRUE(again.ok()) << again;
    if (again.ok()) {
      EXPECT_EQ((*po)->incarnation(), 1);
      EXPECT_EQ((*po)->rank(), death.rank);
      StatusOr<std::unique_ptr<KVStore>> kv = store(*po);
      EXPECT_TRUE(kv.ok()) << kv.status();
      std::vector<int64_t> resumed;
      Status s = WorkerLife(kv->get(), death, &died, &resumed, &out, states, &job, *po);
      if (s.ok()) s = (*kv)->Finalize();
      EXPECT_TRUE(s.ok()) << s;
      out.resumed.insert(out.resumed.end(), resumed.begin(), resumed.end());
    }
  }
  for (size_t i = 0; i < done.size(); ++i) {
    const Status s = done[i].get();
    // The cut-off process may fail on its own (it cannot hear the job).
    if (death.rank >= 0 && nodes[i]->role() == Role::kWorker && nodes[i]->rank() == death.rank) {
      continue;
    }
    EXPECT_TRUE(s.ok()) << nodes[i]->name() << ": " << s;
  }
  StatusOr<std::string> bytes = ReadWholeFile(states);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  if (bytes.ok()) out.states = *bytes;
  return out;
}

bool SameBits(const Outcome& a, const Outcome& b) {
  return !a.values.empty() && kv_test::SameBits(a.values, b.values);
}

TEST(DistKVStoreRestartTest, AWorkerStartedAgainChangesNoBit) {
  const Outcome plain = Train({}, "plain");
  ASSERT_EQ(plain.values.size(), kSizes.size());
  EXPECT_EQ(plain.resumed, (std::vector<int64_t>{-1, -1}));
  struct Case {
    Death death;
    int64_t resumed;  // the step the new process goes on after
  };
  const std::vector<Case> cases = {
      // Worker 1 pushed one key of step 4: that key completed step 4 with
      // worker 0's push, the others did not; the job is at step 3.
      {{1, 4, 1}, 3},
      // Worker 0, which initialised the keys, between two steps.
      {{0, 3, 0}, 2},
      // Worker 1 pushed every key of step 5 and died before the answers.
      {{1, 5, 3}, 5},
  };
  for (const Case& c : cases) {
    const std::string name = "w" + std::to_string(c.death.rank) + "_" +
                             std::to_string(c.death.at) + "_" + std::to_string(c.death.pushed);
    const Outcome again = Train(c.death, name);
    EXPECT_TRUE(SameBits(plain, again)) << name;
    EXPECT_TRUE(plain.states == again.states) << name;
    EXPECT_THAT(again.resumed, testing::Contains(c.resumed)) << name;
  }
  // With server replicas (3 servers, each range on two): the copies keep
  // the previous values too, and forget the dead process's requests.
  const Outcome three = Train({}, "plain3", 3);
  const Outcome replicated = Train({1, 4, 1}, "replicated", 3, 1);
  EXPECT_TRUE(SameBits(three, replicated));
  EXPECT_TRUE(three.states == replicated.states);
}

// The row ids worker `rank` pushes at step t (over every server), and
// their gradient rows (width 4).
std::vector<int64_t> TableIds(int rank, int t) {
  std::vector<int64_t> ids;
  for (int i = 0; i < 9; ++i) ids.push_back(((t * 5 + rank * 3 + i * 7) % 40) * 7919);
  return ids;
}

Tensor TableRows(int rank, int t) {
  std::vector<float> rows;
  for (int i = 0; i < 9; ++i) {
    for (int j = 0; j < 4; ++j) rows.push_back(0.01f * ((t + rank + i + j) % 9) - 0.04f);
  }
  return Tensor::FromVector(rows, Shape({9, 4}));
}

// 3 servers, each range on two; server 1 cut off before step 3 and a new
// process put in its place, which copies ranges 0 and 1 from their
// primaries (dense keys and a row-sparse table with Adam's state); once it
// is a copy again, server 2 (range 1's primary since then) is cut off too,
// so range 1 lives on the new process alone.
Outcome TrainLosingServers(bool lose, const std::string& name) {
  const std::string states = std::string(std::getenv("TEST_TMPDIR")) + "/servers_" + name;
  const std::string table = std::string(std::getenv("TEST_TMPDIR")) + "/table_" + name;
  ps::InprocJobOptions o = kv_test::DistFixture::Options(3, 2, 1);
  o.worker_restarts = 1;
  ps::InprocJob job(o);
  Outcome out;
  EXPECT_TRUE(job.CreateAll().ok());
  EXPECT_TRUE(job.StartAll().ok());
  const std::map<std::string, std::string> env = {{"KVTRAIN_BIGARRAY_BOUND", "1000"}};
  auto store = [&](ps::Postoffice* po) {
    KVStoreOptions opts;
    opts.env = MapEnv(env);
    opts.postoffice = po;
    return KVStore::Create("dist_sync", opts);
  };
  std::vector<ps::Postoffice*> nodes;
  for (const auto& node : job.nodes()) nodes.push_back(node.get());
  ps::Postoffice* server1 = job.server(1);
  ps::Postoffice* server2 = job.server(2);
  std::future<Status> again;
  std::vector<std::future<Status>> done;
  for (ps::Postoffice* po : nodes) {
    done.push_back(std::async(std::launch::async, [&, po]() -> Status {
      KV_ASSIGN_OR_RETURN(std::unique_ptr<KVStore> kv, store(po));
      if (!kv->is_worker()) return kv->RunServer();
      const std::vector<Key> keys = Keys();
      std::vector<Tensor> init;
      for (int64_t n : kSizes) init.push_back(kv_test::Filled(n, 0.25f));
      KV_RETURN_IF_ERROR(kv->Init(keys, init));
      proto::OptimizerSpec sgd;
      sgd.set_type(proto::OptimizerSpec::SGD);
      sgd.set_learning_rate(0.1f);
      sgd.set_momentum(0.9f);
      KV_RETURN_IF_ERROR(kv->SetOptimizer(sgd));
      proto::SparseTableSpec spec;
      spec.set_width(4);
      spec.set_init(proto::SparseTableSpec::NORMAL);
      spec.set_scale(0.1f);
      spec.set_seed(3);
      spec.mutable_optimizer()->set_type(proto::OptimizerSpec::ADAM);
      spec.mutable_optimizer()->set_learning_rate(0.01f);
      KV_RETURN_IF_ERROR(kv->InitRowSparse("emb", spec));
      std::vector<Tensor> w;
      for (int64_t n : kSizes) w.push_back(Tensor::Zeros({n}));
      KV_RETURN_IF_ERROR(kv->Pull(keys, w));
      const int rank = kv->rank();
      for (int t = 1; t <= kSteps; ++t) {
        if (lose && rank == 0 && t == 3) {
          job.net()->Isolate(server1->port());
          NodeConfig c = job.ConfigFor(Role::kServer);
          c.requested_rank = 1;
          StatusOr<ps::Postoffice*> fresh = job.AddNode(c);
          KV_RETURN_IF_ERROR(fresh.status());
          ps::Postoffice* np = *fresh;
          again = std::async(std::launch::async, [np, &store]() -> Status {
            KV_RETURN_IF_ERROR(np->Start());
            KV_ASSIGN_OR_RETURN(std::unique_ptr<KVStore> kv, store(np));
            return kv->RunServer();
          });
        }
        if (lose && rank == 0 && t == 6) {
          // Once every node counts the new process as range 1's copy.
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
          while (po->RangeServerRanks(1) != std::vector<int>{2, 1} &&
                 std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          EXPECT_EQ(po->RangeServerRanks(1), (std::vector<int>{2, 1}));
          job.net()->Isolate(server2->port());
        }
        std::vector<Tensor> grads;
        for (const Tensor& wk : w) grads.push_back(Gradient(wk, rank, t));
        KV_RETURN_IF_ERROR(kv->PushPull(keys, grads, w, -t));
        const std::vector<int64_t> ids = TableIds(rank, t);
        KV_RETURN_IF_ERROR(kv->PushRowSparse("emb", kv_test::Ids(ids), TableRows(rank, t)));
        Tensor rows = Tensor::Zeros({static_cast<int64_t>(ids.size()), 4});
        KV_RETURN_IF_ERROR(kv->RowSparsePull("emb", kv_test::Ids(ids), rows));
      }
      if (rank == 0) {
        KV_RETURN_IF_ERROR(kv->SaveRowSparse("emb", table));
        KV_RETURN_IF_ERROR(kv->SaveOptimizerStates(states));
        for (const Tensor& o : w) out.values.push_back(o.ToVector());
      }
      return kv->Finalize();
    }));
  }
  for (size_t i = 0; i < done.size(); ++i) {
    const Status s = done[i].get();
    if (lose && (nodes[i] == server1 || nodes[i] == server2)) continue;  // cut off
    EXPECT_TRUE(s.ok()) << nodes[i]->name() << ": " << s;
  }
  if (again.valid()) {
    const Status s = again.get();
    EXPECT_TRUE(s.ok()) << s;
  }
  StatusOr<std::string> bytes = ReadWholeFile(states);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  if (bytes.ok()) out.states = *bytes;
  StatusOr<std::string> rows = ReadWholeFile(table);
  EXPECT_TRUE(rows.ok()) << rows.status();
  if (rows.ok()) out.table = *rows;
  return out;
}

TEST(DistKVStoreRestartTest, AServerStartedAgainIsACopyAgain) {
  const Outcome plain = TrainLosingServers(false, "plain");
  const Outcome lost = TrainLosingServers(true, "lost");
  ASSERT_EQ(plain.values.size(), kSizes.size());
  EXPECT_TRUE(SameBits(plain, lost));
  EXPECT_TRUE(plain.states == lost.states);
  // The table's rows, Adam's state and recency, byte for byte.
  ASSERT_FALSE(plain.table.empty());
  EXPECT_TRUE(plain.table == lost.table);
}

TEST(DistKVStoreRestartTest, AWorkerNotBackInTimeEndsTheJob) {
  ps::InprocJobOptions o = kv_test::DistFixture::Options(1, 2);
  o.worker_restarts = 1;
  o.rejoin_timeout_s = 0.5;
  ps::InprocJob job(o);
  ASSERT_TRUE(job.CreateAll().ok());
  ASSERT_TRUE(job.StartAll().ok());
  std::vector<std::future<Status>> done;
  for (const auto& node : job.nodes()) {
    ps::Postoffice* po = node.get();
    done.push_back(std::async(std::launch::async, [&job, po]() -> Status {
      KVStoreOptions opts;
      opts.postoffice = po;
      KV_ASSIGN_OR_RETURN(std::unique_ptr<KVStore> kv, KVStore::Create("dist_sync", opts));
      if (!kv->is_worker()) return kv->RunServer();
      KV_RETURN_IF_ERROR(kv->Init({"w"}, {kv_test::Filled(4, 1.0f)}));
      if (kv->rank() == 1) {
        job.net()->Isolate(po->port());
        return Status::OK();
      }
      Tensor out = Tensor::Zeros({4});
      return kv->PushPull({"w"}, {kv_test::Filled(4, 1.0f)}, {out}, 0);
    }));
  }
  Status worker0;
  for (size_t i = 0; i < done.size(); ++i) {
    const Status s = done[i].get();
    if (job.nodes()[i]->role() == Role::kWorker && job.nodes()[i]->rank() == 0) worker0 = s;
  }
  EXPECT_FALSE(worker0.ok());
  EXPECT_THAT(worker0.message(), HasSubstr("worker 1"));
  EXPECT_THAT(worker0.message(), HasSubstr("was not started again within 0.5"));
}

}  // namespace
}  // namespace kvtrain
