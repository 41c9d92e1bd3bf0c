// Communicator on in-process groups (loopback): sums, tags, split, errors,
// and the environment contract.
#include "transport/collective/communicator.h"
#include "transport/collective/mesh.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <thread>

namespace kvtrain {
namespace collective {
namespace {

using Comms = std::vector<std::shared_ptr<Communicator>>;

// `doubling_bytes` 0: every all-reduce takes the ring.
Comms Group(int n, net::JobKey key = net::JobKey::Insecure(),
            size_t doubling_bytes = CommunicatorOptions().doubling_bytes) {
  CommunicatorOptions o;
  o.key = key;
  o.timeout = std::chrono::seconds(30);
  o.piece_bytes = 4096;  // many pieces even for small tensors
  o.doubling_bytes = doubling_bytes;
  auto g = Communicator::CreateLocalGroup(n, o);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *g : Comms();
}

// Runs fn(rank) on one thread per rank; returns each rank's status.
std::vector<Status> OnEachRank(int n, const std::function<Status(int)>& fn) {
  std::vector<Status> out(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { out[r] = fn(r); });
  for (auto& t : threads) t.join();
  return out;
}

void ExpectAllOk(const std::vector<Status>& s) {
  for (size_t r = 0; r < s.size(); ++r) EXPECT_TRUE(s[r].ok()) << "rank " << r << ": " << s[r];
}

TEST(CommunicatorTest, AllReduceSumsEverySize) {
  // Ring for every size, then recursive doubling up to 16 KB (n = 2, 4).
  for (size_t doubling : {size_t{0}, size_t{16384}})
  for (int n : {1, 2, 3, 4}) {
    Comms g = Group(n, net::JobKey::Insecure(), doubling);
    ASSERT_EQ(static_cast<int>(g.size()), n);
    for (size_t count : {0, 1, 2, 3, 5, 1000, 5001, 100003}) {
      std::vector<std::vector<float>> data(n, std::vector<float>(count));
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < count; ++i) data[r][i] = static_cast<float>((r + 1) * (i % 13));
      }
      ExpectAllOk(OnEachRank(n, [&](int r) { return g[r]->AllReduceSum(data[r].data(), count); }));
      const float ranks_sum = n * (n + 1) / 2.0f;
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(data[r][i], ranks_sum * (i % 13))
              << "n " << n << " count " << count << " rank " << r << " index " << i
              << " doubling up to " << doubling << " bytes";
        }
      }
    }
  }
}

TEST(CommunicatorTest, SameHostPeersUseIpcUnlessTurnedOff) {
  for (bool ipc : {true, false}) {
    CommunicatorOptions o;
    o.key = net::JobKey::Insecure();
    o.timeout = std::chrono::seconds(30);
    o.same_host_ipc = ipc;
    o.doubling_bytes = 0;
    auto g = Communicator::CreateLocalGroup(3, o);
    ASSERT_TRUE(g.ok()) << g.status();
    for (int r = 0; r < 3; ++r) {
      for (int p = 0; p < 3; ++p) {
        if (p == r) continue;
        EXPECT_EQ((*g)[r]->Transport(p), ipc ? "ipc" : "tcp") << r << "->" << p;
      }
    }
    std::vector<std::vector<float>> data(3, std::vector<float>(70000, 1.0f));
    ExpectAllOk(OnEachRank(3, [&](int r) { return (*g)[r]->AllReduceSum(data[r].data(), 70000); }));
    for (int r = 0; r < 3; ++r) EXPECT_EQ(data[r][69999], 3.0f);
  }
}

TEST(CommunicatorTest, SameHostSocketsLeaveNoFiles) {
  char dir[] = "/tmp/kvtrain-ipc-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const char* old_tmp = std::getenv("TMPDIR");
  const std::string saved = old_tmp == nullptr ? "" : old_tmp;
  setenv("TMPDIR", dir, 1);
  auto count_files = [&] {
    int n = 0;
    DIR* d = opendir(dir);
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
    return n;
  };
  {
    CommunicatorOptions o;
    o.key = net::JobKey::Insecure();
    auto g = Communicator::CreateLocalGroup(2, o);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ((*g)[0]->Transport(1), "ipc");
    // Abstract sockets: nothing in the file system, nothing left by a kill.
    EXPECT_EQ(count_files(), 0);
    std::vector<std::vector<float>> data(2, std::vector<float>(1000, 2.0f));
    ExpectAllOk(OnEachRank(2, [&](int r) { return (*g)[r]->AllReduceSum(data[r].data(), 1000); }));
    EXPECT_EQ(data[1][999], 4.0f);
  }
  if (old_tmp == nullptr) {
    unsetenv("TMPDIR");
  } else {
    setenv("TMPDIR", saved.c_str(), 1);
  }
  EXPECT_EQ(rmdir(dir), 0) << "files left in " << dir;
}

TEST(CommunicatorTest, EndpointsTravelAsOneToken) {
  Endpoint e{"10.0.0.2", 40123, "b00t-1d.4026531840@kvtrain-mesh-1-2"};
  Endpoint back;
  ASSERT_TRUE(Endpoint::Decode(e.Encode(), &back)) << e.Encode();
  EXPECT_EQ(back.host, "10.0.0.2");
  EXPECT_EQ(back.port, 40123);
  EXPECT_EQ(back.same_host, "b00t-1d.4026531840@kvtrain-mesh-1-2");
  ASSERT_TRUE(Endpoint::Decode("host-a:7", &back));
  EXPECT_EQ(back.host, "host-a");
  EXPECT_TRUE(back.same_host.empty());
  // A name with a space cannot travel: TCP only.
  EXPECT_EQ((Endpoint{"h", 1, "b@a b"}).Encode(), "h:1");
  for (const char* bad : {"", "h", ":5", "h:0", "h:x", "h:5@b", "h:5@@/p", "h:5@b@"}) {
    EXPECT_FALSE(Endpoint::Decode(bad, &back)) << bad;
  }
}

// Sums that round: every rank must still end with the same bits (replicas
// of a model stay identical), by ring and by recursive doubling.
TEST(CommunicatorTest, AllReduceLeavesEveryRankTheSameBits) {
  for (size_t doubling : {size_t{0}, size_t{1} << 20}) {
    for (int n : {2, 4}) {
      Comms g = Group(n, net::JobKey::Insecure(), doubling);
      const size_t count = 3001;
      std::vector<std::vector<float>> data(n, std::vector<float>(count));
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < count; ++i) {
          data[r][i] = 1.0f / static_cast<float>(3 + 7 * r + i) * (i % 2 ? -1e3f : 1e-3f);
        }
      }
      ExpectAllOk(OnEachRank(n, [&](int r) { return g[r]->AllReduceSum(data[r].data(), count); }));
      for (int r = 1; r < n; ++r) {
        ASSERT_EQ(0, std::memcmp(data[0].data(), data[r].data(), count * sizeof(float)))
            << "rank " << r << " of " << n << ", doubling up to " << doubling << " bytes";
      }
      double expect = 0;
      for (int r = 0; r < n; ++r) expect += 1e-3 / (3 + 7 * r);
      EXPECT_NEAR(data[0][0], expect, 1e-9);
    }
  }
}

TEST(CommunicatorTest, SecuredWithTheJobKey) {
  Comms g = Group(3, net::JobKey::Generate());
  ASSERT_EQ(g.size(), 3u);
  std::vector<std::vector<float>> data(3, std::vector<float>(70001, 1.0f));
  ExpectAllOk(OnEachRank(3, [&](int r) { return g[r]->AllReduceSum(data[r].data(), 70001); }));
  for (int r = 0; r < 3; ++r) EXPECT_EQ(data[r][70000], 3.0f) << "rank " << r;
}

TEST(CommunicatorTest, TagsAreIndependentAndFifo) {
  Comms g = Group(2);
  ASSERT_EQ(g.size(), 2u);
  const int a = 1, b = 2, c = 3;
  ASSERT_TRUE(g[0]->Send(1, 7, &a, sizeof(a)).ok());
  ASSERT_TRUE(g[0]->Send(1, 7, &b, sizeof(b)).ok());
  ASSERT_TRUE(g[0]->Send(1, 9, &c, sizeof(c)).ok());
  int got = 0;
  const auto t = std::chrono::seconds(10);
  ASSERT_TRUE(g[1]->Recv(0, 9, &got, sizeof(got), t).ok());
  EXPECT_EQ(got, 3);
  ASSERT_TRUE(g[1]->Recv(0, 7, &got, sizeof(got), t).ok());
  EXPECT_EQ(got, 1);
  ASSERT_TRUE(g[1]->Recv(0, 7, &got, sizeof(got), t).ok());
  EXPECT_EQ(got, 2);
  // A user tag does not see collective traffic, nor the reverse.
  float x = 1;
  ExpectAllOk(OnEachRank(2, [&](int r) {
    float v = 1;
    return g[r]->AllReduceSum(&v, 1);
  }));
  Status none = g[1]->Recv(0, 0, &x, sizeof(x), std::chrono::milliseconds(100));
  EXPECT_EQ(none.code(), Status::Code::kDeadlineExceeded) << none;
  EXPECT_NE(none.message().find("rank 0 (127.0.0.1:"), std::string::npos) << none;
}

TEST(CommunicatorTest, SizeMismatchNamesPeerTagAndSizes) {
  Comms g = Group(2);
  ASSERT_EQ(g.size(), 2u);
  const double d = 1.0;
  ASSERT_TRUE(g[1]->Send(0, 42, &d, sizeof(d)).ok());
  float f;
  Status s = g[0]->Recv(1, 42, &f, sizeof(f), std::chrono::seconds(10));
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("rank 1 (127.0.0.1:"), std::string::npos) << s;
  EXPECT_NE(s.message().find("sent 8 bytes under tag 42, expected 4"), std::string::npos) << s;
  // All-reduce with different counts on the two ranks.
  std::vector<float> x(10, 1.f), y(12, 1.f);
  auto st = OnEachRank(2, [&](int r) {
    return r == 0 ? g[0]->AllReduceSum(x.data(), x.size())
                  : g[1]->AllReduceSum(y.data(), y.size());
  });
  EXPECT_FALSE(st[0].ok() && st[1].ok());
  const Status& bad = st[0].ok() ? st[1] : st[0];
  EXPECT_NE(bad.message().find("bytes under tag"), std::string::npos) << bad;
}

TEST(CommunicatorTest, InvalidPeerIsAnError) {
  Comms g = Group(2);
  ASSERT_EQ(g.size(), 2u);
  int v = 0;
  EXPECT_EQ(g[0]->Send(2, 0, &v, 4).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(g[0]->Send(0, 0, &v, 4).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(g[0]->Recv(-1, 0, &v, 4, std::chrono::seconds(1)).code(),
            Status::Code::kInvalidArgument);
}

TEST(CommunicatorTest, BroadcastAndBarrier) {
  Comms g = Group(3);
  ASSERT_EQ(g.size(), 3u);
  std::vector<std::vector<int>> data(3, std::vector<int>(1000));
  for (int i = 0; i < 1000; ++i) data[2][i] = i * 3;
  ExpectAllOk(OnEachRank(3, [&](int r) {
    KV_RETURN_IF_ERROR(g[r]->Broadcast(2, data[r].data(), 4000));
    return g[r]->Barrier();
  }));
  for (int r = 0; r < 3; ++r) EXPECT_EQ(data[r], data[2]);
}

TEST(CommunicatorTest, SplitFormsIndependentSubGroups) {
  Comms g = Group(4);
  ASSERT_EQ(g.size(), 4u);
  std::vector<std::shared_ptr<Communicator>> sub(4);
  std::vector<float> v(4);
  ExpectAllOk(OnEachRank(4, [&](int r) {
    // Colors by parity; keys reverse the order within each sub-group.
    KV_ASSIGN_OR_RETURN(sub[r], g[r]->Split(r % 2, -r));
    v[r] = static_cast<float>(r + 1);
    KV_RETURN_IF_ERROR(sub[r]->AllReduceSum(&v[r], 1));
    return g[r]->Barrier();  // the parent still works
  }));
  // Ranks 0, 2 -> sub-ranks 1, 0; ranks 1, 3 -> 1, 0.
  EXPECT_EQ(sub[0]->size(), 2);
  EXPECT_EQ(sub[0]->rank(), 1);
  EXPECT_EQ(sub[2]->rank(), 0);
  EXPECT_EQ(sub[3]->rank(), 0);
  EXPECT_EQ(v[0], 4.f);  // 1 + 3
  EXPECT_EQ(v[2], 4.f);
  EXPECT_EQ(v[1], 6.f);  // 2 + 4
  EXPECT_EQ(v[3], 6.f);
  // Point-to-point within a sub-group uses sub-group ranks.
  const int x = 17;
  ASSERT_TRUE(sub[3]->Send(1, 5, &x, 4).ok());  // world 3 -> world 1
  int got = 0;
  ASSERT_TRUE(sub[1]->Recv(0, 5, &got, 4, std::chrono::seconds(10)).ok());
  EXPECT_EQ(got, 17);
  // The same tag on the parent group is another queue.
  Status none = g[1]->Recv(3, 5, &got, 4, std::chrono::milliseconds(50));
  EXPECT_EQ(none.code(), Status::Code::kDeadlineExceeded);
  // A negative color joins nothing.
  std::vector<std::shared_ptr<Communicator>> none_sub(4);
  ExpectAllOk(OnEachRank(4, [&](int r) {
    KV_ASSIGN_OR_RETURN(none_sub[r], g[r]->Split(r == 0 ? -1 : 0, 0));
    return Status::OK();
  }));
  EXPECT_EQ(none_sub[0], nullptr);
  ASSERT_NE(none_sub[1], nullptr);
  EXPECT_EQ(none_sub[1]->size(), 3);
}

TEST(CommunicatorTest, PeerThatLeftFailsWaitsOnIt) {
  Comms g = Group(3);
  ASSERT_EQ(g.size(), 3u);
  g[2]->Close();
  float v = 1;
  const auto start = std::chrono::steady_clock::now();
  Status s = g[0]->Recv(2, 0, &v, 4, std::chrono::seconds(30));
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s;
  EXPECT_NE(s.message().find("rank 2 (127.0.0.1:"), std::string::npos) << s;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  // A collective involving it fails too instead of hanging.
  auto st = OnEachRank(2, [&](int r) { return g[r]->Barrier(); });
  for (const Status& b : st) {
    EXPECT_EQ(b.code(), Status::Code::kUnavailable) << b;
    EXPECT_NE(b.message().find("rank 2 (127.0.0.1:"), std::string::npos) << b;
    EXPECT_NE(b.message().find("has left"), std::string::npos) << b;
  }
}

TEST(GroupEnvTest, ReadsLaunchersAndNamesBadVariables) {
  auto ompi = GroupEnv::FromEnv(MapEnv({{"OMPI_COMM_WORLD_RANK", "1"},
                                        {"OMPI_COMM_WORLD_SIZE", "3"},
                                        {"KVTRAIN_RENDEZVOUS", "127.0.0.1:5000"}}));
  ASSERT_TRUE(ompi.ok()) << ompi.status();
  EXPECT_EQ(ompi->rank, 1);
  EXPECT_EQ(ompi->size, 3);
  EXPECT_EQ(ompi->source, "Open MPI");
  EXPECT_FALSE(ompi->host_rendezvous);
  EXPECT_EQ(ompi->rendezvous_port, 5000);

  auto pmi = GroupEnv::FromEnv(MapEnv({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"},
                                       {"DMLC_PS_ROOT_URI", "127.0.0.1"},
                                       {"DMLC_PS_ROOT_PORT", "6000"}}));
  ASSERT_TRUE(pmi.ok()) << pmi.status();
  EXPECT_EQ(pmi->source, "PMI");
  EXPECT_TRUE(pmi->host_rendezvous);
  EXPECT_EQ(pmi->rendezvous_port, 6000);

  auto dmlc = GroupEnv::FromEnv(MapEnv({{"DMLC_ROLE", "worker"},
                                        {"DMLC_PS_ROOT_URI", "127.0.0.1"},
                                        {"DMLC_PS_ROOT_PORT", "7000"},
                                        {"DMLC_NUM_WORKER", "4"},
                                        {"DMLC_NUM_SERVER", "0"},
                                        {"DMLC_RANK", "3"}}));
  ASSERT_TRUE(dmlc.ok()) << dmlc.status();
  EXPECT_EQ(dmlc->rank, 3);
  EXPECT_EQ(dmlc->size, 4);
  EXPECT_FALSE(dmlc->host_rendezvous);
  // launch.py --launcher mpi: DMLC_ROLE wins over the MPI variables (its
  // scheduler serves the rendezvous, not MPI rank 0).
  auto both = GroupEnv::FromEnv(MapEnv({{"DMLC_ROLE", "worker"},
                                        {"DMLC_PS_ROOT_URI", "127.0.0.1"},
                                        {"DMLC_PS_ROOT_PORT", "7000"},
                                        {"DMLC_NUM_WORKER", "2"},
                                        {"DMLC_NUM_SERVER", "0"},
                                        {"DMLC_RANK", "0"},
                                        {"OMPI_COMM_WORLD_RANK", "0"},
                                        {"OMPI_COMM_WORLD_SIZE", "2"}}));
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->source, "DMLC");
  EXPECT_FALSE(both->host_rendezvous);

  auto error = [](std::map<std::string, std::string> vars) {
    auto g = GroupEnv::FromEnv(MapEnv(std::move(vars)));
    EXPECT_FALSE(g.ok());
    return g.status().message();
  };
  EXPECT_NE(error({{"OMPI_COMM_WORLD_RANK", "1"}}).find("OMPI_COMM_WORLD_SIZE is not set"),
            std::string::npos);
  EXPECT_NE(error({{"PMI_RANK", "2"}, {"PMI_SIZE", "2"}}).find("PMI_RANK=2 is not below PMI_SIZE=2"),
            std::string::npos);
  EXPECT_NE(error({{"PMI_RANK", "x"}, {"PMI_SIZE", "2"}}).find("PMI_RANK=\"x\""),
            std::string::npos);
  EXPECT_NE(error({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}}).find("KVTRAIN_RENDEZVOUS"),
            std::string::npos);
  EXPECT_NE(error({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"KVTRAIN_RENDEZVOUS", "nohost"}})
                .find("expected host:port"),
            std::string::npos);
  EXPECT_NE(error({{"DMLC_ROLE", "server"}, {"DMLC_PS_ROOT_URI", "h"},
                   {"DMLC_PS_ROOT_PORT", "1"}, {"DMLC_NUM_WORKER", "2"},
                   {"DMLC_NUM_SERVER", "0"}})
                .find("workers only"),
            std::string::npos);
}

}  // namespace
}  // namespace collective
}  // namespace kvtrain
