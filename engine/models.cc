// The networks of models.h, composed with engine/symbol.h's builders.
#include "engine/models.h"

#include <string>

namespace kvtrain {
namespace models {

using sym::Activation;
using sym::Convolution;
using sym::Flatten;
using sym::FullyConnected;
using sym::Pooling;
using sym::SoftmaxOutput;

Symbol Mlp(const std::vector<int>& hidden, int classes) {
  Symbol x = Symbol::Variable("data");
  for (size_t i = 0; i < hidden.size(); ++i) {
    const std::string k = std::to_string(i + 1);
    x = Activation(FullyConnected(x, "fc" + k, hidden[i]), "relu" + k, "relu");
  }
  x = FullyConnected(x, "fc" + std::to_string(hidden.size() + 1), classes);
  return SoftmaxOutput(x, "softmax");
}

Symbol LeNet(int classes) {
  Symbol x = Symbol::Variable("data");
  x = Convolution(x, "conv1", 20, 5);
  x = Pooling(Activation(x, "tanh1", "tanh"), "pool1", "max", 2, 2);
  x = Convolution(x, "conv2", 50, 5);
  x = Pooling(Activation(x, "tanh2", "tanh"), "pool2", "max", 2, 2);
  x = Flatten(x, "flatten");
  x = Activation(FullyConnected(x, "fc1", 500), "tanh3", "tanh");
  x = FullyConnected(x, "fc2", classes);
  return SoftmaxOutput(x, "softmax");
}

Symbol MlpTwoStages(const std::vector<int>& hidden, int classes) {
  auto stage = [](size_t layer) { return layer == 0 ? "stage0" : "stage1"; };
  Symbol x = Symbol::Variable("data");
  for (size_t i = 0; i < hidden.size(); ++i) {
    const std::string k = std::to_string(i + 1);
    x = Symbol::Op("FullyConnected", "fc" + k, {x},
                   {{"num_hidden", std::to_string(hidden[i])}, {"no_bias", "false"}},
                   stage(i));
    x = Symbol::Op("Activation", "relu" + k, {x}, {{"act_type", "relu"}}, stage(i));
  }
  x = Symbol::Op("FullyConnected", "fc" + std::to_string(hidden.size() + 1), {x},
                 {{"num_hidden", std::to_string(classes)}, {"no_bias", "false"}},
                 stage(hidden.size()));
  return Symbol::Op("SoftmaxOutput", "softmax", {x, Symbol::Variable("softmax_label")},
                    {}, "stage0");
}

}  // namespace models
}  // namespace kvtrain
