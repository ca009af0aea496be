// The survey work queue's hand-out order (parallel::WorkScheduler): stay with the group last worked on,
// else start the costliest unstarted group, else join the group with the most cost left.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.hpp"
#include "parallel/work_queue.hpp"

namespace sinklab::parallel {
namespace {

// Items 0..9: group 0 = {0,1,2} cost 1 each (3), group 1 = {3,4} cost 10 each (20), group 2 = {5..9}
// cost 2 each (10).
std::vector<WorkItem> three_groups() {
  std::vector<WorkItem> items;
  for (int i = 0; i < 3; ++i) items.push_back({0, 1.0});
  for (int i = 0; i < 2; ++i) items.push_back({1, 10.0});
  for (int i = 0; i < 5; ++i) items.push_back({2, 2.0});
  return items;
}

TEST(WorkScheduler, CostliestUnstartedGroupFirstThenAffinity) {
  WorkScheduler s(three_groups());
  EXPECT_EQ(s.size(), 10);
  EXPECT_EQ(s.remaining(), 10);
  // Three fresh ranks: groups by decreasing total cost (20, 10, 3), each from its lowest index.
  EXPECT_EQ(s.next(-1), 3);
  EXPECT_EQ(s.next(-1), 5);
  EXPECT_EQ(s.next(-1), 0);
  // Each rank stays with its group, in index order.
  EXPECT_EQ(s.next(2), 6);
  EXPECT_EQ(s.next(1), 4);
  EXPECT_EQ(s.next(0), 1);
  EXPECT_EQ(s.remaining(), 4);
  // Group 1 is exhausted: its rank joins the group with the most cost left (group 2: 3 items x 2 = 6
  // against group 0: 1 item x 1).
  EXPECT_EQ(s.next(1), 7);
  EXPECT_EQ(s.next(0), 2);
  EXPECT_EQ(s.next(0), 8);  // group 0 exhausted too
  EXPECT_EQ(s.next(-1), 9);
  EXPECT_EQ(s.remaining(), 0);
  EXPECT_EQ(s.next(2), -1);
  EXPECT_EQ(s.next(-1), -1);
}

TEST(WorkScheduler, TiesGoToTheLowerGroupAndItemsAreInterleaved) {
  // Groups given out of order in the item list: each group's items still go lowest index first.
  std::vector<WorkItem> items = {{1, 1.0}, {0, 1.0}, {1, 1.0}, {0, 1.0}};
  WorkScheduler s(items);
  EXPECT_EQ(s.group_of(0), 1);
  EXPECT_EQ(s.next(-1), 1);  // equal totals: group 0
  EXPECT_EQ(s.next(-1), 0);  // then group 1
  EXPECT_EQ(s.next(0), 3);
  EXPECT_EQ(s.next(1), 2);
  EXPECT_EQ(s.next(1), -1);
}

TEST(WorkScheduler, EveryItemExactlyOnce) {
  std::vector<WorkItem> items;
  for (int i = 0; i < 57; ++i) items.push_back({(i * 7) % 5, 1.0 + (i % 3)});
  WorkScheduler s(items);
  std::vector<int> seen(items.size(), 0);
  int last[3] = {-1, -1, -1};
  for (int step = 0;; ++step) {
    const int rank = step % 3;
    const int64_t i = s.next(last[rank]);
    if (i < 0) break;
    ++seen[size_t(i)];
    last[rank] = s.group_of(i);
  }
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 1) << "item " << i;
  EXPECT_EQ(s.remaining(), 0);
}

TEST(WorkScheduler, EmptyAndInvalid) {
  WorkScheduler empty({});
  EXPECT_EQ(empty.next(-1), -1);
  EXPECT_EQ(empty.next(3), -1);  // an unknown last group is no error
  EXPECT_THROW(WorkScheduler({{-1, 1.0}}), Error);
  EXPECT_THROW(WorkScheduler({{0, 0.0}}), Error);
}

}  // namespace
}  // namespace sinklab::parallel
