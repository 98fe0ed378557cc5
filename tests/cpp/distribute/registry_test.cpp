#include <gtest/gtest.h>

#include <algorithm>

#include "mdtrain/distribute/optional_backends.h"
#include "mdtrain/distribute/registry.h"
#include "mdtrain/distribute/single_communicator.h"

namespace mdtrain {
namespace {

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(BackendRegistry, BuiltInsAreRegisteredAndSingleAndThreadsAlwaysAvailable) {
  const auto all = registered_backends();
  for (const char* name : {"single", "threads", "mpi", "nccl"}) EXPECT_TRUE(contains(all, name)) << name;
  const auto avail = available_backends();
  EXPECT_TRUE(contains(avail, "single"));
  EXPECT_TRUE(contains(avail, "threads"));
  EXPECT_EQ(contains(avail, "mpi"), mpi_available());
  EXPECT_EQ(contains(avail, "nccl"), nccl_available());
  EXPECT_EQ(is_backend_available("mpi"), mpi_available());
  EXPECT_FALSE(is_backend_available("no_such_backend"));
}

TEST(BackendRegistry, CreatesThreadsGroupsAndTheSingleFallback) {
  auto comms = create_communicators("threads", 3);
  ASSERT_EQ(comms.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(comms[r]->rank(), r);
    EXPECT_EQ(comms[r]->size(), 3);
  }
  auto single = create_communicators("single");
  ASSERT_EQ(single.size(), 1u);
  EXPECT_EQ(single[0]->size(), 1);
  EXPECT_EQ(single[0]->backend(), "single");
  EXPECT_THROW(create_communicators("single", 2), std::invalid_argument);
  EXPECT_THROW(create_communicators("threads", 0), std::invalid_argument);
}

TEST(BackendRegistry, UnknownNameListsTheRegisteredBackends) {
  try {
    create_communicators("carrier_pigeon");
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'carrier_pigeon'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("threads"), std::string::npos) << msg;
  }
}

TEST(BackendRegistry, MissingOptionalBackendsSayHowToRebuild) {
  if (!mpi_available()) {
    try {
      create_communicators("mpi");
      ADD_FAILURE() << "no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("[mpi]"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("-DMDTRAIN_MPI=ON"), std::string::npos) << e.what();
    }
    EXPECT_THROW(make_mpi_communicator(), std::runtime_error);
  }
  if (!nccl_available()) {
    try {
      create_communicators("nccl", 2);
      ADD_FAILURE() << "no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("[nccl]"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("-DMDTRAIN_NCCL=ON"), std::string::npos) << e.what();
    }
  }
}

TEST(BackendRegistry, RegisterBackendAddsANameOnceOnly) {
  int calls = 0;
  register_backend("test_loopback", [&calls](int) {
    ++calls;
    std::vector<std::unique_ptr<Communicator>> v;
    v.push_back(make_single_communicator());
    return v;
  });
  EXPECT_TRUE(is_backend_available("test_loopback"));
  auto comms = create_communicators("test_loopback");
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(comms.size(), 1u);
  EXPECT_THROW(register_backend("test_loopback", [](int) { return std::vector<std::unique_ptr<Communicator>>{}; }),
               std::invalid_argument);
  EXPECT_THROW(register_backend("threads", [](int) { return std::vector<std::unique_ptr<Communicator>>{}; }),
               std::invalid_argument);
  EXPECT_THROW(register_backend("test_empty", nullptr), std::invalid_argument);
  register_backend(
      "test_unavailable", [](int) { return std::vector<std::unique_ptr<Communicator>>{}; }, [] { return false; });
  EXPECT_FALSE(is_backend_available("test_unavailable"));
  EXPECT_TRUE(contains(registered_backends(), "test_unavailable"));
}

}  // namespace
}  // namespace mdtrain
