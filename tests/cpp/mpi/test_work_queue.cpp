// The survey work queue under `mpirun -np 2` (CTest label "mpi", also registered with -np 1): every
// item is computed once and its blob reaches rank 0 intact; a slow item on rank 0 does not stall the
// other ranks (rank 0 serves them from poll()); a stop request ends every rank's loop; ranks stay with
// their group.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "parallel/mpi.hpp"
#include "parallel/work_queue.hpp"
#include "mpi/mpi_test_main.hpp"

namespace sinklab::parallel {
namespace {

World* g_world = nullptr;

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// Sleeps `ms` in 1 ms steps, polling the queue between steps (what the survey does between layers).
void busy(WorkQueue& q, int ms) {
  for (int i = 0; i < ms; ++i) {
    sleep_ms(1);
    q.poll();
  }
}

// The blob of item i: a text header, then bytes (i*7 + j) % 256 (zeros included); item 5 is 3 MB so
// that it travels in MPI's rendezvous protocol.
std::string blob_of(int64_t item, int rank) {
  std::string b = "item=" + std::to_string(item) + ";rank=" + std::to_string(rank) + ";";
  const size_t n = item == 5 ? size_t(3) << 20 : size_t(item) * 100;
  for (size_t j = 0; j < n; ++j) b.push_back(char((item * 7 + int64_t(j)) % 256));
  return b;
}

TEST(WorkQueue, EveryItemOnceWithItsBlob) {
  const World& w = *g_world;
  std::vector<WorkItem> items;
  for (int i = 0; i < 40; ++i) items.push_back({i % 5, 1.0 + i % 3});
  std::map<int64_t, std::string> got;
  std::map<int64_t, int> count;
  WorkQueue q(w, items, [&](const WorkResult& r) {
    ++count[r.item];
    got[r.item] = r.blob;
    // The blob names the item and the rank that made it; the queue must report the same.
    const size_t at = r.blob.find(";rank=");
    ASSERT_NE(at, std::string::npos);
    EXPECT_EQ(r.blob.substr(0, at), "item=" + std::to_string(r.item));
    EXPECT_EQ(std::stoi(r.blob.substr(at + 6)), r.rank);
  });
  int64_t mine = 0;
  while (auto i = q.next()) {
    busy(q, 3);
    q.finish(*i, blob_of(*i, w.rank()));
    ++mine;
  }
  EXPECT_FALSE(q.next().has_value());  // stays finished
  const int64_t total = w.allreduce_sum(mine);
  EXPECT_EQ(total, 40);
  const int64_t by_others = w.allreduce_sum(int64_t(w.is_root() ? 0 : mine));
  if (w.size() > 1) {
    EXPECT_GT(by_others, 0) << "only rank 0 worked";
  }
  if (w.is_root()) {
    EXPECT_EQ(q.handed_out(), 40);
    EXPECT_EQ(q.collected(), 40);
    ASSERT_EQ(got.size(), 40u);
    for (const auto& [item, blob] : got) {
      EXPECT_EQ(count[item], 1) << item;
      const int rank = std::stoi(blob.substr(blob.find(";rank=") + 6));
      EXPECT_TRUE(blob == blob_of(item, rank)) << "item " << item << ": blob of " << blob.size() << " bytes differs";
    }
  }
}

TEST(WorkQueue, SlowItemOnRankZeroDoesNotStallTheOthers) {
  const World& w = *g_world;
  if (w.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  // Group 0: one item of cost 100 (1.5 s); groups 1..: 30 quick items (10 ms each). Rank 0 asks first
  // (the others wait 200 ms), so it gets the costly group.
  std::vector<WorkItem> items = {{0, 100.0}};
  for (int i = 0; i < 30; ++i) items.push_back({1 + i % 3, 1.0});
  WorkQueue q(w, items, [](const WorkResult&) {});
  if (!w.is_root()) sleep_ms(200);
  int64_t mine = 0, slow_rank = -1;
  while (auto i = q.next()) {
    if (*i == 0) slow_rank = w.rank();
    busy(q, *i == 0 ? 1500 : 10);
    q.finish(*i, "");
    ++mine;
  }
  EXPECT_EQ(w.allreduce_sum(mine), 31);
  EXPECT_EQ(w.allreduce_max(double(slow_rank)), 0.0) << "rank 0 did not get the costly item";
  if (w.is_root()) {
    // While rank 0 was busy for 1.5 s, the other ranks got every quick item through its poll().
    EXPECT_EQ(mine, 1);
  }
}

TEST(WorkQueue, StopRequestEndsEveryLoop) {
  const World& w = *g_world;
  std::vector<WorkItem> items(200, WorkItem{0, 1.0});
  int64_t collected = 0;
  std::map<int64_t, int> count;
  WorkQueue q(w, items, [&](const WorkResult& r) {
    ++collected;
    ++count[r.item];
  });
  const int stopper = w.size() - 1;  // the last rank stops after 3 items (rank 0 when alone)
  int64_t mine = 0;
  while (auto i = q.next()) {
    busy(q, 2);
    q.finish(*i, std::to_string(*i));
    if (++mine == 3 && w.rank() == stopper) q.request_stop();
  }
  const int64_t total = w.allreduce_sum(mine);
  EXPECT_LT(total, 200);
  if (w.is_root()) {
    EXPECT_EQ(collected, total);  // every finished item reached rank 0, none twice
    for (const auto& [item, n] : count) EXPECT_EQ(n, 1) << item;
  }
}

TEST(WorkQueue, RanksStayWithTheirGroup) {
  const World& w = *g_world;
  std::vector<WorkItem> items;
  for (int i = 0; i < 24; ++i) items.push_back({i % 2, 1.0});  // two groups, interleaved in the list
  WorkQueue q(w, items, [](const WorkResult&) {});
  std::vector<int> groups;
  while (auto i = q.next()) {
    busy(q, 3);
    groups.push_back(int(*i % 2));
    q.finish(*i, "");
  }
  int switches = 0;
  for (size_t k = 1; k < groups.size(); ++k) switches += groups[k] != groups[k - 1];
  EXPECT_LE(switches, 1) << "rank " << w.rank();  // its own group, then (once it is empty) the other
  EXPECT_EQ(w.allreduce_sum(int64_t(groups.size())), 24);
}

}  // namespace
}  // namespace sinklab::parallel

SINKLAB_MPI_TEST_MAIN(sinklab::parallel::g_world)
