// A program for the KVStore's multi-process tests: it plays any role of a
// dist job (servers and the scheduler serve), and a worker runs one scenario,
// checking its results and exiting non-zero on any mismatch.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <thread>

#include <gflags/gflags.h>
#include <glog/logging.h>

#include "base/file.h"
#include "engine/io/data_iter.h"
#include "kvstore/kvstore.h"
#include "tensor/blas.h"

DEFINE_string(type, "dist_sync", "KVStore type");
DEFINE_string(scenario, "closed_form",
              "closed_form, async_total, save_states, load_states, bad_input, linreg, "
              "load, load_async");
DEFINE_int32(steps, 5, "push/pull steps");
DEFINE_string(states_path, "", "save_states/load_states: the states file");
DEFINE_string(weights_path, "", "save_states: weights at the save; load_states: input");
DEFINE_string(out, "", "rank 0 writes its final weights here");
DEFINE_int32(batch, 30, "linreg: batch size per worker");
DEFINE_int32(epochs, 2, "linreg: epochs");
DEFINE_bool(skip_load, false, "load_states: resume without the saved states");
DEFINE_double(seconds, 60, "big_arrays: how long to push");
DEFINE_int64(array_mb, 256, "big_arrays: the array's size in MB");
DEFINE_bool(report_rss, false,
            "every role: sample VmRSS and print it at a quarter of the run and at the end");

namespace kvtrain {
namespace {

Tensor Filled(int64_t n, float v) {
  Tensor t = Tensor::Empty({n});
  CHECK(t.Fill(v).ok());
  return t;
}

Status WriteTensor(const std::string& path, const Tensor& t) {
  return WriteFileAtomic(path, std::string(static_cast<const char*>(t.raw_data()),
                                           t.nbytes()));
}

StatusOr<Tensor> ReadTensor(const std::string& path) {
  KV_ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(path));
  Tensor t = Tensor::Empty({static_cast<int64_t>(bytes.size() / 4)});
  std::memcpy(t.raw_data(), bytes.data(), bytes.size());
  return t;
}

Status Expect(bool ok, const std::string& what) {
  return ok ? Status::OK() : Status::Internal(what);
}

// Scalar, small and (with KVTRAIN_BIGARRAY_BOUND=1000) split keys; SGD lr=1:
// after t steps every element is 1 - t * W(W+1)/2, exactly.
Status ClosedForm(KVStore* kv) {
  const std::vector<int64_t> sizes = {1, 37, 5000};
  std::vector<Key> keys = {"scalar", "small", "big"};
  std::vector<Tensor> init;
  for (int64_t n : sizes) init.push_back(Filled(n, kv->rank() == 0 ? 1.0f : -7.0f));
  KV_RETURN_IF_ERROR(kv->Init(keys, init));
  proto::OptimizerSpec sgd;
  sgd.set_type(proto::OptimizerSpec::SGD);
  sgd.set_learning_rate(1.0f);
  KV_RETURN_IF_ERROR(kv->SetOptimizer(sgd));
  const int w = kv->num_workers();
  for (int t = 1; t <= FLAGS_steps; ++t) {
    std::vector<Tensor> grads, outs;
    for (int64_t n : sizes) {
      grads.push_back(Filled(n, kv->rank() + 1.0f));
      outs.push_back(Tensor::Zeros({n}));
    }
    KV_RETURN_IF_ERROR(kv->PushPull(keys, grads, outs, -t));
    const float want = 1.0f - t * w * (w + 1) / 2.0f;
    for (size_t i = 0; i < sizes.size(); ++i) {
      for (float v : outs[i].ToVector()) {
        KV_RETURN_IF_ERROR(Expect(v == want, "step " + std::to_string(t) + " key " +
                                                 keys[i].ToString() + ": got " +
                                                 std::to_string(v) + ", want " +
                                                 std::to_string(want)));
      }
    }
  }
  std::printf("closed form exact: %d steps, %d workers\n", FLAGS_steps, w);
  return Status::OK();
}

// No optimizer: async accumulates every push.
Status AsyncTotal(KVStore* kv) {
  KV_RETURN_IF_ERROR(kv->Init({"a", "big"}, {Filled(3, 0), Filled(5000, 0)}));
  for (int i = 0; i < FLAGS_steps; ++i) {
    KV_RETURN_IF_ERROR(kv->Push({"a", "big"}, {Filled(3, kv->rank() + 1.0f), Filled(5000, 1)}));
  }
  KV_RETURN_IF_ERROR(kv->Barrier());
  Tensor a = Tensor::Zeros({3}), big = Tensor::Zeros({5000});
  KV_RETURN_IF_ERROR(kv->Pull({"a", "big"}, {a, big}));
  const int w = kv->num_workers();
  const float want_a = FLAGS_steps * w * (w + 1) / 2.0f, want_big = FLAGS_steps * w;
  for (float v : a.ToVector()) KV_RETURN_IF_ERROR(Expect(v == want_a, "a: " + std::to_string(v)));
  for (float v : big.ToVector()) {
    KV_RETURN_IF_ERROR(Expect(v == want_big, "big: " + std::to_string(v)));
  }
  std::printf("async total exact: %g and %g\n", want_a, want_big);
  return Status::OK();
}

proto::OptimizerSpec Momentum() {
  proto::OptimizerSpec spec;
  spec.set_type(proto::OptimizerSpec::SGD);
  spec.set_learning_rate(0.1f);
  spec.set_momentum(0.9f);
  return spec;
}

// Two steps, save states (and weights), two more steps; or, resuming, load
// both and do the two more steps.
Status States(KVStore* kv, bool resume) {
  Tensor init = Filled(3000, 1.0f);
  if (resume) {
    KV_ASSIGN_OR_RETURN(init, ReadTensor(FLAGS_weights_path));
  }
  KV_RETURN_IF_ERROR(kv->Init({"w"}, {init}));
  KV_RETURN_IF_ERROR(kv->SetOptimizer(Momentum()));
  Tensor out = Tensor::Zeros({3000});
  auto step = [&](int t) {
    return kv->PushPull({"w"}, {Filled(3000, 0.25f * (kv->rank() + t))}, {out});
  };
  if (!resume) {
    for (int t = 0; t < 2; ++t) KV_RETURN_IF_ERROR(step(t));
    if (kv->rank() == 0) {
      KV_RETURN_IF_ERROR(kv->SaveOptimizerStates(FLAGS_states_path));
      KV_RETURN_IF_ERROR(WriteTensor(FLAGS_weights_path, out));
    }
  } else if (kv->rank() == 0 && !FLAGS_skip_load) {
    KV_RETURN_IF_ERROR(kv->LoadOptimizerStates(FLAGS_states_path));
  }
  KV_RETURN_IF_ERROR(kv->Barrier());
  for (int t = 2; t < 4; ++t) KV_RETURN_IF_ERROR(step(t));
  if (kv->rank() == 0) KV_RETURN_IF_ERROR(WriteTensor(FLAGS_out, out));
  return Status::OK();
}

Status ExpectError(const Status& got, const std::string& want) {
  std::printf("error as expected: %s\n", got.ToString().c_str());
  return Expect(got.message().find(want) != std::string::npos,
                "expected an error containing \"" + want + "\", got " + got.ToString());
}

Status BadInput(KVStore* kv) {
  KV_RETURN_IF_ERROR(kv->Init({"w"}, {Filled(4, 1)}));
  KV_RETURN_IF_ERROR(ExpectError(kv->Push({"v"}, {Filled(4, 1)}),
                                 "key v: was never initialised (call Init first)"));
  KV_RETURN_IF_ERROR(ExpectError(kv->Push({"w"}, {Filled(5, 1)}),
                                 "key w: push with shape (5) but it was initialised with (4)"));
  KV_RETURN_IF_ERROR(ExpectError(kv->Pull({"w"}, {Tensor::Zeros({2, 2})}),
                                 "key w: pull with shape (2, 2) but it was initialised with (4)"));
  KV_RETURN_IF_ERROR(ExpectError(kv->Push({"w"}, {Tensor::Zeros({4}, DType::kInt32)}),
                                 "key w: push got a int32 tensor"));
  // The servers still serve.
  Tensor out = Tensor::Zeros({4});
  KV_RETURN_IF_ERROR(kv->PushPull({"w"}, {Filled(4, 3)}, {out}));
  KV_RETURN_IF_ERROR(Expect(out.ToVector()[0] == 3.0f * kv->num_workers(), "after errors"));
  std::printf("bad input handled, servers still serving\n");
  return Status::OK();
}

// Least-squares linear regression with SGD+momentum on the KVStore; data
// partitioned by rank. n workers at batch b equal one process at n*b.
Status LinReg(KVStore* kv) {
  const int64_t n = 1200, d = 16;
  Tensor x = Tensor::Empty({n, d}), y = Tensor::Empty({n});
  for (int64_t i = 0; i < n; ++i) {
    float target = 0;
    for (int64_t j = 0; j < d; ++j) {
      const float v = std::sin(0.37f * i + 1.3f * j);
      x.data<float>()[i * d + j] = v;
      target += v * (j % 5 - 2.0f);
    }
    y.data<float>()[i] = target + 0.1f * std::cos(2.1f * i);
  }
  IterOptions io;
  io.batch_size = FLAGS_batch;
  io.shuffle = true;
  io.seed = 11;
  io.scale = 1;
  io.num_parts = kv->num_workers();
  io.part_index = kv->rank();
  KV_ASSIGN_OR_RETURN(std::unique_ptr<DataIter> it, NewArrayIter(x, y, io));
  Tensor w = Tensor::Zeros({d, 1});
  KV_RETURN_IF_ERROR(kv->Init({"w"}, {w}));
  proto::OptimizerSpec spec = Momentum();
  spec.set_learning_rate(0.05f);
  spec.set_rescale_grad(1.0f / (FLAGS_batch * kv->num_workers()));
  KV_RETURN_IF_ERROR(kv->SetOptimizer(spec));
  Tensor resid = Tensor::Empty({FLAGS_batch, 1}), grad = Tensor::Empty({d, 1});
  for (int e = 0; e < FLAGS_epochs; ++e) {
    KV_RETURN_IF_ERROR(it->Reset());
    Batch b;
    while (true) {
      KV_ASSIGN_OR_RETURN(bool more, it->Next(&b));
      if (!more) break;
      // grad = X^T (X w - y)
      KV_RETURN_IF_ERROR(blas::Gemm(b.data, false, w, false, 1, 0, &resid));
      KV_ASSIGN_OR_RETURN(Tensor label, b.label.Reshape({FLAGS_batch, 1}));
      KV_RETURN_IF_ERROR(blas::Axpy(-1, label, &resid));
      KV_RETURN_IF_ERROR(blas::Gemm(b.data, true, resid, false, 1, 0, &grad));
      KV_RETURN_IF_ERROR(kv->PushPull({"w"}, {grad}, {w}));
    }
  }
  if (kv->rank() == 0 && !FLAGS_out.empty()) KV_RETURN_IF_ERROR(WriteTensor(FLAGS_out, w));
  std::printf("linreg done: %d epochs, batch %d per worker\n", FLAGS_epochs, FLAGS_batch);
  return Status::OK();
}

// The load test's keys: 20 of mixed sizes, from 1 float to 1M (split across
// the servers), most of them small.
const std::vector<int64_t>& LoadSizes() {
  static const std::vector<int64_t> sizes = {
      1, 2, 3, 7, 10, 31, 64, 100, 257, 1000, 1024, 3000, 4096, 10000,
      1, 5, 333, 65536, 100000, 1 << 20};
  return sizes;
}

std::vector<Key> LoadKeys() {
  std::vector<Key> keys;
  for (size_t k = 0; k < LoadSizes().size(); ++k) keys.push_back("k" + std::to_string(k));
  return keys;
}

// dist_sync, SGD lr=1: key k starts at k; worker r pushes (r + 1) * m_k
// with m_k = 1 + k % 3; after step t every element of key k is exactly
// k - t * m_k * W(W+1)/2. Every pulled value of every step is checked.
Status Load(KVStore* kv) {
  const std::vector<int64_t>& sizes = LoadSizes();
  const std::vector<Key> keys = LoadKeys();
  std::vector<Tensor> init, grads, outs;
  for (size_t k = 0; k < sizes.size(); ++k) {
    init.push_back(Filled(sizes[k], static_cast<float>(k)));
    grads.push_back(Filled(sizes[k], (kv->rank() + 1.0f) * (1 + k % 3)));
    outs.push_back(Tensor::Zeros({sizes[k]}));
  }
  KV_RETURN_IF_ERROR(kv->Init(keys, init));
  proto::OptimizerSpec sgd;
  sgd.set_type(proto::OptimizerSpec::SGD);
  sgd.set_learning_rate(1.0f);
  KV_RETURN_IF_ERROR(kv->SetOptimizer(sgd));
  const int64_t w = kv->num_workers();
  int64_t checked = 0;
  for (int t = 1; t <= FLAGS_steps; ++t) {
    KV_RETURN_IF_ERROR(kv->PushPull(keys, grads, outs));
    for (size_t k = 0; k < sizes.size(); ++k) {
      const float want = static_cast<float>(k) - t * (1 + k % 3) * w * (w + 1) / 2.0f;
      const float* v = outs[k].data<float>();
      for (int64_t i = 0; i < sizes[k]; ++i) {
        if (v[i] != want) {
          return Status::Internal("step " + std::to_string(t) + " key " + keys[k].ToString() +
                                  " element " + std::to_string(i) + ": got " +
                                  std::to_string(v[i]) + ", want " + std::to_string(want));
        }
      }
      checked += sizes[k];
    }
  }
  std::printf("load exact: %d steps, %zu keys, %lld values checked, %lld workers\n",
              FLAGS_steps, sizes.size(), static_cast<long long>(checked),
              static_cast<long long>(w));
  return Status::OK();
}

// dist_async, no optimizer: the servers add every push; after all workers'
// steps, key k holds k + steps * m_k * W(W+1)/2 exactly.
Status LoadAsync(KVStore* kv) {
  const std::vector<int64_t>& sizes = LoadSizes();
  const std::vector<Key> keys = LoadKeys();
  std::vector<Tensor> init, grads, outs;
  for (size_t k = 0; k < sizes.size(); ++k) {
    init.push_back(Filled(sizes[k], static_cast<float>(k)));
    grads.push_back(Filled(sizes[k], (kv->rank() + 1.0f) * (1 + k % 3)));
    outs.push_back(Tensor::Zeros({sizes[k]}));
  }
  KV_RETURN_IF_ERROR(kv->Init(keys, init));
  for (int t = 1; t <= FLAGS_steps; ++t) KV_RETURN_IF_ERROR(kv->Push(keys, grads));
  KV_RETURN_IF_ERROR(kv->Barrier());
  KV_RETURN_IF_ERROR(kv->Pull(keys, outs));
  const int64_t w = kv->num_workers();
  for (size_t k = 0; k < sizes.size(); ++k) {
    const float want = static_cast<float>(k) + FLAGS_steps * (1 + k % 3) * w * (w + 1) / 2.0f;
    const float* v = outs[k].data<float>();
    for (int64_t i = 0; i < sizes[k]; ++i) {
      if (v[i] != want) {
        return Status::Internal("key " + keys[k].ToString() + " element " +
                                std::to_string(i) + ": got " + std::to_string(v[i]) +
                                ", want " + std::to_string(want));
      }
    }
  }
  std::printf("async load exact: %d pushes from each of %lld workers on %zu keys\n",
              FLAGS_steps, static_cast<long long>(w), sizes.size());
  return Status::OK();
}

// dist_sync push-pulls of one large array (--array_mb) for --seconds: the
// node's heartbeats must keep up while it encrypts and moves them. Every
// answer is checked: the sum of every worker's push (no optimizer).
Status BigArrays(KVStore* kv) {
  const int64_t n = FLAGS_array_mb * (1 << 20) / 4;
  const int w = kv->num_workers();
  KV_RETURN_IF_ERROR(kv->Init({"big"}, {Tensor::Zeros({n})}));
  Tensor grad = Tensor::Empty({n});
  KV_RETURN_IF_ERROR(grad.Fill(static_cast<float>(kv->rank() + 1)));
  Tensor out = Tensor::Zeros({n});
  const float want = w * (w + 1) / 2.0f;
  const auto end = std::chrono::steady_clock::now() +
                   std::chrono::duration<double>(FLAGS_seconds);
  int steps = 0;
  // Every worker runs the same number of steps: rank 0 decides, and the
  // others follow its count (a barrier each step would hide the load).
  for (;;) {
    KV_RETURN_IF_ERROR(kv->PushPull({"big"}, {grad}, {out}));
    ++steps;
    const float* o = out.data<float>();
    if (o[0] != want || o[n - 1] != want || o[n / 2] != want) {
      return Status::Internal("step " + std::to_string(steps) + ": got " +
                              std::to_string(o[0]) + ", want " + std::to_string(want));
    }
    Tensor more = Tensor::Zeros({1});
    if (kv->rank() == 0 && std::chrono::steady_clock::now() < end) more.data<float>()[0] = 1;
    // A tiny key carries rank 0's decision (summed: only rank 0 adds 1).
    if (steps == 1) KV_RETURN_IF_ERROR(kv->Init({"more"}, {Tensor::Zeros({1})}));
    Tensor again = Tensor::Zeros({1});
    KV_RETURN_IF_ERROR(kv->PushPull({"more"}, {more}, {again}));
    if (again.data<float>()[0] == 0) break;
  }
  std::printf("big arrays: %d steps of %lld MB\n", steps, static_cast<long long>(FLAGS_array_mb));
  return Status::OK();
}

int64_t RssKb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  }
  return -1;
}

// Samples VmRSS every 100 ms; Report() prints the sample taken a quarter of
// the way through the run (after warm-up) and the last one.
class RssSampler {
 public:
  RssSampler() : thread_([this] { Loop(); }) {}
  ~RssSampler() {
    stop_ = true;
    thread_.join();
  }
  void Report() {
    std::lock_guard<std::mutex> l(mu_);
    samples_.push_back(RssKb());
    const int64_t start = samples_[samples_.size() / 4], end = samples_.back();
    std::printf("rss kB: start %lld end %lld (%zu samples)\n", static_cast<long long>(start),
                static_cast<long long>(end), samples_.size());
    std::fflush(stdout);
  }

 private:
  void Loop() {
    while (!stop_) {
      {
        std::lock_guard<std::mutex> l(mu_);
        samples_.push_back(RssKb());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<int64_t> samples_;
  std::thread thread_;
};

Status RunWorker(KVStore* kv) {
  if (FLAGS_scenario == "closed_form") return ClosedForm(kv);
  if (FLAGS_scenario == "async_total") return AsyncTotal(kv);
  if (FLAGS_scenario == "save_states") return States(kv, false);
  if (FLAGS_scenario == "load_states") return States(kv, true);
  if (FLAGS_scenario == "bad_input") return BadInput(kv);
  if (FLAGS_scenario == "linreg") return LinReg(kv);
  if (FLAGS_scenario == "load") return Load(kv);
  if (FLAGS_scenario == "load_async") return LoadAsync(kv);
  if (FLAGS_scenario == "big_arrays") return BigArrays(kv);
  return Status::InvalidArgument("unknown --scenario " + FLAGS_scenario);
}

int Main() {
  std::unique_ptr<RssSampler> rss;
  if (FLAGS_report_rss) rss = std::make_unique<RssSampler>();
  StatusOr<std::unique_ptr<KVStore>> kv = KVStore::Create(FLAGS_type);
  if (!kv.ok()) {
    std::fprintf(stderr, "error: %s\n", kv.status().ToString().c_str());
    return 2;
  }
  if (!(*kv)->is_worker()) {
    if ((*kv)->role() == Role::kServer) {
      // A worker-only call in a server process is a clear error.
      const Status s = (*kv)->Push({"w"}, {Filled(1, 1)});
      std::printf("server push refused: %s\n", s.ToString().c_str());
    }
    const Status s = (*kv)->RunServer();
    if (rss) rss->Report();
    if (!s.ok()) std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return s.ok() ? 0 : 1;
  }
  const Status s = RunWorker(kv->get());
  if (rss) rss->Report();
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
    return 1;
  }
  const Status f = (*kv)->Finalize();
  if (!f.ok()) std::fprintf(stderr, "error: %s\n", f.ToString().c_str());
  return f.ok() ? 0 : 1;
}

}  // namespace
}  // namespace kvtrain

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  return kvtrain::Main();
}
