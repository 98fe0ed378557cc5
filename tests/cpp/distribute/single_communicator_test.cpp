// The shared suite on the size-1 fallback.
#include "communicator_suite.h"

#include "mdtrain/distribute/single_communicator.h"

namespace mdtrain::testing {
namespace {

INSTANTIATE_TEST_SUITE_P(Single, CommunicatorSuite,
                         ::testing::Values(BackendCase{"single", 1,
                                                       [] {
                                                         Comms comms;
                                                         comms.push_back(make_single_communicator());
                                                         return comms;
                                                       },
                                                       true, false}),
                         [](const ::testing::TestParamInfo<BackendCase>& info) { return info.param.name; });

TEST(SingleCommunicator, AbortMakesLaterCollectivesThrow) {
  auto comm = make_single_communicator();
  EXPECT_EQ(comm->backend(), "single");
  comm->barrier();
  comm->abort("stop");
  try {
    comm->barrier();
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("stop"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mdtrain::testing
