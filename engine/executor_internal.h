// The executor's private data structures, shared by its .cc files.
#ifndef KVTRAIN_ENGINE_EXECUTOR_INTERNAL_H_
#define KVTRAIN_ENGINE_EXECUTOR_INTERNAL_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/executor.h"

namespace kvtrain {

// One value in the graph: an argument array or an op output.
struct Executor::Entry {
  std::string name;
  Shape shape;
  Device device;
  int producer = -1;      // step index; -1 for an argument
  int output_index = 0;   // which output of the producer
  int arg = -1;           // argument index, for arguments
  bool head = false;      // a graph output
  bool needs_grad = false;
  // (step, input position) of every reader.
  std::vector<std::pair<int, int>> consumers;
  // Storage: a view of a planned block (or the argument array) and the
  // engine variable guarding it; the same for the gradient.
  Tensor value;
  Engine::Var* var = nullptr;
  Tensor grad;
  Engine::Var* grad_var = nullptr;
};

// One op of the graph (or an inserted copy) with everything a pass needs
// prepared at bind time.
struct Executor::Step {
  std::unique_ptr<Operator> op;
  Device device;
  std::vector<int> inputs, outputs;  // entry ids
  std::vector<int> aux;              // auxiliary array indices
  BackwardNeeds needs;
  bool backward = false;  // some input needs a gradient
  int backward_step = -1;  // its position in the plan's step numbering
  OpContext ctx;
  ForwardArgs fwd;
  BackwardArgs bwd;
  std::vector<Engine::Var*> fwd_reads, fwd_writes, bwd_reads, bwd_writes;
  std::string fwd_name, bwd_name;  // the engine ops' names
};

}  // namespace kvtrain

#endif  // KVTRAIN_ENGINE_EXECUTOR_INTERNAL_H_
