// ops::add_into on the host: the bits of the loop it replaced in the pipeline executor
// (acc[i] += x[i]), float32 and float64, and the arguments it refuses.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <stdexcept>
#include <string>

#include "mdtrain/ops/accumulate.h"

namespace mdtrain {
namespace {

template <class T>
Tensor noise(std::int64_t n, DType dtype, unsigned seed) {
  Tensor t({n}, dtype);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(0.0, 3.0);
  for (std::int64_t i = 0; i < n; ++i) t.data<T>()[i] = static_cast<T>(d(rng));
  return t;
}

template <class T>
void expect_bits_of_the_plain_loop(DType dtype) {
  const std::int64_t n = 1037;  // not a multiple of any vector width
  Tensor acc = noise<T>(n, dtype, 1), want = noise<T>(n, dtype, 1);
  for (unsigned k = 2; k < 6; ++k) {
    const Tensor x = noise<T>(n, dtype, k);
    ops::add_into(acc, x);
    for (std::int64_t i = 0; i < n; ++i) want.data<T>()[i] += x.data<T>()[i];
  }
  EXPECT_EQ(std::memcmp(acc.raw(), want.raw(), want.nbytes()), 0) << name_of(dtype);
}

TEST(AddInto, GivesTheBitsOfThePlainLoop) {
  expect_bits_of_the_plain_loop<float>(DType::Float32);
  expect_bits_of_the_plain_loop<double>(DType::Float64);
}

TEST(AddInto, RefusesMismatchedArguments) {
  Tensor acc({4}, DType::Float32);
  auto message = [&](const Tensor& x) {
    try {
      ops::add_into(acc, x);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(message(Tensor({4}, DType::Float64)).rfind("[add_into] dtype mismatch", 0), 0u);
  EXPECT_EQ(message(Tensor({5}, DType::Float32)).rfind("[add_into] sizes differ", 0), 0u);
  Tensor ints({4}, DType::Int32);
  EXPECT_THROW(ops::add_into(ints, Tensor({4}, DType::Int32)), std::invalid_argument);
}

}  // namespace
}  // namespace mdtrain
