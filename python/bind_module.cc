// kvtrain._kvtrain.Module (kvtrain.mod.Module wraps it) and the checkpoint
// files, the same the C++ trainer reads and writes.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/symbol.h"
#include "kvstore/kvstore.h"
#include "ops/initializer.h"
#include "python/bind_common.h"
#include "python/bind_parts.h"
#include "trainer/checkpoint.h"
#include "trainer/metrics.h"
#include "trainer/module.h"

namespace kvtrain {
namespace python {
namespace {

py::dict ToDict(const std::map<std::string, Tensor>& arrays) {
  py::dict out;
  for (const auto& [name, t] : arrays) out[py::str(name)] = ToArray(t);
  return out;
}

std::map<std::string, Tensor> FromDict(const py::dict& d, const char* what) {
  std::map<std::string, Tensor> out;
  for (const auto& [k, v] : d) {
    const std::string name = py::str(k);
    if (!py::isinstance<py::array>(v)) {
      throw py::type_error(std::string(what) + " " + name + ": expected a numpy array");
    }
    out[name] = ViewArray(v.cast<py::array>(), std::string(what) + " " + name, false).Clone();
  }
  return out;
}

py::list ToList(const MetricValues& values) {
  py::list out;
  for (const auto& [name, v] : values) out.append(py::make_tuple(name, v));
  return out;
}

class PyModule {
 public:
  PyModule(std::unique_ptr<Module> m) : module_(std::move(m)) {}
  Module* module() const { return module_.get(); }
  // A checkpoint loaded to start from (Module.load): its arrays, and the
  // optimizer states file saved with it ("" when not resuming states).
  std::optional<ModelArrays> preload;
  std::string resume_states;
  // Where the checkpoint's residuals files are (gradient compression).
  std::string resume_prefix;
  int resume_epoch = 0;

 private:
  std::unique_ptr<Module> module_;
};

std::shared_ptr<PyModule> Create(const Symbol& symbol, const py::list& devices,
                                 const std::vector<double>& work_load_list,
                                 const std::string& data_name, const std::string& label_name) {
  ModuleOptions o;
  o.data_name = data_name;
  o.label_name = label_name;
  o.devices.clear();
  for (const py::handle& d : devices) {
    const std::string type = d.attr("device_type").cast<std::string>();
    const int id = d.attr("device_id").cast<int>();
    const Device dev = type == "gpu" ? Device::GPU(id) : Device::CPU(id);
    Check(CheckDevice(dev));
    o.devices.push_back(dev);
  }
  o.work_load_list = work_load_list;
  return std::make_shared<PyModule>(Check(Module::Create(symbol, o)));
}

void Fit(PyModule& m, const py::object& train, const py::object& eval, const py::object& kv,
         const py::dict& opts, const py::object& batch_end, const py::object& epoch_end,
         const py::object& eval_batch_end, const py::object& eval_end) {
  FitOptions o;
  o.begin_epoch = opts["begin_epoch"].cast<int>();
  o.num_epochs = opts["num_epoch"].cast<int>();
  o.epoch_size = opts["epoch_size"].cast<int64_t>();
  if (!o.optimizer.ParseFromString(opts["optimizer"].cast<std::string>())) {
    throw py::value_error("fit: not a serialized OptimizerSpec");
  }
  o.metrics = opts["eval_metric"].cast<std::vector<std::string>>();
  o.disp_batches = opts["disp_batches"].cast<int>();
  o.model_prefix = opts["model_prefix"].cast<std::string>();
  o.checkpoint_period = opts["checkpoint_period"].cast<int>();
  o.metrics_file = opts["metrics_file"].cast<std::string>();
  if (!opts["update_on_kvstore"].is_none()) {
    o.update_on_kvstore = opts["update_on_kvstore"].cast<bool>();
  }
  if (m.preload && !m.resume_states.empty() && o.begin_epoch > 0) {
    o.resume_states = m.resume_states;
    o.resume_params = &*m.preload;
  }
  // A Python callback's exception ends Fit and is raised as it was.
  std::optional<py::error_already_set> raised;
  auto call = [&](const py::object& fn, auto... args) -> Status {
    py::gil_scoped_acquire gil;
    try {
      fn(args...);
    } catch (py::error_already_set& e) {
      raised.emplace(std::move(e));
      return Status::Aborted("a Python callback raised an exception");
    }
    return Status::OK();
  };
  if (!batch_end.is_none()) {
    o.batch_end = [&](int epoch, int64_t n, const MetricValues& values) -> Status {
      py::gil_scoped_acquire gil;
      return call(batch_end, epoch, n, ToList(values));
    };
  }
  if (!epoch_end.is_none()) {
    o.epoch_end = [&](int epoch) -> Status { return call(epoch_end, epoch); };
  }
  if (!eval_batch_end.is_none()) {
    o.eval_batch_end = [&](int epoch, int64_t n, const MetricValues& values) -> Status {
      py::gil_scoped_acquire gil;
      return call(eval_batch_end, epoch, n, ToList(values));
    };
  }
  if (!eval_end.is_none()) {
    o.eval_end = [&](int epoch, const MetricValues& values) -> Status {
      py::gil_scoped_acquire gil;
      return call(eval_end, epoch, ToList(values));
    };
  }
  o.stop = [] { return Interrupted(); };
  KVStore* store = StoreOf(kv);
  if (!o.resume_states.empty()) {
    o.resume_residuals = ResidualsPath(m.resume_prefix, m.resume_epoch, store->rank());
  }
  DataIter* t = IterOf(train);
  DataIter* e = eval.is_none() ? nullptr : IterOf(eval);
  try {
    RunBlocking([&] { return m.module()->Fit(t, e, store, o); }, AborterOf(kv));
  } catch (const StatusError&) {
    if (raised) {
      raised->restore();
      raised.reset();
      throw py::error_already_set();
    }
    throw;
  }
}

}  // namespace

void BindModule(py::module_& m) {
  // One array as initializer `text` (seeded) fills the parameter `name`:
  // what Module.init_params would give it (mx.init.Mixed picks per name).
  m.def(
      "init_array",
      [](const std::string& text, uint64_t seed, const std::string& name,
         const py::object& shape) {
        InitializerOptions io = Check(ParseInitializer(text));
        io.seed = seed;
        Initializer init = Check(Initializer::Create(io));
        Tensor t = Tensor::Zeros(ToShape(shape, "init_array shape"));
        Check(init.Init(name, &t));
        return ToArray(t);
      },
      py::arg("text"), py::arg("seed"), py::arg("name"), py::arg("shape"));
  py::class_<PyModule, std::shared_ptr<PyModule>>(m, "Module")
      .def_static("create", &Create, py::arg("symbol"), py::arg("devices"),
                  py::arg("work_load_list"), py::arg("data_name"), py::arg("label_name"))
      .def("bind",
           [](PyModule& m, const py::object& data_shape, const py::object& label_shape) {
             Check(m.module()->Bind(ToShape(data_shape, "data shape"),
                                    ToShape(label_shape, "label shape")));
           })
      .def("init_params",
           [](PyModule& m, const std::string& init, uint64_t seed, const py::object& args,
              const py::object& aux, bool from_preload) {
             InitializerOptions io = Check(ParseInitializer(init));
             io.seed = seed;
             if (from_preload && m.preload) {
               RunBlocking([&] { return m.module()->InitParams(io, &*m.preload); });
               return;
             }
             if (args.is_none()) {
               RunBlocking([&] { return m.module()->InitParams(io); });
               return;
             }
             ModelArrays from;
             from.args = FromDict(args.cast<py::dict>(), "arg_params");
             if (!aux.is_none()) from.aux = FromDict(aux.cast<py::dict>(), "aux_params");
             from.source = "arg_params";
             RunBlocking([&] { return m.module()->InitParams(io, &from); });
           })
      .def("preload_checkpoint",
           [](PyModule& m, const std::string& prefix, int epoch, bool states) {
             m.preload = Check(LoadCheckpointParams(prefix, epoch));
             m.resume_states = states ? StatesPath(prefix, epoch) : "";
             m.resume_prefix = prefix;
             m.resume_epoch = epoch;
           })
      .def("fit", &Fit, py::arg("train"), py::arg("eval"), py::arg("kv"), py::arg("opts"),
           py::arg("batch_end"), py::arg("epoch_end"), py::arg("eval_batch_end") = py::none(),
           py::arg("eval_end") = py::none())
      .def("score",
           [](PyModule& m, const py::object& data, const std::vector<std::string>& metrics) {
             MetricValues v;
             DataIter* it = IterOf(data);
             RunBlocking([&]() -> Status {
               KV_ASSIGN_OR_RETURN(v, m.module()->Score(it, metrics));
               return Status::OK();
             });
             return ToList(v);
           })
      .def("predict",
           [](PyModule& m, const py::object& data) {
             Tensor out;
             DataIter* it = IterOf(data);
             RunBlocking([&]() -> Status {
               KV_ASSIGN_OR_RETURN(out, m.module()->Predict(it));
               return Status::OK();
             });
             return ToArray(out);
           })
      .def("prepare_steps",
           [](PyModule& m, const py::object& kv, const std::string& optimizer,
              const py::object& update_on_kvstore) {
             FitOptions o;
             if (!o.optimizer.ParseFromString(optimizer)) {
               throw py::value_error("init_optimizer: not a serialized OptimizerSpec");
             }
             if (!update_on_kvstore.is_none()) o.update_on_kvstore = update_on_kvstore.cast<bool>();
             KVStore* store = StoreOf(kv);
             RunBlocking([&] { return m.module()->PrepareSteps(store, o); }, AborterOf(kv));
           })
      .def("forward",
           [](PyModule& m, const py::array& data, const py::array& label, bool is_train) {
             Batch b;
             b.data = ViewArray(data, "data", false).Clone();
             b.label = ViewArray(label, "label", false).Clone();
             RunBlocking([&] { return m.module()->Forward(b, is_train); });
           })
      .def("backward", [](PyModule& m) { RunBlocking([&] { return m.module()->Backward(); }); })
      .def("update", [](PyModule& m) { RunBlocking([&] { return m.module()->Update(); }); })
      .def("get_outputs", [](PyModule& m) { return ToArray(Check(m.module()->Outputs())); })
      .def("get_params",
           [](PyModule& m) {
             ModelArrays a = Check(m.module()->Arrays());
             return py::make_tuple(ToDict(a.args), ToDict(a.aux));
           })
      .def("save_checkpoint",
           [](PyModule& m, const std::string& prefix, int epoch, const py::object& kv) {
             KVStore* store = kv.is_none() ? nullptr : StoreOf(kv);
             if (store != nullptr) {
               RunBlocking([&] { return m.module()->SaveCheckpoint(prefix, epoch, store); });
               return;
             }
             // Without a store (before fit): the symbol and parameters only.
             ModelArrays a = Check(m.module()->Arrays());
             Check(m.module()->symbol().Save(SymbolPath(prefix)));
             Check(SaveParams(ParamsPath(prefix, epoch), a, epoch));
           })
      .def_property_readonly("param_names", [](const PyModule& m) {
        return m.module()->param_names();
      });

  m.def("load_params", [](const std::string& path) {
    int epoch = 0;
    ModelArrays a = Check(LoadParams(path, &epoch));
    return py::make_tuple(ToDict(a.args), ToDict(a.aux), epoch);
  });
  m.def("save_params", [](const std::string& path, const py::dict& args, const py::dict& aux,
                          int epoch) {
    ModelArrays a;
    a.args = FromDict(args, "arg_params");
    a.aux = FromDict(aux, "aux_params");
    Check(SaveParams(path, a, epoch));
  });
  // One of the trainer's metrics, for MXNet's mx.metric outside fit.
  py::class_<Metric, std::shared_ptr<Metric>>(m, "Metric")
      .def(py::init([](const std::string& spec) {
             return std::shared_ptr<Metric>(Check(CreateMetric(spec)));
           }),
           py::arg("spec"))
      .def("update",
           [](Metric& metric, const py::array& labels, const py::array& probs, int pad) {
             const Tensor l = ViewArray(labels, "metric labels", false);
             const Tensor p = ViewArray(probs, "metric predictions", false);
             Check(metric.Update(l, p, pad));
           },
           py::arg("labels"), py::arg("probs"), py::arg("pad") = 0)
      .def("reset", &Metric::Reset)
      .def("get", &Metric::Get)
      .def_property_readonly("name", &Metric::name)
      .def_property_readonly("count", &Metric::count);
  m.def("symbol_path", &SymbolPath);
  m.def("params_path", &ParamsPath);
  m.def("states_path", &StatesPath);
}

}  // namespace python
}  // namespace kvtrain
