// Helper of checkpoint_atomicity_test.py.
//   checkpoint_writer write PREFIX   writes PREFIX-0001.params and
//     PREFIX-0001.states over and over, versions v+1, v+2, ... after the
//     version v found in the params file (0 if none) (every float of
//     version v is v, the params' epoch is v, the states hold "states v"
//     padded to 1 MB), printing "ready" first and "wrote v" after each
//     pair, until killed.
//   checkpoint_writer check PREFIX   loads both files, checks each is one
//     whole version, prints "params v states w" (exit 0) or the error (1).
#include <cstdio>
#include <cstring>
#include <string>

#include "trainer/checkpoint.h"

namespace kvtrain {
namespace {

constexpr int64_t kFloats = 1 << 19;  // 2 MB of parameters
constexpr size_t kStatesBytes = 1 << 20;

int Write(const std::string& prefix) {
  int found = 0;
  if (!LoadParams(ParamsPath(prefix, 1), &found).ok()) found = 0;
  std::printf("ready\n");
  std::fflush(stdout);
  for (int v = found + 1;; ++v) {
    ModelArrays a;
    a.args["weight"] = Tensor::FromVector(std::vector<float>(kFloats, v), {kFloats});
    a.aux["version"] = Tensor::FromVector({static_cast<float>(v)}, {1});
    Status s = SaveParams(ParamsPath(prefix, 1), a, v);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
    std::string states = "states " + std::to_string(v) + " ";
    states.resize(kStatesBytes, static_cast<char>('a' + v % 26));
    s = WriteLocalStates(StatesPath(prefix, 1), states);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
    std::printf("wrote %d\n", v);
    std::fflush(stdout);
  }
}

int Check(const std::string& prefix) {
  int epoch = 0;
  StatusOr<ModelArrays> a = LoadParams(ParamsPath(prefix, 1), &epoch);
  if (!a.ok()) {
    std::printf("%s\n", a.status().ToString().c_str());
    return 1;
  }
  const Tensor& w = a->args.at("weight");
  const float* p = static_cast<const float*>(w.raw_data());
  if (w.shape().NumElements() != kFloats) {
    std::printf("weight has %lld elements\n", static_cast<long long>(w.shape().NumElements()));
    return 1;
  }
  for (int64_t i = 0; i < kFloats; ++i) {
    if (p[i] != static_cast<float>(epoch)) {
      std::printf("torn params: element %lld is %g in version %d\n",
                  static_cast<long long>(i), p[i], epoch);
      return 1;
    }
  }
  StatusOr<std::string> states = ReadLocalStates(StatesPath(prefix, 1));
  if (!states.ok()) {
    std::printf("%s\n", states.status().ToString().c_str());
    return 1;
  }
  int sv = 0;
  if (states->size() != kStatesBytes || std::sscanf(states->c_str(), "states %d", &sv) != 1 ||
      (*states)[kStatesBytes - 1] != static_cast<char>('a' + sv % 26)) {
    std::printf("torn states file (%zu bytes)\n", states->size());
    return 1;
  }
  std::printf("params %d states %d\n", epoch, sv);
  return 0;
}

}  // namespace
}  // namespace kvtrain

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "write") == 0) return kvtrain::Write(argv[2]);
  if (argc == 3 && std::strcmp(argv[1], "check") == 0) return kvtrain::Check(argv[2]);
  std::fprintf(stderr, "usage: checkpoint_writer write|check PREFIX\n");
  return 2;
}
