// The main() of every mpi test: MPI starts before GoogleTest, only rank 0 prints the report, and every
// rank's result decides the exit status.
//
//   SINKLAB_MPI_TEST_MAIN(sinklab::parallel::g_world)   // a World* the tests read
#pragma once

#include <gtest/gtest.h>

#include <cstdint>

#include "parallel/mpi.hpp"

namespace sinklab::test {

inline int run_tests_on_every_rank(const parallel::World& world, int& argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (!world.is_root()) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  return world.allreduce_sum(int64_t(rc != 0)) ? 1 : 0;
}

}  // namespace sinklab::test

#define SINKLAB_MPI_TEST_MAIN(world_pointer)                                \
  int main(int argc, char** argv) {                                         \
    auto world = sinklab::parallel::World::init(argc, argv);                    \
    world_pointer = &world;                                                 \
    return sinklab::test::run_tests_on_every_rank(world, argc, argv);       \
  }
