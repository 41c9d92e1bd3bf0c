// What every part of the kvtrain extension module shares: C++ Status to
// Python exceptions, numpy arrays to and from Tensors, and blocking calls
// that release the GIL and turn Ctrl-C into KeyboardInterrupt.
#ifndef KVTRAIN_PYTHON_BIND_COMMON_H_
#define KVTRAIN_PYTHON_BIND_COMMON_H_

#include <functional>
#include <string>
#include <utility>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "base/status.h"
#include "tensor/tensor.h"

namespace kvtrain {
namespace python {

namespace py = pybind11;

// Thrown by Check; translated to kvtrain.KVTrainError, or to
// kvtrain.KVTrainValueError (a ValueError too) for InvalidArgument.
struct StatusError {
  Status status;
};

inline void Check(const Status& s) {
  if (!s.ok()) throw StatusError{s};
}
template <typename T>
T Check(StatusOr<T> v) {
  if (!v.ok()) throw StatusError{v.status()};
  return std::move(*v);
}

// Registers the exception classes and their translator on `m`.
void RegisterErrors(py::module_& m);

// Runs `fn` with the GIL released. While it runs, Ctrl-C (SIGINT) calls
// `on_interrupt` from a watchdog thread (it should make `fn` return soon,
// e.g. KVStore::Abort) and, once `fn` has returned, raises
// KeyboardInterrupt instead of `fn`'s result. Otherwise `fn`'s error is
// raised as Check does. Nested and concurrent calls are fine.
// `watch` false: no Ctrl-C handling, for calls that cannot wait on anything
// but this process's own work (a Ctrl-C then raises in Python once the call
// returns, as it does for any C function); it saves two system calls.
void RunBlocking(const std::function<Status()>& fn,
                 const std::function<void()>& on_interrupt = nullptr, bool watch = true);
// Whether a Ctrl-C arrived during the innermost RunBlocking of this
// thread (for loops that poll, e.g. Fit's stop check).
bool Interrupted();

// A zero-copy CPU float32 view of `a`, which must be float32 and
// C-contiguous (and writable when `writable`): otherwise TypeError or
// ValueError naming `what`. The caller keeps `a` alive while the view is used.
Tensor ViewArray(const py::array& a, const std::string& what, bool writable);
// A view of `a` of any dtype kvtrain stores (float32, float64, int32,
// int64, uint8); C-contiguous.
Tensor ViewAnyArray(const py::array& a, const std::string& what);
// A new numpy array holding a copy of `t` (any device, float32).
py::array ToArray(const Tensor& t);
// A shape from a Python sequence of ints (TypeError naming `what` if not).
Shape ToShape(const py::handle& h, const std::string& what);

}  // namespace python
}  // namespace kvtrain

#endif  // KVTRAIN_PYTHON_BIND_COMMON_H_
