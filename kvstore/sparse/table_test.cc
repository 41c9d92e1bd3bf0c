#include "kvstore/sparse/table.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <unordered_map>

#include "kvstore/sparse/row_index.h"
#include "kvstore/sparse/rows.h"

namespace kvtrain {
namespace sparse {
namespace {

proto::SparseTableSpec Spec(int64_t width) {
  proto::SparseTableSpec s;
  s.set_width(width);
  s.set_init(proto::SparseTableSpec::UNIFORM);
  s.set_scale(0.5f);
  s.set_seed(7);
  return s;
}

std::unique_ptr<Table> Make(const proto::SparseTableSpec& spec, const std::string& key = "emb") {
  auto t = Table::Create(key, spec);
  EXPECT_TRUE(t.ok()) << t.status().message();
  return std::move(t).value();
}

std::vector<float> ReadRows(Table* t, const std::vector<int64_t>& ids) {
  std::vector<float> out(ids.size() * static_cast<size_t>(t->width()));
  t->Read(ids.data(), ids.size(), out.data());
  return out;
}

std::unique_ptr<Optimizer> MakeOpt(proto::OptimizerSpec::Type type, float momentum = 0) {
  proto::OptimizerSpec s;
  s.set_type(type);
  s.set_learning_rate(0.1f);
  s.set_momentum(momentum);
  s.set_weight_decay(0.01f);
  auto o = Optimizer::Create(s);
  EXPECT_TRUE(o.ok()) << o.status().message();
  return std::move(o).value();
}

TEST(RowIndexTest, MatchesAHashMapThroughInsertsAndErases) {
  RowIndex index;
  std::unordered_map<int64_t, uint32_t> ref;
  std::mt19937_64 rng(1);
  for (int i = 0; i < 200000; ++i) {
    // A small id space so that erases and re-inserts collide often.
    const int64_t id = static_cast<int64_t>(rng() % 5000) * 1000003;
    if (rng() % 3 == 0) {
      EXPECT_EQ(index.Erase(id), ref.erase(id) == 1);
    } else if (index.Find(id) == nullptr) {
      ASSERT_EQ(ref.count(id), 0u);
      index.Insert(id, static_cast<uint32_t>(i));
      ref[id] = static_cast<uint32_t>(i);
    }
  }
  ASSERT_EQ(index.size(), ref.size());
  for (const auto& [id, v] : ref) {
    ASSERT_NE(index.Find(id), nullptr) << id;
    EXPECT_EQ(*index.Find(id), v);
  }
  size_t seen = 0;
  index.ForEach([&](int64_t id, uint32_t v) {
    EXPECT_EQ(ref.at(id), v);
    ++seen;
  });
  EXPECT_EQ(seen, ref.size());
  index.Clear();
  EXPECT_EQ(index.size(), 0u);
  for (const auto& [id, v] : ref) EXPECT_EQ(index.Find(id), nullptr) << id;
}

TEST(TableTest, InitialRowsDependOnlyOnSeedKeyAndId) {
  auto a = Make(Spec(8));
  auto b = Make(Spec(8));
  const std::vector<int64_t> ids = {3, (int64_t{1} << 40) + 3, 3, 0};
  const std::vector<float> ra = ReadRows(a.get(), ids);
  EXPECT_EQ(ra, ReadRows(b.get(), {3, (int64_t{1} << 40) + 3, 3, 0}));
  // Row 3 is read twice alike; rows 3 and 2^40 + 3 differ (ids are int64).
  EXPECT_TRUE(std::equal(ra.begin(), ra.begin() + 8, ra.begin() + 16));
  EXPECT_FALSE(std::equal(ra.begin(), ra.begin() + 8, ra.begin() + 8));
  for (float v : ra) {
    EXPECT_GE(v, -0.5f);
    EXPECT_LT(v, 0.5f);
  }
  // Another key or seed gives other values.
  auto c = Make(Spec(8), "other");
  EXPECT_NE(ReadRows(c.get(), ids), ra);
  // Reads create nothing.
  EXPECT_EQ(a->stats().rows, 0);
}

TEST(TableTest, NormalAndZeroInitialisers) {
  proto::SparseTableSpec s = Spec(1000);
  s.set_init(proto::SparseTableSpec::NORMAL);
  s.set_scale(2.0f);
  auto t = Make(s);
  std::vector<float> r = ReadRows(t.get(), {12345});
  double mean = 0, sq = 0;
  for (float v : r) mean += v / 1000.0;
  for (float v : r) sq += (v - mean) * (v - mean) / 1000.0;
  EXPECT_NEAR(mean, 0.0, 0.2);
  EXPECT_NEAR(std::sqrt(sq), 2.0, 0.2);
  s.set_init(proto::SparseTableSpec::ZEROS);
  auto z = Make(s);
  for (float v : ReadRows(z.get(), {9})) EXPECT_EQ(v, 0.0f);
  // Constant: every value is `scale`, negative allowed (only there).
  s.set_init(proto::SparseTableSpec::CONSTANT);
  s.set_scale(-1.5f);
  auto k = Make(s);
  for (float v : ReadRows(k.get(), {0, 77})) EXPECT_EQ(v, -1.5f);
  s.set_init(proto::SparseTableSpec::UNIFORM);
  StatusOr<std::unique_ptr<Table>> bad = Table::Create("u", s);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("scale must be >= 0"), std::string::npos)
      << bad.status().message();
}

TEST(TableTest, WithoutAnOptimizerARowBecomesItsGradient) {
  auto t = Make(Spec(2));
  const std::vector<int64_t> ids = {5, 9};
  const std::vector<float> g = {1, 2, 3, 4};
  ASSERT_TRUE(t->Update(ids.data(), 2, g.data(), nullptr).ok());
  EXPECT_EQ(ReadRows(t.get(), {9, 5}), (std::vector<float>{3, 4, 1, 2}));
  EXPECT_EQ(t->stats().rows, 2);
  EXPECT_EQ(t->stats().created, 2);
}

// Every row touched every step: the lazy update equals the dense optimizer
// on the whole table, exactly.
TEST(TableTest, LazyRulesEqualTheDenseOptimizerWhenEveryRowIsTouched) {
  struct Case {
    proto::OptimizerSpec::Type type;
    float momentum;
  };
  for (const Case& c : {Case{proto::OptimizerSpec::SGD, 0}, Case{proto::OptimizerSpec::SGD, 0.9f},
                        Case{proto::OptimizerSpec::NAG, 0.9f}, Case{proto::OptimizerSpec::ADAM, 0},
                        Case{proto::OptimizerSpec::ADAGRAD, 0},
                        Case{proto::OptimizerSpec::FTRL, 0}}) {
    SCOPED_TRACE(proto::OptimizerSpec::Type_Name(c.type));
    const int64_t rows = 5, width = 3;
    auto table = Make(Spec(width));
    auto sparse_opt = MakeOpt(c.type, c.momentum);
    auto dense_opt = MakeOpt(c.type, c.momentum);
    std::vector<int64_t> ids(rows);
    for (int64_t i = 0; i < rows; ++i) ids[static_cast<size_t>(i)] = i * 1000;
    Tensor dense = Tensor::Empty(Shape({rows, width}));
    table->Read(ids.data(), ids.size(), dense.data<float>());
    std::mt19937 rng(3);
    std::normal_distribution<float> normal;
    for (int step = 0; step < 6; ++step) {
      Tensor g = Tensor::Empty(Shape({rows, width}));
      for (int64_t i = 0; i < rows * width; ++i) g.data<float>()[i] = normal(rng);
      ASSERT_TRUE(table->Update(ids.data(), ids.size(), g.data<float>(), sparse_opt.get()).ok());
      ASSERT_TRUE(dense_opt->Update(0, dense, g).ok());
    }
    const std::vector<float> got = ReadRows(table.get(), ids);
    for (int64_t i = 0; i < rows * width; ++i) {
      EXPECT_EQ(got[static_cast<size_t>(i)], dense.data<float>()[i]) << i;
    }
  }
}

// Rows touched at some steps only: each row follows the dense optimizer
// applied to that row alone at exactly the steps that touched it (rules
// without a step count: SGD with momentum, AdaGrad, FTRL); untouched rows
// and their state do not move.
TEST(TableTest, UntouchedRowsAndTheirStateStayPut) {
  for (auto type : {proto::OptimizerSpec::SGD, proto::OptimizerSpec::ADAGRAD,
                    proto::OptimizerSpec::FTRL}) {
    SCOPED_TRACE(proto::OptimizerSpec::Type_Name(type));
    const float momentum = type == proto::OptimizerSpec::SGD ? 0.9f : 0.0f;
    const int64_t width = 4;
    auto table = Make(Spec(width));
    auto sparse_opt = MakeOpt(type, momentum);
    auto ref_opt = MakeOpt(type, momentum);  // one key per row
    std::map<int64_t, Tensor> ref;
    std::mt19937 rng(5);
    std::normal_distribution<float> normal;
    for (int step = 0; step < 12; ++step) {
      std::vector<int64_t> ids;
      for (int64_t id = 0; id < 8; ++id) {
        if (rng() % 3 == 0) ids.push_back(id * 7 + 1);
      }
      std::vector<float> g(ids.size() * width);
      for (float& v : g) v = normal(rng);
      ASSERT_TRUE(table->Update(ids.data(), ids.size(), g.data(), sparse_opt.get()).ok());
      for (size_t i = 0; i < ids.size(); ++i) {
        if (!ref.count(ids[i])) {
          ref[ids[i]] = Tensor::Empty(Shape({width}));
          table->InitialRow(ids[i], ref[ids[i]].data<float>());
        }
        Tensor gi = Tensor::Empty(Shape({width}));
        std::memcpy(gi.data<float>(), g.data() + i * width, width * sizeof(float));
        ASSERT_TRUE(ref_opt->Update(ids[i], ref[ids[i]], gi).ok());
      }
    }
    ASSERT_GT(ref.size(), 3u);
    for (const auto& [id, w] : ref) {
      const std::vector<float> got = ReadRows(table.get(), {id});
      for (int64_t j = 0; j < width; ++j) EXPECT_EQ(got[static_cast<size_t>(j)], w.data<float>()[j]);
    }
    // A row never touched reads as its initial value.
    std::vector<float> init(width);
    table->InitialRow(1000, init.data());
    EXPECT_EQ(ReadRows(table.get(), {1000}), init);
  }
}

// FTRL-proximal against the formula, written out here in double.
TEST(TableTest, FtrlFollowsTheProximalFormula) {
  proto::SparseTableSpec s = Spec(1);
  s.set_init(proto::SparseTableSpec::ZEROS);
  auto table = Make(s);
  proto::OptimizerSpec os;
  os.set_type(proto::OptimizerSpec::FTRL);
  os.set_learning_rate(0.5f);
  os.set_lamda1(0.05f);
  os.set_beta(1.0f);
  auto opt = Optimizer::Create(os).value();
  double w = 0, z = 0, n = 0;
  const double lr = 0.5, l1 = 0.05, beta = 1.0;
  const int64_t id = 42;
  for (float g : {0.3f, -0.02f, 0.5f, -1.0f, 0.01f}) {
    ASSERT_TRUE(table->Update(&id, 1, &g, opt.get()).ok());
    const double nn = n + double(g) * g;
    z += g - (std::sqrt(nn) - std::sqrt(n)) / lr * w;
    n = nn;
    w = std::fabs(z) <= l1 ? 0.0 : ((z > 0 ? l1 : -l1) - z) / ((beta + std::sqrt(n)) / lr);
    EXPECT_NEAR(ReadRows(table.get(), {id})[0], w, 1e-6);
  }
  EXPECT_NE(w, 0.0);
}

TEST(TableTest, AdmissionCreatesARowAtItsNthPushAndCountsWhatItDropped) {
  proto::SparseTableSpec s = Spec(2);
  s.set_admit_after(3);
  auto t = Make(s);
  auto opt = MakeOpt(proto::OptimizerSpec::SGD);
  const std::vector<float> init = ReadRows(t.get(), {11});
  const int64_t id = 11;
  const float g[2] = {1, 1};
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(t->Update(&id, 1, g, opt.get()).ok());
    EXPECT_EQ(ReadRows(t.get(), {11}), init);
    EXPECT_EQ(t->stats().rows, 0);
  }
  EXPECT_EQ(t->stats().pending, 1);
  EXPECT_EQ(t->stats().dropped_grads, 2);
  ASSERT_TRUE(t->Update(&id, 1, g, opt.get()).ok());
  EXPECT_EQ(t->stats().rows, 1);
  EXPECT_EQ(t->stats().pending, 0);
  const std::vector<float> now = ReadRows(t.get(), {11});
  EXPECT_FLOAT_EQ(now[0], init[0] - 0.1f * (1 + 0.01f * init[0]));
}

// A long tail of ids each pushed once cannot grow the admission counters
// without bound: at max_pending they start again from zero (counted), and
// ids pushed often enough still get their rows.
TEST(TableTest, AdmissionCountersStayWithinMaxPending) {
  proto::SparseTableSpec s = Spec(2);
  s.set_admit_after(2);
  s.set_max_pending(100);
  auto t = Make(s);
  auto opt = MakeOpt(proto::OptimizerSpec::SGD);
  const float g[2] = {1, 1};
  for (int64_t id = 1000; id < 11000; ++id) {
    ASSERT_TRUE(t->Update(&id, 1, g, opt.get()).ok());
    ASSERT_LE(t->stats().pending, 100) << "after id " << id;
  }
  EXPECT_EQ(t->stats().rows, 0);
  EXPECT_EQ(t->stats().admission_resets, 99);  // 10,000 ids, 100 at a time
  const int64_t hot = 7;
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(t->Update(&hot, 1, g, opt.get()).ok());
  EXPECT_EQ(t->stats().rows, 1);
  // The hot id's first push found the counters full once more.
  EXPECT_NE(t->stats().ToString().find("admission resets 100"), std::string::npos)
      << t->stats().ToString();
  // The default: max_rows when set, else 4,194,304.
  proto::SparseTableSpec d = Spec(2);
  EXPECT_EQ(MaxPending(d), int64_t{1} << 22);
  d.set_max_rows(5000);
  EXPECT_EQ(MaxPending(d), 5000);
}

TEST(TableTest, RowsUnseenForExpireAfterUpdatesAreDropped) {
  proto::SparseTableSpec s = Spec(1);
  s.set_expire_after(2);
  auto t = Make(s);
  const int64_t a = 1, b = 2;
  const float g = 5;
  ASSERT_TRUE(t->Update(&a, 1, &g, nullptr).ok());  // update 1: a
  ASSERT_TRUE(t->Update(&b, 1, &g, nullptr).ok());  // update 2: b
  EXPECT_EQ(t->stats().rows, 2);
  ReadRows(t.get(), {b});                           // b used at 2
  ASSERT_TRUE(t->Update(&b, 1, &g, nullptr).ok());  // update 3: a unseen for 2
  EXPECT_EQ(t->stats().rows, 1);
  EXPECT_EQ(t->stats().expired, 1);
  std::vector<float> init(1);
  t->InitialRow(a, init.data());
  EXPECT_EQ(ReadRows(t.get(), {a}), init);
  EXPECT_EQ(ReadRows(t.get(), {b})[0], 5.0f);
}

TEST(TableTest, MaxRowsEvictsTheLeastRecentlyUsed) {
  proto::SparseTableSpec s = Spec(1);
  s.set_max_rows(2);
  auto t = Make(s);
  const float g[2] = {1, 2};
  const int64_t ab[2] = {10, 20};
  ASSERT_TRUE(t->Update(ab, 2, g, nullptr).ok());
  ReadRows(t.get(), {10});  // 20 is now the least recently used
  const int64_t c = 30;
  ASSERT_TRUE(t->Update(&c, 1, g, nullptr).ok());
  EXPECT_EQ(t->stats().rows, 2);
  EXPECT_EQ(t->stats().evicted, 1);
  EXPECT_EQ(ReadRows(t.get(), {10, 30}), (std::vector<float>{1, 1}));
  std::vector<float> init(1);
  t->InitialRow(20, init.data());
  EXPECT_EQ(ReadRows(t.get(), {20}), init);
}

TEST(TableTest, ASavedShardResumesBitExact) {
  proto::SparseTableSpec s = Spec(3);
  s.set_admit_after(2);
  s.set_expire_after(4);
  s.set_max_rows(20);
  auto a = Make(s);
  auto opt = MakeOpt(proto::OptimizerSpec::ADAM);
  std::mt19937 rng(9);
  auto step = [&](Table* t, std::mt19937* r) {
    std::vector<int64_t> ids;
    for (int64_t id = 0; id < 40; ++id) {
      if ((*r)() % 4 == 0) ids.push_back(id);
    }
    std::vector<float> g(ids.size() * 3);
    for (float& v : g) v = static_cast<float>((*r)() % 1000) / 500.0f - 1.0f;
    ASSERT_TRUE(t->Update(ids.data(), ids.size(), g.data(), opt.get()).ok());
  };
  for (int i = 0; i < 10; ++i) step(a.get(), &rng);
  auto b = Make(s);
  ASSERT_TRUE(b->Load(a->Save()).ok());
  EXPECT_EQ(b->Save(), a->Save());
  std::mt19937 rng_b = rng;
  for (int i = 0; i < 10; ++i) {
    step(a.get(), &rng);
    step(b.get(), &rng_b);
  }
  EXPECT_EQ(a->Save(), b->Save());
  EXPECT_GT(a->stats().evicted + a->stats().expired, 0);
  // Another key's or spec's shard is refused, naming the key.
  auto other = Make(s, "other");
  Status st = other->Load(a->Save());
  EXPECT_NE(st.message().find("key other"), std::string::npos) << st.message();
  std::string cut = a->Save();
  cut.resize(cut.size() - 5);
  EXPECT_FALSE(b->Load(cut).ok());
}

// Three servers' shards cut again for 1 and 2 servers: every row, its state
// and the admission counters carry over, and updates go on as on one table.
TEST(TableTest, ReshardKeepsEveryRowAndItsState) {
  proto::SparseTableSpec s = Spec(2);
  s.set_admit_after(2);
  auto opt = MakeOpt(proto::OptimizerSpec::ADAM);
  auto one = Make(s);
  std::vector<std::unique_ptr<Table>> three;
  for (int i = 0; i < 3; ++i) three.push_back(Make(s));
  std::mt19937 rng(4);
  // One step on the whole table and on its 3 shards (each shard updated
  // every step, as dist_sync's servers are).
  auto step = [&](Table* whole, std::vector<std::unique_ptr<Table>>* parts) {
    std::vector<int64_t> ids;
    for (int64_t id = 0; id < 30; ++id) {
      if (rng() % 3 == 0) ids.push_back(id * 1000);
    }
    std::vector<float> g(ids.size() * 2);
    for (float& v : g) v = static_cast<float>(rng() % 100) / 50.0f - 1.0f;
    ASSERT_TRUE(whole->Update(ids.data(), ids.size(), g.data(), opt.get()).ok());
    std::vector<std::vector<int64_t>> pi(parts->size());
    std::vector<std::vector<float>> pg(parts->size());
    for (size_t i = 0; i < ids.size(); ++i) {
      const size_t p = static_cast<size_t>(ServerOfRow(ids[i], static_cast<int>(parts->size())));
      pi[p].push_back(ids[i]);
      pg[p].insert(pg[p].end(), g.begin() + 2 * i, g.begin() + 2 * i + 2);
    }
    for (size_t p = 0; p < parts->size(); ++p) {
      ASSERT_TRUE((*parts)[p]->Update(pi[p].data(), pi[p].size(), pg[p].data(), opt.get()).ok());
    }
  };
  for (int t = 0; t < 8; ++t) step(one.get(), &three);
  std::vector<std::string> saved;
  for (const auto& t : three) saved.push_back(t->Save());
  std::vector<int64_t> all;
  for (int64_t id = 0; id < 30; ++id) all.push_back(id * 1000);
  for (int servers : {1, 2}) {
    SCOPED_TRACE(servers);
    auto cut = Table::Reshard("emb", s, saved, servers);
    ASSERT_TRUE(cut.ok()) << cut.status().message();
    std::vector<std::unique_ptr<Table>> parts;
    for (const std::string& shard : *cut) {
      parts.push_back(Make(s));
      ASSERT_TRUE(parts.back()->Load(shard).ok());
    }
    auto whole = Make(s);
    ASSERT_TRUE(whole->Load(one->Save()).ok());
    std::mt19937 keep = rng;
    for (int t = 0; t < 5; ++t) step(whole.get(), &parts);
    rng = keep;
    for (int64_t id : all) {
      const size_t p = static_cast<size_t>(ServerOfRow(id, servers));
      EXPECT_EQ(ReadRows(parts[p].get(), {id}), ReadRows(whole.get(), {id})) << id;
    }
    int64_t rows = 0, pending = 0;
    for (const auto& t : parts) {
      rows += t->stats().rows;
      pending += t->stats().pending;
    }
    EXPECT_EQ(rows, whole->stats().rows);
    EXPECT_EQ(pending, whole->stats().pending);
  }
  // Another key's shards are refused.
  EXPECT_FALSE(Table::Reshard("other", s, saved, 2).ok());
}

TEST(TableTest, BadIdsAndSpecsNameTheKeyAndTheId) {
  proto::SparseTableSpec s = Spec(4);
  s.set_num_rows(100);
  const int64_t ids[3] = {5, 100, -1};
  Status st = CheckIds("user_emb", s, ids, 3);
  EXPECT_NE(st.message().find("key user_emb"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("row id 100 at position 1"), std::string::npos) << st.message();
  st = CheckIds("user_emb", s, ids + 2, 1);
  EXPECT_NE(st.message().find("row id -1 at position 0 is negative"), std::string::npos);
  EXPECT_TRUE(CheckIds("user_emb", s, ids, 1).ok());
  s.set_width(0);
  st = CheckSpec("user_emb", s);
  EXPECT_NE(st.message().find("row width > 0"), std::string::npos) << st.message();
  EXPECT_FALSE(Table::Create("user_emb", s).ok());
}

TEST(TableTest, AnOptimizerWithOtherStateIsRefusedOnceRowsExist) {
  auto t = Make(Spec(2));
  const int64_t id = 1;
  const float g[2] = {1, 1};
  ASSERT_TRUE(t->Update(&id, 1, g, nullptr).ok());
  auto adam = MakeOpt(proto::OptimizerSpec::ADAM);
  Status st = t->Update(&id, 1, g, adam.get());
  EXPECT_NE(st.message().find("key emb"), std::string::npos) << st.message();
}

TEST(TableTest, ATablesOwnOptimizerWinsOverTheStores) {
  proto::SparseTableSpec s = Spec(1);
  s.set_init(proto::SparseTableSpec::ZEROS);
  s.mutable_optimizer()->set_type(proto::OptimizerSpec::SGD);
  s.mutable_optimizer()->set_learning_rate(2.0f);
  auto t = Make(s);
  auto store_opt = MakeOpt(proto::OptimizerSpec::ADAM);
  const int64_t id = 3;
  const float g = 1;
  ASSERT_TRUE(t->Update(&id, 1, &g, store_opt.get()).ok());
  EXPECT_EQ(ReadRows(t.get(), {3})[0], -2.0f);  // SGD lr 2, not Adam
  s.mutable_optimizer()->set_learning_rate(-1);
  auto bad = Table::Create("emb", s);
  EXPECT_NE(bad.status().message().find("key emb: the table's optimizer: learning_rate -1"),
            std::string::npos) << bad.status().message();
}

TEST(RowsTest, RowSumAddsRepeatsAndUniqueIdsMapsEveryPosition) {
  RowSum sum(2);
  const int64_t ids[4] = {7, 3, 7, 9};
  const float rows[8] = {1, 1, 2, 2, 3, 3, 4, 4};
  sum.Add(ids, 4, rows);
  EXPECT_EQ(sum.ids(), (std::vector<int64_t>{7, 3, 9}));
  EXPECT_EQ(sum.rows(), (std::vector<float>{4, 4, 2, 2, 4, 4}));
  std::vector<int64_t> unique;
  std::vector<uint32_t> where;
  UniqueIds(ids, 4, &unique, &where);
  EXPECT_EQ(unique, (std::vector<int64_t>{7, 3, 9}));
  EXPECT_EQ(where, (std::vector<uint32_t>{0, 1, 0, 2}));
  // Cleared, it sums from nothing.
  sum.Clear();
  sum.Add(ids + 2, 2, rows + 4);
  EXPECT_EQ(sum.ids(), (std::vector<int64_t>{7, 9}));
  EXPECT_EQ(sum.rows(), (std::vector<float>{3, 3, 4, 4}));
}

TEST(RowsTest, RowsSpreadEvenlyOverServers) {
  std::vector<int> count(4);
  for (int64_t id = 0; id < 40000; ++id) ++count[static_cast<size_t>(ServerOfRow(id, 4))];
  for (int c : count) EXPECT_NEAR(c, 10000, 500);
}

}  // namespace
}  // namespace sparse
}  // namespace kvtrain
