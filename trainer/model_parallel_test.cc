// Module with model parallelism across ranks (2 ranks in threads over
// in-memory PeerLinks): the per-batch losses and the trained weights equal
// one process training the whole graph; only rank 0 reports.
#include <cstdio>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "base/in_memory_peer_link.h"
#include "engine/models.h"
#include "trainer/module.h"

namespace kvtrain {
namespace {

constexpr int kBatch = 20;

std::unique_ptr<DataIter> Data() {
  const int n = 400, d = 8;
  Tensor x = Tensor::Empty({n, d}), y = Tensor::Empty({n});
  for (int i = 0; i < n; ++i) {
    const int c = i % 3;
    for (int j = 0; j < d; ++j) {
      x.data<float>()[i * d + j] = (c - 1.f) * (j % 2 ? 1 : -1) + 0.2f * ((i * 7 + j) % 5 - 2);
    }
    y.data<float>()[i] = static_cast<float>(c);
  }
  IterOptions o;
  o.batch_size = kBatch;
  o.scale = 1;
  o.shuffle = true;
  o.seed = 5;
  return std::move(NewArrayIter(x, y, o)).value();
}

std::vector<double> ReadLosses(const std::string& path) {
  std::ifstream in(path);
  std::vector<double> v;
  double x;
  while (in >> x) v.push_back(x);
  return v;
}

// Trains `net` (on rank `link->rank()` when `link` is set); returns the
// local parameters and whether the module reported.
Status Train(const Symbol& net, PeerLink* link, const std::string& loss_file,
             ModelArrays* arrays, bool* reported) {
  ModuleOptions mo;
  mo.peer_link = link;
  mo.group2rank = {{"stage0", 0}, {"stage1", 1}};
  KV_ASSIGN_OR_RETURN(auto m, Module::Create(net, mo));
  auto it = Data();
  KV_RETURN_IF_ERROR(m->Bind(it->data_shape(), {kBatch}));
  InitializerOptions init;
  init.type = InitializerOptions::Type::kXavier;
  init.seed = 9;
  KV_RETURN_IF_ERROR(m->InitParams(init));
  KV_ASSIGN_OR_RETURN(auto kv, KVStore::Create("local"));
  FitOptions fo;
  fo.num_epochs = 2;
  fo.optimizer.set_type(proto::OptimizerSpec::SGD);
  fo.optimizer.set_learning_rate(0.2f);
  fo.optimizer.set_momentum(0.9f);
  fo.disp_batches = 0;
  fo.metrics = {"accuracy", "cross-entropy"};
  fo.loss_file = loss_file;
  KV_RETURN_IF_ERROR(m->Fit(it.get(), it.get(), kv.get(), fo));
  KV_ASSIGN_OR_RETURN(MetricValues score, m->Score(it.get(), {"accuracy"}));
  *reported = m->has_output();
  if (m->has_output() && score[0].second < 0.9) {
    return Status::Internal("accuracy " + std::to_string(score[0].second));
  }
  KV_ASSIGN_OR_RETURN(*arrays, m->Arrays());
  return Status::OK();
}

TEST(ModelParallelTest, TwoRanksTrainLikeOneProcess) {
  const std::string dir = ::testing::TempDir();
  ModelArrays whole;
  bool reported = false;
  Status st = Train(models::Mlp({16, 12}, 3), nullptr, dir + "/whole.loss", &whole, &reported);
  ASSERT_TRUE(st.ok()) << st;
  const std::vector<double> expected = ReadLosses(dir + "/whole.loss");
  ASSERT_EQ(expected.size(), 40u);  // 2 epochs of 20 batches

  InMemoryPeerGroup group(2);
  ModelArrays parts[2];
  bool rep[2] = {false, false};
  Status status[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      status[r] = Train(models::MlpTwoStages({16, 12}, 3), group.link(r),
                        dir + "/split" + std::to_string(r) + ".loss", &parts[r], &rep[r]);
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(status[0].ok()) << status[0];
  ASSERT_TRUE(status[1].ok()) << status[1];
  EXPECT_TRUE(rep[0]);
  EXPECT_FALSE(rep[1]);
  EXPECT_FALSE(std::ifstream(dir + "/split1.loss").good());  // rank 1 writes none
  const std::vector<double> got = ReadLosses(dir + "/split0.loss");
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-5) << "step " << i;
  // Each rank holds its layers' parameters; together, the whole model's.
  EXPECT_EQ(parts[0].args.count("fc1_weight"), 1u);
  EXPECT_EQ(parts[0].args.count("fc2_weight"), 0u);
  EXPECT_EQ(parts[1].args.count("fc2_weight"), 1u);
  size_t total = 0;
  for (const ModelArrays& p : parts) {
    for (const auto& [name, t] : p.args) {
      ++total;
      ASSERT_EQ(whole.args.count(name), 1u) << name;
      const std::vector<float> a = t.ToVector(), b = whole.args.at(name).ToVector();
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5) << name << "[" << i << "]";
    }
  }
  EXPECT_EQ(total, whole.args.size());
  EXPECT_EQ(group.pending(), 0u);
}

}  // namespace
}  // namespace kvtrain
