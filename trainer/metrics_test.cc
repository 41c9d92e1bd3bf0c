#include "trainer/metrics.h"

#include <cmath>
#include <random>

#include <gtest/gtest.h>

namespace kvtrain {
namespace {

// Three rows over 3 classes; labels 0, 2, 1.
Tensor Probs() {
  return Tensor::FromVector({0.7f, 0.2f, 0.1f,    // predicts 0 (right)
                             0.5f, 0.1f, 0.4f,    // predicts 0 (label 2 is 2nd)
                             0.3f, 0.3f, 0.4f},   // predicts 2 (label 1 is 2nd=)
                            {3, 3});
}
Tensor Labels() { return Tensor::FromVector({0, 2, 1}, {3}); }

TEST(MetricsTest, AccuracyTopKCrossEntropy) {
  StatusOr<MetricSet> set =
      MetricSet::Create({"accuracy", "top_k_accuracy:2", "cross-entropy"});
  ASSERT_TRUE(set.ok());
  ASSERT_TRUE(set->Update(Labels(), Probs(), 0).ok());
  const auto v = set->Get();
  EXPECT_EQ(v[0].first, "accuracy");
  EXPECT_NEAR(v[0].second, 1.0 / 3, 1e-9);
  EXPECT_EQ(v[1].first, "top_k_accuracy_2");
  // Row 3: class 1 ties with class 0 at 0.3; only class 2 scores higher.
  EXPECT_NEAR(v[1].second, 1.0, 1e-9);
  EXPECT_EQ(v[2].first, "cross-entropy");
  EXPECT_NEAR(v[2].second, -(std::log(0.7) + std::log(0.4) + std::log(0.3)) / 3, 1e-6);
  set->Reset();
  EXPECT_EQ(set->Get()[0].second, 0);
  // MXNet's negative log-likelihood is the same mean under its own name.
  auto nll = std::move(CreateMetric("nll_loss")).value();
  ASSERT_TRUE(nll->Update(Labels(), Probs()).ok());
  EXPECT_EQ(nll->name(), "nll-loss");
  EXPECT_NEAR(nll->Get(), v[2].second, 1e-9);
}

TEST(MetricsTest, RegressionMetricsAverageBatchMeans) {
  auto mse = std::move(CreateMetric("mse")).value();
  auto rmse = std::move(CreateMetric("rmse")).value();
  auto mae = std::move(CreateMetric("mae")).value();
  const Tensor labels = Tensor::FromVector({1, 2, 3, 4}, {4});
  const Tensor preds = Tensor::FromVector({1, 4, 3, 0}, {4, 1});  // errors 0, 2, 0, 4
  for (Metric* m : {mse.get(), rmse.get(), mae.get()}) {
    ASSERT_TRUE(m->Update(labels, preds).ok()) << m->name();
  }
  EXPECT_DOUBLE_EQ(mse->Get(), 5.0);
  EXPECT_DOUBLE_EQ(rmse->Get(), std::sqrt(5.0));
  EXPECT_DOUBLE_EQ(mae->Get(), 1.5);
  // A second batch (its last row padding): each batch weighs the same.
  ASSERT_TRUE(mse->Update(labels, Tensor::FromVector({2, 2, 3, 9}, {4, 1}), 1).ok());
  EXPECT_DOUBLE_EQ(mse->Get(), (5.0 + 1.0 / 3) / 2);
  EXPECT_EQ(mse->count(), 2);
  EXPECT_EQ(mse->name(), "mse");
  EXPECT_FALSE(mse->Update(labels, Tensor::FromVector(std::vector<float>(8, 0), {4, 2})).ok());
}

TEST(MetricsTest, PerplexityIsEToTheMeanNegativeLogLikelihood) {
  auto ppl = std::move(CreateMetric("perplexity")).value();
  ASSERT_TRUE(ppl->Update(Labels(), Probs()).ok());
  EXPECT_EQ(ppl->name(), "perplexity");
  EXPECT_NEAR(ppl->Get(), std::exp(-(std::log(0.7) + std::log(0.4) + std::log(0.3)) / 3), 1e-6);
  // Rows labelled 2 left out (MXNet's ignore_label).
  auto some = std::move(CreateMetric("perplexity:2")).value();
  ASSERT_TRUE(some->Update(Labels(), Probs()).ok());
  EXPECT_NEAR(some->Get(), std::exp(-(std::log(0.7) + std::log(0.3)) / 2), 1e-6);
  EXPECT_FALSE(CreateMetric("perplexity:x").ok());
}

TEST(MetricsTest, F1MacroAveragesBatchesMicroCountsRows) {
  auto macro = std::move(CreateMetric("f1")).value();
  auto micro = std::move(CreateMetric("f1:micro")).value();
  // Batch 1: predictions 1, 1, 0, 0 for labels 1, 0, 1, 0: tp 1, fp 1, fn 1.
  const Tensor p1 = Tensor::FromVector({0.2f, 0.8f, 0.4f, 0.6f, 0.9f, 0.1f, 0.7f, 0.3f}, {4, 2});
  const Tensor l1 = Tensor::FromVector({1, 0, 1, 0}, {4});
  // Batch 2: predictions 1, 1 for labels 1, 1: tp 2.
  const Tensor p2 = Tensor::FromVector({0.1f, 0.9f, 0.3f, 0.7f}, {2, 2});
  const Tensor l2 = Tensor::FromVector({1, 1}, {2});
  for (Metric* m : {macro.get(), micro.get()}) {
    ASSERT_TRUE(m->Update(l1, p1).ok());
    ASSERT_TRUE(m->Update(l2, p2).ok());
  }
  EXPECT_DOUBLE_EQ(macro->Get(), (0.5 + 1.0) / 2);
  // Every row: tp 3, fp 1, fn 1: precision = recall = 0.75.
  EXPECT_DOUBLE_EQ(micro->Get(), 0.75);
  micro->Reset();
  EXPECT_EQ(micro->Get(), 0);
  // Not two classes, or a label outside them: errors naming the metric.
  const Status three = macro->Update(Labels(), Probs());
  EXPECT_FALSE(three.ok());
  EXPECT_NE(three.message().find("metric f1 is for two classes"), std::string::npos);
  EXPECT_FALSE(macro->Update(Tensor::FromVector({2, 0}, {2}), p2).ok());
}

TEST(MetricsTest, PaddedRowsAreIgnored) {
  StatusOr<std::unique_ptr<Metric>> acc = CreateMetric("accuracy");
  ASSERT_TRUE(acc.ok());
  ASSERT_TRUE((*acc)->Update(Labels(), Probs(), /*pad=*/2).ok());
  EXPECT_EQ((*acc)->count(), 1);
  EXPECT_EQ((*acc)->Get(), 1.0);
}

TEST(MetricsTest, Errors) {
  EXPECT_EQ(CreateMetric("mcc").status().message(),
            "unknown metric \"mcc\": expected accuracy, top_k_accuracy:K, cross-entropy, "
            "nll-loss, perplexity, perplexity:IGNORED_LABEL, f1, f1:micro, mse, rmse or mae");
  EXPECT_FALSE(CreateMetric("top_k_accuracy:0").ok());
  auto acc = std::move(CreateMetric("acc")).value();
  EXPECT_FALSE(acc->Update(Tensor::FromVector({0, 1}, {2}), Probs()).ok());
  EXPECT_NE(acc->Update(Tensor::FromVector({0, 7, 1}, {3}), Probs()).message().find(
                "label 7 is not a class 0..2"),
            std::string::npos);
}

// The AUC by its definition: over every (positive, negative) pair, 1 when
// the positive scores higher, 1/2 on a tie.
double PairwiseAuc(const std::vector<float>& labels, const std::vector<float>& scores) {
  double wins = 0, pairs = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    for (size_t j = 0; j < labels.size(); ++j) {
      if (labels[i] != 1 || labels[j] != 0) continue;
      wins += scores[i] > scores[j] ? 1.0 : scores[i] == scores[j] ? 0.5 : 0.0;
      pairs += 1;
    }
  }
  return wins / pairs;
}

TEST(MetricsTest, AucOfPerfectReversedAndTiedOrders) {
  const std::vector<float> labels = {0, 1, 0, 1, 1};
  EXPECT_EQ(BinaryAuc(labels, {0.1f, 0.8f, 0.3f, 0.9f, 0.5f}), 1.0);
  EXPECT_EQ(BinaryAuc(labels, {0.9f, 0.2f, 0.7f, 0.1f, 0.3f}), 0.0);
  EXPECT_EQ(BinaryAuc(labels, {0.4f, 0.4f, 0.4f, 0.4f, 0.4f}), 0.5);
  // Hand-computed, 3 positives x 2 negatives = 6 pairs: 0.9 beats 0.8 and
  // 0.4 (2), the positive 0.4 ties the negative 0.4 (1/2), 0.2 beats none.
  EXPECT_DOUBLE_EQ(BinaryAuc({1, 0, 1, 0, 1}, {0.9f, 0.8f, 0.4f, 0.4f, 0.2f}), 2.5 / 6);
}

TEST(MetricsTest, AucMatchesThePairwiseDefinition) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(0, 1);
  // Scores rounded to tenths: many ties. Labels lean towards high scores.
  std::vector<float> labels, scores;
  for (int i = 0; i < 500; ++i) {
    const float s = std::round(u(gen) * 10) / 10;
    scores.push_back(s);
    labels.push_back(u(gen) < 0.2f + 0.6f * s ? 1 : 0);
  }
  const double auc = BinaryAuc(labels, scores);
  EXPECT_NEAR(auc, PairwiseAuc(labels, scores), 1e-12);
  EXPECT_GT(auc, 0.6);

  // Scores that know nothing of the labels: about 1/2.
  std::vector<float> random_labels, random_scores;
  for (int i = 0; i < 20000; ++i) {
    random_labels.push_back(u(gen) < 0.3f ? 1 : 0);
    random_scores.push_back(u(gen));
  }
  EXPECT_NEAR(BinaryAuc(random_labels, random_scores), 0.5, 0.02);
}

TEST(MetricsTest, AucIsNaNWithoutBothClasses) {
  EXPECT_TRUE(std::isnan(BinaryAuc({1, 1, 1}, {0.1f, 0.5f, 0.9f})));
  EXPECT_TRUE(std::isnan(BinaryAuc({0, 0}, {0.1f, 0.5f})));
  EXPECT_TRUE(std::isnan(BinaryAuc({}, {})));
  EXPECT_TRUE(std::isnan(BinaryAuc({0, 1}, {0.1f, NAN})));
}

TEST(MetricsTest, LogLoss) {
  EXPECT_NEAR(LogLoss({1, 0, 1}, {0.9f, 0.2f, 0.5f}),
              -(std::log(0.9) + std::log(0.8) + std::log(0.5)) / 3, 1e-7);
  // A confident mistake costs -log(1e-12), a confident hit nothing.
  EXPECT_NEAR(LogLoss({1, 0}, {0.0f, 1.0f}), -std::log(1e-12), 1e-9);
  EXPECT_EQ(LogLoss({1, 0}, {1.0f, 0.0f}), 0.0);
  EXPECT_TRUE(std::isnan(LogLoss({}, {})));
  EXPECT_TRUE(std::isnan(LogLoss({1, 0}, {0.5f, NAN})));
}

}  // namespace
}  // namespace kvtrain
