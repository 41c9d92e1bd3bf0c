// PartitionByRank: the part of a graph one rank runs, with a _Send/_Recv
// pair at every edge that crosses ranks (model parallelism across
// processes; the cross-rank counterpart of group2ctx's copies).
#include <algorithm>
#include <map>
#include <set>

#include "engine/executor.h"

namespace kvtrain {

using graph::Node;
using graph::NodeEntry;

namespace {

// FNV-1a, so that both ends derive the same tag from an edge's name.
uint64_t EdgeTag(const std::string& entry_name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : entry_name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h & ((uint64_t{1} << 61) - 1);
}

std::string DimsText(const Shape& s) {
  std::string t;
  for (int i = 0; i < s.ndim(); ++i) t += (i ? "," : "") + std::to_string(s[i]);
  return t;
}

// The rank of every node: ops by group2rank (else 0), variables by their
// group, else by their first reader.
StatusOr<std::map<const Node*, int>> Ranks(
    const std::vector<const Node*>& order,
    const std::map<std::string, int>& group2rank, int size) {
  std::map<const Node*, int> rank;
  auto group_rank = [&](const Node& n, int* r) -> Status {
    auto it = group2rank.find(n.ctx_group);
    if (n.ctx_group.empty() || it == group2rank.end()) return Status::OK();
    if (it->second < 0 || it->second >= size) {
      return Status::InvalidArgument(
          "layer " + n.name + " (ctx_group \"" + n.ctx_group +
          "\") is placed on rank " + std::to_string(it->second) +
          " but the job has " + std::to_string(size) + " processes (ranks 0.." +
          std::to_string(size - 1) + ")");
    }
    *r = it->second;
    return Status::OK();
  };
  for (const Node* n : order) {
    if (n->is_variable()) continue;
    int r = 0;
    KV_RETURN_IF_ERROR(group_rank(*n, &r));
    rank[n] = r;
  }
  for (const Node* n : order) {
    if (!n->is_variable() || n->ctx_group.empty()) continue;
    int r = -1;
    KV_RETURN_IF_ERROR(group_rank(*n, &r));
    if (r >= 0) rank[n] = r;
  }
  for (const Node* n : order) {
    if (n->is_variable()) continue;
    for (const NodeEntry& e : n->inputs) {
      if (e.node->is_variable()) rank.emplace(e.node.get(), rank[n]);
    }
  }
  for (const Node* n : order) rank.emplace(n, 0);  // unread variables
  return rank;
}

}  // namespace

StatusOr<Symbol> PartitionByRank(const Symbol& symbol,
                                 const std::map<std::string, Shape>& input_shapes,
                                 const std::map<std::string, int>& group2rank,
                                 int rank, int size) {
  KV_RETURN_IF_ERROR(symbol.status());
  if (size < 1 || rank < 0 || rank >= size) {
    return Status::InvalidArgument("PartitionByRank: rank " + std::to_string(rank) +
                                   " is not in a group of " + std::to_string(size));
  }
  KV_ASSIGN_OR_RETURN(std::vector<const Node*> order, graph::TopoSort(symbol.heads()));
  KV_ASSIGN_OR_RETURN(auto ranks, Ranks(order, group2rank, size));
  KV_ASSIGN_OR_RETURN(auto shapes, graph::InferNodeShapes(order, input_shapes, nullptr));
  std::map<const Node*, int> position;
  for (size_t i = 0; i < order.size(); ++i) position[order[i]] = static_cast<int>(i);

  std::map<const Node*, Symbol> built;          // local nodes, rebuilt
  std::map<std::pair<const Node*, int>, Symbol> received;  // by entry
  // Sends, keyed by (producer position, output, destination) for their order.
  std::map<std::tuple<int, int, int>, Symbol> sends;
  auto local_input = [&](const NodeEntry& e, int consumer_rank) -> StatusOr<Symbol> {
    const Node* p = e.node.get();
    const int from = ranks[p];
    const std::string entry = p->OutputName(e.index);
    const std::string tag = std::to_string(EdgeTag(entry));
    if (from == consumer_rank) return built[p][e.index];
    if (from == rank) {  // this rank produces it: send to the consumer
      auto key = std::make_tuple(position[p], e.index, consumer_rank);
      if (!sends.count(key)) {
        sends[key] = Symbol::Op("_Send", entry + "_to_rank" + std::to_string(consumer_rank),
                                {built[p][e.index]},
                                {{"peer", std::to_string(consumer_rank)}, {"tag", tag}});
      }
      return Symbol();
    }
    // consumer_rank == rank: receive it.
    auto it = received.find({p, e.index});
    if (it != received.end()) return it->second;
    const Shape& s = shapes[p][e.index];
    if (s.ndim() == 0) {
      return Status::InvalidArgument(
          "PartitionByRank: the shape of " + entry + " (sent from rank " +
          std::to_string(from) + " to rank " + std::to_string(consumer_rank) +
          ") cannot be inferred; give the input shapes");
    }
    Symbol r = Symbol::Op("_Recv", entry + "_from_rank" + std::to_string(from), {},
                          {{"peer", std::to_string(from)}, {"tag", tag},
                           {"shape", "(" + DimsText(s) + ")"}});
    KV_RETURN_IF_ERROR(r.status());
    received[{p, e.index}] = r;
    return r;
  };
  for (const Node* n : order) {
    const int r = ranks[n];
    if (n->is_variable()) {
      if (r == rank) built[n] = Symbol::Variable(n->name, n->ctx_group);
      continue;
    }
    std::vector<Symbol> inputs;
    for (const NodeEntry& e : n->inputs) {
      if (ranks[e.node.get()] != rank && r != rank) continue;
      KV_ASSIGN_OR_RETURN(Symbol in, local_input(e, r));
      inputs.push_back(in);
    }
    if (r != rank) continue;
    Symbol op = Symbol::Op(n->op_type, n->name, inputs, n->attrs, n->ctx_group);
    KV_RETURN_IF_ERROR(op.status());
    built[n] = op;
  }
  // Sends first, in the order of their producers: then the local order runs
  // every send before any receive that does not depend on it, so even the
  // synchronous engine (KVTRAIN_ENGINE=naive) cannot deadlock.
  std::vector<Symbol> heads;
  for (const auto& [key, s] : sends) {
    KV_RETURN_IF_ERROR(s.status());
    heads.push_back(s);
  }
  for (const NodeEntry& h : symbol.heads()) {
    if (ranks[h.node.get()] == rank) heads.push_back(built[h.node.get()][h.index]);
  }
  if (heads.empty()) {
    return Status::InvalidArgument("PartitionByRank: rank " + std::to_string(rank) +
                                   " of " + std::to_string(size) +
                                   " runs no part of the graph");
  }
  return Symbol::Group(heads);
}

}  // namespace kvtrain
