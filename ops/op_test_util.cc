// Operator test helpers: a one-op runner, the numeric gradient check and the
// CPU-vs-device comparison.
#include "ops/op_test_util.h"

#include <cmath>
#include <cstdlib>
#include <random>

#include <gtest/gtest.h>

namespace kvtrain {
namespace op_test {

Values Random(int64_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  Values v(n);
  for (float& x : v) x = u(rng);
  return v;
}

namespace {

Tensor OnDevice(const Values& v, const Shape& shape, const Device& device) {
  StatusOr<Tensor> t = Tensor::FromVector(v, shape).CopyTo(device);
  CHECK(t.ok()) << t.status();
  return *t;
}

}  // namespace

StatusOr<std::unique_ptr<OpRunner>> OpRunner::Create(
    const std::string& type, const OpAttrs& attrs,
    const std::vector<Shape>& in_shapes, const Device& device) {
  std::unique_ptr<OpRunner> r(new OpRunner);
  KV_ASSIGN_OR_RETURN(r->op_, CreateOperator(type, "op", attrs));
  r->device_ = device;
  r->in_shapes_ = in_shapes;
  r->in_shapes_.resize(r->op_->ListArguments().size());
  r->out_shapes_.resize(r->op_->ListOutputs().size());
  std::vector<Shape> aux(r->op_->ListAuxiliaryStates().size());
  KV_RETURN_IF_ERROR(r->op_->InferShape(&r->in_shapes_, &r->out_shapes_, &aux));
  for (size_t i = 0; i < r->in_shapes_.size(); ++i) {
    const Shape& s = r->in_shapes_[i];
    r->args_.in.push_back(
        OnDevice(Random(s.NumElements(), 100 + i), s, device));
  }
  for (const Shape& s : r->out_shapes_) {
    KV_ASSIGN_OR_RETURN(Tensor t, Tensor::CreateZeros(s, DType::kFloat32, device));
    r->args_.out.push_back(t);
    r->args_.req.push_back(OpReq::kWrite);
  }
  for (const Shape& s : aux) {
    KV_ASSIGN_OR_RETURN(Tensor t, Tensor::CreateZeros(s, DType::kFloat32, device));
    r->args_.aux.push_back(t);
  }
  const size_t ws = r->op_->WorkspaceBytes(r->in_shapes_, device);
  KV_ASSIGN_OR_RETURN(r->workspace_,
                      Tensor::Create({static_cast<int64_t>(ws)}, DType::kUInt8,
                                     device));
  return r;
}

void OpRunner::SetInput(int i, const Values& v) {
  args_.in[i] = OnDevice(v, in_shapes_[i], device_);
}

void OpRunner::SetAux(int i, const Values& v) {
  CHECK(args_.aux[i].CopyFrom(OnDevice(v, args_.aux[i].shape(), device_)).ok());
}

Status OpRunner::Forward(bool is_train, OpReq req) {
  KV_ASSIGN_OR_RETURN(DeviceContext * dctx, DeviceContext::Get(device_));
  OpContext ctx;
  ctx.is_train = is_train;
  ctx.device = dctx;
  ctx.workspace = workspace_.raw_data();
  ctx.workspace_bytes = workspace_.nbytes();
  for (size_t k = 0; k < args_.out.size(); ++k) {
    args_.req[k] = req;
    // A written output may hold anything: NaN catches ops that read it.
    if (req == OpReq::kWrite) KV_RETURN_IF_ERROR(args_.out[k].Fill(NAN));
  }
  KV_RETURN_IF_ERROR(op_->Forward(ctx, &args_));
  return dctx->Synchronize();
}

Status OpRunner::Backward(const std::vector<Values>& out_grads,
                          const std::vector<OpReq>& reqs,
                          std::vector<Values>* grads) {
  KV_ASSIGN_OR_RETURN(DeviceContext * dctx, DeviceContext::Get(device_));
  OpContext ctx;
  ctx.is_train = true;
  ctx.device = dctx;
  ctx.workspace = workspace_.raw_data();
  ctx.workspace_bytes = workspace_.nbytes();
  BackwardArgs b;
  for (int k = 0; k < op_->NumVisibleOutputs(); ++k) {
    b.out_grad.push_back(k < static_cast<int>(out_grads.size())
                             ? OnDevice(out_grads[k], out_shapes_[k], device_)
                             : Tensor());
  }
  b.in = args_.in;
  b.out = args_.out;
  b.aux = args_.aux;
  b.req = reqs;
  for (size_t i = 0; i < args_.in.size(); ++i) {
    b.in_grad.push_back(OnDevice((*grads)[i], in_shapes_[i], device_));
    // A written gradient may hold anything: NaN catches ops that read it.
    if (reqs[i] == OpReq::kWrite) KV_RETURN_IF_ERROR(b.in_grad[i].Fill(NAN));
  }
  KV_RETURN_IF_ERROR(op_->Backward(ctx, &b));
  KV_RETURN_IF_ERROR(dctx->Synchronize());
  for (size_t i = 0; i < args_.in.size(); ++i) {
    (*grads)[i] = b.in_grad[i].ToVector();
  }
  return Status::OK();
}

namespace {

std::vector<Values> VisibleOutputs(OpRunner* r) {
  std::vector<Values> outs;
  for (int k = 0; k < r->num_visible_outputs(); ++k) outs.push_back(r->Output(k));
  return outs;
}

std::vector<Values> Inputs(OpRunner* r) {
  std::vector<Values> ins;
  for (size_t i = 0; i < r->in_shapes().size(); ++i) {
    ins.push_back(r->Input(static_cast<int>(i)));
  }
  return ins;
}

// kAdd adds the same gradient onto what is there.
void ExpectAddAccumulates(OpRunner* r, const GradCheckOptions& o,
                          const std::vector<Values>& weights,
                          const std::vector<Values>& analytic) {
  const size_t n_in = r->in_shapes().size();
  ASSERT_TRUE(r->Forward(o.is_train).ok());
  std::vector<Values> added(n_in);
  std::vector<OpReq> add_reqs(n_in, OpReq::kNull);
  for (size_t i = 0; i < n_in; ++i) {
    added[i].assign(r->in_shapes()[i].NumElements(), 0.5f);
  }
  for (int i : o.inputs) add_reqs[i] = OpReq::kAdd;
  const Status st = r->Backward(weights, add_reqs, &added);
  ASSERT_TRUE(st.ok()) << st;
  for (int i : o.inputs) {
    for (size_t j = 0; j < added[i].size(); ++j) {
      ASSERT_NEAR(added[i][j], analytic[i][j] + 0.5f,
                  1e-5 + 1e-4 * std::fabs(analytic[i][j]))
          << r->op()->Describe() << ": kAdd of input " << i << "[" << j << "]";
    }
  }
}

}  // namespace

void CheckGradient(OpRunner* r, const GradCheckOptions& o) {
  std::vector<Values> weights;
  for (int k = 0; k < r->num_visible_outputs(); ++k) {
    weights.push_back(Random(r->out_shapes()[k].NumElements(), 900 + k));
  }
  Objective loss = o.loss;
  if (!loss) {
    loss = [&weights](const std::vector<Values>& outs,
                      const std::vector<Values>&) {
      double s = 0;
      for (size_t k = 0; k < outs.size(); ++k) {
        for (size_t i = 0; i < outs[k].size(); ++i) s += weights[k][i] * outs[k][i];
      }
      return s;
    };
  }
  const size_t n_in = r->in_shapes().size();
  ASSERT_TRUE(r->Forward(o.is_train).ok());
  std::vector<Values> analytic(n_in);
  std::vector<OpReq> reqs(n_in, OpReq::kNull);
  for (size_t i = 0; i < n_in; ++i) {
    analytic[i].assign(r->in_shapes()[i].NumElements(), 0.0f);
  }
  for (int i : o.inputs) reqs[i] = OpReq::kWrite;
  Status st = r->Backward(weights, reqs, &analytic);
  ASSERT_TRUE(st.ok()) << st;

  for (int i : o.inputs) {
    const Values base = r->Input(i);
    const int64_t n = static_cast<int64_t>(base.size());
    const int64_t step = std::max<int64_t>(1, n / o.max_elements);
    for (int64_t j = 0; j < n; j += step) {
      Values x = base;
      double l[2];
      for (int side = 0; side < 2; ++side) {
        x[j] = static_cast<float>(base[j] + (side == 0 ? o.eps : -o.eps));
        r->SetInput(i, x);
        ASSERT_TRUE(r->Forward(o.is_train).ok());
        l[side] = loss(VisibleOutputs(r), Inputs(r));
      }
      r->SetInput(i, base);
      const double numeric = (l[0] - l[1]) / (2 * o.eps);
      const double a = analytic[i][j];
      EXPECT_NEAR(a, numeric,
                  o.atol + o.rtol * std::max(std::fabs(a), std::fabs(numeric)))
          << r->op()->Describe() << ": d/d input " << i << "[" << j << "]";
    }
  }

  ExpectAddAccumulates(r, o, weights, analytic);
}

namespace {

// Two runners of one op type (attributes and device each) fed the same
// inputs; gtest failures when either cannot be made.
void RunnerPair(const std::string& type, const OpAttrs& attrs_a,
                const Device& device_a, const OpAttrs& attrs_b,
                const Device& device_b, const std::vector<Shape>& in_shapes,
                const std::vector<Values>& inputs, std::unique_ptr<OpRunner>* a,
                std::unique_ptr<OpRunner>* b) {
  StatusOr<std::unique_ptr<OpRunner>> ra =
      OpRunner::Create(type, attrs_a, in_shapes, device_a);
  StatusOr<std::unique_ptr<OpRunner>> rb =
      OpRunner::Create(type, attrs_b, in_shapes, device_b);
  ASSERT_TRUE(ra.ok()) << ra.status();
  ASSERT_TRUE(rb.ok()) << rb.status();
  *a = std::move(*ra);
  *b = std::move(*rb);
  for (size_t i = 0; i < inputs.size(); ++i) {
    (*a)->SetInput(static_cast<int>(i), inputs[i]);
    (*b)->SetInput(static_cast<int>(i), inputs[i]);
  }
}

}  // namespace

void ExpectSameOnDevice(const std::string& type, const OpAttrs& attrs,
                        const std::vector<Shape>& in_shapes,
                        const std::vector<Values>& inputs,
                        const Device& device, float tol) {
  std::unique_ptr<OpRunner> cpu, dev;
  RunnerPair(type, attrs, Device::CPU(), attrs, device, in_shapes, inputs, &cpu,
             &dev);
  if (::testing::Test::HasFatalFailure()) return;
  ASSERT_TRUE(cpu->Forward(true).ok());
  ASSERT_TRUE(dev->Forward(true).ok());
  std::vector<Values> out_grads;
  for (int k = 0; k < cpu->num_visible_outputs(); ++k) {
    const Values a = cpu->Output(k), b = dev->Output(k);
    ASSERT_EQ(a.size(), b.size());
    for (size_t j = 0; j < a.size(); ++j) {
      ASSERT_NEAR(a[j], b[j], tol * (1 + std::fabs(a[j]))) << "output " << k;
    }
    out_grads.push_back(Random(a.size(), 500 + k));
  }
  const size_t n_in = cpu->in_shapes().size();
  std::vector<Values> ga(n_in), gb(n_in);
  for (size_t i = 0; i < n_in; ++i) {
    ga[i].assign(cpu->in_shapes()[i].NumElements(), 0.0f);
    gb[i] = ga[i];
  }
  const std::vector<OpReq> reqs(n_in, OpReq::kWrite);
  if (!cpu->op()->differentiable()) return;
  ASSERT_TRUE(cpu->Backward(out_grads, reqs, &ga).ok());
  ASSERT_TRUE(dev->Backward(out_grads, reqs, &gb).ok());
  for (size_t i = 0; i < n_in; ++i) {
    for (size_t j = 0; j < ga[i].size(); ++j) {
      ASSERT_NEAR(ga[i][j], gb[i][j], tol * (1 + std::fabs(ga[i][j])))
          << "gradient of input " << i << "[" << j << "]";
    }
  }
}

namespace {

void ExpectClose(const Values& a, const Values& b, float tol,
                 const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t j = 0; j < a.size(); ++j) {
    ASSERT_FALSE(std::isnan(b[j])) << what << "[" << j << "] not written";
    ASSERT_NEAR(a[j], b[j], tol * (1 + std::fabs(a[j])))
        << what << "[" << j << "]";
  }
}

}  // namespace

void ExpectCudnnMatchesReference(const std::string& type, const OpAttrs& attrs,
                                 const std::vector<Shape>& in_shapes,
                                 const std::vector<Values>& inputs,
                                 const Device& device, float tol,
                                 bool is_train) {
  OpAttrs off = attrs, on = attrs;
  off["cudnn_off"] = "true";
  on["cudnn_off"] = "false";
  std::unique_ptr<OpRunner> ref, dnn;
  RunnerPair(type, off, device, on, device, in_shapes, inputs, &ref, &dnn);
  if (::testing::Test::HasFatalFailure()) return;
  const size_t n_out = ref->out_shapes().size();
  for (OpReq req : {OpReq::kWrite, OpReq::kAdd}) {
    const std::string mode = req == OpReq::kAdd ? " (kAdd)" : " (kWrite)";
    Status a = ref->Forward(is_train, req);
    if (req == OpReq::kAdd && !a.ok()) continue;  // e.g. probabilities
    ASSERT_TRUE(a.ok()) << a;
    const Status b = dnn->Forward(is_train, req);
    ASSERT_TRUE(b.ok()) << b;
    for (size_t k = 0; k < n_out; ++k) {
      ExpectClose(ref->Output(k), dnn->Output(k), tol,
                  "output " + std::to_string(k) + mode);
    }
    for (size_t k = 0; k < ref->op()->ListAuxiliaryStates().size(); ++k) {
      ExpectClose(ref->Aux(k), dnn->Aux(k), tol,
                  "auxiliary state " + std::to_string(k) + mode);
    }
  }
  if (!ref->op()->differentiable()) return;
  // Backward after a fresh kWrite forward, so both read the same outputs.
  ASSERT_TRUE(ref->Forward(is_train).ok());
  ASSERT_TRUE(dnn->Forward(is_train).ok());
  std::vector<Values> out_grads;
  for (int k = 0; k < ref->num_visible_outputs(); ++k) {
    out_grads.push_back(Random(ref->out_shapes()[k].NumElements(), 700 + k));
  }
  const size_t n_in = ref->in_shapes().size();
  for (OpReq req : {OpReq::kWrite, OpReq::kAdd}) {
    std::vector<Values> ga(n_in), gb(n_in);
    for (size_t i = 0; i < n_in; ++i) {
      ga[i] = Random(ref->in_shapes()[i].NumElements(), 800 + i);
      gb[i] = ga[i];
    }
    const std::vector<OpReq> reqs(n_in, req);
    ASSERT_TRUE(ref->Backward(out_grads, reqs, &ga).ok());
    ASSERT_TRUE(dnn->Backward(out_grads, reqs, &gb).ok());
    for (size_t i = 0; i < n_in; ++i) {
      ExpectClose(ga[i], gb[i], tol,
                  "gradient of input " + std::to_string(i) +
                      (req == OpReq::kAdd ? " (kAdd)" : " (kWrite)"));
    }
  }
}

void ExpectNear(const Values& got, const std::vector<double>& want,
                double atol, double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], atol + rtol * std::fabs(want[i]))
        << what << " at " << i;
  }
}

}  // namespace op_test
}  // namespace kvtrain
