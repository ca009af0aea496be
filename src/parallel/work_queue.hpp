// A dynamic work queue over MPI for jobs whose items differ widely in cost (the survey: a 14M-parameter
// model next to a 13B one). Rank 0 hands out item indices one at a time on request and is the only rank
// that sees results; every rank, rank 0 included, computes items.
//
//   WorkQueue q(world, items, [&](const WorkResult& r) { /* rank 0 only: write r */ });
//   while (auto i = q.next()) q.finish(*i, compute(*i, [&] { q.poll(); }));
//
// WHY NO THREAD. The World is MPI_THREAD_FUNNELED, so only the main thread may call MPI. Rank 0 therefore
// serves the other ranks from poll(), which its own work must call now and then (the survey calls it
// between the layers of a forward pass, so a rank waits at most one layer of rank 0's model for its
// next item); next() and finish() poll too. A dedicated coordinator rank would idle a GPU; a coordinator
// thread would need MPI_THREAD_MULTIPLE.
//
// PROTOCOL (tags kRequest / kAssign on MPI_COMM_WORLD). A worker sends one kRequest message per
// next() call: [int64 finished item or -1 | int64 flags | result blob of that item]; rank 0 answers
// with kAssign: int64 next item, or -1 when there is nothing more for that rank (all handed out, or a
// stop was requested). Rank 0's own results go to the collector directly. Rank 0's final next() keeps
// serving until every other rank has been told -1, so all results are collected when it returns.
//
// ORDER. Which rank computes which item, and when results arrive, depends on timing. Callers that
// want reproducible output key results by item (the survey writes /items/<id>), never by arrival.
//
// SCHEDULING (WorkScheduler, below): items carry a group (items of one group share an expensive set-up,
// e.g. loading one model) and a cost. A rank gets more items of the group it last worked on while there
// are any; otherwise the costliest group nobody has started (longest-processing-time first); otherwise
// it joins the group with the most cost left.
//
// STOPPING. request_stop() (e.g. on SIGTERM) on any rank: that rank's next() returns nullopt and tells
// rank 0, which then hands out nothing more; items handed out but never finished are simply missing
// from the results (the survey's --resume redoes them).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "parallel/mpi.hpp"

namespace sinklab::parallel {

struct WorkItem {
  int group = 0;      // items of a group share a set-up (>= 0)
  double cost = 1.0;  // relative cost (> 0), for the order of groups
};

// The order in which rank 0 hands out items: pure bookkeeping, no MPI.
class WorkScheduler {
 public:
  explicit WorkScheduler(std::vector<WorkItem> items);
  // The next item for a rank whose last item was of group `last_group` (-1: none yet), or -1 when every
  // item has been handed out. Ties go to the lower group id; within a group items go in index order.
  int64_t next(int last_group);
  int64_t remaining() const { return remaining_; }
  int64_t size() const { return int64_t(items_.size()); }
  int group_of(int64_t item) const { return items_[size_t(item)].group; }

 private:
  struct Group {
    std::vector<int64_t> pending;  // item indices not yet handed out, in decreasing order (pop_back = lowest)
    double total_cost = 0.0, pending_cost = 0.0;
    bool started = false;
  };
  int64_t take(int group);

  std::vector<WorkItem> items_;
  std::vector<Group> groups_;
  int64_t remaining_ = 0;
};

struct WorkResult {
  int64_t item = -1;
  int rank = 0;      // the rank that computed it
  std::string blob;  // what that rank passed to finish()
};

class WorkQueue {
 public:
  // Every rank passes the same items; `collect` is called on rank 0 only, once per finished item, in
  // arrival order (from next(), finish() or poll()).
  WorkQueue(const World& world, std::vector<WorkItem> items, std::function<void(const WorkResult&)> collect);
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // The next item this rank should compute, or nullopt when there is none (then, on rank 0, every
  // result has been collected). Sends the result of the previous finish() along on other ranks.
  std::optional<int64_t> next();
  // The result of an item this rank got from next(); must come before the following next().
  // Blobs up to 2 GiB - 16 bytes.
  void finish(int64_t item, std::string blob);
  // Rank 0: answers every request waiting now. Other ranks: nothing. Cheap; call it from long work.
  void poll();
  // Hand out no more items (see STOPPING). Takes effect at this rank's next next().
  void request_stop() { stop_ = true; }
  bool stopping() const { return stop_; }

  // Items handed out so far and items whose results were collected (rank 0's view; 0 elsewhere).
  int64_t handed_out() const { return handed_out_; }
  int64_t collected() const { return collected_; }

 private:
  void serve_one(int source);  // rank 0: receive one kRequest from `source` and answer it
  int64_t assign(int rank);    // rank 0: the next item for `rank` (-1: none), updating the books

  const World& world_;
  std::function<void(const WorkResult&)> collect_;
  WorkScheduler scheduler_;
  std::vector<int> last_group_;  // rank 0: per rank, the group of its last item (-1: none)
  int active_ = 0;               // rank 0: other ranks not yet told -1
  bool stop_ = false;
  int64_t handed_out_ = 0, collected_ = 0;
  // Other ranks: the result waiting to be sent with the next request.
  int64_t pending_item_ = -1;
  std::string pending_blob_;
  bool done_ = false;
};

}  // namespace sinklab::parallel
