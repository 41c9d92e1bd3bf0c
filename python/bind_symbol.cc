// kvtrain._kvtrain.Symbol and the operator registry (kvtrain.sym generates
// one function per registered operator from describe_op).
#include <google/protobuf/text_format.h>

#include <map>
#include <string>
#include <vector>

#include "engine/symbol.h"
#include "ops/operator.h"
#include "proto/graph.pb.h"
#include "python/bind_common.h"
#include "python/bind_parts.h"

namespace kvtrain {
namespace python {
namespace {

Symbol Checked(Symbol s) {
  Check(s.status());
  return s;
}

py::tuple ShapeTuple(const Shape& s) {
  py::tuple t(s.ndim());
  for (int i = 0; i < s.ndim(); ++i) t[i] = s[i];
  return t;
}

py::list ShapeList(const std::vector<Shape>& shapes) {
  py::list out;
  for (const Shape& s : shapes) out.append(ShapeTuple(s));
  return out;
}

}  // namespace

void BindSymbol(py::module_& m) {
  py::class_<Symbol>(m, "Symbol")
      .def_static(
          "variable",
          [](const std::string& name, const std::map<std::string, std::string>& attrs) {
            return Checked(Symbol::Variable(name, "", OpAttrs(attrs.begin(), attrs.end())));
          },
          py::arg("name"), py::arg("attrs") = std::map<std::string, std::string>())
      .def_static("op",
                  [](const std::string& type, const std::string& name,
                     const std::vector<Symbol>& inputs,
                     const std::map<std::string, std::string>& attrs) {
                    OpAttrs a(attrs.begin(), attrs.end());
                    return Checked(Symbol::Op(type, name, inputs, a));
                  })
      .def_static("group",
                  [](const std::vector<Symbol>& symbols) {
                    return Checked(Symbol::Group(symbols));
                  })
      .def("output",
           [](const Symbol& s, int i) {
             const int n = static_cast<int>(s.ListOutputs().size());
             if (i < 0 || i >= n) {
               throw py::index_error("output " + std::to_string(i) + " of a symbol with " +
                                     std::to_string(n) + " outputs");
             }
             return Checked(s[i]);
           })
      .def("list_arguments", &Symbol::ListArguments)
      .def("list_outputs", &Symbol::ListOutputs)
      .def("list_auxiliary_states", &Symbol::ListAuxiliaryStates)
      .def("infer_shape",
           [](const Symbol& s, const py::dict& known) {
             std::map<std::string, Shape> k;
             for (const auto& [name, shape] : known) {
               const std::string n = py::str(name);
               k[n] = ToShape(shape, "shape of " + n);
             }
             Symbol::Shapes shapes = Check(s.InferShape(k));
             return py::make_tuple(ShapeList(shapes.arguments), ShapeList(shapes.outputs),
                                   ShapeList(shapes.aux));
           })
      .def("tojson", [](const Symbol& s) { return Check(s.ToText()); })
      // The graph in topological order, for other formats (MXNet's JSON):
      // {"nodes": [(name, op ("" for a variable), {attr: value},
      // [(input node, output index)])], "outputs": [(node, index)]}.
      .def("graph",
           [](const Symbol& s) {
             proto::GraphDef g;
             if (!google::protobuf::TextFormat::ParseFromString(Check(s.ToText()), &g)) {
               throw py::value_error("graph: the symbol's own text does not parse");
             }
             auto entry = [](const proto::NodeOutput& o) {
               return py::make_tuple(o.node(), o.index());
             };
             py::list nodes;
             for (const proto::NodeDef& d : g.nodes()) {
               py::dict attrs;
               for (const auto& [k, v] : d.attrs()) attrs[py::str(k)] = v;
               py::list inputs;
               for (const proto::NodeOutput& o : d.inputs()) inputs.append(entry(o));
               nodes.append(py::make_tuple(d.name(), d.op(), attrs, inputs));
             }
             py::list outputs;
             for (const proto::NodeOutput& o : g.outputs()) outputs.append(entry(o));
             py::dict out;
             out["nodes"] = nodes;
             out["outputs"] = outputs;
             return out;
           })
      .def_static("fromjson",
                  [](const std::string& text) { return Check(Symbol::FromText(text)); })
      .def("save", [](const Symbol& s, const std::string& path) { Check(s.Save(path)); })
      .def_static("load", [](const std::string& path) { return Check(Symbol::Load(path)); });

  m.def("registered_ops", [] {
    std::vector<std::string> out;
    for (const std::string& n : RegisteredOperators()) {
      if (n.rfind("_", 0) != 0) out.push_back(n);  // internal ops stay hidden
    }
    return out;
  });
  m.def("describe_op", [](const std::string& type) {
    OpDoc d = Check(DescribeOperator(type));
    py::list attrs;
    for (const AttrDoc& a : d.attrs) {
      attrs.append(py::make_tuple(a.key, a.kind, a.fallback, a.required));
    }
    py::dict out;
    out["arguments"] = d.arguments;
    out["outputs"] = d.outputs;
    out["aux"] = d.aux;
    out["attrs"] = attrs;
    return out;
  });
}

}  // namespace python
}  // namespace kvtrain
