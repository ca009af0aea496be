// The MPI world under `mpirun -np 2` (CTest label "mpi"): distinct ranks, in-place sums, broadcast,
// gather of variable-length blobs. Also runs (trivially) as a single process.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "parallel/mpi.hpp"
#include "mpi/mpi_test_main.hpp"

namespace sinklab::parallel {
namespace {

World* g_world = nullptr;

TEST(MpiWorld, RanksAreDistinct) {
  const World& w = *g_world;
  ASSERT_GE(w.size(), 1);
  ASSERT_GE(w.rank(), 0);
  ASSERT_LT(w.rank(), w.size());
  EXPECT_EQ(log::rank(), w.rank());
  EXPECT_GE(w.local_rank(), 0);
  EXPECT_LT(w.local_rank(), w.local_size());
  // Every rank contributes 2^rank: the sum is 2^size - 1 only when ranks are distinct.
  int64_t bits = w.allreduce_sum(int64_t(1) << w.rank());
  EXPECT_EQ(bits, (int64_t(1) << w.size()) - 1);
  // Local ranks on one node are distinct too.
  int64_t local_bits = w.allreduce_sum(int64_t(1) << w.local_rank());
  if (w.local_size() == w.size()) {
    EXPECT_EQ(local_bits, (int64_t(1) << w.size()) - 1);
  }
}

// Under a launcher (mpiexec -np 1 or 2) MPI is initialised; a process started on its own runs as rank
// 0 of 1 without MPI (the *_no_launcher CTest runs: no orted daemon, no singleton start to fail).
TEST(MpiWorld, MpiOnlyUnderALauncher) {
  const World& w = *g_world;
  int initialized = 0;
  MPI_Initialized(&initialized);
  const bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
  EXPECT_EQ(w.mpi_active(), launched);
  EXPECT_EQ(bool(initialized), launched);
  if (!launched) {
    EXPECT_EQ(w.size(), 1);
    EXPECT_EQ(w.rank(), 0);
  }
}

// Which GPU a rank drives: its local rank when every rank sees every GPU, GPU 0 when each sees its own;
// more ranks than GPUs is refused naming the counts.
TEST(MpiWorld, GpuOfALocalRank) {
  EXPECT_EQ(World::gpu_for(0, 8, 8), 0);
  EXPECT_EQ(World::gpu_for(5, 8, 8), 5);
  EXPECT_EQ(World::gpu_for(5, 8, 1), 0);  // srun --gpus-per-task=1 with binding: one visible GPU per rank
  EXPECT_EQ(World::gpu_for(1, 2, 4), 1);  // fewer ranks than GPUs
  EXPECT_EQ(World::gpu_for(3, 4, 0), 3);  // no GPU: the CUDA backend says so
  try {
    World::gpu_for(2, 4, 2);
    ADD_FAILURE() << "4 ranks on 2 GPUs were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("local rank 2 of 4 on this node sees 2 GPUs"), std::string::npos) << e.what();
  }
}

TEST(MpiWorld, AllreduceSums) {
  const World& w = *g_world;
  const int n = w.size(), r = w.rank();
  std::vector<float> f(1000);
  std::vector<double> d(7);
  for (size_t i = 0; i < f.size(); ++i) f[i] = float(i) + float(r);
  for (size_t i = 0; i < d.size(); ++i) d[i] = 0.5 * double(i) * (r + 1);
  w.allreduce_sum(f.data(), f.size());
  w.allreduce_sum(d.data(), d.size());
  const double rank_sum = n * (n - 1) / 2.0;
  for (size_t i = 0; i < f.size(); ++i) ASSERT_EQ(f[i], float(n * double(i) + rank_sum)) << i;
  for (size_t i = 0; i < d.size(); ++i) EXPECT_DOUBLE_EQ(d[i], 0.5 * double(i) * (rank_sum + n));
  EXPECT_DOUBLE_EQ(w.allreduce_sum(1.5), 1.5 * n);
  EXPECT_DOUBLE_EQ(w.allreduce_max(double(r)), double(n - 1));
  // Element-wise, in one call; a NaN on any one rank is NaN everywhere, whichever rank holds it.
  const double nan = std::nan("");
  std::vector<double> m = {double(r), -double(r), r == n - 1 ? nan : 1.0, r == 0 ? nan : 2.0, -1e300};
  w.allreduce_max(m.data(), m.size());
  EXPECT_EQ(m[0], double(n - 1));
  EXPECT_EQ(m[1], 0.0);
  EXPECT_TRUE(std::isnan(m[2]));
  EXPECT_TRUE(std::isnan(m[3]));
  EXPECT_EQ(m[4], -1e300);
  w.allreduce_sum(static_cast<float*>(nullptr), 0);  // empty buffers are fine
}

TEST(MpiWorld, Broadcast) {
  const World& w = *g_world;
  std::string text = w.is_root() ? std::string("config from rank 0\n[x]\ny = 1") : std::string("junk");
  w.broadcast(text);
  EXPECT_EQ(text, "config from rank 0\n[x]\ny = 1");
  // From the last rank, bytes including zeros; receivers start with a different size.
  const int root = w.size() - 1;
  std::vector<uint8_t> bytes;
  if (w.rank() == root) bytes = {0, 1, 2, 0, 255};
  w.broadcast(bytes, root);
  EXPECT_EQ(bytes, (std::vector<uint8_t>{0, 1, 2, 0, 255}));
  std::string empty = w.is_root() ? "" : "x";
  w.broadcast(empty);
  EXPECT_EQ(empty, "");
}

TEST(MpiWorld, GatherVariableLengthBlobs) {
  const World& w = *g_world;
  // Rank r sends r+1 copies of char('a'+r) (rank 1's blob has an embedded NUL at the end).
  std::string blob(size_t(w.rank() + 1), char('a' + w.rank()));
  if (w.rank() == 1) blob.back() = '\0';
  std::vector<std::string> all = w.gather(blob);
  if (w.is_root()) {
    ASSERT_EQ(all.size(), size_t(w.size()));
    for (int r = 0; r < w.size(); ++r) {
      std::string want(size_t(r + 1), char('a' + r));
      if (r == 1) want.back() = '\0';
      EXPECT_EQ(all[size_t(r)], want) << "rank " << r;
    }
  } else {
    EXPECT_TRUE(all.empty());
  }
  // Empty blobs from everyone.
  std::vector<std::string> none = w.gather("");
  if (w.is_root()) {
    EXPECT_EQ(none, std::vector<std::string>(size_t(w.size())));
  }
  w.barrier();
}

}  // namespace
}  // namespace sinklab::parallel

SINKLAB_MPI_TEST_MAIN(sinklab::parallel::g_world)
