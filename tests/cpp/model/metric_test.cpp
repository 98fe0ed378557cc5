// Metrics: Keras's documented values, accumulation, exact cross-replica aggregation through
// totals(), Keras 3's resolution of "accuracy", and argmax tie breaking.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "mdtrain/model/metric.h"
#include "mdtrain/nn/loss.h"

namespace mdtrain {
namespace {

using metrics::BinaryAccuracy;
using metrics::CategoricalAccuracy;
using metrics::MeanAbsoluteError;
using metrics::MeanSquaredError;
using metrics::SparseCategoricalAccuracy;
using metrics::SparseTopKCategoricalAccuracy;

Tensor make(Shape shape, const std::vector<double>& v, DType dtype = DType::Float32) {
  Tensor t(std::move(shape), dtype);
  EXPECT_EQ(static_cast<std::size_t>(t.numel()), v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    switch (dtype) {
      case DType::Float32: t.data<float>()[i] = static_cast<float>(v[i]); break;
      case DType::Float64: t.data<double>()[i] = v[i]; break;
      case DType::Int32: t.data<std::int32_t>()[i] = static_cast<std::int32_t>(v[i]); break;
      case DType::Int64: t.data<std::int64_t>()[i] = static_cast<std::int64_t>(v[i]); break;
      case DType::UInt8: t.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(v[i]); break;
    }
  }
  return t;
}

// ---- Keras's documented values ------------------------------------------------------------------

TEST(Metrics, KerasDocExamples) {
  BinaryAccuracy bin;
  bin.update(make({4, 1}, {1, 1, 0, 0}), make({4, 1}, {0.98, 1, 0, 0.6}));
  EXPECT_DOUBLE_EQ(bin.result(), 0.75);

  CategoricalAccuracy cat_acc;
  cat_acc.update(make({2, 3}, {0, 0, 1, 0, 1, 0}), make({2, 3}, {0.1, 0.9, 0.8, 0.05, 0.95, 0}));
  EXPECT_DOUBLE_EQ(cat_acc.result(), 0.5);

  SparseCategoricalAccuracy sparse;
  sparse.update(make({2, 1}, {2, 1}), make({2, 3}, {0.1, 0.6, 0.3, 0.05, 0.95, 0}));
  EXPECT_DOUBLE_EQ(sparse.result(), 0.5);

  SparseTopKCategoricalAccuracy top1("top1", 1);
  top1.update(make({2}, {2, 1}, DType::Int32), make({2, 3}, {0.1, 0.9, 0.8, 0.05, 0.95, 0}));
  EXPECT_DOUBLE_EQ(top1.result(), 0.5);
  SparseTopKCategoricalAccuracy top2("top2", 2);
  top2.update(make({2}, {2, 1}, DType::Int32), make({2, 3}, {0.1, 0.9, 0.8, 0.05, 0.95, 0}));
  EXPECT_DOUBLE_EQ(top2.result(), 1.0);

  // keras.metrics.MeanSquaredError doc: [[0, 1], [0, 0]] vs [[1, 1], [0, 0]] -> 0.25.
  MeanSquaredError mse;
  mse.update(make({2, 2}, {0, 1, 0, 0}), make({2, 2}, {1, 1, 0, 0}));
  EXPECT_DOUBLE_EQ(mse.result(), 0.25);
  MeanAbsoluteError mae;
  mae.update(make({2, 2}, {0, 1, 0, 0}), make({2, 2}, {1, 1, 0, 0}));
  EXPECT_DOUBLE_EQ(mae.result(), 0.25);
}

TEST(Metrics, LabelDtypesAndShapes) {
  const Tensor pred = make({3, 4}, {0.1, 0.2, 0.6, 0.1, 0.9, 0.05, 0.05, 0.0, 0.2, 0.3, 0.1, 0.4});
  for (DType dt : {DType::Int32, DType::Int64, DType::Float32, DType::Float64, DType::UInt8}) {
    SparseCategoricalAccuracy m;
    m.update(make({3}, {2, 0, 1}, dt), pred);
    EXPECT_DOUBLE_EQ(m.result(), 2.0 / 3.0) << name_of(dt);
  }
  // A float label that is not an integer never matches (Keras compares as floats).
  SparseCategoricalAccuracy frac;
  frac.update(make({1}, {2.5}), make({1, 4}, {0, 0, 1, 0}));
  EXPECT_DOUBLE_EQ(frac.result(), 0.0);
  // Binary accuracy on y_true (batch,) against y_pred (batch, 1), and threshold is strict (>).
  BinaryAccuracy bin;
  bin.update(make({4}, {1, 0, 0, 1}, DType::Int32), make({4, 1}, {0.7, 0.5, 0.2, 0.5}));
  EXPECT_DOUBLE_EQ(bin.result(), 0.75);
  // Per sample, binary accuracy is the mean over its positions; each sample then counts once.
  BinaryAccuracy multi;
  multi.update(make({2, 4}, {1, 1, 1, 1, 0, 0, 0, 0}), make({2, 4}, {0.9, 0.9, 0.9, 0.1, 0.1, 0.1, 0.1, 0.1}));
  EXPECT_DOUBLE_EQ(multi.result(), (0.75 + 1.0) / 2);
  EXPECT_DOUBLE_EQ(multi.totals()[1], 2.0);
  // Sequences: (batch, time, classes) with (batch, time) labels: per-sample mean over time.
  SparseCategoricalAccuracy seq;
  seq.update(make({2, 2}, {0, 1, 1, 1}), make({2, 2, 2}, {1, 0, 1, 0, 0, 1, 0, 1}));
  EXPECT_DOUBLE_EQ(seq.totals()[0], 0.5 + 1.0);
  EXPECT_DOUBLE_EQ(seq.totals()[1], 2.0);
}

TEST(Metrics, ArgmaxTiesGoToTheFirstMaximum) {
  SparseCategoricalAccuracy first, second;
  first.update(make({1}, {0}, DType::Int32), make({1, 3}, {0.4, 0.4, 0.2}));
  second.update(make({1}, {1}, DType::Int32), make({1, 3}, {0.4, 0.4, 0.2}));
  EXPECT_DOUBLE_EQ(first.result(), 1.0);
  EXPECT_DOUBLE_EQ(second.result(), 0.0);
  // Ties in y_true too: argmax([0.5, 0.5, 0]) is 0 on both sides.
  CategoricalAccuracy c;
  c.update(make({2, 3}, {0.5, 0.5, 0, 0, 1, 0}), make({2, 3}, {0.3, 0.3, 0.3, 0.2, 0.2, 0.6}));
  EXPECT_DOUBLE_EQ(c.result(), 0.5);
  // Top-k counts ties at the boundary as in (TF's in_top_k).
  SparseTopKCategoricalAccuracy top1("top1", 1);
  top1.update(make({1}, {1}, DType::Int32), make({1, 3}, {0.4, 0.4, 0.2}));
  EXPECT_DOUBLE_EQ(top1.result(), 1.0);
}

// ---- accumulation and aggregation ---------------------------------------------------------------

struct Batch {
  Tensor y_true, y_pred;
};

Batch random_sparse(std::mt19937_64& rng, std::int64_t n) {
  std::uniform_int_distribution<int> cls(0, 4);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<double> labels(n), pred(n * 5);
  for (auto& l : labels) l = cls(rng);
  for (auto& p : pred) p = u(rng);
  return {make({n}, labels, DType::Int64), make({n, 5}, pred)};
}

TEST(Metrics, SeveralUpdatesEqualOneUpdateOnTheConcatenation) {
  std::mt19937_64 rng(5);
  Batch all = random_sparse(rng, 23);
  std::vector<std::unique_ptr<Metric>> split, whole;
  for (auto* v : {&split, &whole}) {
    v->push_back(std::make_unique<SparseCategoricalAccuracy>());
    v->push_back(std::make_unique<SparseTopKCategoricalAccuracy>("top3", 3));
  }
  for (std::size_t i = 0; i < split.size(); ++i) {
    split[i]->update(all.y_true.rows(0, 10), all.y_pred.rows(0, 10));
    split[i]->update(all.y_true.rows(10, 11), all.y_pred.rows(10, 11));
    split[i]->update(all.y_true.rows(11, 11), all.y_pred.rows(11, 11));  // an empty batch adds nothing
    split[i]->update(all.y_true.rows(11, 23), all.y_pred.rows(11, 23));
    whole[i]->update(all.y_true, all.y_pred);
    EXPECT_DOUBLE_EQ(split[i]->result(), whole[i]->result()) << split[i]->name();
    EXPECT_EQ(split[i]->totals(), whole[i]->totals()) << split[i]->name();
    EXPECT_GT(whole[i]->result(), 0.0);
  }
  // Regression metrics: a plain mean over samples.
  MeanSquaredError a, b;
  Tensor t = make({5, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}), p = make({5, 2}, {1, 1, 2, 5, 4, 5, 9, 7, 8, 8});
  a.update(t.rows(0, 2), p.rows(0, 2));
  a.update(t.rows(2, 5), p.rows(2, 5));
  b.update(t, p);
  EXPECT_DOUBLE_EQ(a.result(), b.result());
  EXPECT_DOUBLE_EQ(b.result(), (0.5 + 2.0 + 0 + 4.5 + 0.5) / 5);
}

TEST(Metrics, TotalsOfTwoReplicasAggregateToTheWhole) {
  std::mt19937_64 rng(11);
  Batch all = random_sparse(rng, 17);
  SparseCategoricalAccuracy whole, r0, r1;
  whole.update(all.y_true, all.y_pred);
  r0.update(all.y_true.rows(0, 8), all.y_pred.rows(0, 8));  // uneven split: 8 + 9
  r1.update(all.y_true.rows(8, 17), all.y_pred.rows(8, 17));
  std::vector<double> sum = r0.totals();
  for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += r1.totals()[i];
  SparseCategoricalAccuracy aggregated;
  aggregated.set_totals(sum);
  EXPECT_EQ(aggregated.totals(), whole.totals());
  EXPECT_DOUBLE_EQ(aggregated.result(), whole.result());
  EXPECT_THROW(aggregated.set_totals({1.0}), std::invalid_argument);
  aggregated.reset();
  EXPECT_EQ(aggregated.result(), 0.0);
  EXPECT_EQ(aggregated.totals(), (std::vector<double>{0.0, 0.0}));
}

TEST(Metrics, MeanIsWeightedAndZeroWhenEmpty) {
  Mean loss_tracker("loss");
  EXPECT_EQ(loss_tracker.result(), 0.0);
  loss_tracker.update_value(2.0, 3.0);
  loss_tracker.update_value(4.0);
  EXPECT_DOUBLE_EQ(loss_tracker.result(), (2.0 * 3 + 4.0) / 4);
  Mean values;
  values.update(Tensor(), make({2, 2}, {1, 3, 5, 7}, DType::Float64));  // per-sample means 2 and 6
  EXPECT_DOUBLE_EQ(values.result(), 4.0);
  EXPECT_DOUBLE_EQ(values.totals()[1], 2.0);
  auto copy = values.clone();
  copy->update(Tensor(), make({1}, {10}, DType::Float64));
  EXPECT_DOUBLE_EQ(values.result(), 4.0);  // clones are independent
  EXPECT_DOUBLE_EQ(copy->result(), (2.0 + 6.0 + 10.0) / 3);
}

// ---- resolution of "accuracy" (Keras 3 compile_utils.get_metric) --------------------------------

TEST(MakeMetric, AccuracyResolvesLikeKeras3) {
  auto scce = make_loss("sparse_categorical_crossentropy");
  auto sparse = make_metric("accuracy", scce.get(), {32}, {32, 10});
  EXPECT_EQ(sparse->class_name(), "SparseCategoricalAccuracy");
  EXPECT_EQ(sparse->name(), "accuracy");
  EXPECT_EQ(make_metric("accuracy", nullptr, {32, 1}, {32, 10})->class_name(), "SparseCategoricalAccuracy");

  auto binary = make_metric("accuracy", nullptr, {32, 1}, {32, 1});
  EXPECT_EQ(binary->class_name(), "BinaryAccuracy");
  EXPECT_EQ(make_metric("accuracy", nullptr, {32}, {32, 1})->class_name(), "BinaryAccuracy");

  auto categorical = make_metric("acc", nullptr, {32, 10}, {32, 10});
  EXPECT_EQ(categorical->class_name(), "CategoricalAccuracy");
  EXPECT_EQ(categorical->name(), "acc");  // Keras 3 logs the identifier the user gave
  EXPECT_EQ(make_metric("Accuracy", nullptr, {32, 10}, {32, 10})->name(), "Accuracy");

  // The resolved metric behaves as its class does.
  sparse->update(make({2}, {1, 0}, DType::Int32), make({2, 10}, {0, 1, 0, 0, 0, 0, 0, 0, 0, 0,  //
                                                                 0, 1, 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_DOUBLE_EQ(sparse->result(), 0.5);
}

TEST(MakeMetric, NamedMetricsKeepTheUsersKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"sparse_categorical_accuracy", "SparseCategoricalAccuracy"},
      {"categorical_accuracy", "CategoricalAccuracy"},
      {"binary_accuracy", "BinaryAccuracy"},
      {"mse", "MeanSquaredError"},
      {"mean_squared_error", "MeanSquaredError"},
      {"mae", "MeanAbsoluteError"},
      {"mean_absolute_error", "MeanAbsoluteError"},
      {"sparse_top_k_categorical_accuracy", "SparseTopKCategoricalAccuracy"},
  };
  for (const auto& [id, cls] : cases) {
    auto m = make_metric(id, nullptr, {8}, {8, 10});
    EXPECT_EQ(m->class_name(), cls) << id;
    EXPECT_EQ(m->name(), id);
    EXPECT_EQ(m->config().at("name").as_string(), id);
  }
  EXPECT_DOUBLE_EQ(make_metric("binary_accuracy", nullptr, {8}, {8, 1})->config().at("threshold").as_number(), 0.5);
  EXPECT_EQ(make_metric("sparse_top_k_categorical_accuracy", nullptr, {8}, {8, 10})->config().at("k").as_int(), 5);

  try {
    make_metric("f1_score", nullptr, {8}, {8, 10});
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[metric] unknown metric 'f1_score'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'accuracy'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'mse'"), std::string::npos) << msg;
  }
}

TEST(Metrics, ShapeErrorsNameTheMetricAndBothShapes) {
  SparseCategoricalAccuracy m("accuracy");
  try {
    m.update(make({31}, std::vector<double>(31, 0)), Tensor({32, 10}));
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[metric] accuracy"), std::string::npos) << msg;
    EXPECT_NE(msg.find("(31,)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("(32, 10)"), std::string::npos) << msg;
  }
  EXPECT_THROW(CategoricalAccuracy().update(Tensor({4}, DType::Int32), Tensor({4, 3})), std::invalid_argument);
  EXPECT_THROW(MeanSquaredError().update(Tensor({4, 2}), Tensor({4, 3})), std::invalid_argument);
  EXPECT_THROW(BinaryAccuracy("b", 1.0), std::invalid_argument);
}

}  // namespace
}  // namespace mdtrain
