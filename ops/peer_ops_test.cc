// _Send/_Recv over in-memory links: forward moves the activation, backward
// the gradient (written or added), errors name the peer and the op.
#include "ops/peer_ops.h"

#include <gtest/gtest.h>

#include "base/in_memory_peer_link.h"

namespace kvtrain {
namespace {

std::unique_ptr<Operator> Make(const std::string& type, const OpAttrs& attrs) {
  auto op = CreateOperator(type, type == "_Send" ? "x_to_rank1" : "x_from_rank0", attrs);
  EXPECT_TRUE(op.ok()) << op.status();
  return std::move(op).value();
}

OpContext Ctx(PeerLink* link) {
  OpContext ctx;
  ctx.device = *DeviceContext::Get(Device::CPU());
  ctx.peer_link = link;
  ctx.peer_timeout = std::chrono::milliseconds(500);
  ctx.is_train = true;
  return ctx;
}

TEST(PeerOpsTest, ForwardSendsTheActivationBackwardReturnsTheGradient) {
  InMemoryPeerGroup group(2);
  auto send = Make("_Send", {{"peer", "1"}, {"tag", "7"}});
  auto recv = Make("_Recv", {{"peer", "0"}, {"tag", "7"}, {"shape", "(2, 3)"}});
  const Tensor x = Tensor::FromVector({1, 2, 3, 4, 5, 6}, {2, 3});
  ForwardArgs sf{{x}, {Tensor::Zeros({1})}, {}, {OpReq::kWrite}};
  ASSERT_TRUE(send->Forward(Ctx(group.link(0)), &sf).ok());
  ForwardArgs rf{{}, {Tensor::Zeros({2, 3})}, {}, {OpReq::kWrite}};
  ASSERT_TRUE(recv->Forward(Ctx(group.link(1)), &rf).ok());
  EXPECT_EQ(rf.out[0].ToVector(), x.ToVector());

  // Backward twice: the gradient is written, then added.
  const Tensor g = Tensor::FromVector({6, 5, 4, 3, 2, 1}, {2, 3});
  Tensor in_grad = Tensor::Zeros({2, 3});
  for (OpReq req : {OpReq::kWrite, OpReq::kAdd}) {
    BackwardArgs rb{{g}, {}, rf.out, {}, {}, {}};
    ASSERT_TRUE(recv->Backward(Ctx(group.link(1)), &rb).ok());
    BackwardArgs sb{{Tensor()}, {x}, sf.out, {}, {in_grad}, {req}};
    ASSERT_TRUE(send->Backward(Ctx(group.link(0)), &sb).ok());
  }
  EXPECT_EQ(in_grad.ToVector(), (std::vector<float>{12, 10, 8, 6, 4, 2}));
  EXPECT_EQ(group.pending(), 0u);
}

TEST(PeerOpsTest, ErrorsNameTheOpAndThePeer) {
  InMemoryPeerGroup group(2);
  auto recv = Make("_Recv", {{"peer", "0"}, {"tag", "7"}, {"shape", "(2)"}});
  ForwardArgs rf{{}, {Tensor::Zeros({2})}, {}, {OpReq::kWrite}};
  Status st = recv->Forward(Ctx(group.link(1)), &rf);
  EXPECT_EQ(st.code(), Status::Code::kDeadlineExceeded) << st;
  EXPECT_NE(st.message().find("x_from_rank0 (_Recv): receiving the activation from rank 0"),
            std::string::npos) << st;
  st = recv->Forward(Ctx(nullptr), &rf);
  EXPECT_NE(st.message().find("no peer link"), std::string::npos) << st;
  group.Kill(0);
  st = recv->Forward(Ctx(group.link(1)), &rf);
  EXPECT_EQ(st.code(), Status::Code::kUnavailable) << st;
  EXPECT_FALSE(CreateOperator("_Recv", "r", {{"peer", "0"}, {"tag", "1"}}).ok());  // no shape
}

}  // namespace
}  // namespace kvtrain
