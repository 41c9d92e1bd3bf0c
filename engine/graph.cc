// Topological order of a node graph, with duplicate-name detection.
#include "engine/graph.h"

#include <map>
#include <set>

namespace kvtrain {
namespace graph {

std::string Node::OutputName(int index) const {
  if (is_variable()) return name;
  return name + "_" + op->ListOutputs()[index];
}

StatusOr<std::vector<const Node*>> TopoSort(
    const std::vector<NodeEntry>& heads) {
  std::vector<const Node*> order;
  std::set<const Node*> done;
  std::map<std::string, const Node*> by_name;
  // Iterative DFS: (node, next input to visit).
  std::vector<std::pair<const Node*, size_t>> stack;
  for (const NodeEntry& head : heads) {
    if (done.count(head.node.get())) continue;
    stack.emplace_back(head.node.get(), 0);
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      if (next < node->inputs.size()) {
        const Node* in = node->inputs[next++].node.get();
        if (!done.count(in)) stack.emplace_back(in, 0);
        continue;
      }
      if (done.insert(node).second) {
        auto [it, fresh] = by_name.emplace(node->name, node);
        if (!fresh && it->second != node) {
          return Status::InvalidArgument(
              "the graph has two different nodes named \"" + node->name +
              "\"; node names must be unique");
        }
        order.push_back(node);
      }
      stack.pop_back();
    }
  }
  return order;
}

StatusOr<std::map<const Node*, std::vector<Shape>>> InferNodeShapes(
    const std::vector<const Node*>& order, const std::map<std::string, Shape>& known,
    std::vector<Shape>* aux) {
  std::map<const Node*, std::vector<Shape>> shapes;
  for (const Node* n : order) {
    if (!n->is_variable()) continue;
    auto it = known.find(n->name);
    shapes[n] = {it == known.end() ? Shape() : it->second};
  }
  for (const Node* n : order) {
    if (n->is_variable()) continue;
    std::vector<Shape> in;
    for (const NodeEntry& e : n->inputs) in.push_back(shapes[e.node.get()][e.index]);
    std::vector<Shape> out(n->op->ListOutputs().size());
    std::vector<Shape> op_aux(n->op->ListAuxiliaryStates().size());
    KV_RETURN_IF_ERROR(n->op->InferShape(&in, &out, &op_aux));
    // Shapes inferred for the op's variable inputs (weights) stick.
    for (size_t i = 0; i < in.size(); ++i) {
      const NodeEntry& e = n->inputs[i];
      if (e.node->is_variable()) shapes[e.node.get()][0] = in[i];
    }
    shapes[n] = std::move(out);
    if (aux != nullptr) aux->insert(aux->end(), op_aux.begin(), op_aux.end());
  }
  return shapes;
}

}  // namespace graph
}  // namespace kvtrain
