#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "mdtrain/core/dtype_dispatch.h"

namespace mdtrain {
namespace {

TEST(DtypeDispatch, FloatingCallsWithTheElementTypeAndReturnsItsResult) {
  auto size = [](DType d) { return dispatch_floating(d, "test", [](auto tag) { return sizeof(tag); }); };
  EXPECT_EQ(size(DType::Float32), sizeof(float));
  EXPECT_EQ(size(DType::Float64), sizeof(double));
  bool is_double = false;
  dispatch_floating(DType::Float64, "test", [&](auto tag) { is_double = std::is_same_v<decltype(tag), double>; });
  EXPECT_TRUE(is_double);
}

TEST(DtypeDispatch, FloatingRejectsIntegerDtypesWithTheAreaPrefix) {
  for (DType d : {DType::Int32, DType::Int64, DType::UInt8}) {
    bool called = false;
    try {
      dispatch_floating(d, "optim", [&](auto) { called = true; });
      ADD_FAILURE() << "no exception for " << name_of(d);
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()).rfind("[optim] ", 0), 0u) << e.what();
      EXPECT_NE(std::string(e.what()).find(name_of(d)), std::string::npos) << e.what();
    }
    EXPECT_FALSE(called);
  }
}

TEST(DtypeDispatch, AnyCoversEveryDtype) {
  for (DType d : {DType::Float32, DType::Float64, DType::Int32, DType::Int64, DType::UInt8}) {
    const DType seen = dispatch_any(d, "test", [](auto tag) { return dtype_of<decltype(tag)>::value; });
    EXPECT_EQ(seen, d);
  }
}

}  // namespace
}  // namespace mdtrain
