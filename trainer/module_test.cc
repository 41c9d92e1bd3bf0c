// Module on synthetic data: it learns, several devices equal one, and its
// errors name the problem.
#include "trainer/module.h"
#include "engine/models.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>

namespace kvtrain {
namespace {

// Two well separated classes: x = +/-1 plus a little structure.
std::unique_ptr<DataIter> TwoClasses(int batch) {
  const int n = 400, d = 8;
  Tensor x = Tensor::Empty({n, d}), y = Tensor::Empty({n});
  for (int i = 0; i < n; ++i) {
    const int c = i % 2;
    for (int j = 0; j < d; ++j) x.data<float>()[i * d + j] = (c ? 1.f : -1.f) + 0.1f * ((i * 7 + j) % 5 - 2);
    y.data<float>()[i] = static_cast<float>(c);
  }
  IterOptions o;
  o.batch_size = batch;
  o.scale = 1;
  o.shuffle = true;
  return std::move(NewArrayIter(x, y, o)).value();
}

proto::OptimizerSpec Sgd() {
  proto::OptimizerSpec s;
  s.set_type(proto::OptimizerSpec::SGD);
  s.set_learning_rate(0.5f);
  return s;
}

// A small MLP bound for `it`'s batches of 20 and initialised.
std::unique_ptr<Module> BoundMlp(const DataIter& it) {
  auto m = std::move(Module::Create(models::Mlp({4}, 2), ModuleOptions())).value();
  CHECK(m->Bind(it.data_shape(), {20}).ok());
  CHECK(m->InitParams(InitializerOptions()).ok());
  return m;
}

// `epochs` of 2 batches with SGD, quietly.
FitOptions ShortFit(int epochs) {
  FitOptions fo;
  fo.num_epochs = epochs;
  fo.epoch_size = 2;
  fo.optimizer = Sgd();
  fo.disp_batches = 0;
  return fo;
}

StatusOr<ModelArrays> Train(std::vector<Device> devices, std::vector<double> load,
                            double* accuracy) {
  ModuleOptions mo;
  mo.devices = std::move(devices);
  mo.work_load_list = std::move(load);
  KV_ASSIGN_OR_RETURN(auto m, Module::Create(models::Mlp({16}, 2), mo));
  auto it = TwoClasses(20);
  KV_RETURN_IF_ERROR(m->Bind(it->data_shape(), {20}));
  InitializerOptions init;
  init.type = InitializerOptions::Type::kXavier;
  KV_RETURN_IF_ERROR(m->InitParams(init));
  KV_ASSIGN_OR_RETURN(auto kv, KVStore::Create("local"));
  FitOptions fo;
  fo.num_epochs = 3;
  fo.optimizer = Sgd();
  fo.disp_batches = 0;
  KV_RETURN_IF_ERROR(m->Fit(it.get(), nullptr, kv.get(), fo));
  KV_ASSIGN_OR_RETURN(MetricValues score, m->Score(it.get(), {"accuracy"}));
  *accuracy = score[0].second;
  return m->Arrays();
}

TEST(ModuleTest, LearnsAndSeveralDevicesEqualOne) {
  double acc1 = 0, acc2 = 0;
  StatusOr<ModelArrays> one = Train({Device::CPU()}, {}, &acc1);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_GT(acc1, 0.99);
  StatusOr<ModelArrays> two = Train({Device::CPU(0), Device::CPU(1)}, {1, 3}, &acc2);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_GT(acc2, 0.99);
  for (const auto& [name, t] : one->args) {
    const std::vector<float> a = t.ToVector(), b = two->args.at(name).ToVector();
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4) << name << "[" << i << "]";
  }
}

TEST(ModuleTest, CallbacksStopAndPredict) {
  auto m = std::move(Module::Create(models::Mlp({8}, 2), ModuleOptions())).value();
  auto it = TwoClasses(20);  // 20 batches per epoch
  ASSERT_TRUE(m->Bind(it->data_shape(), {20}).ok());
  ASSERT_TRUE(m->InitParams(InitializerOptions()).ok());
  auto kv = std::move(KVStore::Create("local")).value();
  FitOptions fo;
  fo.num_epochs = 2;
  fo.optimizer = Sgd();
  fo.disp_batches = 0;
  std::vector<std::pair<int, int64_t>> batches;
  std::vector<int> epochs;
  fo.batch_end = [&](int epoch, int64_t n, const MetricValues& train) {
    EXPECT_EQ(train.size(), 1u);
    batches.emplace_back(epoch, n);
    return Status::OK();
  };
  fo.epoch_end = [&](int epoch) {
    epochs.push_back(epoch);
    return Status::OK();
  };
  ASSERT_TRUE(m->Fit(it.get(), nullptr, kv.get(), fo).ok());
  EXPECT_EQ(batches.size(), 40u);
  EXPECT_EQ(batches.back(), std::make_pair(1, int64_t{19}));
  EXPECT_EQ(epochs, (std::vector<int>{0, 1}));

  // A callback's error ends Fit with it; stop() ends it before a batch.
  fo.batch_end = [](int, int64_t n, const MetricValues&) {
    return n == 3 ? Status::InvalidArgument("from the callback") : Status::OK();
  };
  // (A store takes each key's initial value once: a new one per Fit.)
  kv = std::move(KVStore::Create("local")).value();
  Status s = m->Fit(it.get(), nullptr, kv.get(), fo);
  EXPECT_EQ(s.message(), "from the callback");
  fo.batch_end = nullptr;
  int asked = 0;
  fo.stop = [&] { return ++asked > 5; };
  kv = std::move(KVStore::Create("local")).value();
  s = m->Fit(it.get(), nullptr, kv.get(), fo);
  EXPECT_EQ(s.code(), Status::Code::kAborted);
  EXPECT_EQ(s.message(), "training stopped at epoch 0 batch 5");

  // Predict: one row per example, the padding dropped; rows are probabilities.
  StatusOr<Tensor> p = m->Predict(it.get());
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->shape(), Shape({400, 2}));
  const std::vector<float> v = p->ToVector();
  for (int i = 0; i < 400; ++i) EXPECT_NEAR(v[2 * i] + v[2 * i + 1], 1.0f, 1e-5);
}

TEST(ModuleTest, Errors) {
  ModuleOptions mo;
  mo.devices = {Device::CPU(0), Device::CPU(1)};
  mo.work_load_list = {1};
  EXPECT_EQ(Module::Create(models::Mlp({4}, 2), mo).status().message(),
            "work_load_list has 1 entries for 2 devices");
  mo.work_load_list = {};
  auto m = std::move(Module::Create(models::Mlp({4}, 2), mo)).value();
  EXPECT_EQ(m->Bind({1, 8}, {1}).message(), "batch of 1 cannot be split across 2 devices");
  auto kv = std::move(KVStore::Create("local")).value();
  auto it = TwoClasses(20);
  EXPECT_EQ(m->Fit(it.get(), nullptr, kv.get(), FitOptions()).message(),
            "Fit before Bind and InitParams");
  ModuleOptions bad;
  bad.data_name = "pixels";
  auto m2 = std::move(Module::Create(models::Mlp({4}, 2), bad)).value();
  EXPECT_FALSE(m2->Bind({4, 8}, {4}).ok());
  // Batches of another size than the module was bound for, whether Fit
  // writes them in (NextRows) or a caller feeds them.
  auto bound = BoundMlp(*it);
  auto fives = TwoClasses(5);
  const Status fit = bound->Fit(fives.get(), nullptr, kv.get(), ShortFit(1));
  EXPECT_NE(fit.message().find("batch of 5 rows; the module was bound for 20"),
            std::string::npos)
      << fit;
  const Status score = bound->Score(fives.get(), {"accuracy"}).status();
  EXPECT_NE(
      score.message().find("batch of 5 rows; the module was bound for 20"),
      std::string::npos)
      << score;
}

// Loading from saved arrays: every parameter must be there, with the
// model's shape; errors name the file and the array.
TEST(ModuleTest, LoadedArraysMustCoverTheModel) {
  auto m = std::move(Module::Create(models::Mlp({4}, 2), ModuleOptions())).value();
  ASSERT_TRUE(m->Bind({5, 8}, {5}).ok());
  ASSERT_TRUE(m->InitParams(InitializerOptions()).ok());
  ModelArrays saved = std::move(m->Arrays()).value();
  saved.source = "m-0001.params";
  EXPECT_TRUE(m->InitParams(InitializerOptions(), &saved).ok());
  ModelArrays missing = saved;
  missing.args.erase("fc2_weight");
  EXPECT_EQ(m->InitParams(InitializerOptions(), &missing).message(),
            "m-0001.params: has no parameter fc2_weight");
  ModelArrays reshaped = saved;
  reshaped.args["fc1_weight"] = Tensor::Zeros({4, 9});
  EXPECT_EQ(m->InitParams(InitializerOptions(), &reshaped).message(),
            "m-0001.params: parameter fc1_weight has shape (4, 9), the model's is (4, 8)");
}

// A store of another type and worker count over a local store: records the
// optimizer Fit gives it.
class RecordingStore : public KVStore {
 public:
  RecordingStore(const std::string& type, int workers, bool levels = false)
      : KVStore(type),
        inner_(std::move(KVStore::Create("local")).value()),
        workers_(workers),
        levels_(levels) {}
  int num_workers() const override { return workers_; }
  bool SumsComeBackAsLevels() const override { return levels_; }
  Status Init(const std::vector<Key>& k, const std::vector<Tensor>& v) override {
    return inner_->Init(k, v);
  }
  StatusOr<KVHandle> PushAsync(const std::vector<Key>& k, const std::vector<Tensor>& v,
                               int p) override {
    return inner_->PushAsync(k, v, p);
  }
  StatusOr<KVHandle> PullAsync(const std::vector<Key>& k, const std::vector<Tensor>& o,
                               int p) override {
    return inner_->PullAsync(k, o, p);
  }
  StatusOr<KVHandle> PushPullAsync(const std::vector<Key>& k, const std::vector<Tensor>& v,
                                   const std::vector<Tensor>& o, int p) override {
    return inner_->PushPullAsync(k, v, o, p);
  }
  Status Wait(KVHandle h) override { return inner_->Wait(h); }
  // As an asynchronous store's would after each epoch.
  StatusOr<StalenessReport> TakeStalenessReport() override {
    ++reports_;
    return StalenessReport{};
  }
  int reports() const { return reports_; }
  Status SetOptimizer(const proto::OptimizerSpec& spec) override {
    spec_ = spec;
    has_optimizer_ = true;
    return inner_->SetOptimizer(spec);
  }
  Status SetUpdater(Updater u) override { return inner_->SetUpdater(std::move(u)); }
  Status SaveOptimizerStates(const std::string& p) override { return inner_->SaveOptimizerStates(p); }
  Status LoadOptimizerStates(const std::string& p) override { return inner_->LoadOptimizerStates(p); }
  const proto::OptimizerSpec& spec() const { return spec_; }
  bool has_optimizer() const { return has_optimizer_; }

 protected:
  std::unique_ptr<KVStore> inner_;

 private:
  const int workers_;
  const bool levels_;
  bool has_optimizer_ = false;
  proto::OptimizerSpec spec_;
  int reports_ = 0;
};

// A local store whose answers land late, in Wait, as a remote store's do
// (written into the caller's arrays after a pause); the `fail_at`-th Wait
// (counting from 1; 0: none) fails naming its key.
class LateStore : public RecordingStore {
 public:
  explicit LateStore(int fail_at = 0) : RecordingStore("dist_sync", 1), fail_at_(fail_at) {}
  StatusOr<KVHandle> PushPullAsync(const std::vector<Key>& k, const std::vector<Tensor>& v,
                                   const std::vector<Tensor>& o, int p) override {
    std::vector<Tensor> staged;
    for (const Tensor& t : o) staged.push_back(Tensor::Empty(t.shape()));
    KV_ASSIGN_OR_RETURN(KVHandle h, inner_->PushPullAsync(k, v, staged, p));
    std::lock_guard<std::mutex> lock(mu_);
    late_[h] = Late{k.empty() ? std::string() : k[0].ToString(), o, staged};
    return h;
  }
  Status Wait(KVHandle h) override {
    KV_RETURN_IF_ERROR(inner_->Wait(h));
    Late late;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = late_.find(h);
      if (it == late_.end()) return Status::OK();  // a push or pull
      late = it->second;
      late_.erase(h);
      if (++waits_ == fail_at_) {
        return Status::Unavailable("no answer for key " + late.key);
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(300));
    for (size_t i = 0; i < late.outs.size(); ++i) {
      KV_RETURN_IF_ERROR(late.outs[i].CopyFrom(late.staged[i]));
    }
    return Status::OK();
  }

 private:
  struct Late {
    std::string key;
    std::vector<Tensor> outs, staged;
  };
  const int fail_at_;
  std::mutex mu_;
  std::map<KVHandle, Late> late_;
  int waits_ = 0;
};

// Fit keeps two steps in flight; a step's forward still runs on every
// update before it, however late the store's answers land, and what it
// learns is exactly what a store answering at once teaches.
TEST(ModuleTest, StepsInFlightSeeEveryUpdate) {
  auto reference = [](KVStore* kv) {
    auto it = TwoClasses(20);
    auto m = BoundMlp(*it);
    FitOptions fo = ShortFit(3);
    fo.epoch_size = 0;  // 20 batches per epoch
    EXPECT_TRUE(m->Fit(it.get(), nullptr, kv, fo).ok());
    return std::move(m->Arrays()).value();
  };
  auto local = std::move(KVStore::Create("local")).value();
  const ModelArrays want = reference(local.get());
  LateStore late;
  const ModelArrays got = reference(&late);
  ASSERT_EQ(want.args.size(), got.args.size());
  for (const auto& [name, t] : want.args) {
    EXPECT_EQ(t.ToVector(), got.args.at(name).ToVector()) << name;
  }
}

// A store's error in a step ends Fit naming the step's batch, and the
// module trains again afterwards.
TEST(ModuleTest, AStoreErrorNamesItsBatch) {
  auto it = TwoClasses(20);
  auto m = BoundMlp(*it);
  FitOptions fo = ShortFit(1);
  fo.epoch_size = 10;
  // 4 parameters per step: the 14th Wait is in the 4th step (batch 3).
  LateStore failing(14);
  const Status s = m->Fit(it.get(), nullptr, &failing, fo);
  EXPECT_EQ(s.code(), Status::Code::kUnavailable) << s;
  EXPECT_NE(s.message().find("epoch 0 batch 3"), std::string::npos) << s;
  EXPECT_NE(s.message().find("no answer for key fc"), std::string::npos) << s;
  auto kv = std::move(KVStore::Create("local")).value();
  EXPECT_TRUE(m->Fit(it.get(), nullptr, kv.get(), fo).ok());
}

// MXNet's rule: gradients are averaged over every example one update sums,
// so over all workers' batches for the synchronous stores and over one
// worker's batch for dist_async (each push is its own update).
TEST(ModuleTest, GradientScaleFollowsWhatAnUpdateSums) {
  for (const auto& [type, workers, want] :
       std::vector<std::tuple<std::string, int, float>>{{"dist_sync", 4, 1.f / 80},
                                                        {"dist_device_sync", 2, 1.f / 40},
                                                        {"dist_allreduce", 3, 1.f / 60},
                                                        {"dist_async", 4, 1.f / 20},
                                                        {"dist_ssp", 2, 1.f / 20},
                                                        {"local", 1, 1.f / 20}}) {
    auto it = TwoClasses(20);
    auto m = BoundMlp(*it);
    RecordingStore kv(type, workers);
    FitOptions fo = ShortFit(1);
    ASSERT_TRUE(m->Fit(it.get(), nullptr, &kv, fo).ok()) << type;
    EXPECT_FLOAT_EQ(kv.spec().rescale_grad(), want) << type << " with " << workers << " workers";
    // An asynchronous store's staleness is reported once per epoch.
    EXPECT_EQ(kv.reports(), kv.is_async() ? 1 : 0) << type;
  }
}

// dist_async's servers apply each push as it arrives: with the workers
// running the optimizer there would be no step's sum to apply (MXNet refuses
// it too).
TEST(ModuleTest, WorkersCannotUpdateOverAnAsyncStore) {
  auto it = TwoClasses(20);
  auto m = BoundMlp(*it);
  RecordingStore kv("dist_async", 2);
  FitOptions fo = ShortFit(1);
  fo.update_on_kvstore = false;
  const Status s = m->Fit(it.get(), nullptr, &kv, fo);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("update_on_kvstore=false"), std::string::npos) << s;
  EXPECT_NE(s.message().find("'dist_async'"), std::string::npos) << s;
  RecordingStore sync("dist_sync", 2);
  EXPECT_TRUE(m->Fit(it.get(), nullptr, &sync, fo).ok());
}

// update_on_kvstore unset: the workers run the optimizer where the
// servers answer summed codes as levels and there are 2 or more workers;
// the store everywhere else, and wherever the caller says so.
TEST(ModuleTest, TheWorkersUpdateWhereSumsComeBackAsLevels) {
  struct Case {
    bool levels;
    int workers;
    std::optional<bool> update_on_kvstore;
    bool store_updates;
  };
  for (const Case& c : std::vector<Case>{{true, 2, std::nullopt, false},
                                         {true, 3, std::nullopt, false},
                                         {true, 1, std::nullopt, true},
                                         {false, 2, std::nullopt, true},
                                         {true, 2, true, true},
                                         {false, 2, false, false}}) {
    auto it = TwoClasses(20);
    auto m = BoundMlp(*it);
    RecordingStore kv("dist_sync", c.workers, c.levels);
    FitOptions fo = ShortFit(1);
    fo.update_on_kvstore = c.update_on_kvstore;
    ASSERT_TRUE(m->Fit(it.get(), nullptr, &kv, fo).ok());
    EXPECT_EQ(kv.has_optimizer(), c.store_updates)
        << "levels " << c.levels << ", " << c.workers << " workers, update_on_kvstore "
        << (c.update_on_kvstore ? std::to_string(*c.update_on_kvstore) : "unset");
  }
}

// Checkpoints every checkpoint_period-th epoch; the states come from the
// optimizer that ran (here the workers').
TEST(ModuleTest, CheckpointsEveryPeriodthEpoch) {
  const std::string prefix = std::string(std::getenv("TEST_TMPDIR")) + "/period";
  auto it = TwoClasses(20);
  auto m = BoundMlp(*it);
  auto kv = std::move(KVStore::Create("local")).value();
  FitOptions fo = ShortFit(5);
  fo.update_on_kvstore = false;
  fo.model_prefix = prefix;
  fo.checkpoint_period = 2;
  ASSERT_TRUE(m->Fit(it.get(), nullptr, kv.get(), fo).ok());
  for (int epoch = 1; epoch <= 5; ++epoch) {
    char suffix[16];
    std::snprintf(suffix, sizeof suffix, "-%04d", epoch);
    for (const char* ext : {".params", ".states"}) {
      EXPECT_EQ(std::ifstream(prefix + suffix + ext).good(), epoch % 2 == 0)
          << "epoch " << epoch << ext;
    }
  }
  fo.checkpoint_period = 0;
  const Status s = m->Fit(it.get(), nullptr, kv.get(), fo);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("checkpoint period 0"), std::string::npos) << s;
}

}  // namespace
}  // namespace kvtrain
