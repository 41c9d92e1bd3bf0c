// Symbol composition, listing, shape inference and the text format.
#include "engine/symbol.h"

#include <google/protobuf/text_format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "proto/graph.pb.h"

namespace kvtrain {

using graph::Node;
using graph::NodeEntry;

Symbol Symbol::Error(Status status) {
  Symbol s;
  s.status_ = std::move(status);
  return s;
}

Symbol Symbol::Variable(const std::string& name, const std::string& group,
                        const OpAttrs& attrs) {
  if (name.empty()) return Error(Status::InvalidArgument("a variable needs a name"));
  for (const auto& [k, v] : attrs) {
    if (k != "__lr_mult__" && k != "__wd_mult__") {
      return Error(Status::InvalidArgument("variable \"" + name + "\": attribute \"" + k +
                                           "\" is not one a variable takes (__lr_mult__, "
                                           "__wd_mult__)"));
    }
    char* end = nullptr;
    const double m = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !(m >= 0) || !std::isfinite(m)) {
      return Error(Status::InvalidArgument("variable \"" + name + "\": " + k + " \"" + v +
                                           "\" is not a number >= 0"));
    }
  }
  auto node = std::make_shared<Node>();
  node->name = name;
  node->ctx_group = group;
  node->attrs = attrs;
  Symbol s;
  s.heads_.push_back({node, 0});
  return s;
}

Symbol Symbol::Op(const std::string& type, const std::string& name,
                  const std::vector<Symbol>& inputs, const OpAttrs& attrs,
                  const std::string& group) {
  const std::string desc = name + " (" + type + ")";
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].ok()) return Error(inputs[i].status());
    if (inputs[i].heads_.size() != 1) {
      return Error(Status::InvalidArgument(
          "input " + std::to_string(i) + " of " + desc + " has " +
          std::to_string(inputs[i].heads_.size()) +
          " outputs; an op input needs exactly one (pick one with [i])"));
    }
  }
  StatusOr<std::unique_ptr<Operator>> op = CreateOperator(type, name, attrs);
  if (!op.ok()) return Error(op.status());
  const std::vector<std::string> args = (*op)->ListArguments();
  if (inputs.size() > args.size()) {
    std::string list;
    for (const std::string& a : args) list += (list.empty() ? "" : ", ") + a;
    return Error(Status::InvalidArgument(
        desc + " takes " + std::to_string(args.size()) + " inputs (" + list +
        "), got " + std::to_string(inputs.size())));
  }
  auto node = std::make_shared<Node>();
  node->name = name;
  node->op_type = type;
  node->attrs = attrs;
  node->ctx_group = group;
  std::vector<std::string> names;
  for (size_t i = 0; i < args.size(); ++i) {
    NodeEntry e = i < inputs.size()
                      ? inputs[i].heads_[0]
                      : Variable(name + "_" + args[i], group).heads_[0];
    names.push_back(e.node->OutputName(e.index));
    node->inputs.push_back(std::move(e));
  }
  (*op)->set_input_names(std::move(names));
  node->op = std::move(op).value();
  Symbol s;
  for (int k = 0; k < node->num_visible_outputs(); ++k) {
    s.heads_.push_back({node, k});
  }
  return s;
}

Symbol Symbol::Group(const std::vector<Symbol>& symbols) {
  Symbol s;
  for (const Symbol& part : symbols) {
    if (!part.ok()) return Error(part.status());
    s.heads_.insert(s.heads_.end(), part.heads_.begin(), part.heads_.end());
  }
  return s;
}

Symbol Symbol::operator[](int index) const {
  if (!ok()) return *this;
  if (index < 0 || index >= static_cast<int>(heads_.size())) {
    return Error(Status::InvalidArgument(
        "output index " + std::to_string(index) + " out of range: the symbol has " +
        std::to_string(heads_.size()) + " outputs"));
  }
  Symbol s;
  s.heads_.push_back(heads_[index]);
  return s;
}

std::vector<std::string> Symbol::ListArguments() const {
  std::vector<std::string> names;
  if (!ok()) return names;
  StatusOr<std::vector<const Node*>> order = graph::TopoSort(heads_);
  if (!order.ok()) return names;
  for (const Node* n : *order) {
    if (n->is_variable()) names.push_back(n->name);
  }
  return names;
}

std::vector<std::string> Symbol::ListOutputs() const {
  std::vector<std::string> names;
  for (const NodeEntry& e : heads_) names.push_back(e.node->OutputName(e.index));
  return names;
}

std::vector<std::string> Symbol::ListAuxiliaryStates() const {
  std::vector<std::string> names;
  if (!ok()) return names;
  StatusOr<std::vector<const Node*>> order = graph::TopoSort(heads_);
  if (!order.ok()) return names;
  for (const Node* n : *order) {
    if (n->is_variable()) continue;
    for (const std::string& a : n->op->ListAuxiliaryStates()) {
      names.push_back(n->name + "_" + a);
    }
  }
  return names;
}

StatusOr<Symbol::Shapes> Symbol::InferShape(
    const std::map<std::string, Shape>& known) const {
  KV_RETURN_IF_ERROR(status_);
  KV_ASSIGN_OR_RETURN(std::vector<const Node*> order, graph::TopoSort(heads_));
  std::set<std::string> arguments;
  for (const Node* n : order) {
    if (n->is_variable()) arguments.insert(n->name);
  }
  for (const auto& [name, shape] : known) {
    if (arguments.count(name)) continue;
    std::string list;
    for (const std::string& a : ListArguments()) list += (list.empty() ? "" : ", ") + a;
    return Status::InvalidArgument("InferShape: \"" + name +
                                   "\" is not an argument of the graph; "
                                   "arguments: " + list);
  }
  Shapes result;
  KV_ASSIGN_OR_RETURN(auto shapes, graph::InferNodeShapes(order, known, &result.aux));
  for (const Node* n : order) {
    if (!n->is_variable()) continue;
    const Shape& s = shapes[n][0];
    if (s.ndim() == 0) {
      return Status::InvalidArgument(
          "InferShape: cannot infer the shape of argument \"" + n->name +
          "\"; give it with the input shapes");
    }
    result.arguments.push_back(s);
  }
  for (const NodeEntry& e : heads_) {
    result.outputs.push_back(shapes[e.node.get()][e.index]);
  }
  return result;
}

StatusOr<std::string> Symbol::ToText() const {
  KV_RETURN_IF_ERROR(status_);
  KV_ASSIGN_OR_RETURN(std::vector<const Node*> order, graph::TopoSort(heads_));
  proto::GraphDef g;
  for (const Node* n : order) {
    proto::NodeDef* d = g.add_nodes();
    d->set_name(n->name);
    d->set_op(n->op_type);
    d->set_ctx_group(n->ctx_group);
    for (const auto& [k, v] : n->attrs) (*d->mutable_attrs())[k] = v;
    for (const NodeEntry& e : n->inputs) {
      proto::NodeOutput* o = d->add_inputs();
      o->set_node(e.node->name);
      o->set_index(e.index);
    }
  }
  for (const NodeEntry& e : heads_) {
    proto::NodeOutput* o = g.add_outputs();
    o->set_node(e.node->name);
    o->set_index(e.index);
  }
  std::string text;
  if (!google::protobuf::TextFormat::PrintToString(g, &text)) {
    return Status::Internal("cannot print the graph as text");
  }
  return text;
}

namespace {

// The entry `o` names among the nodes built so far.
StatusOr<Symbol> Lookup(const std::map<std::string, Symbol>& built,
                        const proto::NodeOutput& o, const std::string& user) {
  auto it = built.find(o.node());
  if (it == built.end()) {
    return Status::InvalidArgument("graph text: " + user +
                                   " reads unknown (or later) node \"" +
                                   o.node() + "\"");
  }
  Symbol s = it->second[o.index()];
  KV_RETURN_IF_ERROR(s.status().Annotate("graph text: " + user));
  return s;
}

}  // namespace

StatusOr<Symbol> Symbol::FromText(const std::string& text) {
  proto::GraphDef g;
  if (!google::protobuf::TextFormat::ParseFromString(text, &g)) {
    return Status::InvalidArgument(
        "graph text: not a valid kvtrain.proto.GraphDef in text format");
  }
  std::map<std::string, Symbol> built;
  for (const proto::NodeDef& d : g.nodes()) {
    if (built.count(d.name())) {
      return Status::InvalidArgument("graph text: node \"" + d.name() +
                                     "\" is defined twice");
    }
    Symbol s;
    if (d.op().empty()) {
      if (d.inputs_size() > 0) {
        return Status::InvalidArgument("graph text: variable \"" + d.name() + "\" has inputs");
      }
      s = Variable(d.name(), d.ctx_group(), OpAttrs(d.attrs().begin(), d.attrs().end()));
      KV_RETURN_IF_ERROR(s.status().Annotate("graph text"));
    } else {
      std::vector<Symbol> inputs;
      for (const proto::NodeOutput& o : d.inputs()) {
        KV_ASSIGN_OR_RETURN(Symbol in, Lookup(built, o, "node \"" + d.name() + "\""));
        inputs.push_back(std::move(in));
      }
      const OpAttrs attrs(d.attrs().begin(), d.attrs().end());
      s = Op(d.op(), d.name(), inputs, attrs, d.ctx_group());
      KV_RETURN_IF_ERROR(s.status());
      if (d.inputs_size() != static_cast<int>(s.heads_[0].node->inputs.size())) {
        return Status::InvalidArgument(
            "graph text: node \"" + d.name() + "\" lists " +
            std::to_string(d.inputs_size()) + " inputs but " + d.op() +
            " takes " + std::to_string(s.heads_[0].node->inputs.size()));
      }
    }
    built[d.name()] = s;
  }
  std::vector<Symbol> outputs;
  for (const proto::NodeOutput& o : g.outputs()) {
    KV_ASSIGN_OR_RETURN(Symbol out, Lookup(built, o, "an output"));
    outputs.push_back(std::move(out));
  }
  if (outputs.empty()) {
    return Status::InvalidArgument("graph text: no outputs");
  }
  return Group(outputs);
}

Status Symbol::Save(const std::string& path) const {
  KV_ASSIGN_OR_RETURN(std::string text, ToText());
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f || !(f << text) || !f.flush()) {
    return Status::Unavailable("cannot write " + path + ": " +
                               std::strerror(errno));
  }
  return Status::OK();
}

StatusOr<Symbol> Symbol::Load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    return Status::NotFound("cannot open " + path + ": " + std::strerror(errno));
  }
  std::stringstream ss;
  ss << f.rdbuf();
  StatusOr<Symbol> s = FromText(ss.str());
  if (!s.ok()) return s.status().Annotate(path);
  return s;
}

// ---- Builders.

namespace sym {

Symbol FullyConnected(const Symbol& data, const std::string& name,
                      int num_hidden, bool no_bias) {
  return Symbol::Op("FullyConnected", name, {data},
                    {{"num_hidden", std::to_string(num_hidden)},
                     {"no_bias", no_bias ? "true" : "false"}});
}

Symbol Activation(const Symbol& data, const std::string& name,
                  const std::string& act_type) {
  return Symbol::Op("Activation", name, {data}, {{"act_type", act_type}});
}

Symbol Convolution(const Symbol& data, const std::string& name,
                   int num_filter, int kernel, int stride, int pad) {
  return Symbol::Op("Convolution", name, {data},
                    {{"num_filter", std::to_string(num_filter)},
                     {"kernel", std::to_string(kernel)},
                     {"stride", std::to_string(stride)},
                     {"pad", std::to_string(pad)}});
}

Symbol Pooling(const Symbol& data, const std::string& name,
               const std::string& pool_type, int kernel, int stride) {
  return Symbol::Op("Pooling", name, {data},
                    {{"pool_type", pool_type},
                     {"kernel", std::to_string(kernel)},
                     {"stride", std::to_string(stride)}});
}

Symbol Flatten(const Symbol& data, const std::string& name) {
  return Symbol::Op("Flatten", name, {data});
}

Symbol SoftmaxOutput(const Symbol& data, const std::string& name) {
  return Symbol::Op("SoftmaxOutput", name,
                    {data, Symbol::Variable(name + "_label")});
}

}  // namespace sym
}  // namespace kvtrain
