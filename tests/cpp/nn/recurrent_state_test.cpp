// The recurrent layers' state API (nn/recurrent_layer.h: forward_from_state, final_state,
// backward_with_state): dL/dx, dL/dweights and dL/d(initial states) of
// L = sum(G * y) + sum_i sum(S_i * final_state_i) against float64 central finite differences, and
// chunked runs (a sequence cut in two, the second half started from the first's final states)
// equal to the whole sequence.
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "gradient_check.h"
#include "mdtrain/nn/gru.h"
#include "mdtrain/nn/lstm.h"
#include "mdtrain/nn/simple_rnn.h"

namespace mdtrain {
namespace {

using testing::dot;
using testing::expect_close;
using testing::random_tensor;

struct StateCase {
  bool return_sequences, go_backwards, dropout;
  bool masked = false;  // rows whose first or last steps are masked: the states pass them unchanged
};

template <class Cell>
std::unique_ptr<Cell> make_cell(const StateCase& p) {
  RecurrentLayer::Options o;
  o.units = 3;
  o.return_sequences = p.return_sequences;
  o.go_backwards = p.go_backwards;
  if (p.dropout) {
    o.dropout = 0.3;
    o.recurrent_dropout = 0.4;
    o.seed = 9;
  }
  auto layer = std::make_unique<Cell>("cell", o);
  layer->build({4, 2}, 5, DType::Float64);
  std::mt19937_64 rng(31);
  for (Parameter* w : layer->parameters()) w->value.copy_from(random_tensor(w->value.shape(), rng, -0.8, 0.8));
  return layer;
}

// Central differences of f over every element of t.
std::vector<double> numeric_gradient(Tensor& t, const std::function<double()>& f) {
  std::vector<double> g(static_cast<std::size_t>(t.numel()));
  const double eps = 1e-6;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    double& v = t.data<double>()[i];
    const double keep = v;
    v = keep + eps;
    const double up = f();
    v = keep - eps;
    const double down = f();
    v = keep;
    g[static_cast<std::size_t>(i)] = (up - down) / (2 * eps);
  }
  return g;
}

template <class Cell>
void check_state_gradients(const StateCase& p) {
  auto layer = make_cell<Cell>(p);
  std::mt19937_64 rng(41);
  const std::int64_t batch = 3, u = 3;
  Tensor x = random_tensor({batch, 4, 2}, rng);
  std::vector<Tensor> init, seeds;
  for (std::int64_t i = 0; i < layer->state_count(); ++i) {
    init.push_back(random_tensor({batch, u}, rng, -0.9, 0.9));
    seeds.push_back(random_tensor({batch, u}, rng));
  }
  if (p.masked) {
    Tensor mask({batch, 4}, DType::Float64);
    const double read[] = {0, 1, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0};  // first and last; last two; all
    for (int i = 0; i < 12; ++i) mask.data<double>()[i] = read[i];
    layer->set_input_mask(mask);
  }
  ForwardContext ctx;
  ctx.training = p.dropout;
  const Shape out = p.return_sequences ? Shape{batch, 4, u} : Shape{batch, u};
  Tensor g = random_tensor(out, rng);
  auto loss = [&] {
    double l = dot(g, layer->forward_from_state(x, init, ctx));
    const auto fin = layer->final_state();
    for (std::size_t i = 0; i < fin.size(); ++i) l += dot(seeds[i], fin[i].clone());
    return l;
  };
  loss();
  Tensor dx = layer->backward_with_state(g, seeds, true, true).clone();
  std::vector<Tensor> d_init;
  for (const Tensor& t : layer->initial_state_gradient()) d_init.push_back(t.clone());
  std::vector<Tensor> d_weights;
  for (Parameter* w : layer->parameters()) d_weights.push_back(w->grad.clone());
  ASSERT_EQ(d_init.size(), init.size());
  expect_close(dx, numeric_gradient(x, loss), "dL/dx");
  for (std::size_t i = 0; i < init.size(); ++i)
    expect_close(d_init[i], numeric_gradient(init[i], loss), "dL/d(initial state " + std::to_string(i) + ")");
  auto params = layer->parameters();
  for (std::size_t i = 0; i < params.size(); ++i)
    expect_close(d_weights[i], numeric_gradient(params[i]->value, loss), params[i]->name);
}

class StateGradient : public ::testing::TestWithParam<StateCase> {};
TEST_P(StateGradient, LstmMatchesFiniteDifferences) { check_state_gradients<LSTM>(GetParam()); }
TEST_P(StateGradient, GruMatchesFiniteDifferences) { check_state_gradients<GRU>(GetParam()); }
TEST_P(StateGradient, SimpleRnnMatchesFiniteDifferences) { check_state_gradients<SimpleRNN>(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Options, StateGradient,
                         ::testing::Values(StateCase{false, false, false}, StateCase{true, false, false},
                                           StateCase{true, true, false}, StateCase{true, false, true},
                                           StateCase{false, false, false, true}, StateCase{true, true, true, true}));

// Without initial states or state gradients the state API is forward()/backward() exactly.
TEST(RecurrentState, EmptyStatesAreForwardAndBackward) {
  auto a = make_cell<LSTM>({true, false, false});
  auto b = make_cell<LSTM>({true, false, false});
  std::mt19937_64 rng(5);
  Tensor x = random_tensor({2, 4, 2}, rng), g = random_tensor({2, 4, 3}, rng);
  Tensor ya = a->forward(x, {}).clone(), yb = b->forward_from_state(x, {}, {}).clone();
  Tensor dxa = a->backward(g, true).clone(), dxb = b->backward_with_state(g, {}, true, false).clone();
  for (std::int64_t i = 0; i < ya.numel(); ++i) ASSERT_EQ(ya.data<double>()[i], yb.data<double>()[i]);
  for (std::int64_t i = 0; i < dxa.numel(); ++i) ASSERT_EQ(dxa.data<double>()[i], dxb.data<double>()[i]);
  EXPECT_TRUE(b->initial_state_gradient().empty());
}

TEST(RecurrentState, WrongStateCountOrShapeNamesTheLayer) {
  auto l = make_cell<LSTM>({true, false, false});
  Tensor x({2, 4, 2}, DType::Float64), h({2, 3}, DType::Float64), bad({3, 3}, DType::Float64);
  x.fill(0.0);
  EXPECT_THROW(l->forward_from_state(x, {h}, {}), std::invalid_argument);
  try {
    l->forward_from_state(x, {h, bad}, {});
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("[lstm] layer \"cell\""), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mdtrain
