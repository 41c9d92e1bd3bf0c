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

}  // namespace graph
}  // namespace kvtrain
