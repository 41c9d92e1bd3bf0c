// _Send / _Recv: tensors through a PeerLink. GPU tensors go through a host
// copy (the link moves host bytes).
#include "ops/peer_ops.h"

#include "tensor/blas.h"

namespace kvtrain {
namespace {

constexpr int64_t kMaxTag = (int64_t{1} << 62) - 1;

Status ReadEdge(AttrReader* r, PeerEdge* edge) {
  int64_t peer = 0, tag = 0;
  KV_RETURN_IF_ERROR(r->Int("peer", &peer, 0, 1 << 30));
  KV_RETURN_IF_ERROR(r->Int("tag", &tag, 0, kMaxTag));
  edge->peer = static_cast<int>(peer);
  edge->tag = static_cast<uint64_t>(tag);
  return Status::OK();
}

// The tensor's bytes on the host (itself when it is there already).
StatusOr<Tensor> OnHost(const Tensor& t) {
  if (t.device().is_cpu()) return t;
  return t.CopyTo(Device::CPU());
}

Status SendTensor(const OpContext& ctx, const PeerEdge& edge, uint64_t tag,
                  const Tensor& t) {
  KV_ASSIGN_OR_RETURN(Tensor host, OnHost(t));
  if (t.device().is_gpu()) KV_RETURN_IF_ERROR(ctx.device->Synchronize());
  return ctx.peer_link->Send(edge.peer, tag, host.raw_data(), host.nbytes());
}

// Receives into `dst` as `req` says (kNull: receive and drop).
Status RecvTensor(const OpContext& ctx, const PeerEdge& edge, uint64_t tag,
                  const Shape& shape, Tensor* dst, OpReq req) {
  const bool direct = req != OpReq::kNull && req != OpReq::kAdd &&
                      dst->device().is_cpu();
  Tensor buf = direct ? *dst : Tensor::Empty(shape);
  KV_RETURN_IF_ERROR(ctx.peer_link->Recv(edge.peer, tag, buf.raw_data(),
                                         buf.nbytes(), ctx.peer_timeout));
  if (direct || req == OpReq::kNull) return Status::OK();
  if (req != OpReq::kAdd) return dst->CopyFrom(buf);
  KV_ASSIGN_OR_RETURN(Tensor tmp, buf.CopyTo(dst->device()));
  return blas::Axpy(1.0f, tmp, dst);
}

Status NeedLink(const OpContext& ctx, const std::string& who) {
  if (ctx.peer_link != nullptr) return Status::OK();
  return Status::FailedPrecondition(
      who + ": no peer link (bind the graph with ExecutorOptions::peer_link)");
}

}  // namespace

// ---- _Send.

StatusOr<std::unique_ptr<Operator>> SendOp::Create(const OpSpec& spec) {
  AttrReader r(spec.Describe(), spec.attrs);
  PeerEdge edge;
  KV_RETURN_IF_ERROR(ReadEdge(&r, &edge));
  KV_RETURN_IF_ERROR(r.Finish());
  return std::unique_ptr<Operator>(new SendOp(edge));
}

Status SendOp::InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                          std::vector<Shape>* aux) const {
  if ((*in)[0].ndim() == 0) {
    return Error("the shape of " + input_name(0) + " is unknown");
  }
  (*out)[0] = Shape({1});
  return Status::OK();
}

BackwardNeeds SendOp::DeclareBackwardNeeds() const {
  BackwardNeeds needs;
  needs.outputs = {0};
  needs.out_grad = false;
  return needs;
}

Status SendOp::ForwardCpu(const OpContext& ctx, ForwardArgs* args) {
  KV_RETURN_IF_ERROR(NeedLink(ctx, Describe()));
  const Status st = SendTensor(ctx, edge_, edge_.forward_tag(), args->in[0]);
  if (!st.ok()) {
    return st.Annotate(Describe() + ": sending " + input_name(0) +
                       " to rank " + std::to_string(edge_.peer));
  }
  return Status::OK();
}

Status SendOp::BackwardCpu(const OpContext& ctx, BackwardArgs* args) {
  KV_RETURN_IF_ERROR(NeedLink(ctx, Describe()));
  const Status st = RecvTensor(ctx, edge_, edge_.backward_tag(),
                               args->in[0].shape(), &args->in_grad[0],
                               args->req[0]);
  if (!st.ok()) {
    return st.Annotate(Describe() + ": receiving the gradient of " +
                       input_name(0) + " from rank " +
                       std::to_string(edge_.peer));
  }
  return Status::OK();
}

Status SendOp::ForwardGpu(const OpContext& ctx, ForwardArgs* args) {
  return ForwardCpu(ctx, args);
}

Status SendOp::BackwardGpu(const OpContext& ctx, BackwardArgs* args) {
  return BackwardCpu(ctx, args);
}

// ---- _Recv.

StatusOr<std::unique_ptr<Operator>> RecvOp::Create(const OpSpec& spec) {
  AttrReader r(spec.Describe(), spec.attrs);
  PeerEdge edge;
  KV_RETURN_IF_ERROR(ReadEdge(&r, &edge));
  std::vector<int64_t> dims;
  bool present = false;
  KV_RETURN_IF_ERROR(r.IntList("shape", 1, &dims, &present));
  if (!present || dims.empty()) {
    return Status::InvalidArgument(spec.Describe() +
                                   ": missing attribute shape");
  }
  KV_RETURN_IF_ERROR(r.Finish());
  return std::unique_ptr<Operator>(new RecvOp(edge, Shape(dims)));
}

Status RecvOp::InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                          std::vector<Shape>* aux) const {
  (*out)[0] = shape_;
  return Status::OK();
}

BackwardNeeds RecvOp::DeclareBackwardNeeds() const { return BackwardNeeds(); }

Status RecvOp::ForwardCpu(const OpContext& ctx, ForwardArgs* args) {
  KV_RETURN_IF_ERROR(NeedLink(ctx, Describe()));
  const Status st = RecvTensor(ctx, edge_, edge_.forward_tag(), shape_,
                               &args->out[0], args->req[0]);
  if (!st.ok()) {
    return st.Annotate(Describe() + ": receiving the activation from rank " +
                       std::to_string(edge_.peer));
  }
  return Status::OK();
}

Status RecvOp::BackwardCpu(const OpContext& ctx, BackwardArgs* args) {
  KV_RETURN_IF_ERROR(NeedLink(ctx, Describe()));
  const Status st =
      SendTensor(ctx, edge_, edge_.backward_tag(), args->out_grad[0]);
  if (!st.ok()) {
    return st.Annotate(Describe() + ": sending the gradient to rank " +
                       std::to_string(edge_.peer));
  }
  return Status::OK();
}

Status RecvOp::ForwardGpu(const OpContext& ctx, ForwardArgs* args) {
  return ForwardCpu(ctx, args);
}

Status RecvOp::BackwardGpu(const OpContext& ctx, BackwardArgs* args) {
  return BackwardCpu(ctx, args);
}

KV_REGISTER_OP("_Send", SendOp::Create);
KV_REGISTER_OP("_Recv", RecvOp::Create);

}  // namespace kvtrain
