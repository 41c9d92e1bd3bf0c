// The parts of the kvtrain extension module, each defined in its own file,
// and what they hand each other.
#ifndef KVTRAIN_PYTHON_BIND_PARTS_H_
#define KVTRAIN_PYTHON_BIND_PARTS_H_

#include <functional>

#include "python/bind_common.h"

namespace kvtrain {

class DataIter;
class KVStore;

namespace python {

void BindKVStore(py::module_& m);  // bind_kvstore.cc
void BindSymbol(py::module_& m);   // bind_symbol.cc
void BindIo(py::module_& m);       // bind_io.cc
void BindModule(py::module_& m);   // bind_module.cc

// The C++ objects behind the Python ones (a TypeError for anything else).
KVStore* StoreOf(const py::object& store);
std::function<void()> AborterOf(const py::object& store);
DataIter* IterOf(const py::object& iter);

}  // namespace python
}  // namespace kvtrain

#endif  // KVTRAIN_PYTHON_BIND_PARTS_H_
