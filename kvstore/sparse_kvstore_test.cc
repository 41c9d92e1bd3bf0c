// Row-sparse keys through every store type: closed-form sums, the lazy
// optimizer against the local store, bad input, and whole tables saved and
// restored through the servers. Dist types run inside one process over the
// in-process transport (tests/kvstore runs them over ZeroMQ).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "base/file.h"

#include "kvstore/dist_fixture_testlib.h"
#include "transport/collective/communicator.h"
#include "kvstore/kvstore.h"
#include "kvstore/sparse/table.h"

namespace kvtrain {
namespace {

using kv_test::DistFixture;

using kv_test::Ids;

Tensor Rows(size_t n, int64_t width, float v) {
  Tensor t = Tensor::Empty(Shape({static_cast<int64_t>(n), width}));
  for (int64_t i = 0; i < t.size(); ++i) t.data<float>()[i] = v;
  return t;
}

proto::SparseTableSpec Table(int64_t width, int64_t num_rows = 0) {
  proto::SparseTableSpec s;
  s.set_width(width);
  s.set_num_rows(num_rows);
  return s;  // zeros
}

proto::OptimizerSpec Sgd(float lr) {
  proto::OptimizerSpec o;
  o.set_type(proto::OptimizerSpec::SGD);
  o.set_learning_rate(lr);
  return o;
}

constexpr int64_t kBig = (int64_t{1} << 40) + 7;  // an id past 32 bits

// Every worker pushes, each step, rows of (rank + 1) for ids {rank, 100,
// kBig, 100} (100 twice: repeats sum) and nothing else; SGD lr = 1 from
// zeros. After step t: row 100 = -2t * W(W+1)/2, row kBig = -t * W(W+1)/2,
// row r = -t (r + 1), rows never pushed 0. Step 2 has worker 0 push no row
// at all, which still completes the step.
Status ClosedFormWorker(KVStore* kv, int rank, int workers) {
  const int64_t width = 3;
  KV_RETURN_IF_ERROR(kv->InitRowSparse("emb", Table(width)));
  KV_RETURN_IF_ERROR(kv->SetOptimizer(Sgd(1.0f)));
  const float tri = workers * (workers + 1) / 2.0f;
  for (int t = 1; t <= 3; ++t) {
    if (t == 2 && rank == 0) {
      KV_RETURN_IF_ERROR(kv->PushRowSparse("emb", Ids({}), Rows(0, width, 0)));
    } else {
      KV_RETURN_IF_ERROR(kv->PushRowSparse("emb", Ids({rank, 100, kBig, 100}),
                                           Rows(4, width, rank + 1.0f)));
    }
    if (kv->type() == "dist_async") continue;
    Tensor out = Rows(5, width, -1);
    KV_RETURN_IF_ERROR(kv->RowSparsePull("emb", Ids({100, kBig, rank, 999, 100}), out));
    // Worker 0's rows in step 2 were not pushed.
    const float skipped = t >= 2 ? 1.0f : 0.0f;
    const float w100 = -2.0f * (t * tri - skipped);
    const float wbig = -(t * tri - skipped);
    const float mine = -(t - (rank == 0 ? skipped : 0.0f)) * (rank + 1.0f);
    const std::vector<float> want = {w100, wbig, mine, 0.0f, w100};
    const std::vector<float> got = out.ToVector();
    for (size_t i = 0; i < want.size(); ++i) {
      for (int64_t j = 0; j < width; ++j) {
        if (got[i * width + j] != want[i]) {
          return Status::Internal("rank " + std::to_string(rank) + " step " +
                                  std::to_string(t) + " row " + std::to_string(i) +
                                  ": got " + std::to_string(got[i * width + j]) +
                                  ", want " + std::to_string(want[i]));
        }
      }
    }
  }
  return Status::OK();
}

TEST(SparseKVStoreTest, LocalAndDeviceClosedForm) {
  for (const char* type : {"local", "device"}) {
    auto kv = KVStore::Create(type);
    ASSERT_TRUE(kv.ok());
    Status s = ClosedFormWorker(kv->get(), 0, 1);
    EXPECT_TRUE(s.ok()) << type << ": " << s;
  }
}

void DistClosedForm(int servers, int workers, const std::string& type) {
  DistFixture f(servers, workers);
  Status s = f.Run(type, [&](KVStore* kv, int rank) {
    return ClosedFormWorker(kv, rank, workers);
  });
  EXPECT_TRUE(s.ok()) << s;
}

TEST(SparseKVStoreTest, SyncOneByOne) { DistClosedForm(1, 1, "dist_sync"); }

// A worker that finished after fewer pushes of a table is named at once to
// the one waiting for its next step.
TEST(SparseKVStoreTest, AWorkerThatFinishedEarlyIsNamedAtOnce) {
  DistFixture f(2, 2, {{"KVTRAIN_KVSTORE_TIMEOUT", "600"}});
  std::string error;
  Status s = f.Run("dist_sync", [&](KVStore* kv, int rank) -> Status {
    KV_RETURN_IF_ERROR(kv->InitRowSparse("emb", Table(2)));
    Tensor out = Tensor::Zeros({2, 2});
    for (int t = 0; t < (rank == 0 ? 3 : 2); ++t) {
      Status e = kv->PushRowSparse("emb", Ids({rank, 7}), Rows(2, 2, 1.0f));
      if (e.ok()) e = kv->RowSparsePull("emb", Ids({rank, 7}), out);
      if (!e.ok()) {
        error = e.ToString();
        return Status::OK();
      }
    }
    return Status::OK();
  });
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_NE(error.find("worker 1 finished (KVStore::Finalize) after pushing it 2 times: step 3"),
            std::string::npos)
      << error;
}
TEST(SparseKVStoreTest, SyncTwoByTwo) { DistClosedForm(2, 2, "dist_sync"); }
TEST(SparseKVStoreTest, SyncThreeServersFourWorkers) { DistClosedForm(3, 4, "dist_sync"); }
TEST(SparseKVStoreTest, DeviceSync) { DistClosedForm(2, 2, "dist_device_sync"); }

TEST(SparseKVStoreTest, AsyncTotalIsTheSumOfAllPushes) {
  const int workers = 3, pushes = 10;
  DistFixture f(2, workers);
  Status s = f.Run("dist_async", [&](KVStore* kv, int rank) -> Status {
    KV_RETURN_IF_ERROR(kv->InitRowSparse("emb", Table(2)));
    KV_RETURN_IF_ERROR(kv->SetOptimizer(Sgd(1.0f)));
    for (int i = 0; i < pushes; ++i) {
      KV_RETURN_IF_ERROR(kv->PushRowSparse("emb", Ids({5, kBig, 5}), Rows(3, 2, rank + 1.0f)));
    }
    KV_RETURN_IF_ERROR(kv->Barrier());
    Tensor out = Rows(2, 2, 0);
    KV_RETURN_IF_ERROR(kv->RowSparsePull("emb", Ids({5, kBig}), out));
    const std::vector<float> got = out.ToVector();
    const float total = pushes * 6.0f;  // sum over ranks of (rank + 1)
    if (got[0] != -2 * total || got[2] != -total) {
      return Status::Internal("async rows " + std::to_string(got[0]) + ", " +
                              std::to_string(got[2]));
    }
    return Status::OK();
  });
  EXPECT_TRUE(s.ok()) << s;
}

// dist_sync with 2 workers each pushing half of a batch equals the local
// store pushing the whole batch, with Adam on a random-initialised table.
TEST(SparseKVStoreTest, SyncTwoWorkersEqualLocalWithTheWholeBatch) {
  proto::SparseTableSpec spec = Table(4);
  spec.set_init(proto::SparseTableSpec::NORMAL);
  spec.set_scale(0.1f);
  spec.set_seed(3);
  proto::OptimizerSpec adam;
  adam.set_type(proto::OptimizerSpec::ADAM);
  adam.set_learning_rate(0.01f);
  // Batch of step t, half h: ids and gradient rows.
  auto batch = [](int t, int h, std::vector<int64_t>* ids, std::vector<float>* rows) {
    for (int i = 0; i < 6; ++i) {
      ids->push_back((t * 7 + h * 3 + i * 5) % 17);
      for (int j = 0; j < 4; ++j) rows->push_back(0.01f * ((t + h + i + j) % 9) - 0.04f);
    }
  };
  const std::vector<int64_t> all = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  auto local = KVStore::Create("local").value();
  ASSERT_TRUE(local->InitRowSparse("emb", spec).ok());
  ASSERT_TRUE(local->SetOptimizer(adam).ok());
  for (int t = 0; t < 20; ++t) {
    std::vector<int64_t> ids;
    std::vector<float> rows;
    batch(t, 0, &ids, &rows);
    batch(t, 1, &ids, &rows);
    Tensor r = Tensor::FromVector(rows, Shape({static_cast<int64_t>(ids.size()), 4}));
    ASSERT_TRUE(local->PushRowSparse("emb", Ids(ids), r).ok());
  }
  Tensor want = Rows(all.size(), 4, 0);
  ASSERT_TRUE(local->RowSparsePull("emb", Ids(all), want).ok());
  Tensor got = Rows(all.size(), 4, 0);
  DistFixture f(2, 2);
  Status s = f.Run("dist_sync", [&](KVStore* kv, int rank) -> Status {
    KV_RETURN_IF_ERROR(kv->InitRowSparse("emb", spec));
    KV_RETURN_IF_ERROR(kv->SetOptimizer(adam));
    for (int t = 0; t < 20; ++t) {
      std::vector<int64_t> ids;
      std::vector<float> rows;
      batch(t, rank, &ids, &rows);
      Tensor r = Tensor::FromVector(rows, Shape({static_cast<int64_t>(ids.size()), 4}));
      KV_RETURN_IF_ERROR(kv->PushRowSparse("emb", Ids(ids), r));
    }
    if (rank == 0) KV_RETURN_IF_ERROR(kv->RowSparsePull("emb", Ids(all), got));
    return Status::OK();
  });
  ASSERT_TRUE(s.ok()) << s;
  const std::vector<float> w = want.ToVector(), g = got.ToVector();
  double moved = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    EXPECT_NEAR(g[i], w[i], 1e-6) << i;
    moved += std::fabs(w[i]);
  }
  EXPECT_GT(moved, 0.1);
}

// Every bad input is an error naming the key and what is wrong, and the
// store keeps serving the good calls that follow.
void ExpectBadInputErrors(KVStore* kv, std::vector<std::string>* errors) {
  auto err = [&](const Status& s) { errors->push_back(s.ok() ? "OK" : s.message()); };
  err(kv->Init({"dense"}, {Tensor::Zeros({4})}));
  err(kv->InitRowSparse("emb", Table(2, 1000)));
  err(kv->PushRowSparse("emb", Ids({3, -1}), Rows(2, 2, 1)));       // negative
  err(kv->PushRowSparse("emb", Ids({3, 1000}), Rows(2, 2, 1)));     // past num_rows
  err(kv->PushRowSparse("emb", Ids({3, 4}), Rows(2, 3, 1)));        // wrong width
  err(kv->PushRowSparse("emb", Rows(2, 1, 1), Rows(2, 2, 1)));      // float ids
  err(kv->Push({"emb"}, {Tensor::Zeros({2})}));                     // dense push
  err(kv->PushRowSparse("dense", Ids({1}), Rows(1, 2, 1)));         // sparse push
  err(kv->RowSparsePull("emb", Ids({1, 2}), Rows(3, 2, 0)));        // out shape
  err(kv->InitRowSparse("bad", Table(0)));                          // width 0
  // Still serving.
  err(kv->PushRowSparse("emb", Ids({7}), Rows(1, 2, 1)));
  Tensor out = Rows(1, 2, 0);
  err(kv->RowSparsePull("emb", Ids({7}), out));
}

void CheckBadInputErrors(const std::vector<std::string>& e) {
  ASSERT_EQ(e.size(), 12u);
  EXPECT_EQ(e[0], "OK");
  EXPECT_EQ(e[1], "OK");
  EXPECT_NE(e[2].find("key emb: row id -1 at position 1 is negative"), std::string::npos) << e[2];
  EXPECT_NE(e[3].find("key emb: row id 1000 at position 1 is outside"), std::string::npos) << e[3];
  EXPECT_NE(e[4].find("key emb: pushed rows have shape (2, 3)"), std::string::npos) << e[4];
  EXPECT_NE(e[5].find("key emb: row ids must be int64, got float32"), std::string::npos) << e[5];
  EXPECT_NE(e[6].find("key emb: is a row-sparse key"), std::string::npos) << e[6];
  EXPECT_NE(e[7].find("key dense: is a dense key"), std::string::npos) << e[7];
  EXPECT_NE(e[8].find("key emb: output rows have shape (3, 2)"), std::string::npos) << e[8];
  EXPECT_NE(e[9].find("key bad"), std::string::npos) << e[9];
  EXPECT_EQ(e[10], "OK");
  EXPECT_EQ(e[11], "OK");
}

TEST(SparseKVStoreTest, BadInputLocal) {
  auto kv = KVStore::Create("local").value();
  std::vector<std::string> errors;
  ExpectBadInputErrors(kv.get(), &errors);
  CheckBadInputErrors(errors);
}

TEST(SparseKVStoreTest, BadInputDistSync) {
  DistFixture f(2, 1);
  std::vector<std::string> errors;
  Status s = f.Run("dist_sync", [&](KVStore* kv, int) {
    ExpectBadInputErrors(kv, &errors);
    return Status::OK();
  });
  ASSERT_TRUE(s.ok()) << s;
  CheckBadInputErrors(errors);
}

TEST(SparseKVStoreTest, AllreduceHasNoTables) {
  auto group = collective::Communicator::CreateLocalGroup(1, {});
  ASSERT_TRUE(group.ok()) << group.status();
  KVStoreOptions opts;
  opts.communicator = (*group)[0];
  auto kv = KVStore::Create("dist_allreduce", opts);
  ASSERT_TRUE(kv.ok()) << kv.status();
  Status s = (*kv)->InitRowSparse("emb", Table(2));
  EXPECT_NE(s.message().find("key emb: the 'dist_allreduce' store has no row-sparse keys"),
            std::string::npos) << s;
  s = (*kv)->PushRowSparse("emb", Ids({1}), Rows(1, 2, 1));
  EXPECT_FALSE(s.ok());
}

// Admission, expiry and the row cap counted over the servers: the counters
// add up to what the pushes imply, whatever server each row landed on.
TEST(SparseKVStoreTest, CountersAddUpOverTheServers) {
  proto::SparseTableSpec spec = Table(2);
  spec.set_admit_after(2);
  spec.set_expire_after(3);
  DistFixture f(2, 1);
  Status s = f.Run("dist_sync", [&](KVStore* kv, int) -> Status {
    KV_RETURN_IF_ERROR(kv->InitRowSparse("emb", spec));
    std::vector<int64_t> ten;
    for (int64_t i = 0; i < 10; ++i) ten.push_back(i * 1000003);
    auto sum = [&](std::vector<int64_t>* out) -> Status {
      KV_ASSIGN_OR_RETURN(std::vector<proto::SparseTableStats> st, kv->RowSparseStats("emb"));
      if (st.size() != 2) return Status::Internal("expected 2 servers' counters");
      out->assign(5, 0);
      for (const auto& t : st) {
        (*out)[0] += t.rows();
        (*out)[1] += t.created();
        (*out)[2] += t.pending();
        (*out)[3] += t.dropped_grads();
        (*out)[4] += t.expired();
      }
      return Status::OK();
    };
    std::vector<int64_t> c;
    KV_RETURN_IF_ERROR(kv->PushRowSparse("emb", Ids(ten), Rows(10, 2, 1)));
    KV_RETURN_IF_ERROR(kv->RowSparsePull("emb", Ids({0}), Rows(1, 2, 0)));  // step done
    KV_RETURN_IF_ERROR(sum(&c));
    if (c != std::vector<int64_t>{0, 0, 10, 10, 0}) return Status::Internal("after 1 push");
    KV_RETURN_IF_ERROR(kv->PushRowSparse("emb", Ids(ten), Rows(10, 2, 1)));
    KV_RETURN_IF_ERROR(kv->RowSparsePull("emb", Ids({0}), Rows(1, 2, 0)));
    KV_RETURN_IF_ERROR(sum(&c));
    if (c != std::vector<int64_t>{10, 10, 0, 10, 0}) return Status::Internal("after 2 pushes");
    // Three updates touching only row 0: the other nine expire.
    for (int i = 0; i < 3; ++i) {
      KV_RETURN_IF_ERROR(kv->PushRowSparse("emb", Ids({0}), Rows(1, 2, 1)));
      KV_RETURN_IF_ERROR(kv->RowSparsePull("emb", Ids({0}), Rows(1, 2, 0)));
    }
    KV_RETURN_IF_ERROR(sum(&c));
    if (c[0] != 1 || c[4] != 9) {
      return Status::Internal("after expiry: rows " + std::to_string(c[0]) + ", expired " +
                              std::to_string(c[4]));
    }
    return Status::OK();
  });
  EXPECT_TRUE(s.ok()) << s;
}

// A table saved through the servers resumes bit-exact in a new job, with
// its optimizer state, admission counters and recency.
TEST(SparseKVStoreTest, TablesSaveAndLoadThroughTheServers) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/emb.table";
  proto::SparseTableSpec spec = Table(3);
  spec.set_init(proto::SparseTableSpec::UNIFORM);
  spec.set_scale(0.5f);
  spec.set_admit_after(2);
  proto::OptimizerSpec adagrad;
  adagrad.set_type(proto::OptimizerSpec::ADAGRAD);
  adagrad.set_learning_rate(0.1f);
  auto step = [](KVStore* kv, int rank, int t) {
    std::vector<int64_t> ids;
    for (int i = 0; i < 5; ++i) ids.push_back((t * 3 + rank * 11 + i * 7) % 23);
    return kv->PushRowSparse("emb", Ids(ids), Rows(ids.size(), 3, 0.1f * (t % 4) - 0.15f));
  };
  std::vector<int64_t> all;
  for (int64_t i = 0; i < 23; ++i) all.push_back(i);
  Tensor continued = Rows(all.size(), 3, 0), resumed = Rows(all.size(), 3, 0);
  Tensor at_save = Rows(all.size(), 3, 0);
  DistFixture first(2, 2);
  ASSERT_TRUE(first.Run("dist_sync", [&](KVStore* kv, int rank) -> Status {
    KV_RETURN_IF_ERROR(kv->InitRowSparse("emb", spec));
    KV_RETURN_IF_ERROR(kv->SetOptimizer(adagrad));
    for (int t = 0; t < 5; ++t) KV_RETURN_IF_ERROR(step(kv, rank, t));
    if (rank == 0) {
      KV_RETURN_IF_ERROR(kv->SaveRowSparse("emb", path));
      KV_RETURN_IF_ERROR(kv->RowSparsePull("emb", Ids(all), at_save));
    }
    KV_RETURN_IF_ERROR(kv->Barrier());
    for (int t = 5; t < 9; ++t) KV_RETURN_IF_ERROR(step(kv, rank, t));
    if (rank == 0) KV_RETURN_IF_ERROR(kv->RowSparsePull("emb", Ids(all), continued));
    return Status::OK();
  }).ok());
  // Resumed on one server: the table is cut again, and training goes on
  // exactly as on two.
  DistFixture second(1, 2);
  ASSERT_TRUE(second.Run("dist_sync", [&](KVStore* kv, int rank) -> Status {
    KV_RETURN_IF_ERROR(kv->InitRowSparse("emb", spec));
    KV_RETURN_IF_ERROR(kv->SetOptimizer(adagrad));
    if (rank == 0) KV_RETURN_IF_ERROR(kv->LoadRowSparse("emb", path));
    KV_RETURN_IF_ERROR(kv->Barrier());
    for (int t = 5; t < 9; ++t) KV_RETURN_IF_ERROR(step(kv, rank, t));
    if (rank == 0) KV_RETURN_IF_ERROR(kv->RowSparsePull("emb", Ids(all), resumed));
    return Status::OK();
  }).ok());
  EXPECT_EQ(continued.ToVector(), resumed.ToVector());
  // The local store loads the two servers' shards as one table.
  auto local = KVStore::Create("local").value();
  ASSERT_TRUE(local->InitRowSparse("emb", spec).ok());
  ASSERT_TRUE(local->LoadRowSparse("emb", path).ok());
  Tensor local_rows = Rows(all.size(), 3, 0);
  ASSERT_TRUE(local->RowSparsePull("emb", Ids(all), local_rows).ok());
  EXPECT_EQ(local_rows.ToVector(), at_save.ToVector());
  Status s;
  // A flipped byte is caught, naming the file.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x55');
  }
  DistFixture third(2, 1);
  s = third.Run("dist_sync", [&](KVStore* kv, int) -> Status {
    KV_RETURN_IF_ERROR(kv->InitRowSparse("emb", spec));
    return kv->LoadRowSparse("emb", path);
  });
  EXPECT_NE(s.message().find(path), std::string::npos) << s;
}

// A table saved from two servers exports every trained row once, sorted by
// id, with the values a pull answers; rows still awaiting admission are not
// in it. Text and binary exports carry the same exact floats.
TEST(SparseKVStoreTest, AnExportedTableHoldsEveryTrainedRowSortedById) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  const std::string path = dir + "/export.table";
  proto::SparseTableSpec spec = Table(3);
  spec.set_init(proto::SparseTableSpec::NORMAL);
  spec.set_scale(0.1f);
  spec.set_admit_after(2);
  // Pushed twice (admitted): 0..19 and an id past 32 bits; pushed once
  // (pending, not exported): 1000..1004.
  std::vector<int64_t> twice;
  for (int64_t i = 0; i < 20; ++i) twice.push_back(19 - i);
  twice.push_back(kBig);
  const std::vector<int64_t> once = {1000, 1001, 1002, 1003, 1004};
  Tensor pulled = Rows(twice.size(), 3, 0);
  DistFixture f(2, 1);
  ASSERT_TRUE(f.Run("dist_sync", [&](KVStore* kv, int) -> Status {
    KV_RETURN_IF_ERROR(kv->InitRowSparse("emb", spec));
    KV_RETURN_IF_ERROR(kv->SetOptimizer(Sgd(0.5f)));
    for (int t = 0; t < 2; ++t) {
      Tensor g = Rows(twice.size(), 3, 0);
      for (int64_t i = 0; i < g.size(); ++i) g.data<float>()[i] = 0.01f * (i % 7) + t;
      KV_RETURN_IF_ERROR(kv->PushRowSparse("emb", Ids(twice), g));
    }
    KV_RETURN_IF_ERROR(kv->PushRowSparse("emb", Ids(once), Rows(once.size(), 3, 1.0f)));
    KV_RETURN_IF_ERROR(kv->RowSparsePull("emb", Ids(twice), pulled));
    return kv->SaveRowSparse("emb", path);
  }).ok());
  std::map<int64_t, std::vector<float>> want;
  std::set<int> servers;
  for (size_t i = 0; i < twice.size(); ++i) {
    want[twice[i]] = std::vector<float>(pulled.data<float>() + i * 3,
                                        pulled.data<float>() + i * 3 + 3);
    servers.insert(sparse::ServerOfRow(twice[i], 2));
  }
  ASSERT_EQ(servers.size(), 2u);  // both shards hold rows
  StatusOr<TableRows> t = ReadRowSparseTable(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->key, "emb");
  EXPECT_EQ(t->width, 3);
  ASSERT_EQ(t->ids.size(), want.size());
  size_t i = 0;
  for (const auto& [id, row] : want) {
    EXPECT_EQ(t->ids[i], id);
    EXPECT_EQ(std::vector<float>(t->rows.begin() + i * 3, t->rows.begin() + i * 3 + 3), row)
        << "row " << id;
    ++i;
  }

  ASSERT_TRUE(ExportRowSparseTable(path, dir + "/emb.txt", RowExportFormat::kText).ok());
  std::ifstream text(dir + "/emb.txt");
  std::string line;
  i = 0;
  for (const auto& [id, row] : want) {
    ASSERT_TRUE(std::getline(text, line)) << "line " << i;
    std::istringstream in(line);
    int64_t got_id = -1;
    std::vector<float> got(3);
    in >> got_id >> got[0] >> got[1] >> got[2];
    EXPECT_EQ(got_id, id);
    EXPECT_EQ(got, row) << line;
    ++i;
  }
  EXPECT_FALSE(std::getline(text, line)) << "an extra line: " << line;

  ASSERT_TRUE(ExportRowSparseTable(path, dir + "/emb.rows", RowExportFormat::kBinary).ok());
  const std::string bin = ReadWholeFile(dir + "/emb.rows").value();
  const size_t n = want.size();
  ASSERT_EQ(bin.size(), 8 + 16 + n * 8 + n * 3 * 4);
  EXPECT_EQ(bin.substr(0, 8), "KVROWS01");
  int64_t width = 0, count = 0;
  std::memcpy(&width, bin.data() + 8, 8);
  std::memcpy(&count, bin.data() + 16, 8);
  EXPECT_EQ(width, 3);
  EXPECT_EQ(count, static_cast<int64_t>(n));
  std::vector<int64_t> ids(n);
  std::vector<float> rows(n * 3);
  std::memcpy(ids.data(), bin.data() + 24, n * 8);
  std::memcpy(rows.data(), bin.data() + 24 + n * 8, n * 12);
  EXPECT_EQ(ids, t->ids);
  EXPECT_EQ(rows, t->rows);

  // A file that is not a table is an error naming it.
  ASSERT_TRUE(WriteFileAtomic(dir + "/junk.table", "junk").ok());
  StatusOr<TableRows> bad = ReadRowSparseTable(dir + "/junk.table");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("junk.table"), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace kvtrain
