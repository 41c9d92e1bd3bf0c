// LeNet through the executor against a naive double-precision LeNet
// (forward values, and gradients by central differences of the naive loss),
// and an MLP that learns a separable problem with the Optimizer-free SGD
// update op.
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "engine/executor.h"
#include "engine/models.h"
#include "ops/initializer.h"
#include "tensor/test_device.h"

namespace kvtrain {
namespace {

using Values = std::vector<float>;
using Params = std::map<std::string, Values>;

// Naive LeNet in double: conv5-tanh-maxpool2-conv5-tanh-maxpool2-fc-tanh-fc
// and the summed cross-entropy of softmax against `label`.
struct NaiveLeNet {
  int n;
  const Params& p;

  static std::vector<double> Conv(const std::vector<double>& x, int n, int c,
                                  int h, const Values& w, const Values& b,
                                  int f) {
    const int o = h - 4;
    std::vector<double> y(n * f * o * o);
    for (int i = 0; i < n; ++i)
      for (int k = 0; k < f; ++k)
        for (int oy = 0; oy < o; ++oy)
          for (int ox = 0; ox < o; ++ox) {
            double s = b[k];
            for (int ch = 0; ch < c; ++ch)
              for (int u = 0; u < 5; ++u)
                for (int v = 0; v < 5; ++v)
                  s += x[((i * c + ch) * h + oy + u) * h + ox + v] *
                       w[((k * c + ch) * 5 + u) * 5 + v];
            y[((i * f + k) * o + oy) * o + ox] = s;
          }
    return y;
  }
  static std::vector<double> TanhPool(const std::vector<double>& x, int planes,
                                      int h) {
    const int o = h / 2;
    std::vector<double> y(planes * o * o);
    for (int p = 0; p < planes; ++p)
      for (int oy = 0; oy < o; ++oy)
        for (int ox = 0; ox < o; ++ox) {
          double m = -1e30;
          for (int u = 0; u < 2; ++u)
            for (int v = 0; v < 2; ++v)
              m = std::max(m, std::tanh(x[(p * h + 2 * oy + u) * h + 2 * ox + v]));
          y[(p * o + oy) * o + ox] = m;
        }
    return y;
  }
  static std::vector<double> Dense(const std::vector<double>& x, int n, int in,
                                   const Values& w, const Values& b, int out) {
    std::vector<double> y(n * out);
    for (int r = 0; r < n; ++r)
      for (int o = 0; o < out; ++o) {
        double s = b[o];
        for (int k = 0; k < in; ++k) s += x[r * in + k] * w[o * in + k];
        y[r * out + o] = s;
      }
    return y;
  }
  // Probabilities (n x 10).
  std::vector<double> Forward() const {
    const Values& d = p.at("data");
    std::vector<double> x(d.begin(), d.end());
    x = TanhPool(Conv(x, n, 1, 28, p.at("conv1_weight"), p.at("conv1_bias"), 20),
                 n * 20, 24);
    x = TanhPool(Conv(x, n, 20, 12, p.at("conv2_weight"), p.at("conv2_bias"), 50),
                 n * 50, 8);
    x = Dense(x, n, 800, p.at("fc1_weight"), p.at("fc1_bias"), 500);
    for (double& v : x) v = std::tanh(v);
    x = Dense(x, n, 500, p.at("fc2_weight"), p.at("fc2_bias"), 10);
    for (int r = 0; r < n; ++r) {
      double m = -1e30, s = 0;
      for (int k = 0; k < 10; ++k) m = std::max(m, x[r * 10 + k]);
      for (int k = 0; k < 10; ++k) s += std::exp(x[r * 10 + k] - m);
      for (int k = 0; k < 10; ++k) x[r * 10 + k] = std::exp(x[r * 10 + k] - m) / s;
    }
    return x;
  }
  double Loss() const {
    const std::vector<double> prob = Forward();
    double l = 0;
    for (int r = 0; r < n; ++r) l -= std::log(prob[r * 10 + r % 10]);
    return l;
  }
};

class ModelsTest : public ::testing::Test {
 protected:
  void SetUp() override { KV_SKIP_IF_NO_TEST_DEVICE(); }
};

TEST_F(ModelsTest, LeNetMatchesNaiveReference) {
  const int n = 2;
  ExecutorOptions o;
  o.device = TestDevice();
  auto ex = Executor::SimpleBind(models::LeNet(), o, {{"data", {n, 1, 28, 28}}});
  ASSERT_TRUE(ex.ok()) << ex.status();
  InitializerOptions io;
  io.type = InitializerOptions::Type::kXavier;
  io.seed = 3;
  auto init = *Initializer::Create(io);
  auto bias_init = *Initializer::Create(InitializerOptions());
  Params params;
  for (size_t i = 0; i < (*ex)->arg_names().size(); ++i) {
    const std::string& name = (*ex)->arg_names()[i];
    Tensor a = (*ex)->arg_arrays()[i];
    if (name == "data") {
      std::mt19937 rng(5);
      std::uniform_real_distribution<float> u(0, 1);
      Values v(a.size());
      for (float& x : v) x = u(rng);
      ASSERT_TRUE(a.CopyFrom(Tensor::FromVector(v, a.shape())).ok());
    } else if (name == "softmax_label") {
      ASSERT_TRUE(a.CopyFrom(Tensor::FromVector({0, 1}, {2})).ok());
    } else {
      // Random biases too, so their gradients are exercised.
      ASSERT_TRUE((a.ndim() == 1 ? bias_init : init).Fill(name, &a).ok());
    }
    params[name] = a.ToVector();
  }
  ASSERT_TRUE((*ex)->Forward(true).ok());
  ASSERT_TRUE((*ex)->Backward().ok());
  NaiveLeNet naive{n, params};
  const std::vector<double> want = naive.Forward();
  const Values got = (*ex)->outputs()[0].ToVector();
  for (int i = 0; i < n * 10; ++i) ASSERT_NEAR(got[i], want[i], 1e-5);
  // Gradients: central differences of the naive loss at a few entries of
  // every parameter.
  for (const char* name : {"conv1_weight", "conv1_bias", "conv2_weight",
                           "conv2_bias", "fc1_weight", "fc1_bias",
                           "fc2_weight", "fc2_bias"}) {
    const Values grad = (*(*ex)->Grad(name)).ToVector();
    Values& w = params[name];
    for (size_t i = 0; i < w.size(); i += std::max<size_t>(1, w.size() / 6)) {
      // A small step (max pooling has kinks), divided by the step the float
      // parameter really took.
      const float keep = w[i];
      w[i] = keep + 1e-4f;
      const double x_up = w[i], up = naive.Loss();
      w[i] = keep - 1e-4f;
      const double x_down = w[i], down = naive.Loss();
      w[i] = keep;
      const double numeric = (up - down) / (x_up - x_down);
      EXPECT_NEAR(grad[i], numeric, 1e-3 + 1e-2 * std::fabs(numeric))
          << name << "[" << i << "]";
    }
  }
}

TEST_F(ModelsTest, MlpLearnsWithUpdateOps) {
  // Two Gaussian blobs per class in 20 dimensions; 30 steps of SGD.
  const int n = 64, d = 20, classes = 4;
  ExecutorOptions o;
  o.device = TestDevice();
  auto ex = Executor::SimpleBind(models::Mlp({32}, classes), o,
                                 {{"data", {n, d}}, {"softmax_label", {n}}});
  ASSERT_TRUE(ex.ok()) << ex.status();
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0, 0.3f);
  Values data(n * d), label(n);
  for (int i = 0; i < n; ++i) {
    label[i] = i % classes;
    for (int k = 0; k < d; ++k) data[i * d + k] = g(rng) + (k % classes == i % classes);
  }
  Tensor data_array = *(*ex)->Arg("data");
  Tensor label_array = *(*ex)->Arg("softmax_label");
  ASSERT_TRUE(data_array.CopyFrom(Tensor::FromVector(data, {n, d})).ok());
  ASSERT_TRUE(label_array.CopyFrom(Tensor::FromVector(label, {n})).ok());
  auto init = *Initializer::Create(InitializerOptions());
  for (size_t i = 0; i < (*ex)->arg_names().size(); ++i) {
    if ((*ex)->grad_arrays()[i].defined()) {
      Tensor a = (*ex)->arg_arrays()[i];
      ASSERT_TRUE(init.Init((*ex)->arg_names()[i], &a).ok());
    }
  }
  auto update = CreateOperator("sgd_update", "sgd",
                               {{"lr", "1"}, {"rescale_grad", "0.015625"}});
  ASSERT_TRUE(update.ok()) << update.status();
  OpContext ctx;
  ctx.device = *DeviceContext::Get(TestDevice());
  auto loss = [&] {
    const Values p = (*ex)->outputs()[0].ToVector();
    double l = 0;
    for (int i = 0; i < n; ++i) l -= std::log(p[i * classes + i % classes]);
    return l / n;
  };
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    ASSERT_TRUE((*ex)->Forward(true).ok());
    if (step == 0) first = loss();
    last = loss();
    ASSERT_TRUE((*ex)->Backward().ok());
    for (size_t i = 0; i < (*ex)->grad_arrays().size(); ++i) {
      const Tensor& w = (*ex)->arg_arrays()[i];
      if (!(*ex)->grad_arrays()[i].defined()) continue;
      ForwardArgs args;
      args.in = {w, (*ex)->grad_arrays()[i]};
      args.out = {w};
      args.req = {OpReq::kInplace};
      ASSERT_TRUE((*update)->Forward(ctx, &args).ok());
    }
  }
  EXPECT_LT(last, 0.5 * first) << "loss " << first << " -> " << last;
}

}  // namespace
}  // namespace kvtrain
