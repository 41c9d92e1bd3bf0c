// Optimizer: spec validation, each rule over a few steps against a double
// reference written from the documented formulas, the learning-rate
// schedules, state save/restore, concurrent keys.
#include "ops/optimizer.h"

#include <cmath>
#include <thread>

#include <gtest/gtest.h>

#include "ops/op_test_util.h"
#include "tensor/test_device.h"

namespace kvtrain {
namespace {

using proto::LrSchedule;
using proto::OptimizerSpec;

OptimizerSpec Spec(OptimizerSpec::Type type, float lr) {
  OptimizerSpec s;
  s.set_type(type);
  s.set_learning_rate(lr);
  return s;
}

std::unique_ptr<Optimizer> Make(const OptimizerSpec& s) {
  auto o = Optimizer::Create(s);
  EXPECT_TRUE(o.ok()) << o.status();
  return o.ok() ? std::move(o).value() : nullptr;
}

// The reference: one element, in double, straight from optimizer.proto.
struct Ref {
  OptimizerSpec s;
  double w, m = 0, v = 0;
  int t = 0;
  void Step(double grad) {
    ++t;
    const double rescale = s.has_rescale_grad() ? s.rescale_grad() : 1;
    double g = rescale * grad;
    if (s.clip_gradient() > 0) {
      g = std::min<double>(std::max<double>(g, -s.clip_gradient()), s.clip_gradient());
    }
    const double lr = s.learning_rate(), wd = s.weight_decay(), mu = s.momentum();
    switch (s.type()) {
      case OptimizerSpec::SGD:
        m = mu * m - lr * (g + wd * w);
        w += m;
        break;
      case OptimizerSpec::NAG: {
        const double gw = g + wd * w;
        m = mu * m + gw;
        w -= lr * (gw + mu * m);
        break;
      }
      case OptimizerSpec::ADAM: {
        const double gw = g + wd * w;
        m = 0.9 * m + 0.1 * gw;
        v = 0.999 * v + 0.001 * gw * gw;
        const double lr_t = lr * std::sqrt(1 - std::pow(0.999, t)) /
                            (1 - std::pow(0.9, t));
        w -= lr_t * m / (std::sqrt(v) + 1e-8);
        break;
      }
      case OptimizerSpec::FTRL: {
        // m: z, v: n.
        const double l1 = s.has_lamda1() ? s.lamda1() : 0.01;
        const double beta = s.has_beta() ? s.beta() : 1.0;
        const double n = v + g * g;
        m += g - (std::sqrt(n) - std::sqrt(v)) / lr * w;
        v = n;
        w = std::fabs(m) <= l1 ? 0.0
                               : ((m > 0 ? l1 : -l1) - m) / ((beta + std::sqrt(v)) / lr + wd);
        break;
      }
      case OptimizerSpec::RMSPROP: {
        const double g1 = s.has_gamma1() ? s.gamma1() : 0.9;
        const double eps = s.has_epsilon() ? s.epsilon() : 1e-8;
        const double gw = g + wd * w;
        v = (1 - g1) * gw * gw + g1 * v;
        w -= lr * gw / std::sqrt(v + eps);
        break;
      }
      case OptimizerSpec::SIGNUM: {
        auto sign = [](double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); };
        if (mu == 0) {
          w = (1 - lr * wd) * w - lr * sign(grad);
        } else {
          m = mu * m - (1 - mu) * (g + wd * w);
          w = (1 - lr * s.wd_lh()) * w + lr * sign(m);
        }
        break;
      }
      case OptimizerSpec::ADAMAX: {
        // m: mean, v: infinity norm; clipped after the weight decay.
        double gw = rescale * grad + wd * w;
        if (s.clip_gradient() > 0) {
          gw = std::min<double>(std::max<double>(gw, -s.clip_gradient()), s.clip_gradient());
        }
        m = 0.9 * m + 0.1 * gw;
        v = std::max(0.999 * v, std::fabs(gw));
        w -= lr / (1 - std::pow(0.9, t)) * m / v;
        break;
      }
      case OptimizerSpec::ADADELTA: {
        // v: mean square of gradients, m: of steps.
        const double rho = s.has_rho() ? s.rho() : 0.9;
        const double eps = s.has_epsilon() ? s.epsilon() : 1e-5;
        v = rho * v + (1 - rho) * g * g;
        const double d = std::sqrt(m + eps) / std::sqrt(v + eps) * g;
        m = rho * m + (1 - rho) * d * d;
        w -= d + wd * w;
        break;
      }
      default:
        v += g * g;
        w -= lr * (g / std::sqrt(v + 1e-7) + wd * w);
    }
  }
};

class OptimizerTest : public ::testing::Test {
 protected:
  void SetUp() override { KV_SKIP_IF_NO_TEST_DEVICE(); }

  // Four steps on 3 elements with changing gradients, against Ref.
  void ExpectMatchesReference(const OptimizerSpec& s) {
    auto opt = Make(s);
    ASSERT_NE(opt, nullptr);
    const std::vector<float> w0 = {0.5f, -1.5f, 2.0f};
    Tensor w = *Tensor::FromVector(w0, {3}).CopyTo(TestDevice());
    std::vector<Ref> refs;
    for (float x : w0) refs.push_back(Ref{s, x});
    for (int step = 0; step < 4; ++step) {
      const std::vector<float> g = {0.3f * (step + 1), -0.7f, 0.1f - step};
      Tensor gt = *Tensor::FromVector(g, {3}).CopyTo(TestDevice());
      ASSERT_TRUE(opt->Update(7, w, gt).ok());
      const std::vector<float> got = w.ToVector();
      for (int i = 0; i < 3; ++i) {
        refs[i].Step(g[i]);
        ASSERT_NEAR(got[i], refs[i].w, 1e-5 * (1 + std::fabs(refs[i].w)))
            << OptimizerSpec::Type_Name(s.type()) << " step " << step;
      }
    }
    EXPECT_EQ(opt->num_update(), 4);
  }
};

TEST_F(OptimizerTest, EachRuleMatchesReference) {
  OptimizerSpec sgd = Spec(OptimizerSpec::SGD, 0.1f);
  ExpectMatchesReference(sgd);
  sgd.set_momentum(0.9f);
  sgd.set_weight_decay(0.01f);
  sgd.set_rescale_grad(0.5f);
  sgd.set_clip_gradient(0.2f);
  ExpectMatchesReference(sgd);
  OptimizerSpec nag = Spec(OptimizerSpec::NAG, 0.05f);
  nag.set_momentum(0.8f);
  nag.set_weight_decay(0.001f);
  ExpectMatchesReference(nag);
  OptimizerSpec adam = Spec(OptimizerSpec::ADAM, 0.01f);
  adam.set_weight_decay(0.01f);
  ExpectMatchesReference(adam);
  ExpectMatchesReference(Spec(OptimizerSpec::ADAGRAD, 0.1f));
  OptimizerSpec ftrl = Spec(OptimizerSpec::FTRL, 0.5f);
  ExpectMatchesReference(ftrl);
  ftrl.set_lamda1(0.3f);
  ftrl.set_beta(0.5f);
  ftrl.set_weight_decay(0.1f);
  ExpectMatchesReference(ftrl);
  OptimizerSpec rmsprop = Spec(OptimizerSpec::RMSPROP, 0.01f);
  ExpectMatchesReference(rmsprop);
  rmsprop.set_gamma1(0.5f);
  rmsprop.set_epsilon(1e-4f);
  rmsprop.set_weight_decay(0.01f);
  rmsprop.set_clip_gradient(0.5f);
  ExpectMatchesReference(rmsprop);
  OptimizerSpec signum = Spec(OptimizerSpec::SIGNUM, 0.05f);
  ExpectMatchesReference(signum);  // no momentum: signSGD
  signum.set_weight_decay(0.1f);
  ExpectMatchesReference(signum);
  signum.set_momentum(0.9f);
  signum.set_wd_lh(0.02f);
  signum.set_rescale_grad(0.5f);
  signum.set_clip_gradient(0.2f);
  ExpectMatchesReference(signum);
  OptimizerSpec adamax = Spec(OptimizerSpec::ADAMAX, 0.002f);
  ExpectMatchesReference(adamax);
  adamax.set_weight_decay(0.01f);
  adamax.set_clip_gradient(0.6f);
  ExpectMatchesReference(adamax);
  OptimizerSpec adadelta = Spec(OptimizerSpec::ADADELTA, 1.0f);
  ExpectMatchesReference(adadelta);
  adadelta.set_rho(0.8f);
  adadelta.set_epsilon(1e-4f);
  adadelta.set_weight_decay(0.001f);
  adadelta.set_rescale_grad(2.0f);
  ExpectMatchesReference(adadelta);
  OptimizerSpec bad = Spec(OptimizerSpec::RMSPROP, 0.01f);
  bad.set_gamma1(1.0f);
  const auto refused = Optimizer::Create(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("gamma1 1 must be in [0, 1)"), std::string::npos)
      << refused.status();
}

TEST_F(OptimizerTest, KeysTakeTheirMultipliers) {
  OptimizerSpec s = Spec(OptimizerSpec::SGD, 0.5f);
  s.set_weight_decay(0.1f);
  (*s.mutable_lr_mult())["fc_weight"] = 2.0f;
  (*s.mutable_wd_mult())["fc_bias"] = 0.0f;
  auto opt = Make(s);
  EXPECT_EQ(opt->MultsFor("fc_weight").lr, 2.0f);
  EXPECT_EQ(opt->MultsFor("fc_weight").wd, 1.0f);
  EXPECT_EQ(opt->MultsFor("fc_bias").wd, 0.0f);
  EXPECT_EQ(opt->MultsFor("other").lr, 1.0f);
  Tensor w = *Tensor::FromVector({1.0f, 1.0f}, {2}).CopyTo(TestDevice());
  Tensor b = *Tensor::FromVector({1.0f, 1.0f}, {2}).CopyTo(TestDevice());
  Tensor g = *Tensor::FromVector({0.5f, 0.5f}, {2}).CopyTo(TestDevice());
  ASSERT_TRUE(opt->Update(1, w, g, Optimizer::Wait::kDone, 1.0f, opt->MultsFor("fc_weight")).ok());
  ASSERT_TRUE(opt->Update(2, b, g, Optimizer::Wait::kDone, 1.0f, opt->MultsFor("fc_bias")).ok());
  EXPECT_NEAR(w.ToVector()[0], 1 - 1.0 * (0.5 + 0.1), 1e-6);  // lr 0.5 x 2
  EXPECT_NEAR(b.ToVector()[0], 1 - 0.5 * 0.5, 1e-6);          // no decay
  (*s.mutable_wd_mult())["fc_bias"] = -1.0f;
  EXPECT_EQ(Optimizer::Create(s).status().message(),
            "optimizer: wd_mult of key \"fc_bias\" is -1; it must be finite and >= 0");
}

TEST_F(OptimizerTest, BadSpecsAreRejected) {
  OptimizerSpec s;
  EXPECT_EQ(Optimizer::Create(s).status().message(),
            "optimizer: type is unspecified; expected one of SGD, NAG, ADAM, "
            "ADAGRAD, FTRL, RMSPROP, SIGNUM, ADAMAX, ADADELTA");
  s = Spec(OptimizerSpec::SIGNUM, 0.1f);
  s.set_wd_lh(0.1f);
  EXPECT_EQ(Optimizer::Create(s).status().message(),
            "optimizer: wd_lh is Signum's decoupled decay with momentum > 0 (signSGD decays "
            "by weight_decay); leave it 0");
  s = Spec(OptimizerSpec::ADADELTA, 0.1f);
  s.set_rho(1.0f);
  EXPECT_EQ(Optimizer::Create(s).status().message(), "optimizer: rho 1 must be in [0, 1)");
  s = Spec(OptimizerSpec::FTRL, 0.1f);
  s.set_lamda1(-1);
  EXPECT_EQ(Optimizer::Create(s).status().message(), "optimizer: lamda1 -1 must be >= 0");
  s = Spec(OptimizerSpec::SGD, 0);
  EXPECT_EQ(Optimizer::Create(s).status().message(),
            "optimizer: learning_rate 0 must be > 0");
  s = Spec(OptimizerSpec::SGD, 0.1f);
  s.set_momentum(1.5f);
  EXPECT_EQ(Optimizer::Create(s).status().message(),
            "optimizer: momentum 1.5 must be in [0, 1)");
  s = Spec(OptimizerSpec::ADAM, 0.1f);
  s.set_momentum(0.9f);
  EXPECT_EQ(Optimizer::Create(s).status().message(),
            "optimizer: momentum is not used by ADAM; leave it 0");
  s = Spec(OptimizerSpec::SGD, 0.1f);
  s.mutable_lr_schedule()->set_type(LrSchedule::FACTOR);
  s.mutable_lr_schedule()->set_factor(0.5f);
  EXPECT_EQ(Optimizer::Create(s).status().message(),
            "optimizer: lr_schedule.step 0 must be >= 1");
  s.mutable_lr_schedule()->set_type(LrSchedule::MULTI_FACTOR);
  s.mutable_lr_schedule()->add_steps(5);
  s.mutable_lr_schedule()->add_steps(3);
  EXPECT_EQ(Optimizer::Create(s).status().message(),
            "optimizer: lr_schedule.steps must be positive and increasing, "
            "got 3 at position 1");
}

TEST_F(OptimizerTest, LearningRateSchedules) {
  OptimizerSpec s = Spec(OptimizerSpec::SGD, 1.0f);
  LrSchedule* sch = s.mutable_lr_schedule();
  sch->set_type(LrSchedule::FACTOR);
  sch->set_step(2);
  sch->set_factor(0.5f);
  sch->set_min_lr(0.2f);
  auto opt = Make(s);
  Tensor w = Tensor::Zeros({1}, DType::kFloat32, TestDevice());
  Tensor g = *Tensor::FromVector({1}, {1}).CopyTo(TestDevice());
  // Updates 1-2 at 1.0, 3-4 at 0.5, 5-6 at 0.25, then the floor 0.2.
  const std::vector<float> want = {1, 1, 0.5f, 0.5f, 0.25f, 0.25f, 0.2f};
  double total = 0;
  for (float lr : want) {
    EXPECT_FLOAT_EQ(opt->CurrentLearningRate(), lr);
    ASSERT_TRUE(opt->Update(0, w, g).ok());
    total += lr;
    EXPECT_NEAR(w.ToVector()[0], -total, 1e-6);
  }
  sch->set_type(LrSchedule::MULTI_FACTOR);
  sch->add_steps(1);
  sch->add_steps(3);
  sch->set_min_lr(0);
  opt = Make(s);
  const std::vector<float> multi = {1, 0.5f, 0.5f, 0.25f, 0.25f};
  for (float lr : multi) {
    EXPECT_FLOAT_EQ(opt->CurrentLearningRate(), lr);
    ASSERT_TRUE(opt->Update(0, w, g).ok());
  }
  // Linear warm-up from 0.2 over updates 1..3 (t < 4), then the schedule.
  sch->set_warmup_steps(4);
  sch->set_warmup_begin_lr(0.2f);
  opt = Make(s);
  const std::vector<float> warm = {0.4f, 0.6f, 0.8f, 0.25f, 0.25f};
  for (float lr : warm) {
    EXPECT_FLOAT_EQ(opt->CurrentLearningRate(), lr);
    ASSERT_TRUE(opt->Update(0, w, g).ok());
  }
}

TEST_F(OptimizerTest, PolyAndCosineSchedulesEndAtTheFinalRate) {
  OptimizerSpec s = Spec(OptimizerSpec::SGD, 1.0f);
  LrSchedule* sch = s.mutable_lr_schedule();
  sch->set_type(LrSchedule::POLY);
  sch->set_max_update(6);
  sch->set_power(2);
  sch->set_final_lr(0.1f);
  sch->set_warmup_steps(2);
  sch->set_warmup_begin_lr(0.5f);
  sch->set_warmup_constant(true);
  auto opt = Make(s);
  Tensor w = Tensor::Zeros({1}, DType::kFloat32, TestDevice());
  Tensor g = *Tensor::FromVector({1}, {1}).CopyTo(TestDevice());
  // t = 1 warms up at 0.5; then u = t - 2 of n = 4, held at t = 6.
  std::vector<double> want = {0.5};
  for (int t = 2; t <= 8; ++t) {
    const double u = std::min(t, 6) - 2;
    want.push_back(0.1 + 0.9 * (1 - u / 4) * (1 - u / 4));
  }
  for (double lr : want) {
    EXPECT_NEAR(opt->CurrentLearningRate(), lr, 1e-6);
    ASSERT_TRUE(opt->Update(0, w, g).ok());
  }
  sch->set_type(LrSchedule::COSINE);
  sch->set_warmup_steps(0);
  opt = Make(s);
  for (int t = 1; t <= 8; ++t) {
    const double u = std::min(t, 6);
    EXPECT_NEAR(opt->CurrentLearningRate(), 0.1 + 0.9 * (1 + std::cos(M_PI * u / 6)) / 2,
                1e-6);
    ASSERT_TRUE(opt->Update(0, w, g).ok());
  }
  sch->set_max_update(0);
  EXPECT_EQ(Optimizer::Create(s).status().message(),
            "optimizer: lr_schedule.max_update 0 must be more than warmup_steps 0");
}

TEST_F(OptimizerTest, SaveAndRestoreStatesContinueIdentically) {
  OptimizerSpec s = Spec(OptimizerSpec::ADAM, 0.01f);
  auto a = Make(s);
  const std::vector<float> w0 = op_test::Random(50, 1);
  Tensor wa = *Tensor::FromVector(w0, {5, 10}).CopyTo(TestDevice());
  Tensor g1 = *Tensor::FromVector(op_test::Random(50, 2), {5, 10}).CopyTo(TestDevice());
  Tensor g2 = *Tensor::FromVector(op_test::Random(50, 3), {5, 10}).CopyTo(TestDevice());
  Tensor wk = *Tensor::FromVector({1, 2}, {2}).CopyTo(TestDevice());
  Tensor gk = *Tensor::FromVector({0.1f, 0.2f}, {2}).CopyTo(TestDevice());
  ASSERT_TRUE(a->Update(3, wa, g1).ok());
  ASSERT_TRUE(a->Update(4, wk, gk).ok());
  StatusOr<std::string> saved = a->SaveStates();
  ASSERT_TRUE(saved.ok()) << saved.status();
  Tensor wb = wa.Clone();
  auto b = Make(s);
  ASSERT_TRUE(b->LoadStates(*saved).ok());
  EXPECT_EQ(b->num_update(), 1);
  ASSERT_TRUE(a->Update(3, wa, g2).ok());
  ASSERT_TRUE(b->Update(3, wb, g2).ok());
  EXPECT_EQ(wa.ToVector(), wb.ToVector());
  // A different rule, or corrupt bytes, are refused.
  auto sgd = Make(Spec(OptimizerSpec::SGD, 0.1f));
  EXPECT_EQ(sgd->LoadStates(*saved).message(),
            "optimizer states were saved by ADAM but this optimizer is SGD");
  EXPECT_EQ(b->LoadStates("garbage").code(), Status::Code::kDataLoss);
  // States numbered otherwise (by an earlier kvtrain) would restore nothing
  // and leave every key fresh: refused.
  proto::OptimizerStates old;
  ASSERT_TRUE(old.ParseFromString(*saved));
  EXPECT_EQ(old.key_numbering(), Optimizer::kKeyNumbering);
  old.clear_key_numbering();
  EXPECT_NE(b->LoadStates(old.SerializeAsString()).message().find("earlier kvtrain"),
            std::string::npos);
  // A state of another shape is an error naming the key.
  Tensor other = Tensor::Zeros({3}, DType::kFloat32, TestDevice());
  EXPECT_EQ(b->Update(4, other, other).message(),
            "optimizer key 4: weight is (3) but its optimizer state is (2)");
}

// A step scale s divides lr / (1 - momentum) by 1/s: momentum first
// (1 - m' = (1 - m) / s, up to 1), the learning rate for the rest.
TEST_F(OptimizerTest, StepScaleLowersMomentumFirstThenTheRate) {
  struct Case {
    float momentum, scale;
    float want_momentum, want_lr;  // from lr 0.4
  };
  for (const Case& c : {Case{0.9f, 0.5f, 0.8f, 0.4f},      // momentum absorbs it all
                        Case{0.9f, 0.05f, 0.0f, 0.2f},     // 1 - m' would be 2: lr / 2
                        Case{0.0f, 0.25f, 0.0f, 0.1f}}) {  // no momentum: lr alone
    OptimizerSpec s = Spec(OptimizerSpec::SGD, 0.4f);
    s.set_momentum(c.momentum);
    OptimizerSpec same = Spec(OptimizerSpec::SGD, c.want_lr);
    same.set_momentum(c.want_momentum);
    auto scaled = Make(s), reference = Make(same);
    Tensor wa = *Tensor::FromVector({1, -2, 3}, {3}).CopyTo(TestDevice());
    Tensor wb = wa.Clone();
    Tensor g = *Tensor::FromVector({0.5f, 0.25f, -1}, {3}).CopyTo(TestDevice());
    for (int t = 0; t < 3; ++t) {
      ASSERT_TRUE(scaled->Update(1, wa, g, Optimizer::Wait::kDone, c.scale).ok());
      ASSERT_TRUE(reference->Update(1, wb, g).ok());
    }
    const std::vector<float> a = wa.ToVector(), b = wb.ToVector();
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_NEAR(a[i], b[i], 1e-6f) << "momentum " << c.momentum << " scale " << c.scale;
    }
  }
  auto opt = Make(Spec(OptimizerSpec::SGD, 0.4f));
  Tensor w = Tensor::Zeros({3}, DType::kFloat32, TestDevice());
  for (float bad : {0.0f, -1.0f, std::nanf("")}) {
    const Status st = opt->Update(1, w, w, Optimizer::Wait::kDone, bad);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("step scale"), std::string::npos) << st;
  }
}

TEST_F(OptimizerTest, ConcurrentKeys) {
  OptimizerSpec s = Spec(OptimizerSpec::SGD, 0.5f);
  s.set_momentum(0.5f);
  auto opt = Make(s);
  std::vector<Tensor> ws;
  for (int k = 0; k < 4; ++k) ws.push_back(Tensor::Zeros({64}, DType::kFloat32, TestDevice()));
  Tensor g = *Tensor::FromVector(std::vector<float>(64, 1.0f), {64}).CopyTo(TestDevice());
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int i = 0; i < 20; ++i) ASSERT_TRUE(opt->Update(k, ws[k], g).ok());
    });
  }
  for (auto& t : threads) t.join();
  Ref ref{s, 0};
  for (int i = 0; i < 20; ++i) ref.Step(1);
  for (int k = 0; k < 4; ++k) EXPECT_NEAR(ws[k].ToVector()[0], ref.w, 1e-4);
  EXPECT_EQ(opt->num_update(), 20);
}

}  // namespace
}  // namespace kvtrain
