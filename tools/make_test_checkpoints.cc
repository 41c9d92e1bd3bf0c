// Writes the small checkpoints tools/checkpoint_tool_test.sh compares: a,
// b (a with one value nudged by 1e-7 relative) and c (one value changed).
#include <cstdio>

#include "trainer/checkpoint.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string dir = argv[1];
  using kvtrain::Tensor;
  kvtrain::ModelArrays a;
  a.args["fc1_weight"] = Tensor::FromVector({1, 2, 3, 4}, {2, 2});
  a.args["fc1_bias"] = Tensor::FromVector({0.5f, -0.5f}, {2});
  a.aux["bn_moving_mean"] = Tensor::FromVector({0.25f}, {1});
  kvtrain::ModelArrays b = a, c = a;
  b.args["fc1_weight"] = Tensor::FromVector({1, 2, 3, 4.0000004f}, {2, 2});
  c.args["fc1_bias"] = Tensor::FromVector({0.5f, -0.25f}, {2});
  for (auto [name, arrays] : {std::pair{"a", &a}, {"b", &b}, {"c", &c}}) {
    if (!kvtrain::SaveParams(dir + "/" + name + ".params", *arrays, 3).ok()) return 1;
  }
  return 0;
}
