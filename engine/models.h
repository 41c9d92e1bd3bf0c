// The networks the examples, benchmarks and tests train, built from the
// engine's symbols: MLPs (whole and split into two model-parallel stages)
// and LeNet.
#ifndef KVTRAIN_ENGINE_MODELS_H_
#define KVTRAIN_ENGINE_MODELS_H_

#include <vector>

#include "engine/symbol.h"

namespace kvtrain {
namespace models {

// The benchmark and test networks: data (N, 784) or (N, 1, 28, 28) and
// softmax_label (N).
// MLP 784-hidden...-10 with ReLU.
Symbol Mlp(const std::vector<int>& hidden, int classes = 10);
// The same MLP (same names, so the same initial weights) split into two
// ctx_groups as ChainerMN's model-parallel MNIST example: "stage0" holds
// fc1, relu1 and the output layer (softmax), "stage1" the other layers;
// with group2rank {stage0: 0, stage1: 1} data and labels stay on rank 0.
Symbol MlpTwoStages(const std::vector<int>& hidden, int classes = 10);
// LeNet: conv5x5x20-tanh-maxpool2-conv5x5x50-tanh-maxpool2-fc500-tanh-fc10.
Symbol LeNet(int classes = 10);

}  // namespace models
}  // namespace kvtrain

#endif  // KVTRAIN_ENGINE_MODELS_H_
