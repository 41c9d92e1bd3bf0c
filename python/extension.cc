// The kvtrain extension module, kvtrain._kvtrain: bindings over the C++ API
// (no logic of its own). The pure-Python package python/kvtrain/ gives it
// MXNet's shape; users import kvtrain, not this.
#include <cstdlib>

#include <glog/logging.h>

#include "python/bind_common.h"
#include "python/bind_parts.h"
#include "tensor/device.h"

PYBIND11_MODULE(_kvtrain, m) {
  namespace py = pybind11;
  m.doc() = "kvtrain's C++ core (use the kvtrain package, not this module)";
  static bool logging = [] {
    // The C++ trainer's log lines (speedometer, epoch summaries, errors)
    // go to stderr as they do from the C++ programs.
    google::InitGoogleLogging("kvtrain");
    FLAGS_logtostderr = true;
    return true;
  }();
  (void)logging;
  kvtrain::python::RegisterErrors(m);
  kvtrain::python::BindKVStore(m);
  kvtrain::python::BindSymbol(m);
  kvtrain::python::BindIo(m);
  kvtrain::python::BindModule(m);
  m.def("num_gpus", [] { return kvtrain::NumGpus(); });
  m.def("python_abi", [] { return std::string(PY_VERSION); });
}
