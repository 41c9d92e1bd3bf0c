// kvtrain_checkpoint: prints a checkpoint's arrays, or compares two.
//   kvtrain_checkpoint show m-0003.params
//   kvtrain_checkpoint diff a-0005.params b-0005.params [--rtol=1e-5 --atol=1e-6]
// diff prints the max abs / rel difference per array and exits 1 if any
// array differs beyond atol + rtol * |a|, or the two hold different arrays.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include <gflags/gflags.h>
#include <glog/logging.h>

#include "trainer/checkpoint.h"

DEFINE_double(rtol, 1e-5, "diff: relative tolerance");
DEFINE_double(atol, 1e-6, "diff: absolute tolerance");

namespace kvtrain {
namespace {

int Show(const std::string& path) {
  int epoch = 0;
  StatusOr<ModelArrays> a = LoadParams(path, &epoch);
  if (!a.ok()) {
    std::fprintf(stderr, "error: %s\n", a.status().message().c_str());
    return 2;
  }
  std::printf("%s: epoch %d, %zu parameters, %zu auxiliary states\n", path.c_str(), epoch,
              a->args.size(), a->aux.size());
  for (const auto* group : {&a->args, &a->aux}) {
    for (const auto& [name, t] : *group) {
      const std::vector<float> v = t.ToVector();
      double sum = 0, lo = v.empty() ? 0 : v[0], hi = lo;
      for (float x : v) {
        sum += x;
        lo = std::min<double>(lo, x);
        hi = std::max<double>(hi, x);
      }
      std::printf("  %-4s %-24s %-16s min %-12.6g max %-12.6g mean %.6g\n",
                  group == &a->args ? "arg" : "aux", name.c_str(), t.shape().ToString().c_str(),
                  lo, hi, v.empty() ? 0.0 : sum / v.size());
    }
  }
  return 0;
}

// Compares one group of arrays; returns false on any difference.
bool Compare(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b,
             const char* kind) {
  bool same = true;
  std::set<std::string> names;
  for (const auto& kv : a) names.insert(kv.first);
  for (const auto& kv : b) names.insert(kv.first);
  for (const std::string& name : names) {
    auto ia = a.find(name), ib = b.find(name);
    if (ia == a.end() || ib == b.end()) {
      std::printf("  %-4s %-24s only in %s\n", kind, name.c_str(), ia == a.end() ? "B" : "A");
      same = false;
      continue;
    }
    if (ia->second.shape() != ib->second.shape()) {
      std::printf("  %-4s %-24s shapes differ: %s vs %s\n", kind, name.c_str(),
                  ia->second.shape().ToString().c_str(), ib->second.shape().ToString().c_str());
      same = false;
      continue;
    }
    const std::vector<float> x = ia->second.ToVector(), y = ib->second.ToVector();
    double max_abs = 0, max_rel = 0;
    bool ok = true;
    for (size_t i = 0; i < x.size(); ++i) {
      const double d = std::fabs(static_cast<double>(x[i]) - y[i]);
      max_abs = std::max(max_abs, d);
      max_rel = std::max(max_rel, d / std::max(1e-12, std::fabs(static_cast<double>(x[i]))));
      if (!(d <= FLAGS_atol + FLAGS_rtol * std::fabs(x[i]))) ok = false;
    }
    std::printf("  %-4s %-24s %-16s max abs diff %-12.4g max rel diff %-12.4g %s\n", kind,
                name.c_str(), ia->second.shape().ToString().c_str(), max_abs, max_rel,
                ok ? "ok" : "DIFFERS");
    same = same && ok;
  }
  return same;
}

int Diff(const std::string& pa, const std::string& pb) {
  StatusOr<ModelArrays> a = LoadParams(pa), b = LoadParams(pb);
  for (const auto* r : {&a, &b}) {
    if (!r->ok()) {
      std::fprintf(stderr, "error: %s\n", r->status().message().c_str());
      return 2;
    }
  }
  std::printf("A: %s\nB: %s\n", pa.c_str(), pb.c_str());
  const bool same = Compare(a->args, b->args, "arg") & Compare(a->aux, b->aux, "aux");
  std::printf("%s (rtol %g, atol %g)\n", same ? "equal within tolerance" : "DIFFERENT",
              FLAGS_rtol, FLAGS_atol);
  return same ? 0 : 1;
}

}  // namespace
}  // namespace kvtrain

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "kvtrain_checkpoint show FILE | diff A B [--rtol=R --atol=A]");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "show" && argc == 3) return kvtrain::Show(argv[2]);
  if (cmd == "diff" && argc == 4) return kvtrain::Diff(argv[2], argv[3]);
  std::fprintf(stderr, "usage: %s show FILE | diff A B [--rtol=R --atol=A]\n", argv[0]);
  return 2;
}
