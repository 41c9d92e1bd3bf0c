// kvtrain._kvtrain.KVStore and the optimizer spec builder (kvtrain.kv and
// kvtrain.optimizer wrap them).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compression/compression.h"
#include "kvstore/kvstore.h"
#include "ops/optimizer.h"
#include "python/bind_common.h"
#include "python/bind_parts.h"

namespace kvtrain {
namespace python {
namespace {

Key ToKey(const py::handle& h) {
  if (py::isinstance<py::str>(h)) return Key(h.cast<std::string>());
  if (py::isinstance<py::int_>(h) && !py::isinstance<py::bool_>(h)) {
    const long long id = h.cast<long long>();
    if (id < 0 || id > INT32_MAX) {
      throw py::value_error("key " + std::to_string(id) +
                            ": int keys must be in [0, 2^31 - 1]");
    }
    return Key(static_cast<int>(id));
  }
  throw py::type_error("a key must be an int or a str, got " +
                       py::str(py::type::of(h)).cast<std::string>());
}

std::vector<Key> ToKeys(const py::list& keys) {
  std::vector<Key> out;
  for (const py::handle& h : keys) out.push_back(ToKey(h));
  return out;
}

std::vector<Tensor> ToTensors(const std::vector<Key>& keys, const py::list& arrays,
                              bool writable, const char* what) {
  if (arrays.size() != keys.size()) {
    throw py::value_error(std::string(what) + ": " + std::to_string(arrays.size()) +
                          " arrays for " + std::to_string(keys.size()) + " keys");
  }
  std::vector<Tensor> out;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!py::isinstance<py::array>(arrays[i])) {
      throw py::type_error("key " + keys[i].ToString() + ": expected a numpy array, got " +
                           py::str(py::type::of(arrays[i])).cast<std::string>());
    }
    out.push_back(ViewArray(arrays[i].cast<py::array>(), "key " + keys[i].ToString(), writable));
  }
  return out;
}

// The store and what the Python side needs besides it.
class PyKVStore {
 public:
  explicit PyKVStore(std::unique_ptr<KVStore> kv) : kv_(std::move(kv)) {}

  KVStore* kv() const { return kv_.get(); }
  // Stops the job when the user presses Ctrl-C during a call.
  // (Captures only `this`: no allocation per call. Used during calls, while
  // the store is alive.)
  std::function<void()> Aborter() const {
    return [this] { kv_->Abort(Who() + " was interrupted (KeyboardInterrupt)"); };
  }
  std::string Who() const {
    if (!kv_->is_distributed()) return "this process";
    return std::string(RoleName(kv_->role())) + " " + std::to_string(kv_->rank());
  }
  // Whether a call may wait on other processes (then Ctrl-C must be able
  // to stop it); single-process stores only compute.
  bool watch() const { return kv_->is_distributed(); }
  bool finished() const { return finished_; }
  void set_finished() { finished_ = true; }

 private:
  std::unique_ptr<KVStore> kv_;
  bool finished_ = false;
};

std::shared_ptr<PyKVStore> Create(const std::string& type) {
  std::unique_ptr<KVStore> kv;
  RunBlocking([&]() -> Status {
    KV_ASSIGN_OR_RETURN(kv, KVStore::Create(type));
    return Status::OK();
  });
  return std::make_shared<PyKVStore>(std::move(kv));
}

py::bytes OptimizerSpec(const std::string& name, const py::dict& params) {
  static const std::map<std::string, proto::OptimizerSpec::Type> kTypes = {
      {"sgd", proto::OptimizerSpec::SGD},
      {"nag", proto::OptimizerSpec::NAG},
      {"adam", proto::OptimizerSpec::ADAM},
      {"adagrad", proto::OptimizerSpec::ADAGRAD},
      {"ftrl", proto::OptimizerSpec::FTRL},
      {"rmsprop", proto::OptimizerSpec::RMSPROP},
      {"signum", proto::OptimizerSpec::SIGNUM},
      {"adamax", proto::OptimizerSpec::ADAMAX},
      {"adadelta", proto::OptimizerSpec::ADADELTA}};
  auto t = kTypes.find(name);
  if (t == kTypes.end()) {
    throw StatusError{Status::InvalidArgument(
        "optimizer \"" + name +
        "\": expected sgd, nag, adam, adagrad, ftrl, rmsprop, signum, adamax or adadelta")};
  }
  proto::OptimizerSpec spec;
  spec.set_type(t->second);
  spec.set_learning_rate(0.01f);
  for (const auto& [k, v] : params) {
    const std::string key = py::str(k);
    auto number = [&, v = v]() -> float {
      if (!py::isinstance<py::float_>(v) && !py::isinstance<py::int_>(v)) {
        throw StatusError{Status::InvalidArgument("optimizer parameter " + key +
                                                  ": expected a number")};
      }
      return v.cast<float>();
    };
    if (key == "learning_rate" || key == "lr") {
      spec.set_learning_rate(number());
    } else if (key == "momentum") {
      spec.set_momentum(number());
    } else if (key == "wd") {
      spec.set_weight_decay(number());
    } else if (key == "rescale_grad") {
      spec.set_rescale_grad(number());
    } else if (key == "clip_gradient") {
      spec.set_clip_gradient(number());
    } else if (key == "beta1") {
      spec.set_beta1(number());
    } else if (key == "beta2") {
      spec.set_beta2(number());
    } else if (key == "epsilon") {
      spec.set_epsilon(number());
    } else if (key == "lamda1") {
      spec.set_lamda1(number());
    } else if (key == "beta") {
      spec.set_beta(number());
    } else if (key == "gamma1") {
      spec.set_gamma1(number());
    } else if (key == "lr_mult" || key == "wd_mult") {
      if (v.is_none()) continue;
      if (!py::isinstance<py::dict>(v)) {
        throw StatusError{Status::InvalidArgument("optimizer parameter " + key +
                                                  ": expected a dict of key -> multiplier")};
      }
      auto* mults = key == "lr_mult" ? spec.mutable_lr_mult() : spec.mutable_wd_mult();
      for (const auto& [name, m] : v.cast<py::dict>()) {
        if (!py::isinstance<py::float_>(m) && !py::isinstance<py::int_>(m)) {
          throw StatusError{Status::InvalidArgument("optimizer parameter " + key + "[" +
                                                    std::string(py::str(name)) +
                                                    "]: expected a number")};
        }
        (*mults)[std::string(py::str(name))] = m.cast<float>();
      }
    } else if (key == "wd_lh") {
      spec.set_wd_lh(number());
    } else if (key == "rho") {
      spec.set_rho(number());
    } else if (key == "lr_scheduler") {
      if (v.is_none()) continue;
      py::dict s = v.attr("_spec")();
      proto::LrSchedule* ls = spec.mutable_lr_schedule();
      const std::string type = py::str(s["type"]);
      ls->set_type(type == "factor"        ? proto::LrSchedule::FACTOR
                   : type == "multifactor" ? proto::LrSchedule::MULTI_FACTOR
                   : type == "poly"        ? proto::LrSchedule::POLY
                                           : proto::LrSchedule::COSINE);
      if (type == "factor") ls->set_step(s["step"].cast<int64_t>());
      if (type == "multifactor") {
        for (const py::handle& st : s["step"].cast<py::list>()) ls->add_steps(st.cast<int64_t>());
      }
      if (type == "factor" || type == "multifactor") {
        ls->set_factor(s["factor"].cast<float>());
        ls->set_min_lr(s["stop_factor_lr"].cast<float>());
      } else {
        ls->set_max_update(s["max_update"].cast<int64_t>());
        ls->set_final_lr(s["final_lr"].cast<float>());
        if (type == "poly") ls->set_power(s["power"].cast<float>());
      }
      ls->set_warmup_steps(s["warmup_steps"].cast<int64_t>());
      ls->set_warmup_begin_lr(s["warmup_begin_lr"].cast<float>());
      ls->set_warmup_constant(s["warmup_constant"].cast<bool>());
    } else {
      throw StatusError{Status::InvalidArgument(
          "optimizer parameter \"" + key +
          "\" is unknown; accepted: learning_rate, momentum, wd, rescale_grad, "
          "clip_gradient, beta1, beta2, epsilon, lamda1, beta, gamma1, wd_lh, rho, lr_mult, "
          "wd_mult, lr_scheduler")};
    }
  }
  Check(Optimizer::Create(spec).status());
  return py::bytes(spec.SerializeAsString());
}

proto::SparseTableSpec TableSpec(int64_t width, int64_t num_rows, const std::string& init,
                                float scale, uint64_t seed, int64_t admit_after,
                                int64_t expire_after, int64_t max_rows) {
  proto::SparseTableSpec spec;
  spec.set_width(width);
  spec.set_num_rows(num_rows);
  if (init == "zeros") {
    spec.set_init(proto::SparseTableSpec::ZEROS);
  } else if (init == "uniform") {
    spec.set_init(proto::SparseTableSpec::UNIFORM);
  } else if (init == "normal") {
    spec.set_init(proto::SparseTableSpec::NORMAL);
  } else if (init == "constant") {
    spec.set_init(proto::SparseTableSpec::CONSTANT);
  } else {
    throw StatusError{Status::InvalidArgument("row-sparse init \"" + init +
                                              "\": expected zeros, uniform, normal or constant")};
  }
  spec.set_scale(scale);
  spec.set_seed(seed);
  spec.set_admit_after(admit_after);
  spec.set_expire_after(expire_after);
  spec.set_max_rows(max_rows);
  return spec;
}

}  // namespace

KVStore* StoreOf(const py::object& store) {
  return store.cast<std::shared_ptr<PyKVStore>>()->kv();
}
std::function<void()> AborterOf(const py::object& store) {
  return store.cast<std::shared_ptr<PyKVStore>>()->Aborter();
}

void BindKVStore(py::module_& m) {
  m.def("optimizer_spec", &OptimizerSpec, py::arg("name"), py::arg("params"),
        "The serialized OptimizerSpec for an optimizer name and its parameters "
        "(checked: a bad value is a ValueError naming it).");
  m.def("kvstore_types", [] { return KVStore::Types(); });
  m.def("read_table", [](const std::string& path) {
    TableRows t = Check(ReadRowSparseTable(path));
    const py::ssize_t n = static_cast<py::ssize_t>(t.ids.size());
    py::array_t<int64_t> ids(n);
    py::array_t<float> rows({n, static_cast<py::ssize_t>(t.width)});
    std::copy(t.ids.begin(), t.ids.end(), ids.mutable_data());
    std::copy(t.rows.begin(), t.rows.end(), rows.mutable_data());
    return py::make_tuple(t.key, ids, rows);
  });
  m.def("export_table", [](const std::string& path, const std::string& out,
                           const std::string& format) {
    if (format != "text" && format != "binary") {
      throw py::value_error("export_table: format '" + format + "': expected text or binary");
    }
    Check(ExportRowSparseTable(
        path, out, format == "text" ? RowExportFormat::kText : RowExportFormat::kBinary));
  });

  py::class_<PyKVStore, std::shared_ptr<PyKVStore>>(m, "KVStore")
      .def_static("create", &Create, py::arg("type"))
      .def_property_readonly("type", [](const PyKVStore& s) { return s.kv()->type(); })
      .def_property_readonly("rank", [](const PyKVStore& s) { return s.kv()->rank(); })
      .def_property_readonly("num_workers",
                             [](const PyKVStore& s) { return s.kv()->num_workers(); })
      .def_property_readonly("role",
                             [](const PyKVStore& s) { return RoleName(s.kv()->role()); })
      .def_property_readonly("is_distributed",
                             [](const PyKVStore& s) { return s.kv()->is_distributed(); })
      .def_property_readonly("sums_workers",
                             [](const PyKVStore& s) { return s.kv()->sums_workers(); })
      .def_property_readonly("lockstep",
                             [](const PyKVStore& s) { return s.kv()->lockstep(); })
      .def_property_readonly("finished", &PyKVStore::finished)
      .def("init",
           [](PyKVStore& s, const py::list& keys, const py::list& values) {
             const std::vector<Key> k = ToKeys(keys);
             const std::vector<Tensor> v = ToTensors(k, values, false, "init");
             RunBlocking([&] { return s.kv()->Init(k, v); }, s.Aborter(), s.watch());
           })
      .def("push",
           [](PyKVStore& s, const py::list& keys, const py::list& values, int priority) {
             const std::vector<Key> k = ToKeys(keys);
             const std::vector<Tensor> v = ToTensors(k, values, false, "push");
             RunBlocking([&] { return s.kv()->Push(k, v, priority); }, s.Aborter(), s.watch());
           })
      .def("pull",
           [](PyKVStore& s, const py::list& keys, const py::list& outs, int priority) {
             const std::vector<Key> k = ToKeys(keys);
             const std::vector<Tensor> o = ToTensors(k, outs, true, "pull");
             RunBlocking([&] { return s.kv()->Pull(k, o, priority); }, s.Aborter(), s.watch());
           })
      .def("pushpull",
           [](PyKVStore& s, const py::list& keys, const py::list& values, const py::list& outs,
              int priority) {
             const std::vector<Key> k = ToKeys(keys);
             const std::vector<Tensor> v = ToTensors(k, values, false, "pushpull");
             const std::vector<Tensor> o = ToTensors(k, outs, true, "pushpull");
             RunBlocking([&] { return s.kv()->PushPull(k, v, o, priority); }, s.Aborter(), s.watch());
           })
      // Asynchronous form for overlap (kvtrain.torch): returns a handle to
      // pass to wait() once. The caller keeps the arrays alive until then.
      .def("pushpull_async",
           [](PyKVStore& s, const py::list& keys, const py::list& values, const py::list& outs,
              int priority) {
             const std::vector<Key> k = ToKeys(keys);
             const std::vector<Tensor> v = ToTensors(k, values, false, "pushpull");
             const std::vector<Tensor> o = ToTensors(k, outs, true, "pushpull");
             KVHandle h = 0;
             RunBlocking([&]() -> Status {
               KV_ASSIGN_OR_RETURN(h, s.kv()->PushPullAsync(k, v, o, priority));
               return Status::OK();
             }, nullptr, false);
             return h;
           })
      .def("init_row_sparse",
           [](PyKVStore& s, const py::handle& key, int64_t width, int64_t num_rows,
              const std::string& init, float scale, uint64_t seed, int64_t admit_after,
              int64_t expire_after, int64_t max_rows, const py::object& optimizer) {
             const Key k = ToKey(key);
             proto::SparseTableSpec spec = TableSpec(
                 width, num_rows, init, scale, seed, admit_after, expire_after, max_rows);
             if (!optimizer.is_none() &&
                 !spec.mutable_optimizer()->ParseFromString(optimizer.cast<std::string>())) {
               throw py::value_error("init: not a serialized OptimizerSpec");
             }
             RunBlocking([&] { return s.kv()->InitRowSparse(k, spec); }, s.Aborter(), s.watch());
           })
      // Row ids: an int64 array (other dtypes are an error naming the key).
      .def("push_row_sparse",
           [](PyKVStore& s, const py::handle& key, const py::array& ids, const py::array& rows,
              int priority) {
             const Key k = ToKey(key);
             const Tensor i = ViewAnyArray(ids, "key " + k.ToString() + " row ids");
             const Tensor r = ViewArray(rows, "key " + k.ToString() + " rows", false);
             RunBlocking([&] { return s.kv()->PushRowSparse(k, i, r, priority); }, s.Aborter(),
                         s.watch());
           })
      .def("row_sparse_pull",
           [](PyKVStore& s, const py::handle& key, const py::array& ids, const py::array& out,
              int priority) {
             const Key k = ToKey(key);
             const Tensor i = ViewAnyArray(ids, "key " + k.ToString() + " row ids");
             const Tensor o = ViewArray(out, "key " + k.ToString() + " out", true);
             RunBlocking([&] { return s.kv()->RowSparsePull(k, i, o, priority); }, s.Aborter(),
                         s.watch());
           })
      // Asynchronous forms (kvtrain.torch overlaps them with compute): a
      // handle for wait(); the caller keeps the arrays alive until then.
      .def("push_row_sparse_async",
           [](PyKVStore& s, const py::handle& key, const py::array& ids, const py::array& rows,
              int priority) {
             const Key k = ToKey(key);
             const Tensor i = ViewAnyArray(ids, "key " + k.ToString() + " row ids");
             const Tensor r = ViewArray(rows, "key " + k.ToString() + " rows", false);
             KVHandle h = 0;
             RunBlocking([&]() -> Status {
               KV_ASSIGN_OR_RETURN(h, s.kv()->PushRowSparseAsync(k, i, r, priority));
               return Status::OK();
             }, nullptr, false);
             return h;
           })
      .def("row_sparse_pull_async",
           [](PyKVStore& s, const py::handle& key, const py::array& ids, const py::array& out,
              int priority) {
             const Key k = ToKey(key);
             const Tensor i = ViewAnyArray(ids, "key " + k.ToString() + " row ids");
             const Tensor o = ViewArray(out, "key " + k.ToString() + " out", true);
             KVHandle h = 0;
             RunBlocking([&]() -> Status {
               KV_ASSIGN_OR_RETURN(h, s.kv()->RowSparsePullAsync(k, i, o, priority));
               return Status::OK();
             }, nullptr, false);
             return h;
           })
      .def("row_sparse_stats",
           [](PyKVStore& s, const py::handle& key) {
             const Key k = ToKey(key);
             std::vector<proto::SparseTableStats> stats;
             RunBlocking([&]() -> Status {
               KV_ASSIGN_OR_RETURN(stats, s.kv()->RowSparseStats(k));
               return Status::OK();
             }, s.Aborter());
             py::list out;
             for (const proto::SparseTableStats& t : stats) {
               py::dict d;
               d["rows"] = t.rows();
               d["created"] = t.created();
               d["evicted"] = t.evicted();
               d["expired"] = t.expired();
               d["pending"] = t.pending();
               d["dropped_grads"] = t.dropped_grads();
               d["updates"] = t.updates();
               d["bytes"] = t.bytes();
               out.append(d);
             }
             return out;
           })
      .def("save_row_sparse",
           [](PyKVStore& s, const py::handle& key, const std::string& path) {
             const Key k = ToKey(key);
             RunBlocking([&] { return s.kv()->SaveRowSparse(k, path); }, s.Aborter());
           })
      .def("load_row_sparse",
           [](PyKVStore& s, const py::handle& key, const std::string& path) {
             const Key k = ToKey(key);
             RunBlocking([&] { return s.kv()->LoadRowSparse(k, path); }, s.Aborter());
           })
      .def("wait",
           [](PyKVStore& s, KVHandle h) {
             RunBlocking([&] { return s.kv()->Wait(h); }, s.Aborter(), s.watch());
           })
      .def("set_optimizer",
           [](PyKVStore& s, const py::bytes& spec_bytes) {
             proto::OptimizerSpec spec;
             if (!spec.ParseFromString(std::string(spec_bytes))) {
               throw py::value_error("set_optimizer: not a serialized OptimizerSpec");
             }
             RunBlocking([&] { return s.kv()->SetOptimizer(spec); }, s.Aborter());
           })
      .def("set_async_options",
           [](PyKVStore& s, int64_t staleness, bool staleness_lr) {
             AsyncOptions o;
             o.staleness = staleness;
             o.staleness_lr = staleness_lr;
             Check(s.kv()->SetAsyncOptions(o));
           })
      .def("async_options",
           [](PyKVStore& s) {
             const AsyncOptions o = s.kv()->async_options();
             py::dict d;
             d["staleness"] = o.staleness;
             d["staleness_lr"] = o.staleness_lr;
             return d;
           })
      .def_property_readonly("resume_step",
                             [](PyKVStore& s) { return s.kv()->ResumeStep(); })
      .def("server_losses",
           [](PyKVStore& s) {
             const auto [lost, pause] = s.kv()->TakeServerLosses();
             py::dict d;
             d["servers"] = lost;
             d["pause_seconds"] = pause;
             return d;
           })
      .def("staleness_report",
           [](PyKVStore& s) {
             StalenessReport r;
             RunBlocking(
                 [&]() -> Status {
                   KV_ASSIGN_OR_RETURN(r, s.kv()->TakeStalenessReport());
                   return Status::OK();
                 },
                 s.Aborter());
             py::dict d;
             d["pushes"] = r.pushes;
             d["mean"] = r.mean;
             d["max"] = r.max;
             d["held"] = r.held;
             d["held_seconds"] = r.held_seconds;
             return d;
           })
      .def("set_gradient_compression",
           [](PyKVStore& s, const std::string& type, const std::string& threshold,
              int64_t min_bytes, const std::string& pull) {
             proto::GradientCompression spec =
                 Check(kv::ParseCompression(type, threshold, min_bytes, pull));
             Check(s.kv()->SetGradientCompression(spec));
           })
      .def("gradient_compression",
           [](PyKVStore& s) {
             const proto::GradientCompression spec = s.kv()->gradient_compression();
             py::dict d;
             d["type"] = kv::CompressionName(spec.type());
             if (spec.type() == proto::GradientCompression::TWO_BIT) {
               if (spec.auto_threshold()) {
                 d["threshold"] = "auto";
               } else {
                 d["threshold"] = spec.threshold();
               }
             }
             if (spec.min_bytes() > 0) d["min_bytes"] = spec.min_bytes();
             if (!kv::PullName(spec.pull()).empty()) d["pull"] = kv::PullName(spec.pull());
             return d;
           })
      .def("save_residuals",
           [](PyKVStore& s, const std::string& path) {
             RunBlocking([&] { return s.kv()->SaveResiduals(path); }, s.Aborter());
           })
      .def("load_residuals",
           [](PyKVStore& s, const std::string& path) {
             RunBlocking([&] { return s.kv()->LoadResiduals(path); }, s.Aborter());
           })
      .def("barrier",
           [](PyKVStore& s) { RunBlocking([&] { return s.kv()->Barrier(); }, s.Aborter()); })
      .def("save_optimizer_states",
           [](PyKVStore& s, const std::string& path) {
             RunBlocking([&] { return s.kv()->SaveOptimizerStates(path); }, s.Aborter());
           })
      .def("load_optimizer_states",
           [](PyKVStore& s, const std::string& path) {
             RunBlocking([&] { return s.kv()->LoadOptimizerStates(path); }, s.Aborter());
           })
      .def("run_server",
           [](PyKVStore& s) {
             s.set_finished();
             RunBlocking([&] { return s.kv()->RunServer(); }, s.Aborter());
           })
      .def("finalize",
           [](PyKVStore& s) {
             if (s.finished()) return;
             s.set_finished();
             RunBlocking([&] { return s.kv()->Finalize(); }, s.Aborter());
           })
      .def("abort", [](PyKVStore& s, const std::string& reason) {
        s.set_finished();
        py::gil_scoped_release release;
        s.kv()->Abort(reason);
      });
}

}  // namespace python
}  // namespace kvtrain
