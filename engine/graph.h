// The node graph behind Symbol (private to engine/): nodes shared between
// symbols, entries naming one output of a node, and a topological order.
#ifndef KVTRAIN_ENGINE_GRAPH_H_
#define KVTRAIN_ENGINE_GRAPH_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "ops/operator.h"

namespace kvtrain {
namespace graph {

struct Node;

// One output of a node.
struct NodeEntry {
  std::shared_ptr<Node> node;
  int index = 0;
};

// Immutable once built (symbols share nodes freely).
struct Node {
  std::string name;
  // The operator type; empty for a variable.
  std::string op_type;
  OpAttrs attrs;
  // Device group for group2ctx; "" is the default device.
  std::string ctx_group;
  // The op's inputs in ListArguments() order.
  std::vector<NodeEntry> inputs;
  // An instance made when the node was built: it checked the attributes and
  // answers the graph-facing questions (arguments, outputs, shapes). The
  // executor makes its own instances to run.
  std::shared_ptr<const Operator> op;

  bool is_variable() const { return op_type.empty(); }
  // Outputs the graph sees (1 for a variable).
  int num_visible_outputs() const {
    return is_variable() ? 1 : op->NumVisibleOutputs();
  }
  // "data" for a variable, "fc1_output" for an op output.
  std::string OutputName(int index) const;
};

// The nodes reachable from `heads`, each after its inputs (inputs visited in
// order, so arguments come out as data, fc1_weight, fc1_bias, ...). Two
// different nodes with the same name are an error.
StatusOr<std::vector<const Node*>> TopoSort(const std::vector<NodeEntry>& heads);

// Every node's output shapes along `order` (a TopoSort), from the variables'
// shapes in `known` (missing ones are inferred from their readers where the
// ops can, else stay empty). The ops' auxiliary states' shapes are appended
// to `aux` when it is not null.
StatusOr<std::map<const Node*, std::vector<Shape>>> InferNodeShapes(
    const std::vector<const Node*>& order, const std::map<std::string, Shape>& known,
    std::vector<Shape>* aux);

}  // namespace graph
}  // namespace kvtrain

#endif  // KVTRAIN_ENGINE_GRAPH_H_
