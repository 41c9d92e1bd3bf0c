// Module: binding, parameters, scoring and checkpoints.
#include "trainer/module.h"

#include <cmath>
#include <fstream>

#include "base/file.h"

namespace kvtrain {

StatusOr<std::unique_ptr<Module>> Module::Create(const Symbol& symbol,
                                                 const ModuleOptions& options) {
  KV_RETURN_IF_ERROR(symbol.status());
  if (options.devices.empty()) {
    return Status::InvalidArgument("Module needs at least one device");
  }
  if (!options.work_load_list.empty() &&
      options.work_load_list.size() != options.devices.size()) {
    return Status::InvalidArgument(
        "work_load_list has " + std::to_string(options.work_load_list.size()) +
        " entries for " + std::to_string(options.devices.size()) + " devices");
  }
  for (double w : options.work_load_list) {
    if (!(w > 0)) return Status::InvalidArgument("work_load_list entries must be > 0");
  }
  for (const Device& d : options.devices) KV_RETURN_IF_ERROR(CheckDevice(d));
  if (options.peer_link != nullptr && options.devices.size() != 1) {
    return Status::InvalidArgument(
        "model parallelism across processes needs one device per process, got " +
        std::to_string(options.devices.size()));
  }
  std::unique_ptr<Module> m(new Module(symbol, options));
  Engine::Options eo;
  eo.env = options.env;
  KV_ASSIGN_OR_RETURN(m->engine_, Engine::Create(eo));
  return m;
}

Module::~Module() {
  execs_.clear();  // their ops finish before the engine goes
}

Status Module::Bind(const Shape& data_shape, const Shape& label_shape) {
  data_arg_ = label_arg_ = -1;
  const int64_t batch = data_shape.ndim() > 0 ? data_shape[0] : 0;
  const size_t n = options_.devices.size();
  if (batch < static_cast<int64_t>(n)) {
    return Status::InvalidArgument("batch of " + std::to_string(batch) +
                                   " cannot be split across " + std::to_string(n) +
                                   " devices");
  }
  std::vector<double> w = options_.work_load_list;
  if (w.empty()) w.assign(n, 1.0);
  double total = 0;
  for (double x : w) total += x;
  slices_.clear();
  int64_t begin = 0;
  for (size_t d = 0; d < n; ++d) {
    const int64_t size = d + 1 == n ? batch - begin
                                    : std::max<int64_t>(1, std::llround(batch * w[d] / total));
    if (size < 1 || begin + size > batch) {
      return Status::InvalidArgument("work_load_list leaves device " +
                                     options_.devices[d].ToString() + " no rows");
    }
    slices_.push_back({begin, size});
    begin += size;
  }
  execs_.clear();
  for (size_t d = 0; d < n; ++d) {
    std::vector<int64_t> ds = data_shape.dims(), ls = label_shape.dims();
    ds[0] = ls[0] = slices_[d].size;
    ExecutorOptions eo;
    eo.device = options_.devices[d];
    eo.engine = engine_.get();
    eo.env = options_.env;
    eo.peer_link = options_.peer_link;
    eo.group2rank = options_.group2rank;
    KV_ASSIGN_OR_RETURN(
        std::unique_ptr<Executor> exec,
        Executor::SimpleBind(symbol_, eo,
                             {{options_.data_name, Shape(ds)}, {options_.label_name, Shape(ls)}}));
    execs_.push_back(std::move(exec));
  }
  batch_size_ = batch;
  param_names_.clear();
  param_args_.clear();
  const std::vector<std::string>& names = execs_[0]->arg_names();
  for (int i = 0; i < static_cast<int>(names.size()); ++i) {
    if (names[i] == options_.data_name) {
      data_arg_ = i;
    } else if (names[i] == options_.label_name) {
      label_arg_ = i;
    } else {
      param_names_.push_back(names[i]);
      param_args_.push_back(i);
    }
  }
  output_index_ = -1;
  const std::vector<std::string>& outs = execs_[0]->output_names();
  for (size_t i = 0; i < outs.size(); ++i) {
    if (outs[i] == symbol_.ListOutputs()[0]) output_index_ = static_cast<int>(i);
  }
  // With model parallelism the inputs may live on other ranks.
  if (options_.peer_link == nullptr && (data_arg_ < 0 || label_arg_ < 0)) {
    return Status::InvalidArgument("the network reads no \"" +
                                   (data_arg_ < 0 ? options_.data_name : options_.label_name) +
                                   "\" input");
  }
  return Status::OK();
}

namespace {

// Copies the saved array `name` of `from` into `t`: it must be there, with
// t's shape (errors name the file, the array and both shapes).
Status LoadArray(const ModelArrays& from, const std::map<std::string, Tensor>& arrays,
                 const std::string& kind, const std::string& name, Tensor* t) {
  const std::string source = from.source.empty() ? "the loaded arrays" : from.source;
  auto it = arrays.find(name);
  if (it == arrays.end()) {
    return Status::DataLoss(source + ": has no " + kind + " " + name);
  }
  if (it->second.shape() != t->shape()) {
    return Status::InvalidArgument(source + ": " + kind + " " + name + " has shape " +
                                   it->second.shape().ToString() + ", the model's is " +
                                   t->shape().ToString());
  }
  return t->CopyFrom(it->second).Annotate("loading " + kind + " " + name);
}

}  // namespace

Status Module::InitParams(const InitializerOptions& init, const ModelArrays* from) {
  if (execs_.empty()) return Status::FailedPrecondition("InitParams before Bind");
  KV_ASSIGN_OR_RETURN(Initializer initializer, Initializer::Create(init));
  Executor* first = execs_[0].get();
  for (size_t p = 0; p < param_names_.size(); ++p) {
    Tensor t = first->arg_arrays()[param_args_[p]];
    const std::string& name = param_names_[p];
    if (from != nullptr) {
      KV_RETURN_IF_ERROR(LoadArray(*from, from->args, "parameter", name, &t));
    } else {
      KV_RETURN_IF_ERROR(initializer.Init(name, &t));
    }
  }
  for (size_t a = 0; a < first->aux_names().size(); ++a) {
    Tensor t = first->aux_arrays()[a];
    const std::string& name = first->aux_names()[a];
    if (from != nullptr) {
      KV_RETURN_IF_ERROR(LoadArray(*from, from->aux, "auxiliary state", name, &t));
    } else {
      KV_RETURN_IF_ERROR(initializer.Init(name, &t));
    }
  }
  // Every device starts from the same parameters (inputs differ in rows).
  for (size_t d = 1; d < execs_.size(); ++d) {
    for (int i : param_args_) {
      Tensor t = execs_[d]->arg_arrays()[i];
      KV_RETURN_IF_ERROR(t.CopyFrom(first->arg_arrays()[i]));
    }
    for (size_t i = 0; i < first->aux_arrays().size(); ++i) {
      Tensor t = execs_[d]->aux_arrays()[i];
      KV_RETURN_IF_ERROR(t.CopyFrom(first->aux_arrays()[i]));
    }
  }
  return Status::OK();
}

StatusOr<std::vector<Completion>> Module::PushFeed(const Batch& batch,
                                                   const RowWriter* rows) {
  // Rows counted by the data, or by the labels when a writer brings the data.
  const Tensor& counted = rows == nullptr ? batch.data : batch.label;
  const int64_t batch_rows =
      counted.defined() && counted.ndim() > 0 ? counted.dim(0) : 0;
  if (batch_rows != batch_size_) {
    return Status::InvalidArgument("batch of " + std::to_string(batch_rows) +
                                   " rows; the module was bound for " +
                                   std::to_string(batch_size_));
  }
  std::vector<Completion> done;
  for (size_t d = 0; d < execs_.size(); ++d) {
    const Slice& s = slices_[d];
    Tensor data;
    if (rows == nullptr) {
      KV_ASSIGN_OR_RETURN(data, batch.data.Slice(s.begin, s.begin + s.size));
    }
    KV_ASSIGN_OR_RETURN(Tensor label, batch.label.Slice(s.begin, s.begin + s.size));
    Executor* e = execs_[d].get();
    std::vector<Engine::Var*> writes;
    Tensor dst_data, dst_label;
    if (data_arg_ >= 0) {
      dst_data = e->arg_arrays()[data_arg_];
      writes.push_back(e->arg_var(data_arg_));
    }
    if (label_arg_ >= 0) {
      dst_label = e->arg_arrays()[label_arg_];
      writes.push_back(e->arg_var(label_arg_));
    }
    if (writes.empty()) continue;
    // An engine op: the previous step's backward may still read the inputs.
    RowWriter write = rows == nullptr ? RowWriter() : *rows;
    const int64_t begin = s.begin, end = s.begin + s.size;
    Engine::Fn copy = [dst_data, dst_label, data, label, write, begin, end,
                       this]() mutable -> Status {
      if (dst_data.defined() && write) {
        Status st;
        if (dst_data.device().is_cpu()) {
          st = write(begin, end, dst_data);
        } else {
          // Gathered on the host, then one copy to the device.
          Tensor host = Tensor::Empty(dst_data.shape(), DType::kFloat32);
          st = write(begin, end, host);
          if (st.ok()) st = dst_data.CopyFrom(host);
        }
        KV_RETURN_IF_ERROR(st.Annotate("input " + options_.data_name));
      } else if (dst_data.defined()) {
        KV_RETURN_IF_ERROR(dst_data.CopyFrom(data).Annotate("input " + options_.data_name));
      }
      if (dst_label.defined()) {
        KV_RETURN_IF_ERROR(dst_label.CopyFrom(label).Annotate("input " + options_.label_name));
      }
      return Status::OK();
    };
    const Device device = (dst_data.defined() ? dst_data : dst_label).device();
    done.push_back(engine_->Push(std::move(copy), {}, writes, device, Engine::Queue::kCompute,
                                 "feed"));
  }
  return done;
}

Status Module::Feed(const Batch& batch) {
  KV_ASSIGN_OR_RETURN(std::vector<Completion> feeds, PushFeed(batch));
  Status first;
  for (const Completion& c : feeds) {
    const Status s = c.Wait(kStepTimeout);
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

Status Module::UpdateMetrics(MetricSet* metrics, const Batch& batch) {
  if (output_index_ < 0) return Status::OK();  // computed on another rank
  for (size_t d = 0; d < execs_.size(); ++d) {
    const Slice& s = slices_[d];
    // Padding rows are the batch's last ones.
    const int64_t pad_from = batch_size_ - batch.pad;
    const int pad = static_cast<int>(
        std::max<int64_t>(0, s.begin + s.size - std::max(pad_from, s.begin)));
    KV_ASSIGN_OR_RETURN(Tensor label, batch.label.Slice(s.begin, s.begin + s.size));
    KV_RETURN_IF_ERROR(metrics->Update(label, execs_[d]->outputs()[output_index_], pad));
  }
  return Status::OK();
}

Status Module::ForEachForward(DataIter* data,
                              const std::function<Status(const Batch&)>& fn) {
  KV_RETURN_IF_ERROR(data->Reset());
  Batch batch;
  while (true) {
    KV_ASSIGN_OR_RETURN(bool more, data->Next(&batch));
    if (!more) return Status::OK();
    KV_RETURN_IF_ERROR(Feed(batch));
    for (auto& e : execs_) KV_RETURN_IF_ERROR(e->StartForward(false).status());
    for (auto& e : execs_) KV_RETURN_IF_ERROR(e->Wait());
    KV_RETURN_IF_ERROR(fn(batch));
  }
}

StatusOr<MetricValues> Module::Score(
    DataIter* data, const std::vector<std::string>& specs,
    const std::function<Status(int64_t batch, const MetricValues& running)>& each) {
  KV_ASSIGN_OR_RETURN(MetricSet metrics, MetricSet::Create(specs));
  int64_t n = 0;
  KV_RETURN_IF_ERROR(ForEachForward(data, [&](const Batch& batch) -> Status {
    KV_RETURN_IF_ERROR(UpdateMetrics(&metrics, batch));
    return each ? each(n++, metrics.Get()) : Status::OK();
  }));
  return metrics.Get();
}

StatusOr<Tensor> Module::Predict(DataIter* data) {
  if (execs_.empty()) return Status::FailedPrecondition("Predict before Bind");
  if (output_index_ < 0) {
    return Status::FailedPrecondition("Predict on a rank without the graph's output");
  }
  std::vector<float> rows;
  std::vector<int64_t> dims;
  int64_t count = 0;
  KV_RETURN_IF_ERROR(ForEachForward(data, [&](const Batch& batch) -> Status {
    const int64_t keep = batch_size_ - batch.pad;
    for (size_t d = 0; d < execs_.size(); ++d) {
      const Slice& s = slices_[d];
      const int64_t n = std::max<int64_t>(0, std::min(keep, s.begin + s.size) - s.begin);
      if (n == 0) continue;
      KV_ASSIGN_OR_RETURN(Tensor out,
                          execs_[d]->outputs()[output_index_].CopyTo(Device::CPU()));
      dims = out.shape().dims();
      const int64_t row = out.shape().Product(1, out.ndim());
      rows.insert(rows.end(), out.data<float>(), out.data<float>() + n * row);
      count += n;
    }
    return Status::OK();
  }));
  if (dims.empty()) return Status::InvalidArgument("Predict: the data yields no batch");
  dims[0] = count;
  Tensor result = Tensor::Empty(Shape(dims));
  std::copy(rows.begin(), rows.end(), result.data<float>());
  return result;
}

StatusOr<ModelArrays> Module::Arrays() const {
  if (execs_.empty()) return Status::FailedPrecondition("Arrays before Bind");
  // Fit keeps steps in flight while its callbacks run.
  KV_RETURN_IF_ERROR(engine_->WaitForAll(kStepTimeout));
  ModelArrays out;
  const Executor* first = execs_[0].get();
  for (size_t p = 0; p < param_names_.size(); ++p) {
    KV_ASSIGN_OR_RETURN(out.args[param_names_[p]],
                        first->arg_arrays()[param_args_[p]].CopyTo(Device::CPU()));
  }
  for (size_t a = 0; a < first->aux_names().size(); ++a) {
    KV_ASSIGN_OR_RETURN(out.aux[first->aux_names()[a]],
                        first->aux_arrays()[a].CopyTo(Device::CPU()));
  }
  return out;
}

Status Module::SaveCheckpoint(const std::string& prefix, int epoch, KVStore* kv) {
  const Optimizer* local_optimizer = local_optimizer_.get();
  if (!std::ifstream(SymbolPath(prefix))) {
    KV_ASSIGN_OR_RETURN(std::string text, symbol_.ToText());
    KV_RETURN_IF_ERROR(WriteFileAtomic(SymbolPath(prefix), text));
  }
  KV_ASSIGN_OR_RETURN(ModelArrays arrays, Arrays());
  // Where answers come rounded (KVStore::AnswersRounded) the workers hold
  // the servers' weights rounded: the checkpoint takes the exact values from
  // the servers (a plain pull is exact), so that a resumed job's servers
  // hold what they held. (With a local optimizer the servers hold summed
  // gradients and the workers' weights are exact.)
  if (local_optimizer == nullptr) {
    for (const std::string& name : param_names_) {
      Tensor& value = arrays.args[name];
      if (!kv->AnswersRounded(value.size())) continue;
      KV_RETURN_IF_ERROR(kv->Pull({name}, {value}).Annotate("checkpoint of " + name));
    }
  }
  // The states first, then the params recording their digest: resuming
  // from a params file checks that the states beside it are these.
  const std::string states_path = StatesPath(prefix, epoch);
  if (local_optimizer != nullptr) {
    KV_ASSIGN_OR_RETURN(std::string states, local_optimizer->SaveStates());
    KV_RETURN_IF_ERROR(WriteLocalStates(states_path, states));
  } else {
    KV_RETURN_IF_ERROR(kv->SaveOptimizerStates(states_path));
  }
  KV_ASSIGN_OR_RETURN(std::string states_bytes, ReadWholeFile(states_path));
  return SaveParams(ParamsPath(prefix, epoch), arrays, epoch, StatesDigest(states_bytes));
}

int Module::ParamIndex(const std::string& name) const {
  for (size_t i = 0; i < param_names_.size(); ++i) {
    if (param_names_[i] == name) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace kvtrain
