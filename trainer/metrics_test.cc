#include "trainer/metrics.h"

#include <cmath>

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
}

TEST(MetricsTest, PaddedRowsAreIgnored) {
  StatusOr<std::unique_ptr<Metric>> acc = CreateMetric("accuracy");
  ASSERT_TRUE(acc.ok());
  ASSERT_TRUE((*acc)->Update(Labels(), Probs(), /*pad=*/2).ok());
  EXPECT_EQ((*acc)->count(), 1);
  EXPECT_EQ((*acc)->Get(), 1.0);
}

TEST(MetricsTest, Errors) {
  EXPECT_EQ(CreateMetric("f1").status().message(),
            "unknown metric \"f1\": expected accuracy, top_k_accuracy:K or cross-entropy");
  EXPECT_FALSE(CreateMetric("top_k_accuracy:0").ok());
  auto acc = std::move(CreateMetric("acc")).value();
  EXPECT_FALSE(acc->Update(Tensor::FromVector({0, 1}, {2}), Probs()).ok());
  EXPECT_NE(acc->Update(Tensor::FromVector({0, 7, 1}, {3}), Probs()).message().find(
                "label 7 is not a class 0..2"),
            std::string::npos);
}

}  // namespace
}  // namespace kvtrain
