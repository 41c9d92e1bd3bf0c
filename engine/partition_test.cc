// Model parallelism across ranks: an MLP split over 2 ranks (threads over
// in-memory PeerLinks) computes the same outputs and gradients as the whole
// graph in one executor, with the threaded and the naive engine; placement
// errors and a silent peer are clear errors.
#include <map>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "base/in_memory_peer_link.h"
#include "engine/executor.h"

namespace kvtrain {
namespace {

constexpr int kBatch = 6;

// data -> fc1 (rank 0) -> relu, fc2, relu, fc3 (rank 1) -> softmax (rank 0),
// as ChainerMN's model-parallel MNIST example.
Symbol SplitMlp() {
  Symbol x = Symbol::Variable("data");
  x = Symbol::Op("FullyConnected", "fc1", {x}, {{"num_hidden", "8"}}, "stage0");
  x = Symbol::Op("Activation", "relu1", {x}, {{"act_type", "relu"}}, "stage1");
  x = Symbol::Op("FullyConnected", "fc2", {x}, {{"num_hidden", "7"}}, "stage1");
  x = Symbol::Op("Activation", "relu2", {x}, {{"act_type", "relu"}}, "stage1");
  x = Symbol::Op("FullyConnected", "fc3", {x}, {{"num_hidden", "4"}}, "stage1");
  return Symbol::Op("SoftmaxOutput", "softmax", {x}, {}, "stage0");
}

const std::map<std::string, Shape> kInputs = {{"data", Shape({kBatch, 5})},
                                              {"softmax_label", Shape({kBatch})}};
const std::map<std::string, int> kGroup2Rank = {{"stage0", 0}, {"stage1", 1}};

// Seeded values per argument name (labels: classes).
std::vector<float> Values(const std::string& name, int64_t n, int step) {
  std::vector<float> v(n);
  if (name == "softmax_label") {
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>((i + step) % 4);
    return v;
  }
  std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>()(name)) + step);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  for (float& x : v) x = u(rng);
  return v;
}

void FillArgs(Executor* ex, int step) {
  for (size_t i = 0; i < ex->arg_names().size(); ++i) {
    Tensor t = ex->arg_arrays()[i];
    ASSERT_TRUE(t.CopyFrom(Tensor::FromVector(Values(ex->arg_names()[i], t.size(), step),
                                              t.shape()))
                    .ok());
  }
}

// Outputs and argument gradients by name, after a forward and a backward.
using Results = std::map<std::string, std::vector<float>>;

void Collect(const Executor& ex, Results* out) {
  for (size_t i = 0; i < ex.output_names().size(); ++i) {
    if (ex.output_names()[i].find("_to_rank") != std::string::npos) continue;
    (*out)[ex.output_names()[i]] = ex.outputs()[i].ToVector();
  }
  for (size_t i = 0; i < ex.arg_names().size(); ++i) {
    if (!ex.grad_arrays()[i].defined()) continue;
    (*out)["grad " + ex.arg_names()[i]] = ex.grad_arrays()[i].ToVector();
  }
}

ExecutorOptions Options(const std::string& engine) {
  ExecutorOptions o;
  o.env = MapEnv({{"KVTRAIN_ENGINE", engine}});
  return o;
}

// Two passes (the second with other values) of the whole graph.
Results Whole(const std::string& engine) {
  ExecutorOptions o = Options(engine);
  o.group2rank = kGroup2Rank;  // no peer link: places nothing
  auto ex = Executor::SimpleBind(SplitMlp(), o, kInputs);
  EXPECT_TRUE(ex.ok()) << ex.status();
  Results r;
  for (int step = 0; step < 2; ++step) {
    FillArgs(ex->get(), step);
    EXPECT_TRUE((*ex)->Forward(true).ok());
    EXPECT_TRUE((*ex)->Backward().ok());
  }
  Collect(**ex, &r);
  return r;
}

// The same on 2 ranks; both ranks' results merged.
Results Split(const std::string& engine, InMemoryPeerGroup* group) {
  Results parts[2];
  Status status[2];
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      ExecutorOptions o = Options(engine);
      o.peer_link = group->link(rank);
      o.group2rank = kGroup2Rank;
      o.peer_timeout = std::chrono::seconds(30);
      auto ex = Executor::SimpleBind(SplitMlp(), o, kInputs);
      if (!ex.ok()) {
        status[rank] = ex.status();
        return;
      }
      for (int step = 0; step < 2 && status[rank].ok(); ++step) {
        FillArgs(ex->get(), step);
        status[rank] = (*ex)->Forward(true);
        if (status[rank].ok()) status[rank] = (*ex)->Backward();
      }
      Collect(**ex, &parts[rank]);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(status[0].ok()) << status[0];
  EXPECT_TRUE(status[1].ok()) << status[1];
  Results merged = parts[0];
  for (const auto& [k, v] : parts[1]) {
    EXPECT_EQ(merged.count(k), 0u) << k << " on both ranks";
    merged[k] = v;
  }
  return merged;
}

void ExpectSame(const Results& a, const Results& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [k, v] : a) {
    ASSERT_TRUE(b.count(k)) << k;
    const std::vector<float>& w = b.at(k);
    ASSERT_EQ(v.size(), w.size()) << k;
    for (size_t i = 0; i < v.size(); ++i) EXPECT_FLOAT_EQ(v[i], w[i]) << k << "[" << i << "]";
  }
}

TEST(PartitionTest, EachRankKeepsItsNodesAndTheCutBecomesSendRecv) {
  auto r0 = PartitionByRank(SplitMlp(), kInputs, kGroup2Rank, 0, 2);
  ASSERT_TRUE(r0.ok()) << r0.status();
  EXPECT_EQ(r0->ListArguments(),
            (std::vector<std::string>{"data", "fc1_weight", "fc1_bias",
                                      "softmax_label"}));
  EXPECT_EQ(r0->ListOutputs(),
            (std::vector<std::string>{"fc1_output_to_rank1_sent", "softmax_output"}));
  auto r1 = PartitionByRank(SplitMlp(), kInputs, kGroup2Rank, 1, 2);
  ASSERT_TRUE(r1.ok()) << r1.status();
  EXPECT_EQ(r1->ListArguments(),
            (std::vector<std::string>{"fc2_weight", "fc2_bias", "fc3_weight",
                                      "fc3_bias"}));
  EXPECT_EQ(r1->ListOutputs(), (std::vector<std::string>{"fc3_output_to_rank0_sent"}));
  auto shapes = r1->InferShape({});
  ASSERT_TRUE(shapes.ok()) << shapes.status();  // the receive knows its shape
  EXPECT_EQ(shapes->arguments[0], Shape({7, 8}));
}

TEST(PartitionTest, TwoRanksEqualTheWholeGraph) {
  const Results whole = Whole("threaded");
  ASSERT_EQ(whole.count("grad fc1_weight"), 1u);
  InMemoryPeerGroup group(2);
  ExpectSame(whole, Split("threaded", &group));
  EXPECT_EQ(group.pending(), 0u);  // every message was received
}

TEST(PartitionTest, TwoRanksEqualTheWholeGraphWithTheNaiveEngine) {
  const Results whole = Whole("naive");
  InMemoryPeerGroup group(2);
  ExpectSame(whole, Split("naive", &group));
  EXPECT_EQ(group.pending(), 0u);
}

TEST(PartitionTest, ARankOutsideTheJobNamesTheLayerAndTheSize) {
  auto r = PartitionByRank(SplitMlp(), kInputs, {{"stage0", 0}, {"stage1", 2}}, 0, 2);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("layer relu1 (ctx_group \"stage1\") is placed on "
                                      "rank 2 but the job has 2 processes"),
            std::string::npos)
      << r.status();
}

TEST(PartitionTest, ASilentPeerIsATimeoutNamingItAndTheEdge) {
  InMemoryPeerGroup group(2);
  ExecutorOptions o = Options("threaded");
  o.peer_link = group.link(0);
  o.group2rank = kGroup2Rank;
  o.peer_timeout = std::chrono::milliseconds(200);
  auto ex = Executor::SimpleBind(SplitMlp(), o, kInputs);
  ASSERT_TRUE(ex.ok()) << ex.status();
  const Status st = (*ex)->Forward(true);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kDeadlineExceeded) << st;
  EXPECT_NE(st.message().find("fc3_output_from_rank1 (_Recv): receiving the activation from rank 1"), std::string::npos) << st;
}

}  // namespace
}  // namespace kvtrain
