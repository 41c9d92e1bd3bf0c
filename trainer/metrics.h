// Evaluation metrics over (label, prediction) batches: accuracy, top-k
// accuracy, cross-entropy, perplexity and (two classes) F1 over class
// scores; mean squared error, its root and mean absolute error over
// regression outputs. Padded rows of a batch
// are ignored. For binary
// classification over a whole evaluation set: AUC and log-loss.
#ifndef KVTRAIN_TRAINER_METRICS_H_
#define KVTRAIN_TRAINER_METRICS_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "tensor/tensor.h"

namespace kvtrain {

// Not thread-safe.
class Metric {
 public:
  virtual ~Metric() = default;
  // `labels`: (batch) class ids; `probs`: (batch, classes) probabilities.
  // The last `pad` rows are ignored.
  virtual Status Update(const Tensor& labels, const Tensor& probs, int pad = 0);
  virtual void Reset() {
    sum_ = 0;
    count_ = 0;
  }
  // "accuracy", "top_k_accuracy_5", "cross-entropy", "mse".
  const std::string& name() const { return name_; }
  // The mean over the rows (regression metrics and macro F1: the batches)
  // seen since Reset (0 before any); perplexity: e to that mean.
  virtual double Get() const { return count_ ? sum_ / count_ : 0.0; }
  int64_t count() const { return count_; }

 protected:
  explicit Metric(std::string name) : name_(std::move(name)) {}
  // The metric's value for one row (classification metrics).
  virtual double Row(int label, const float* probs, int classes) const { return 0; }
  void Add(double value) {
    sum_ += value;
    ++count_;
  }

 private:
  const std::string name_;
  double sum_ = 0;
  int64_t count_ = 0;
};

// "accuracy" (or "acc"), "top_k_accuracy:K", "cross-entropy" (or "ce"),
// "nll-loss" (or "nll_loss": cross-entropy under MXNet's other name);
// "perplexity" (e to the mean of -log p(label), p at least 1e-10) or
// "perplexity:L" (rows labelled L left out); "f1" (two classes, class 1
// positive: each batch's F1 of the argmax, averaged over batches, MXNet's
// macro average) or "f1:micro" (the F1 of every row seen);
// "mse", "rmse", "mae": predictions (batch, 1) against labels (batch), each
// batch's mean (for rmse its root) averaged over batches, as MXNet does.
// An unknown name is an error listing the known ones.
StatusOr<std::unique_ptr<Metric>> CreateMetric(const std::string& spec);

// Several metrics updated together.
class MetricSet {
 public:
  static StatusOr<MetricSet> Create(const std::vector<std::string>& specs);
  Status Update(const Tensor& labels, const Tensor& probs, int pad);
  void Reset();
  // (name, value) of each metric.
  std::vector<std::pair<std::string, double>> Get() const;
  // "accuracy=0.812 cross-entropy=0.533".
  std::string ToString(const std::string& prefix = "") const;

 private:
  std::vector<std::shared_ptr<Metric>> metrics_;
};

// Binary classification (click-through rate): label 1 positive, 0 negative.
// Functions of a whole evaluation set, not Metrics: the AUC ranks every
// score of the set together, which a mean over rows cannot express.
// `labels` and the predictions must have the same size (a CHECK).

// The exact ROC AUC: the probability that a random positive (label > 0.5)
// scores above a random negative, a tie counting one half (equivalently,
// tied scores share their average rank). NaN when the labels hold only
// one class (or none) and when a score is NaN.
double BinaryAuc(const std::vector<float>& labels,
                 const std::vector<float>& scores);

// The mean of -(y log p + (1 - y) log(1 - p)) over the rows, p and 1 - p
// each taken as at least 1e-12, so that a confident mistake costs about
// 27.6, not infinity. NaN for no rows and when a probability is NaN.
double LogLoss(const std::vector<float>& labels,
               const std::vector<float>& probs);

}  // namespace kvtrain

#endif  // KVTRAIN_TRAINER_METRICS_H_
