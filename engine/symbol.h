// Symbol: a computation graph built by calling operators on symbols, e.g.
//   Symbol data = Symbol::Variable("data");
//   Symbol fc1 = Symbol::Op("FullyConnected", "fc1", {data},
//                           {{"num_hidden", "128"}});
// Missing trailing inputs become variables named "<op>_<argument>"
// (fc1_weight, fc1_bias). Mistakes (unknown op, bad attribute, too many
// inputs) are kept in the symbol's status and reported by every query.
// Graphs save to protobuf text (proto/graph.proto) and load back unchanged.
#ifndef KVTRAIN_ENGINE_SYMBOL_H_
#define KVTRAIN_ENGINE_SYMBOL_H_

#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/graph.h"
#include "ops/operator.h"
#include "tensor/shape.h"

namespace kvtrain {

// Value type (copies share the graph); immutable; thread-compatible.
class Symbol {
 public:
  // An empty symbol; using it as an input is an error.
  Symbol() = default;

  // An input, parameter or label array named `name`. `attrs`: the
  // parameter's multipliers of the optimizer's learning rate and weight
  // decay, "__lr_mult__" and "__wd_mult__" (numbers >= 0; MXNet's
  // Variable(lr_mult=, wd_mult=)), the only attributes a variable takes.
  static Symbol Variable(const std::string& name, const std::string& ctx_group = "",
                         const OpAttrs& attrs = {});
  // Operator `type` named `name` over `inputs` (ListArguments() order).
  // `ctx_group` places it (and the variables it creates) in a device group
  // for Executor's group2ctx.
  static Symbol Op(const std::string& type, const std::string& name,
                   const std::vector<Symbol>& inputs, const OpAttrs& attrs = {},
                   const std::string& ctx_group = "");
  // The outputs of several symbols as one symbol.
  static Symbol Group(const std::vector<Symbol>& symbols);
  // One output of a multi-output symbol.
  Symbol operator[](int index) const;

  // The first composition error, or ok.
  const Status& status() const { return status_; }
  bool ok() const { return status_.ok(); }

  // Variables the graph reads, in depth-first order (data, fc1_weight, ...).
  std::vector<std::string> ListArguments() const;
  // "<node>_<output>" for each output (a variable's output is its name).
  std::vector<std::string> ListOutputs() const;
  // "<node>_<state>" for each op's auxiliary states (BatchNorm's moving
  // averages).
  std::vector<std::string> ListAuxiliaryStates() const;

  struct Shapes {
    std::vector<Shape> arguments;  // ListArguments() order
    std::vector<Shape> outputs;    // ListOutputs() order
    std::vector<Shape> aux;        // ListAuxiliaryStates() order
  };
  // Infers every shape from the given argument shapes (typically data and
  // label). Errors name the op and both shapes, an unknown argument name, or
  // an argument whose shape cannot be inferred.
  StatusOr<Shapes> InferShape(const std::map<std::string, Shape>& known) const;

  // The graph as protobuf text (proto/graph.proto).
  StatusOr<std::string> ToText() const;
  static StatusOr<Symbol> FromText(const std::string& text);
  Status Save(const std::string& path) const;
  static StatusOr<Symbol> Load(const std::string& path);

  // The graph's outputs (for the executor).
  const std::vector<graph::NodeEntry>& heads() const { return heads_; }

 private:
  static Symbol Error(Status status);

  std::vector<graph::NodeEntry> heads_;
  Status status_;
};

// Builders for common layers, in MXNet's style.
namespace sym {

Symbol FullyConnected(const Symbol& data, const std::string& name,
                      int num_hidden, bool no_bias = false);
Symbol Activation(const Symbol& data, const std::string& name,
                  const std::string& act_type);
Symbol Convolution(const Symbol& data, const std::string& name,
                   int num_filter, int kernel, int stride = 1, int pad = 0);
Symbol Pooling(const Symbol& data, const std::string& name,
               const std::string& pool_type, int kernel, int stride);
Symbol Flatten(const Symbol& data, const std::string& name);
Symbol SoftmaxOutput(const Symbol& data, const std::string& name);

}  // namespace sym
}  // namespace kvtrain

#endif  // KVTRAIN_ENGINE_SYMBOL_H_
