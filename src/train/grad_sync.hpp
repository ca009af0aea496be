// Data-parallel gradient reduction during backward, in buckets (PyTorch DDP's scheme, Li et al., VLDB
// 2020), over parallel::Communicator: MPI on host buffers, NCCL on device buffers, one piece of code.
//
// The model reports each span of its flat gradient buffer as backward finishes it: the head, the layers
// from the last to the first, the embeddings (model::Transformer::backward_spans). Consecutive spans are
// grouped into buckets of at least `bucket_elements` (a bucket never splits a span), and a bucket's
// reduction starts as soon as its last span is final, while backward goes on with the earlier layers.
// Only the last micro-batch of a step reports spans: the earlier ones accumulate locally.
//
// Without ZeRO-1 a bucket is all-reduced. With ZeRO-1 it is reduce-scattered: each rank receives the sum
// only where the bucket overlaps the range its optimizer owns (zero1_partition), which is all the
// optimizer reads, for half an all-reduce's traffic. After the update, allgather_params() sends each
// rank's updated range to every rank.
//
// The gradient norm comes from the owned ranges (square_sum_ranges): one small all-reduce of per-rank
// partial sums, which every rank then adds in rank order. Without ZeRO-1 each rank computes all the
// partial sums itself, over the same ranges, so ZeRO-1 on and off give the same norm bit for bit.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/ops.hpp"
#include "parallel/comm.hpp"
#include "model/transformer.hpp"
#include "train/optimizer.hpp"

namespace sinklab::train {

// A bucket: the flat range of spans [first_span, last_span] (backward's order).
struct GradBucket {
  FlatRange range;
  size_t first_span = 0, last_span = 0;
};

// Buckets over spans given in backward's order (consecutive, descending: spans[i].begin ==
// spans[i + 1].end): each bucket is whole consecutive spans, closed once it holds >= bucket_elements
// (bucket_elements <= 0: one bucket per span). Returned in the same order; they partition the spans.
std::vector<GradBucket> make_buckets(const std::vector<FlatRange>& spans, int64_t bucket_elements);

class GradientSync final : public model::GradReadyObserver {
 public:
  // flat_grads: the model's flat gradient buffer [n]; spans: its backward_spans().
  GradientSync(parallel::Communicator& comm, Tensor flat_grads, std::vector<FlatRange> spans,
               int64_t bucket_elements, bool zero1);

  const std::vector<GradBucket>& buckets() const { return buckets_; }
  bool zero1() const { return zero1_; }
  // Rank r's range of the flat buffer under ZeRO-1 (zero1_partition).
  FlatRange owned(int r) const;

  // From backward, each span in backward_spans() order; starts a bucket's reduction when it is complete.
  void on_grads_ready(int64_t begin, int64_t end) override;
  // Waits until every bucket is reduced; checks that backward reported every span.
  void finish();
  // ZeRO-1: every rank's owned range of the flat parameters [n] to every rank (waits).
  void allgather_params(Tensor flat_params);

  // The sums of squares of the reduced gradients over each group of flat ranges (e.g. a layer's
  // parameters), formed from the owned ranges as the header says, in two halves so that the device
  // work needs no host synchronisation: square_sum_ranges is the table for ops::sum_squares_ranges
  // (slot g * W + r: group g's part of rank r's range; only this rank's ranges under ZeRO-1), and
  // combine_square_sums turns those slots, once read to the host, into each group's sum (all-reduced
  // under ZeRO-1, then added over the ranks in rank order). Every rank gets the same numbers.
  ops::FlatRanges square_sum_ranges(const std::vector<std::vector<FlatRange>>& groups) const;
  std::vector<double> combine_square_sums(std::vector<double> slots, size_t groups);
  // Both halves at once (waits for the device).
  std::vector<double> sums_of_squares(const std::vector<std::vector<FlatRange>>& groups);

 private:
  void start_bucket(const FlatRange& bucket);
  parallel::Communicator& comm_;
  Tensor flat_grads_;
  std::vector<FlatRange> spans_;
  std::vector<GradBucket> buckets_;
  bool zero1_;
  std::vector<int64_t> rank_begins_;  // [W]: zero1_partition(n, W, r).begin
  size_t next_span_ = 0, next_bucket_ = 0;
};

}  // namespace sinklab::train
