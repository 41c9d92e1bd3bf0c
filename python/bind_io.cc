// kvtrain._kvtrain.DataIter: the C++ iterators over numpy arrays,
// MNIST-format directories and CSV files (kvtrain.io wraps them), and one
// that reads a Python iterator's batches for the C++ trainer.
#include <memory>
#include <string>

#include "engine/io/data_iter.h"
#include "python/bind_common.h"
#include "python/bind_parts.h"

namespace kvtrain {
namespace python {
namespace {

// A C++ iterator and the numpy arrays it reads (kept alive with it).
class PyIter {
 public:
  PyIter(std::unique_ptr<DataIter> it, py::object data, py::object label)
      : it_(std::move(it)), data_(std::move(data)), label_(std::move(label)) {}
  DataIter* it() const { return it_.get(); }

 private:
  std::unique_ptr<DataIter> it_;
  py::object data_, label_;
};

LastBatch ParseLastBatch(const std::string& s) {
  if (s == "pad") return LastBatch::kPad;
  if (s == "discard") return LastBatch::kDiscard;
  throw StatusError{Status::InvalidArgument("last_batch_handle=\"" + s +
                                            "\": expected pad or discard")};
}

IterOptions Options(int batch_size, bool shuffle, uint64_t seed, const std::string& last,
                    int num_parts, int part_index, bool prefetch) {
  IterOptions o;
  o.batch_size = batch_size;
  o.shuffle = shuffle;
  o.seed = seed;
  o.last_batch = ParseLastBatch(last);
  o.num_parts = num_parts;
  o.part_index = part_index;
  o.prefetch = prefetch;
  return o;
}

// Batches from Python: `source` has batch_size, data_shape (a tuple),
// reset() and next_arrays(), which returns (data, label, pad) as float32
// numpy arrays or None at the end of the epoch (kvtrain.io.PythonIter).
// The number of batches is known only at an epoch's end. Next runs on the
// trainer's thread and takes the GIL for each batch.
class PythonSourceIter : public DataIter {
 public:
  explicit PythonSourceIter(py::object source)
      : source_(std::move(source)),
        batch_size_(source_.attr("batch_size").cast<int>()),
        data_shape_(ToShape(source_.attr("data_shape"), "the Python iterator's data shape")) {}
  ~PythonSourceIter() override {
    py::gil_scoped_acquire gil;
    source_ = py::object();
  }

  StatusOr<bool> Next(Batch* batch) override {
    py::gil_scoped_acquire gil;
    try {
      py::object got = source_.attr("next_arrays")();
      if (got.is_none()) return false;
      auto t = got.cast<py::tuple>();
      Tensor data = ViewArray(t[0].cast<py::array>(), "the Python iterator's data", false);
      Tensor label = ViewArray(t[1].cast<py::array>(), "the Python iterator's label", false);
      if (data.shape() != data_shape_) {
        return Status::InvalidArgument("the Python iterator's batch " + std::to_string(served_) +
                                       " has data of shape " + data.shape().ToString() +
                                       ", its provide_data says " + data_shape_.ToString());
      }
      if (label.size() != batch_size_) {
        return Status::InvalidArgument("the Python iterator's batch " + std::to_string(served_) +
                                       " has " + std::to_string(label.size()) +
                                       " labels for a batch of " + std::to_string(batch_size_));
      }
      // Copies: the arrays are Python's, which may reuse them.
      KV_ASSIGN_OR_RETURN(batch->data, data.CopyTo(Device::CPU()));
      KV_ASSIGN_OR_RETURN(Tensor flat, label.Reshape(Shape({batch_size_})));
      KV_ASSIGN_OR_RETURN(batch->label, flat.CopyTo(Device::CPU()));
      batch->pad = t[2].cast<int>();
      ++served_;
      return true;
    } catch (py::error_already_set& e) {
      return Status::InvalidArgument("the Python data iterator failed: " + std::string(e.what()));
    } catch (const py::cast_error& e) {
      return Status::InvalidArgument("the Python data iterator gave a batch that is not "
                                     "(data, label, pad) arrays: " + std::string(e.what()));
    } catch (const StatusError& e) {
      return e.status;
    }
  }

  Status Reset() override {
    py::gil_scoped_acquire gil;
    try {
      source_.attr("reset")();
    } catch (py::error_already_set& e) {
      return Status::InvalidArgument("the Python data iterator's reset() failed: " +
                                     std::string(e.what()));
    }
    served_ = 0;
    return Status::OK();
  }
  // A Python iterator cannot seek: every epoch starts with reset().
  Status StartEpoch(int64_t) override { return Reset(); }
  int batch_size() const override { return batch_size_; }
  Shape data_shape() const override { return data_shape_; }
  int64_t num_batches() const override { return -1; }

 private:
  py::object source_;
  const int batch_size_;
  const Shape data_shape_;
  int64_t served_ = 0;
};

}  // namespace

DataIter* IterOf(const py::object& iter) {
  return iter.cast<std::shared_ptr<PyIter>>()->it();
}

void BindIo(py::module_& m) {
  py::class_<PyIter, std::shared_ptr<PyIter>>(m, "DataIter")
      .def_static(
          "from_arrays",
          [](py::array data, py::array label, int batch_size, bool shuffle, uint64_t seed,
             const std::string& last, int num_parts, int part_index, bool prefetch) {
            IterOptions o = Options(batch_size, shuffle, seed, last, num_parts, part_index,
                                    prefetch);
            o.scale = 1.0f;
            Tensor d = ViewAnyArray(data, "data");
            Tensor l = ViewAnyArray(label, "label");
            std::unique_ptr<DataIter> it = Check(NewArrayIter(d, l, o));
            return std::make_shared<PyIter>(std::move(it), data, label);
          },
          py::arg("data"), py::arg("label"), py::arg("batch_size"), py::arg("shuffle"),
          py::arg("seed"), py::arg("last_batch_handle"), py::arg("num_parts"),
          py::arg("part_index"), py::arg("prefetch"))
      .def_static(
          "mnist",
          [](const std::string& dir, bool train, int batch_size, bool shuffle, uint64_t seed,
             bool flat, const std::string& last, int num_parts, int part_index,
             int64_t num_examples, bool prefetch) {
            IterOptions o = Options(batch_size, shuffle, seed, last, num_parts, part_index,
                                    prefetch);
            o.flat = flat;
            o.num_examples = num_examples;
            std::unique_ptr<DataIter> it;
            RunBlocking([&]() -> Status {
              KV_ASSIGN_OR_RETURN(it, NewMnistIter(dir, train, o));
              return Status::OK();
            });
            return std::make_shared<PyIter>(std::move(it), py::none(), py::none());
          },
          py::arg("data_dir"), py::arg("train"), py::arg("batch_size"), py::arg("shuffle"),
          py::arg("seed"), py::arg("flat"), py::arg("last_batch_handle"),
          py::arg("num_parts"), py::arg("part_index"), py::arg("num_examples"),
          py::arg("prefetch"))
      .def_static(
          "csv",
          [](const std::string& data_csv, const py::object& data_shape,
             const std::string& label_csv, int batch_size, bool shuffle, uint64_t seed,
             const std::string& last, int num_parts, int part_index, bool prefetch) {
            IterOptions o = Options(batch_size, shuffle, seed, last, num_parts, part_index,
                                    prefetch);
            const Shape shape = ToShape(data_shape, "CSVIter data_shape");
            std::unique_ptr<DataIter> it;
            RunBlocking([&]() -> Status {
              KV_ASSIGN_OR_RETURN(it, NewCsvIter(data_csv, shape, label_csv, o));
              return Status::OK();
            });
            return std::make_shared<PyIter>(std::move(it), py::none(), py::none());
          },
          py::arg("data_csv"), py::arg("data_shape"), py::arg("label_csv"),
          py::arg("batch_size"), py::arg("shuffle"), py::arg("seed"),
          py::arg("last_batch_handle"), py::arg("num_parts"), py::arg("part_index"),
          py::arg("prefetch"))
      .def_static(
          "from_python",
          [](py::object source) {
            std::unique_ptr<DataIter> it = std::make_unique<PythonSourceIter>(source);
            return std::make_shared<PyIter>(std::move(it), source, py::none());
          },
          py::arg("source"))
      .def_property_readonly("batch_size", [](const PyIter& i) { return i.it()->batch_size(); })
      .def_property_readonly("data_shape",
                             [](const PyIter& i) {
                               const Shape s = i.it()->data_shape();
                               py::tuple t(s.ndim());
                               for (int d = 0; d < s.ndim(); ++d) t[d] = s[d];
                               return t;
                             })
      .def_property_readonly("num_batches",
                             [](const PyIter& i) { return i.it()->num_batches(); })
      .def_property_readonly("max_part_batches",
                             [](const PyIter& i) { return i.it()->max_part_batches(); })
      .def("reset", [](PyIter& i) { RunBlocking([&] { return i.it()->Reset(); }); })
      .def("start_epoch",
           [](PyIter& i, int64_t epoch) {
             RunBlocking([&] { return i.it()->StartEpoch(epoch); });
           })
      // (data, label, pad) copies of the next batch, or None at the end.
      .def("next", [](PyIter& i) -> py::object {
        Batch b;
        bool more = false;
        RunBlocking([&]() -> Status {
          KV_ASSIGN_OR_RETURN(more, i.it()->Next(&b));
          return Status::OK();
        });
        if (!more) return py::none();
        return py::make_tuple(ToArray(b.data), ToArray(b.label), b.pad);
      });
}

}  // namespace python
}  // namespace kvtrain
