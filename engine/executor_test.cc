// Executor: an MLP's forward/backward against a naive double-precision
// reference, memory-plan reuse, grad_req add, head gradients, bad input, NaN
// detection, gradient-ready callbacks overlapping backward, group2ctx.
#include "engine/executor.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "engine/models.h"
#include "tensor/test_device.h"

namespace kvtrain {
namespace {

using Values = std::vector<float>;

Values Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  Values v(n);
  for (float& x : v) x = u(rng);
  return v;
}

void Set(const Tensor& t, const Values& v) {
  Tensor dst = t;
  ASSERT_TRUE(dst.CopyFrom(Tensor::FromVector(v, t.shape())).ok());
}

ExecutorOptions Options(EnvLookup env = MapEnv({})) {
  ExecutorOptions o;
  o.device = TestDevice();
  o.env = std::move(env);
  return o;
}

// Fills every argument of `ex` but the label with seeded values, the label
// with classes i % classes.
void Fill(Executor* ex, int classes) {
  for (size_t i = 0; i < ex->arg_arrays().size(); ++i) {
    const Tensor& a = ex->arg_arrays()[i];
    if (ex->arg_names()[i] == "softmax_label") {
      Values label(a.size());
      for (size_t k = 0; k < label.size(); ++k) label[k] = k % classes;
      Set(a, label);
    } else {
      Set(a, Random(a.size(), 10 + i, 0.5f));
    }
  }
}

// A dense layer y = x W^T + b over rows, in double.
std::vector<double> Dense(const std::vector<double>& x, int rows, int in,
                          const Values& w, const Values& b, int out) {
  std::vector<double> y(rows * out);
  for (int r = 0; r < rows; ++r)
    for (int o = 0; o < out; ++o) {
      double s = b[o];
      for (int k = 0; k < in; ++k) s += x[r * in + k] * w[o * in + k];
      y[r * out + o] = s;
    }
  return y;
}

class ExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override { KV_SKIP_IF_NO_TEST_DEVICE(); }
};

TEST_F(ExecutorTest, MlpMatchesNaiveReference) {
  const int n = 5, d = 12, h1 = 8, h2 = 6, c = 4;
  auto ex = Executor::SimpleBind(models::Mlp({h1, h2}, c), Options(),
                                 {{"data", {n, d}}, {"softmax_label", {n}}});
  ASSERT_TRUE(ex.ok()) << ex.status();
  Fill(ex->get(), c);
  ASSERT_TRUE((*ex)->Forward(true).ok());
  ASSERT_TRUE((*ex)->Backward().ok());
  auto arg = [&](const char* name) { return (*(*ex)->Arg(name)).ToVector(); };
  const Values x = arg("data"), w1 = arg("fc1_weight"), b1 = arg("fc1_bias"),
               w2 = arg("fc2_weight"), b2 = arg("fc2_bias"),
               w3 = arg("fc3_weight"), b3 = arg("fc3_bias");
  // Forward in double.
  std::vector<double> a0(x.begin(), x.end());
  std::vector<double> z1 = Dense(a0, n, d, w1, b1, h1), a1 = z1;
  for (double& v : a1) v = std::max(v, 0.0);
  std::vector<double> z2 = Dense(a1, n, h1, w2, b2, h2), a2 = z2;
  for (double& v : a2) v = std::max(v, 0.0);
  std::vector<double> z3 = Dense(a2, n, h2, w3, b3, c), p(n * c);
  for (int r = 0; r < n; ++r) {
    double m = -1e30, s = 0;
    for (int k = 0; k < c; ++k) m = std::max(m, z3[r * c + k]);
    for (int k = 0; k < c; ++k) s += std::exp(z3[r * c + k] - m);
    for (int k = 0; k < c; ++k) p[r * c + k] = std::exp(z3[r * c + k] - m) / s;
  }
  const Values out = (*ex)->outputs()[0].ToVector();
  for (int i = 0; i < n * c; ++i) ASSERT_NEAR(out[i], p[i], 1e-5);
  // Backward in double: dz3 = p - onehot (SoftmaxOutput's default scale 1).
  std::vector<double> dz3 = p;
  for (int r = 0; r < n; ++r) dz3[r * c + r % c] -= 1;
  auto back = [&](const std::vector<double>& dz, const std::vector<double>& a,
                  const Values& w, int in, int out_dim, std::vector<double>* dw,
                  std::vector<double>* db, std::vector<double>* da) {
    dw->assign(out_dim * in, 0);
    db->assign(out_dim, 0);
    da->assign(n * in, 0);
    for (int r = 0; r < n; ++r)
      for (int o = 0; o < out_dim; ++o) {
        (*db)[o] += dz[r * out_dim + o];
        for (int k = 0; k < in; ++k) {
          (*dw)[o * in + k] += dz[r * out_dim + o] * a[r * in + k];
          (*da)[r * in + k] += dz[r * out_dim + o] * w[o * in + k];
        }
      }
  };
  std::vector<double> dw3, db3, da2, dw2, db2, da1, dw1, db1, da0;
  back(dz3, a2, w3, h2, c, &dw3, &db3, &da2);
  for (int i = 0; i < n * h2; ++i) da2[i] *= z2[i] > 0;
  back(da2, a1, w2, h1, h2, &dw2, &db2, &da1);
  for (int i = 0; i < n * h1; ++i) da1[i] *= z1[i] > 0;
  back(da1, a0, w1, d, h1, &dw1, &db1, &da0);
  auto expect = [&](const char* name, const std::vector<double>& want) {
    const Values got = (*(*ex)->Grad(name)).ToVector();
    ASSERT_EQ(got.size(), want.size()) << name;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << name << i;
    }
  };
  expect("fc3_weight", dw3);
  expect("fc3_bias", db3);
  expect("fc2_weight", dw2);
  expect("fc2_bias", db2);
  expect("fc1_weight", dw1);
  expect("fc1_bias", db1);
  EXPECT_EQ((*ex)->Grad("data").status().message(),
            "argument \"data\" has no gradient (grad_req null)");
}

// A deep MLP: the planned layout reuses buffers, needs fewer bytes than one
// buffer per intermediate, and computes the same values.
TEST_F(ExecutorTest, MemoryPlanReuseLowersPeakBytes) {
  const Symbol net = models::Mlp({32, 32, 32, 32, 32, 32, 32, 32}, 10);
  const std::map<std::string, Shape> shapes = {{"data", {16, 32}},
                                               {"softmax_label", {16}}};
  ExecutorOptions plain = Options();
  plain.plan_memory = false;
  auto a = Executor::SimpleBind(net, Options(), shapes);
  auto b = Executor::SimpleBind(net, plain, shapes);
  ASSERT_TRUE(a.ok() && b.ok());
  // 17 intermediates of 16 x 32 floats, plus gradients, without planning.
  EXPECT_GT((*b)->planned_bytes(), 2 * 16 * 16 * 32 * 4);
  EXPECT_LT((*a)->planned_bytes() * 2, (*b)->planned_bytes())
      << (*a)->DebugString();
  Fill(a->get(), 10);
  Fill(b->get(), 10);
  for (auto* ex : {a->get(), b->get()}) {
    ASSERT_TRUE(ex->Forward(true).ok());
    ASSERT_TRUE(ex->Backward().ok());
  }
  EXPECT_EQ((*a)->outputs()[0].ToVector(), (*b)->outputs()[0].ToVector());
  for (size_t i = 0; i < (*a)->grad_arrays().size(); ++i) {
    if (!(*a)->grad_arrays()[i].defined()) continue;
    EXPECT_EQ((*a)->grad_arrays()[i].ToVector(), (*b)->grad_arrays()[i].ToVector());
  }
}

TEST_F(ExecutorTest, GradReqAddAccumulatesAndNaiveEngineAgrees) {
  const std::map<std::string, Shape> shapes = {{"data", {6, 10}},
                                               {"softmax_label", {6}}};
  auto write = Executor::SimpleBind(models::Mlp({7}, 3), Options(), shapes);
  auto add = Executor::SimpleBind(
      models::Mlp({7}, 3), Options(MapEnv({{"KVTRAIN_ENGINE", "naive"}})), shapes,
      {{"fc1_weight", GradReq::kAdd}});
  ASSERT_TRUE(write.ok() && add.ok());
  EXPECT_EQ((*add)->engine()->mode(), Engine::Mode::kNaive);
  Fill(write->get(), 3);
  Fill(add->get(), 3);
  for (int i = 0; i < 2; ++i) {
    for (auto* ex : {write->get(), add->get()}) {
      ASSERT_TRUE(ex->Forward(true).ok());
      ASSERT_TRUE(ex->Backward().ok());
    }
  }
  const Values once = (*(*write)->Grad("fc1_weight")).ToVector();
  const Values twice = (*(*add)->Grad("fc1_weight")).ToVector();
  for (size_t i = 0; i < once.size(); ++i) ASSERT_FLOAT_EQ(twice[i], 2 * once[i]);
  EXPECT_EQ((*(*write)->Grad("fc2_weight")).ToVector(),
            (*(*add)->Grad("fc2_weight")).ToVector());
}

TEST_F(ExecutorTest, HeadGradientsForNonLossOutputs) {
  Symbol fc = sym::FullyConnected(Symbol::Variable("x"), "fc", 3);
  auto ex = Executor::SimpleBind(fc, Options(), {{"x", {2, 4}}});
  ASSERT_TRUE(ex.ok()) << ex.status();
  Fill(ex->get(), 1);
  ASSERT_TRUE((*ex)->Forward(true).ok());
  EXPECT_EQ((*ex)->Backward().message(),
            "Backward: output fc_output does not come from a loss op; pass its "
            "gradient as head_grads[0]");
  Tensor ones = *Tensor::FromVector(Values(6, 1.0f), {2, 3}).CopyTo(TestDevice());
  ASSERT_TRUE((*ex)->Backward({ones}).ok());
  // d/db of sum(out) is the number of rows.
  EXPECT_EQ((*(*ex)->Grad("fc_bias")).ToVector(), Values(3, 2.0f));
}

TEST_F(ExecutorTest, BadInputIsAnErrorNamingTheProblem) {
  Symbol net = models::Mlp({8}, 3);
  ExecutorOptions o = Options();
  auto zeros = [](const Shape& s) { return Tensor::Zeros(s, DType::kFloat32, TestDevice()); };
  // Wrong input shape: 13 features for an fc1_weight of 12.
  std::vector<Tensor> args = {zeros({4, 13}), zeros({8, 12}), zeros({8}),
                              zeros({3, 8}), zeros({3}), zeros({4})};
  EXPECT_EQ(Executor::Bind(net, o, args, {}, {}, {}).status().message(),
            "fc1 (FullyConnected): input has 13 features but fc1_weight is "
            "(8, 12)");
  // A missing argument.
  args[0] = zeros({4, 12});
  args[2] = Tensor();
  EXPECT_EQ(Executor::Bind(net, o, args, {}, {}, {}).status().message(),
            "Bind: argument fc1_bias is missing (undefined array)");
  args.pop_back();
  EXPECT_EQ(Executor::Bind(net, o, args, {}, {}, {}).status().message(),
            "Bind: 5 argument arrays for 6 arguments (data, fc1_weight, "
            "fc1_bias, fc2_weight, fc2_bias, softmax_label)");
  // Label rows that do not match the batch.
  EXPECT_EQ(Executor::SimpleBind(net, o, {{"data", {4, 12}}, {"softmax_label", {5}}})
                .status()
                .message(),
            "softmax (SoftmaxOutput): softmax_label is (5) but the batch has 4 "
            "rows; expected (4)");
  // An unknown operator in a loaded graph lists the known ones.
  auto loaded = Symbol::FromText(
      "nodes { name: \"x\" } nodes { name: \"y\" op: \"Softmax\" inputs { node: "
      "\"x\" } } outputs { node: \"y\" }");
  EXPECT_NE(loaded.status().message().find(
                "unknown operator \"Softmax\" (for y); known operators: "
                "Activation, BatchNorm"),
            std::string::npos)
      << loaded.status();
  // Backward before a training forward.
  auto ex = Executor::SimpleBind(net, o, {{"data", {4, 12}}});
  ASSERT_TRUE(ex.ok());
  EXPECT_EQ((*ex)->Backward().code(), Status::Code::kFailedPrecondition);
  // A label outside the classes fails at Backward, naming the op.
  Fill(ex->get(), 7);
  ASSERT_TRUE((*ex)->Forward(true).ok());
  EXPECT_EQ((*ex)->Backward().message(),
            "softmax (SoftmaxOutput): 1 label(s) outside [0, 3)");
}

TEST_F(ExecutorTest, NanDetectionOffByDefaultOnByEnvironment) {
  Symbol net = models::Mlp({8}, 3);
  const std::map<std::string, Shape> shapes = {{"data", {4, 12}}};
  Values bad = Random(48, 1);
  bad[17] = std::numeric_limits<float>::quiet_NaN();
  auto off = Executor::SimpleBind(net, Options(), shapes);
  ASSERT_TRUE(off.ok());
  Fill(off->get(), 3);
  Set(*(*off)->Arg("data"), bad);
  EXPECT_TRUE((*off)->Forward(true).ok());
  EXPECT_TRUE(std::isnan((*off)->outputs()[0].ToVector()[4]));

  auto on = Executor::SimpleBind(net, Options(MapEnv({{"KVTRAIN_CHECK_NAN", "1"}})),
                                 shapes);
  ASSERT_TRUE(on.ok());
  Fill(on->get(), 3);
  Set(*(*on)->Arg("data"), bad);
  EXPECT_EQ((*on)->Forward(true).message(),
            "KVTRAIN_CHECK_NAN: fc1 (FullyConnected) forward: output 0 has 8 "
            "NaN/Inf values (of 32)");
  // Fixed input: the next pass is clean again.
  Set(*(*on)->Arg("data"), Random(48, 1));
  EXPECT_TRUE((*on)->Forward(true).ok());
  EXPECT_TRUE((*on)->Backward().ok());
  EXPECT_EQ(Executor::SimpleBind(net, Options(MapEnv({{"KVTRAIN_CHECK_NAN", "maybe"}})),
                                 shapes)
                .status()
                .message(),
            "KVTRAIN_CHECK_NAN=\"maybe\": expected 0 or 1 (or true/false)");
}

// An identity op whose backward blocks until `g_gate_open`: stands for
// "layer k-1's backward is still running".
std::atomic<bool> g_gate_open{false};

class GateOp : public Operator {
 public:
  static StatusOr<std::unique_ptr<Operator>> Create(const OpSpec&) {
    return std::unique_ptr<Operator>(new GateOp);
  }
  Status InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                    std::vector<Shape>*) const override {
    (*out)[0] = (*in)[0];
    return Status::OK();
  }
  BackwardNeeds DeclareBackwardNeeds() const override { return {}; }

 protected:
  Status ForwardCpu(const OpContext& ctx, ForwardArgs* a) override {
    return a->out[0].CopyFrom(a->in[0]);
  }
  Status ForwardGpu(const OpContext& ctx, ForwardArgs* a) override {
    return ForwardCpu(ctx, a);
  }
  Status BackwardCpu(const OpContext& ctx, BackwardArgs* a) override {
    for (int i = 0; i < 20000 && !g_gate_open.load(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!g_gate_open.load()) return Error("gate never opened");
    return a->in_grad[0].CopyFrom(a->out_grad[0]);
  }
  Status BackwardGpu(const OpContext& ctx, BackwardArgs* a) override {
    return BackwardCpu(ctx, a);
  }
};
KV_REGISTER_OP("_TestGate", GateOp::Create);

TEST_F(ExecutorTest, GradientReadyOpsOverlapTheRestOfBackward) {
  // fc1 -> gate -> fc2 -> softmax: fc2's weight gradient is ready before
  // the gate's backward (and fc1's) run.
  Symbol x = sym::FullyConnected(Symbol::Variable("data"), "fc1", 6);
  x = Symbol::Op("_TestGate", "gate", {x});
  x = sym::SoftmaxOutput(sym::FullyConnected(x, "fc2", 3), "softmax");
  auto ex = Executor::SimpleBind(x, Options(), {{"data", {4, 5}}});
  ASSERT_TRUE(ex.ok()) << ex.status();
  ASSERT_EQ((*ex)->engine()->mode(), Engine::Mode::kThreaded);
  Fill(ex->get(), 3);
  g_gate_open = false;
  ASSERT_TRUE((*ex)->Forward(true).ok());
  auto backward = (*ex)->StartBackward();
  ASSERT_TRUE(backward.ok());
  // "Push fc2's gradient": runs on the I/O pool once fc2_weight's gradient
  // is written, while the gate still blocks the compute worker.
  const int k = 3;  // fc2_weight in ListArguments order
  ASSERT_EQ((*ex)->arg_names()[k], "fc2_weight");
  Values seen;
  (*ex)->engine()->Push([&] {
    seen = (*ex)->grad_arrays()[k].ToVector();
    g_gate_open = true;
    return Status::OK();
  }, {(*ex)->grad_var(k)}, {}, Device::CPU(), Engine::Queue::kIo, "push fc2");
  ASSERT_TRUE((*ex)->Wait().ok());
  EXPECT_EQ(seen, (*ex)->grad_arrays()[k].ToVector());
  EXPECT_NE(seen, Values(seen.size(), 0.0f));
}

TEST_F(ExecutorTest, Group2CtxSplitsTheGraphWithCopies) {
  // First layer in group "a", the rest in "b": on the CPU build these are
  // cpu(0) and cpu(1); on the GPU build cpu(0) and gpu(0).
  Symbol data = Symbol::Variable("data");
  Symbol h = Symbol::Op("FullyConnected", "fc1", {data}, {{"num_hidden", "8"}}, "a");
  h = Symbol::Op("Activation", "act", {h}, {{"act_type", "tanh"}}, "b");
  h = Symbol::Op("FullyConnected", "fc2", {h}, {{"num_hidden", "3"}}, "b");
  h = Symbol::Op("SoftmaxOutput", "softmax", {h}, {}, "b");
  const Device other = TestDevice().is_gpu() ? TestDevice() : Device::CPU(1);
  ExecutorOptions split = Options();
  split.group2ctx = {{"a", Device::CPU(0)}, {"b", other}};
  ExecutorOptions one = Options();
  one.group2ctx = {{"a", TestDevice()}, {"b", TestDevice()}};
  const std::map<std::string, Shape> shapes = {{"data", {4, 6}}};
  auto a = Executor::SimpleBind(h, split, shapes);
  auto b = Executor::SimpleBind(h, one, shapes);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*(*a)->Arg("fc1_weight")).device(), Device::CPU(0));
  EXPECT_EQ((*(*a)->Arg("fc2_weight")).device(), other);
  EXPECT_EQ((*a)->outputs()[0].device(), other);
  EXPECT_NE((*a)->DebugString().find("_CrossDeviceCopy"), std::string::npos);
  Fill(a->get(), 3);
  Fill(b->get(), 3);
  for (auto* ex : {a->get(), b->get()}) {
    ASSERT_TRUE(ex->Forward(true).ok());
    ASSERT_TRUE(ex->Backward().ok());
  }
  const Values pa = (*a)->outputs()[0].ToVector(), pb = (*b)->outputs()[0].ToVector();
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_NEAR(pa[i], pb[i], 1e-5);
  const Values ga = (*(*a)->Grad("fc1_weight")).ToVector();
  const Values gb = (*(*b)->Grad("fc1_weight")).ToVector();
  for (size_t i = 0; i < ga.size(); ++i) EXPECT_NEAR(ga[i], gb[i], 1e-5);
  ExecutorOptions missing = Options();
  missing.group2ctx = {{"a", Device::CPU(0)}};
  EXPECT_EQ(Executor::SimpleBind(h, missing, shapes).status().message(),
            "SimpleBind: node act is in ctx_group \"b\" but group2ctx has no "
            "such group");
}

}  // namespace
}  // namespace kvtrain
