#include "parallel/work_queue.hpp"

#include <algorithm>
#include <climits>
#include <cstring>

#include "core/error.hpp"

namespace sinklab::parallel {
namespace {

constexpr int kRequest = 7101;  // worker -> rank 0: [finished item | flags | blob]
constexpr int kAssign = 7102;   // rank 0 -> worker: int64 next item or -1
constexpr int64_t kStopping = 1;
constexpr size_t kHeader = 2 * sizeof(int64_t);

}  // namespace

// ---- WorkScheduler -------------------------------------------------------------------------------

WorkScheduler::WorkScheduler(std::vector<WorkItem> items) : items_(std::move(items)) {
  int n_groups = 0;
  for (const WorkItem& it : items_) {
    SL_CHECK(it.group >= 0, "work queue: negative group %d", it.group);
    SL_CHECK(it.cost > 0, "work queue: item cost must be positive, got %g", it.cost);
    n_groups = std::max(n_groups, it.group + 1);
  }
  groups_.resize(size_t(n_groups));
  for (int64_t i = int64_t(items_.size()) - 1; i >= 0; --i) {
    Group& g = groups_[size_t(items_[size_t(i)].group)];
    g.pending.push_back(i);
    g.total_cost += items_[size_t(i)].cost;
  }
  for (Group& g : groups_) g.pending_cost = g.total_cost;
  remaining_ = int64_t(items_.size());
}

int64_t WorkScheduler::take(int group) {
  Group& g = groups_[size_t(group)];
  const int64_t item = g.pending.back();
  g.pending.pop_back();
  g.started = true;
  g.pending_cost -= items_[size_t(item)].cost;
  --remaining_;
  return item;
}

int64_t WorkScheduler::next(int last_group) {
  if (remaining_ == 0) return -1;
  if (last_group >= 0 && last_group < int(groups_.size()) && !groups_[size_t(last_group)].pending.empty())
    return take(last_group);
  // The costliest group nobody has started: big models first, so they do not end the job alone.
  int best = -1;
  for (int g = 0; g < int(groups_.size()); ++g) {
    const Group& c = groups_[size_t(g)];
    if (!c.started && !c.pending.empty() && (best < 0 || c.total_cost > groups_[size_t(best)].total_cost)) best = g;
  }
  if (best >= 0) return take(best);
  // Everything started: help with the group that has the most cost left.
  for (int g = 0; g < int(groups_.size()); ++g) {
    const Group& c = groups_[size_t(g)];
    if (!c.pending.empty() && (best < 0 || c.pending_cost > groups_[size_t(best)].pending_cost)) best = g;
  }
  return take(best);
}

// ---- WorkQueue -----------------------------------------------------------------------------------

WorkQueue::WorkQueue(const World& world, std::vector<WorkItem> items, std::function<void(const WorkResult&)> collect)
    : world_(world), collect_(std::move(collect)), scheduler_(std::move(items)),
      last_group_(size_t(world.size()), -1), active_(world.size() - 1) {}

int64_t WorkQueue::assign(int rank) {
  const int64_t item = stop_ ? -1 : scheduler_.next(last_group_[size_t(rank)]);
  if (item >= 0) {
    last_group_[size_t(rank)] = scheduler_.group_of(item);
    ++handed_out_;
  } else if (rank != 0) {
    --active_;  // that rank leaves its loop and never asks again
  }
  return item;
}

void WorkQueue::serve_one(int source) {
  MPI_Status status;
  MPI_Probe(source, kRequest, world_.comm(), &status);
  int count = 0;
  MPI_Get_count(&status, MPI_BYTE, &count);
  SL_CHECK(count >= int(kHeader), "work queue: malformed request of %d bytes from rank %d", count, source);
  std::string message(size_t(count), '\0');
  MPI_Recv(message.data(), count, MPI_BYTE, source, kRequest, world_.comm(), MPI_STATUS_IGNORE);
  int64_t header[2];
  std::memcpy(header, message.data(), kHeader);
  if (header[1] & kStopping) stop_ = true;
  if (header[0] >= 0) {
    ++collected_;
    collect_(WorkResult{header[0], source, message.substr(kHeader)});
  }
  int64_t reply = assign(source);
  MPI_Send(&reply, 1, MPI_INT64_T, source, kAssign, world_.comm());
}

void WorkQueue::poll() {
  if (!world_.is_root() || world_.size() == 1) return;  // nobody to serve (and perhaps no MPI)
  for (;;) {
    int flag = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, kRequest, world_.comm(), &flag, &status);
    if (!flag) return;
    serve_one(status.MPI_SOURCE);
  }
}

std::optional<int64_t> WorkQueue::next() {
  if (done_) return std::nullopt;
  if (world_.is_root()) {
    poll();
    const int64_t item = assign(0);
    if (item >= 0) return item;
    // Nothing more for rank 0: serve the others until each has been told there is nothing more.
    while (active_ > 0) {
      MPI_Status status;
      MPI_Probe(MPI_ANY_SOURCE, kRequest, world_.comm(), &status);
      serve_one(status.MPI_SOURCE);
    }
    done_ = true;
    return std::nullopt;
  }
  std::string message(kHeader, '\0');
  const int64_t header[2] = {pending_item_, stop_ ? kStopping : 0};
  std::memcpy(message.data(), header, kHeader);
  message += pending_blob_;
  pending_item_ = -1;
  pending_blob_.clear();
  MPI_Send(message.data(), int(message.size()), MPI_BYTE, 0, kRequest, world_.comm());
  int64_t reply = -1;
  MPI_Recv(&reply, 1, MPI_INT64_T, 0, kAssign, world_.comm(), MPI_STATUS_IGNORE);
  if (reply < 0) {
    done_ = true;
    return std::nullopt;
  }
  return reply;
}

void WorkQueue::finish(int64_t item, std::string blob) {
  SL_CHECK(item >= 0 && item < scheduler_.size(), "work queue: finish(%lld) of an unknown item", (long long)item);
  SL_CHECK(blob.size() <= size_t(INT_MAX) - kHeader, "work queue: the result of item %lld is %zu bytes (at most 2 GiB)",
           (long long)item, blob.size());
  if (world_.is_root()) {
    ++collected_;
    collect_(WorkResult{item, 0, std::move(blob)});
    return;
  }
  SL_CHECK(pending_item_ < 0, "work queue: finish(%lld) while item %lld is still unsent", (long long)item,
           (long long)pending_item_);
  pending_item_ = item;
  pending_blob_ = std::move(blob);
}

}  // namespace sinklab::parallel
