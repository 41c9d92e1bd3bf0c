// Accuracy, top-k accuracy and cross-entropy; binary AUC and log-loss.
#include "trainer/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace kvtrain {
namespace {

class Accuracy : public Metric {
 public:
  Accuracy() : Metric("accuracy") {}

 protected:
  double Row(int label, const float* p, int classes) const override {
    return std::max_element(p, p + classes) - p == label ? 1.0 : 0.0;
  }
};

class TopK : public Metric {
 public:
  explicit TopK(int k) : Metric("top_k_accuracy_" + std::to_string(k)), k_(k) {}

 protected:
  double Row(int label, const float* p, int classes) const override {
    // The label is in the top k when fewer than k classes score higher.
    int higher = 0;
    for (int c = 0; c < classes; ++c) higher += p[c] > p[label];
    return higher < k_ ? 1.0 : 0.0;
  }

 private:
  const int k_;
};

// Also MXNet's negative log-likelihood ("nll-loss"): the same mean.
class CrossEntropy : public Metric {
 public:
  explicit CrossEntropy(std::string name = "cross-entropy") : Metric(std::move(name)) {}

 protected:
  double Row(int label, const float* p, int) const override {
    return -std::log(std::max(p[label], 1e-12f));
  }
};

// e to the mean negative log-likelihood of the rows; rows labelled
// `ignore` are left out (kNone: none is).
class Perplexity : public Metric {
 public:
  static constexpr int kNone = -1000000;
  explicit Perplexity(int ignore) : Metric("perplexity"), ignore_(ignore) {}
  Status Update(const Tensor& labels, const Tensor& probs, int pad) override;
  double Get() const override { return count() ? std::exp(Metric::Get()) : 0.0; }

 private:
  const int ignore_;
};

// Binary F1 of the argmax, class 1 positive: per batch, averaged over the
// batches (macro, MXNet's default), or over every row seen (micro).
class F1 : public Metric {
 public:
  explicit F1(bool micro) : Metric("f1"), micro_(micro) {}
  Status Update(const Tensor& labels, const Tensor& probs, int pad) override;
  double Get() const override {
    if (!micro_) return Metric::Get();
    return Score(tp_, fp_, fn_);
  }
  void Reset() override {
    Metric::Reset();
    tp_ = fp_ = fn_ = 0;
  }

 private:
  static double Score(int64_t tp, int64_t fp, int64_t fn) {
    const double precision = tp + fp > 0 ? static_cast<double>(tp) / (tp + fp) : 0;
    const double recall = tp + fn > 0 ? static_cast<double>(tp) / (tp + fn) : 0;
    return precision + recall > 0 ? 2 * precision * recall / (precision + recall) : 0;
  }
  const bool micro_;
  int64_t tp_ = 0, fp_ = 0, fn_ = 0;
};

// MXNet's regression metrics: one value per batch, the mean of the rows'
// squared (or absolute) errors, rooted for rmse; Get averages the batches.
class Regression : public Metric {
 public:
  enum Kind { kMse, kRmse, kMae };
  Regression(Kind kind, std::string name) : Metric(std::move(name)), kind_(kind) {}
  Status Update(const Tensor& labels, const Tensor& preds, int pad) override;

 private:
  const Kind kind_;
};

// The values of `t` readable on the host: its own memory when it is a CPU
// float32 array, else a copy in `*copy`.
const float* HostFloats(const Tensor& t, std::vector<float>* copy) {
  if (t.device().is_cpu() && t.dtype() == DType::kFloat32)
    return t.data<float>();
  *copy = t.ToVector();
  return copy->data();
}

// Labels (batch) against class scores (batch, classes).
Status CheckClassBatch(const std::string& name, const Tensor& labels, const Tensor& probs) {
  if (probs.ndim() != 2 || labels.ndim() != 1 || labels.dim(0) != probs.dim(0)) {
    return Status::InvalidArgument("metric " + name + ": labels " +
                                   labels.shape().ToString() + " do not match predictions " +
                                   probs.shape().ToString());
  }
  return Status::OK();
}

Status CheckLabel(const std::string& name, int label, int classes) {
  if (label < 0 || label >= classes) {
    return Status::InvalidArgument("metric " + name + ": label " + std::to_string(label) +
                                   " is not a class 0.." + std::to_string(classes - 1));
  }
  return Status::OK();
}

}  // namespace

Status Metric::Update(const Tensor& labels, const Tensor& probs, int pad) {
  KV_RETURN_IF_ERROR(CheckClassBatch(name(), labels, probs));
  std::vector<float> label_copy, prob_copy;
  const float* l = HostFloats(labels, &label_copy);
  const float* p = HostFloats(probs, &prob_copy);
  const int classes = static_cast<int>(probs.dim(1));
  const int64_t rows = probs.dim(0) - std::max(0, pad);
  for (int64_t r = 0; r < rows; ++r) {
    const int label = static_cast<int>(l[r]);
    KV_RETURN_IF_ERROR(CheckLabel(name_, label, classes));
    Add(Row(label, p + r * classes, classes));
  }
  return Status::OK();
}

Status Perplexity::Update(const Tensor& labels, const Tensor& probs, int pad) {
  KV_RETURN_IF_ERROR(CheckClassBatch(name(), labels, probs));
  std::vector<float> label_copy, prob_copy;
  const float* l = HostFloats(labels, &label_copy);
  const float* p = HostFloats(probs, &prob_copy);
  const int classes = static_cast<int>(probs.dim(1));
  const int64_t rows = probs.dim(0) - std::max(0, pad);
  for (int64_t r = 0; r < rows; ++r) {
    const int label = static_cast<int>(l[r]);
    if (label == ignore_) continue;
    KV_RETURN_IF_ERROR(CheckLabel(name(), label, classes));
    Add(-std::log(std::max(p[r * classes + label], 1e-10f)));
  }
  return Status::OK();
}

Status F1::Update(const Tensor& labels, const Tensor& probs, int pad) {
  KV_RETURN_IF_ERROR(CheckClassBatch(name(), labels, probs));
  if (probs.dim(1) != 2) {
    return Status::InvalidArgument("metric f1 is for two classes (class 1 positive); the "
                                   "predictions " + probs.shape().ToString() + " have " +
                                   std::to_string(probs.dim(1)));
  }
  std::vector<float> label_copy, prob_copy;
  const float* l = HostFloats(labels, &label_copy);
  const float* p = HostFloats(probs, &prob_copy);
  const int64_t rows = probs.dim(0) - std::max(0, pad);
  int64_t tp = 0, fp = 0, fn = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int label = static_cast<int>(l[r]);
    KV_RETURN_IF_ERROR(CheckLabel(name(), label, 2));
    const bool predicted = p[r * 2 + 1] > p[r * 2];
    tp += predicted && label == 1;
    fp += predicted && label == 0;
    fn += !predicted && label == 1;
  }
  tp_ += tp;
  fp_ += fp;
  fn_ += fn;
  Add(Score(tp, fp, fn));
  return Status::OK();
}

Status Regression::Update(const Tensor& labels, const Tensor& preds, int pad) {
  const int64_t rows = labels.ndim() == 1 ? labels.dim(0) : -1;
  if (rows < 0 || preds.size() != rows || (preds.ndim() == 2 && preds.dim(1) != 1)) {
    return Status::InvalidArgument("metric " + name() + ": labels " +
                                   labels.shape().ToString() +
                                   " do not match one prediction per row " +
                                   preds.shape().ToString());
  }
  std::vector<float> label_copy, pred_copy;
  const float* l = HostFloats(labels, &label_copy);
  const float* p = HostFloats(preds, &pred_copy);
  const int64_t n = rows - std::max(0, pad);
  if (n <= 0) return Status::OK();
  double sum = 0;
  for (int64_t r = 0; r < n; ++r) {
    const double e = static_cast<double>(l[r]) - p[r];
    sum += kind_ == kMae ? std::fabs(e) : e * e;
  }
  const double mean = sum / n;
  Add(kind_ == kRmse ? std::sqrt(mean) : mean);
  return Status::OK();
}

StatusOr<std::unique_ptr<Metric>> CreateMetric(const std::string& spec) {
  if (spec == "accuracy" || spec == "acc") return std::unique_ptr<Metric>(new Accuracy());
  if (spec == "cross-entropy" || spec == "ce") {
    return std::unique_ptr<Metric>(new CrossEntropy());
  }
  if (spec == "nll-loss" || spec == "nll_loss") {
    return std::unique_ptr<Metric>(new CrossEntropy("nll-loss"));
  }
  if (spec == "mse") return std::unique_ptr<Metric>(new Regression(Regression::kMse, "mse"));
  if (spec == "rmse") return std::unique_ptr<Metric>(new Regression(Regression::kRmse, "rmse"));
  if (spec == "mae") return std::unique_ptr<Metric>(new Regression(Regression::kMae, "mae"));
  if (spec == "f1") return std::unique_ptr<Metric>(new F1(/*micro=*/false));
  if (spec == "f1:micro") return std::unique_ptr<Metric>(new F1(/*micro=*/true));
  if (spec == "perplexity") return std::unique_ptr<Metric>(new Perplexity(Perplexity::kNone));
  const std::string ppl = "perplexity:";
  if (spec.rfind(ppl, 0) == 0) {
    const std::string l = spec.substr(ppl.size());
    char* end = nullptr;
    const long ignore = l.empty() ? 0 : std::strtol(l.c_str(), &end, 10);
    if (!l.empty() && *end == '\0' && ignore > Perplexity::kNone && ignore < 1000000) {
      return std::unique_ptr<Metric>(new Perplexity(static_cast<int>(ignore)));
    }
  }
  const std::string topk = "top_k_accuracy:";
  if (spec.rfind(topk, 0) == 0) {
    const std::string k = spec.substr(topk.size());
    if (!k.empty() && k.find_first_not_of("0123456789") == std::string::npos &&
        std::stoi(k) >= 1) {
      return std::unique_ptr<Metric>(new TopK(std::stoi(k)));
    }
  }
  return Status::InvalidArgument("unknown metric \"" + spec +
                                 "\": expected accuracy, top_k_accuracy:K, cross-entropy, nll-loss, "
                                 "perplexity, perplexity:IGNORED_LABEL, f1, f1:micro, mse, rmse "
                                 "or mae");
}

StatusOr<MetricSet> MetricSet::Create(const std::vector<std::string>& specs) {
  MetricSet set;
  for (const std::string& s : specs) {
    KV_ASSIGN_OR_RETURN(std::unique_ptr<Metric> m, CreateMetric(s));
    set.metrics_.push_back(std::move(m));
  }
  return set;
}

Status MetricSet::Update(const Tensor& labels, const Tensor& probs, int pad) {
  for (auto& m : metrics_) KV_RETURN_IF_ERROR(m->Update(labels, probs, pad));
  return Status::OK();
}

void MetricSet::Reset() {
  for (auto& m : metrics_) m->Reset();
}

std::vector<std::pair<std::string, double>> MetricSet::Get() const {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& m : metrics_) out.emplace_back(m->name(), m->Get());
  return out;
}

std::string MetricSet::ToString(const std::string& prefix) const {
  std::string out;
  char buf[96];
  for (const auto& [name, value] : Get()) {
    std::snprintf(buf, sizeof(buf), "%s%s%s=%.6f", out.empty() ? "" : " ",
                  prefix.c_str(), name.c_str(), value);
    out += buf;
  }
  return out;
}

double BinaryAuc(const std::vector<float>& labels,
                 const std::vector<float>& scores) {
  CHECK_EQ(labels.size(), scores.size()) << "BinaryAuc: labels and scores differ in size";
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  std::vector<std::pair<float, bool>> rows(scores.size());
  for (size_t i = 0; i < scores.size(); ++i) {
    if (std::isnan(scores[i])) return kNaN;
    rows[i] = {scores[i], labels[i] > 0.5f};
  }
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  // Mann-Whitney: each positive wins against the negatives scored below it
  // and half-wins against those tied with it. Counts stay exact integers.
  double wins = 0;
  int64_t negatives_below = 0, positives = 0;
  for (size_t i = 0; i < rows.size();) {
    size_t j = i;
    int64_t pos = 0;
    for (; j < rows.size() && rows[j].first == rows[i].first; ++j) pos += rows[j].second;
    const int64_t neg = static_cast<int64_t>(j - i) - pos;
    wins += pos * (negatives_below + 0.5 * neg);
    negatives_below += neg;
    positives += pos;
    i = j;
  }
  if (positives == 0 || negatives_below == 0) return kNaN;
  return wins / (static_cast<double>(positives) * negatives_below);
}

double LogLoss(const std::vector<float>& labels,
               const std::vector<float>& probs) {
  CHECK_EQ(labels.size(), probs.size()) << "LogLoss: labels and probabilities differ in size";
  if (labels.empty()) return std::numeric_limits<double>::quiet_NaN();
  constexpr double kEps = 1e-12;
  double sum = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    const double p = probs[i];
    sum -= labels[i] * std::log(std::max(p, kEps)) +
           (1.0 - labels[i]) * std::log(std::max(1 - p, kEps));
  }
  return sum / labels.size();
}

}  // namespace kvtrain
