// Executor: a Symbol bound to arrays on devices. Forward/Backward push one
// engine op per graph node (asynchronous with the threaded engine);
// intermediate buffers come from a memory plan that reuses memory between
// buffers whose lifetimes do not overlap and runs ops in place where safe.
// Parts of a graph can live on different devices (ctx_group + group2ctx);
// copies are inserted where an edge crosses devices. Likewise parts can live
// in different processes (ctx_group + group2rank + a PeerLink): each rank's
// executor keeps its own nodes, with a _Send/_Recv pair (ops/peer_ops.h)
// wherever an edge crosses ranks.
//
// Every array has an engine variable: callers push their own ops on the
// engine with these as dependencies, e.g. "send layer k's gradient" reading
// grad_var(k), which then runs as soon as that gradient is written, while
// the backward of the layers below still computes.
#ifndef KVTRAIN_ENGINE_EXECUTOR_H_
#define KVTRAIN_ENGINE_EXECUTOR_H_

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/peer_link.h"
#include "base/status.h"
#include "engine/engine.h"
#include "engine/memory_plan.h"
#include "engine/symbol.h"
#include "ops/operator.h"
#include "tensor/tensor.h"

namespace kvtrain {

// What Backward does with an argument's gradient array.
enum class GradReq { kNull, kWrite, kAdd };

struct ExecutorOptions {
  // Device of nodes without a ctx_group (and of SimpleBind's arrays for
  // them).
  Device device = Device::CPU();
  // Device of each ctx_group used by the graph (groups only in group2rank
  // below run on `device`).
  std::map<std::string, Device> group2ctx;
  // Share and reuse intermediate buffers (and run ops in place). Off: every
  // intermediate gets its own buffer.
  bool plan_memory = true;
  // The engine to run on (shared with, e.g., a KVStore's pushes); null: the
  // executor makes its own, in the mode KVTRAIN_ENGINE selects.
  Engine* engine = nullptr;
  // Where KVTRAIN_CHECK_NAN and KVTRAIN_ENGINE are read.
  EnvLookup env = ProcessEnv();
  // Limit of the waits in Forward, Backward and Wait.
  std::chrono::milliseconds timeout = std::chrono::minutes(10);

  // Model parallelism across processes. Set, SimpleBind partitions the graph
  // by rank (PartitionByRank below) and binds this rank's part; its
  // _Send/_Recv ops talk through the link, which must outlive the executor.
  // Null: the whole graph runs in this process.
  PeerLink* peer_link = nullptr;
  // The rank of each ctx_group; nodes of other groups (or none) run on rank
  // 0. A group may appear in both group2ctx (its device) and group2rank.
  std::map<std::string, int> group2rank;
  // Limit of one receive from a peer (an activation or a gradient).
  std::chrono::milliseconds peer_timeout = std::chrono::minutes(2);
};

// The part of `symbol` that rank `rank` of a group of `size` runs. An op
// runs on group2rank[its ctx_group] (rank 0 where that has no entry); a
// variable on its group's rank, else on its first reader's. Every edge from
// a node on rank a to one on rank b != a becomes, on a, a _Send of the
// value (named "<entry>_to_rank<b>") and, on b, a _Recv ("<entry>_from_rank<a>")
// of its shape, inferred from `input_shapes` over the whole graph (so every
// rank needs the same input shapes). Both ends derive the same tag from the
// entry's name. The part's outputs are its sends' tokens, then those of the
// graph's outputs that live on this rank. Errors: a group placed on a rank
// outside [0, size) (naming the layer and the size), a cut whose shape
// cannot be inferred, a rank with no node.
StatusOr<Symbol> PartitionByRank(const Symbol& symbol,
                                 const std::map<std::string, Shape>& input_shapes,
                                 const std::map<std::string, int>& group2rank,
                                 int rank, int size);

// Not thread-safe: one thread drives an executor (its ops run on the
// engine's threads).
class Executor {
 public:
  // Binds explicit arrays, in the symbol's ListArguments() /
  // ListAuxiliaryStates() order. `grads` and `grad_reqs` are empty (no
  // gradients) or one per argument (undefined where the request is kNull).
  // Errors: wrong counts, missing (undefined) arrays, shapes the graph
  // rejects (naming the op and both shapes).
  static StatusOr<std::unique_ptr<Executor>> Bind(
      const Symbol& symbol, const ExecutorOptions& options,
      std::vector<Tensor> args, std::vector<Tensor> grads,
      std::vector<GradReq> grad_reqs, std::vector<Tensor> aux);

  // Allocates every array from the given input shapes (the rest inferred)
  // on the device of its node. Arguments named in `input_shapes` get
  // kNull gradients unless `grad_reqs` says otherwise; all others kWrite.
  // Arrays start zeroed. With options.peer_link, binds this rank's part of
  // the graph (arguments of other ranks are left out; `input_shapes` and
  // `grad_reqs` may name them).
  static StatusOr<std::unique_ptr<Executor>> SimpleBind(
      const Symbol& symbol, const ExecutorOptions& options,
      const std::map<std::string, Shape>& input_shapes,
      const std::map<std::string, GradReq>& grad_reqs = {});

  // Waits for this executor's pending ops.
  ~Executor();

  // Runs the graph and waits: outputs() are then readable.
  Status Forward(bool is_train);
  // Computes gradients into grad_arrays() and waits. Outputs that do not
  // come from a loss op need their gradient in `head_grads` (one per
  // output; undefined for loss outputs).
  Status Backward(const std::vector<Tensor>& head_grads = {});
  // As above without waiting: the handle completes when the pass is done.
  StatusOr<Completion> StartForward(bool is_train);
  StatusOr<Completion> StartBackward(const std::vector<Tensor>& head_grads = {});
  // Waits for every pass started so far; returns the first error (e.g.
  // KVTRAIN_CHECK_NAN naming the operator).
  Status Wait();
  // Forgets the errors its arrays hold, after the caller reported one that
  // ops outside the executor's passes left on them (e.g. a failed update).
  void ClearErrors();

  const std::vector<std::string>& arg_names() const { return arg_names_; }
  const std::vector<std::string>& aux_names() const { return aux_names_; }
  const std::vector<std::string>& output_names() const { return output_names_; }
  const std::vector<Tensor>& arg_arrays() const { return args_; }
  const std::vector<Tensor>& grad_arrays() const { return grads_; }
  const std::vector<Tensor>& aux_arrays() const { return aux_; }
  const std::vector<Tensor>& outputs() const { return outputs_; }
  // By name; NotFound lists the names.
  StatusOr<Tensor> Arg(const std::string& name) const;
  StatusOr<Tensor> Grad(const std::string& name) const;

  Engine* engine() const { return engine_; }
  Engine::Var* arg_var(int i) const { return arg_vars_[i]; }
  Engine::Var* grad_var(int i) const { return grad_vars_[i]; }
  Engine::Var* aux_var(int i) const { return aux_vars_[i]; }
  Engine::Var* output_var(int i) const;

  // Bytes of the intermediate buffers (op outputs, their gradients) and
  // workspaces, over all devices; arguments, gradients and auxiliary arrays
  // are not counted.
  int64_t planned_bytes() const { return planned_bytes_; }
  // One line per step and buffer, for debugging plans.
  std::string DebugString() const;

 private:
  struct Entry;
  struct Step;

  Executor();
  Status BuildGraph(const Symbol& symbol, const ExecutorOptions& options);
  // Adds the step of op node `node` (and copies for its inputs).
  Status AddStep(const graph::Node& node, const ExecutorOptions& options,
                 std::map<const graph::Node*, int>* first_entry,
                 int* next_aux);
  StatusOr<Device> NodeDevice(const graph::Node& node,
                              const ExecutorOptions& options) const;
  int CopyTo(int entry, const Device& device);
  Status InferShapes();
  void MarkGradients();
  std::vector<BufferRequest> BufferRequests(std::vector<int>* data_req,
                                            std::vector<int>* grad_req) const;
  int LastUse(int entry) const;
  void AddInplace(std::vector<BufferRequest>* requests,
                  const std::vector<int>& data_req,
                  const std::vector<int>& grad_req) const;
  Status Allocate(const ExecutorOptions& options);
  void PrepareSteps();
  void PrepareBackwardReqs();
  Status RunForward(Step* step, bool is_train);
  Status RunBackward(Step* step);
  Status CheckNan(const std::vector<Tensor>& tensors,
                  const std::vector<OpReq>& reqs, const Step& step,
                  const char* pass, const char* role) const;
  Completion Barrier(const std::vector<Engine::Var*>& vars, const char* what);
  // Drops finished passes from pending_, keeping the first error for Wait.
  void PrunePending();

  std::unique_ptr<Engine> own_engine_;
  Engine* engine_ = nullptr;
  PeerLink* peer_link_ = nullptr;
  std::chrono::milliseconds peer_timeout_{0};
  bool check_nan_ = false;
  std::chrono::milliseconds timeout_{0};

  std::vector<std::string> arg_names_, aux_names_, output_names_;
  std::vector<Tensor> args_, grads_, aux_, outputs_;
  std::vector<GradReq> grad_reqs_;
  std::vector<Engine::Var*> arg_vars_, grad_vars_, aux_vars_;

  std::vector<Entry> entries_;
  std::vector<std::unique_ptr<Step>> steps_;
  std::vector<int> backward_order_;  // step indices, reverse topological
  std::vector<int> heads_;           // entry ids of the outputs
  std::map<std::pair<int, Device>, int> copies_;

  // Planned storage.
  std::vector<Tensor> blocks_;
  std::vector<Engine::Var*> block_vars_;
  std::map<Device, Tensor> workspaces_;
  int64_t planned_bytes_ = 0;

  std::vector<Engine::Var*> forward_writes_, backward_writes_;
  std::vector<Completion> pending_;
  Status deferred_error_;
  bool trained_forward_ = false;
};

}  // namespace kvtrain

#endif  // KVTRAIN_ENGINE_EXECUTOR_H_
