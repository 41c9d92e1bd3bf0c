#include "python/bind_common.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

namespace kvtrain {
namespace python {

// ---- Errors.

void RegisterErrors(py::module_& m) {
  static PyObject* base = PyErr_NewExceptionWithDoc(
      "kvtrain.KVTrainError",
      "An error reported by kvtrain's C++ core (its message names the key, "
      "peer, file or shape).",
      PyExc_RuntimeError, nullptr);
  static PyObject* value = [] {
    PyObject* bases = PyTuple_Pack(2, base, PyExc_ValueError);
    PyObject* cls = PyErr_NewExceptionWithDoc(
        "kvtrain.KVTrainValueError",
        "A bad argument (KVTrainError and ValueError).", bases, nullptr);
    Py_DECREF(bases);
    return cls;
  }();
  m.attr("KVTrainError") = py::handle(base);
  m.attr("KVTrainValueError") = py::handle(value);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      PyObject* cls = e.status.code() == Status::Code::kInvalidArgument ? value : base;
      PyErr_SetString(cls, e.status.message().c_str());
    }
  });
}

// ---- Ctrl-C during blocking calls.

namespace {

// One blocking call in progress.
struct Active {
  std::function<void()> on_interrupt;
  std::atomic<bool> fired{false};
};

// While any call is active, SIGINT writes a byte to a pipe that a watchdog
// thread reads (a signal handler may do little else); the watchdog marks
// every active call and runs their on_interrupt outside the handler.
struct Watch {
  std::mutex mu;
  std::set<Active*> active;
  int depth = 0;
  struct sigaction previous;
  bool started = false;
  int pipe_read = -1;
};

Watch& GetWatch() {
  static Watch* w = new Watch;
  return *w;
}

std::atomic<int> g_pipe_write{-1};
thread_local Active* t_current = nullptr;

void OnSigint(int) {
  const int fd = g_pipe_write.load();
  if (fd < 0) return;
  const char c = 1;
  const ssize_t n = write(fd, &c, 1);
  (void)n;
}

void WatchLoop(int fd) {
  Watch& w = GetWatch();
  char c;
  while (true) {
    const ssize_t n = read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    std::vector<std::function<void()>> calls;
    {
      std::lock_guard<std::mutex> lock(w.mu);
      for (Active* a : w.active) {
        a->fired = true;
        if (a->on_interrupt) calls.push_back(a->on_interrupt);
      }
    }
    for (const auto& f : calls) f();
  }
}

void Enter(Active* a) {
  Watch& w = GetWatch();
  std::lock_guard<std::mutex> lock(w.mu);
  if (!w.started) {
    int fds[2];
    if (pipe(fds) != 0) return;  // no Ctrl-C handling; the call still runs
    w.pipe_read = fds[0];
    g_pipe_write = fds[1];
    std::thread(WatchLoop, fds[0]).detach();
    w.started = true;
  }
  w.active.insert(a);
  if (w.depth++ == 0) {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_handler = OnSigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, &w.previous);
  }
}

void Leave(Active* a) {
  Watch& w = GetWatch();
  std::lock_guard<std::mutex> lock(w.mu);
  w.active.erase(a);
  if (--w.depth == 0) sigaction(SIGINT, &w.previous, nullptr);
}

}  // namespace

void RunBlocking(const std::function<Status()>& fn,
                 const std::function<void()>& on_interrupt, bool watch) {
  if (!watch) {
    Status s;
    {
      py::gil_scoped_release release;
      s = fn();
    }
    Check(s);
    return;
  }
  Active a;
  a.on_interrupt = on_interrupt;
  Status s;
  {
    py::gil_scoped_release release;
    Enter(&a);
    Active* outer = t_current;
    t_current = &a;
    s = fn();
    t_current = outer;
    Leave(&a);
  }
  if (a.fired) {
    PyErr_SetNone(PyExc_KeyboardInterrupt);
    throw py::error_already_set();
  }
  Check(s);
}

bool Interrupted() { return t_current != nullptr && t_current->fired.load(); }

// ---- Arrays.

namespace {

Shape ShapeOf(const py::array& a) {
  std::vector<int64_t> dims;
  for (py::ssize_t i = 0; i < a.ndim(); ++i) dims.push_back(a.shape(i));
  return Shape(dims);
}

std::string DtypeName(const py::array& a) {
  return py::str(a.dtype()).cast<std::string>();
}

}  // namespace

Tensor ViewArray(const py::array& a, const std::string& what, bool writable) {
  if (!a.dtype().is(py::dtype::of<float>())) {
    throw py::type_error(what + ": expected a float32 array, got " + DtypeName(a) +
                         " (convert it with .astype(numpy.float32))");
  }
  if (!(a.flags() & py::array::c_style)) {
    throw py::value_error(what + ": expected a C-contiguous array (use "
                          "numpy.ascontiguousarray)");
  }
  if (writable && !a.writeable()) {
    throw py::value_error(what + ": the array is read-only and would be written");
  }
  return Tensor::Wrap(const_cast<void*>(a.data()), ShapeOf(a), DType::kFloat32,
                      Device::CPU(), nullptr);
}

Tensor ViewAnyArray(const py::array& a, const std::string& what) {
  DType dt;
  if (a.dtype().is(py::dtype::of<float>())) {
    dt = DType::kFloat32;
  } else if (a.dtype().is(py::dtype::of<double>())) {
    dt = DType::kFloat64;
  } else if (a.dtype().is(py::dtype::of<int32_t>())) {
    dt = DType::kInt32;
  } else if (a.dtype().is(py::dtype::of<int64_t>())) {
    dt = DType::kInt64;
  } else if (a.dtype().is(py::dtype::of<uint8_t>())) {
    dt = DType::kUInt8;
  } else {
    throw py::type_error(what + ": arrays of " + DtypeName(a) +
                         " are not supported (float32, float64, int32, int64 or uint8)");
  }
  if (!(a.flags() & py::array::c_style)) {
    throw py::value_error(what + ": expected a C-contiguous array (use "
                          "numpy.ascontiguousarray)");
  }
  return Tensor::Wrap(const_cast<void*>(a.data()), ShapeOf(a), dt, Device::CPU(), nullptr);
}

Shape ToShape(const py::handle& h, const std::string& what) {
  std::vector<int64_t> dims;
  try {
    for (const py::handle& d : h) dims.push_back(d.cast<int64_t>());
  } catch (const py::cast_error&) {
    throw py::type_error(what + ": expected a tuple of ints");
  }
  return Shape(dims);
}

py::array ToArray(const Tensor& t) {
  Tensor host = Check(t.CopyTo(Device::CPU()));
  std::vector<py::ssize_t> dims(host.shape().dims().begin(), host.shape().dims().end());
  py::array_t<float> out(dims);
  if (host.size() > 0) std::memcpy(out.mutable_data(), host.raw_data(), host.nbytes());
  return std::move(out);
}

}  // namespace python
}  // namespace kvtrain
