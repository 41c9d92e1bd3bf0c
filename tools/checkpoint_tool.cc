// kvtrain_checkpoint: prints a checkpoint's arrays, or compares two; shows
// or exports a row-sparse table saved by KVStore::SaveRowSparse.
//   kvtrain_checkpoint show m-0003.params
//   kvtrain_checkpoint diff a-0005.params b-0005.params [--rtol=1e-5 --atol=1e-6]
//   kvtrain_checkpoint show m-0003-emb.table
//   kvtrain_checkpoint export-table m-0003-emb.table emb.txt [--format=binary]
// diff prints the max abs / rel difference per array and exits 1 if any
// array differs beyond atol + rtol * |a|, or the two hold different arrays.
// export-table writes every row the table holds, sorted by id, as text
// ("id v1 ... vW" a line) or binary (kvstore/kvstore.h, ExportRowSparseTable).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include <gflags/gflags.h>
#include <glog/logging.h>

#include "kvstore/kvstore.h"
#include "trainer/checkpoint.h"

DEFINE_double(rtol, 1e-5, "diff: relative tolerance");
DEFINE_double(atol, 1e-6, "diff: absolute tolerance");
DEFINE_string(format, "text", "export-table: text or binary");

namespace kvtrain {
namespace {

bool IsTable(const std::string& path) {
  const std::string ext = ".table";
  return path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
}

int ShowTable(const std::string& path) {
  StatusOr<TableRows> t = ReadRowSparseTable(path);
  if (!t.ok()) {
    std::fprintf(stderr, "error: %s\n", t.status().message().c_str());
    return 2;
  }
  std::printf("%s: key %s, width %lld, %zu rows held {%s}\n", path.c_str(), t->key.c_str(),
              static_cast<long long>(t->width), t->ids.size(), t->spec.ShortDebugString().c_str());
  if (!t->ids.empty()) {
    double sum = 0, lo = t->rows[0], hi = lo;
    for (float x : t->rows) {
      sum += x;
      lo = std::min<double>(lo, x);
      hi = std::max<double>(hi, x);
    }
    std::printf("  ids %lld .. %lld, weights min %.6g max %.6g mean %.6g\n",
                static_cast<long long>(t->ids.front()), static_cast<long long>(t->ids.back()),
                lo, hi, sum / static_cast<double>(t->rows.size()));
  }
  return 0;
}

int ExportTable(const std::string& in, const std::string& out) {
  if (FLAGS_format != "text" && FLAGS_format != "binary") {
    std::fprintf(stderr, "error: --format=%s: expected text or binary\n", FLAGS_format.c_str());
    return 2;
  }
  const Status s = ExportRowSparseTable(
      in, out, FLAGS_format == "text" ? RowExportFormat::kText : RowExportFormat::kBinary);
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.message().c_str());
    return 2;
  }
  return 0;
}

int Show(const std::string& path) {
  if (IsTable(path)) return ShowTable(path);
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
  const char* usage =
      "show FILE | diff A B [--rtol=R --atol=A] | export-table T.table OUT "
      "[--format=text|binary]";
  gflags::SetUsageMessage(usage);
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "show" && argc == 3) return kvtrain::Show(argv[2]);
  if (cmd == "diff" && argc == 4) return kvtrain::Diff(argv[2], argv[3]);
  if (cmd == "export-table" && argc == 4) return kvtrain::ExportTable(argv[2], argv[3]);
  std::fprintf(stderr, "usage: %s %s\n", argv[0], usage);
  return 2;
}
