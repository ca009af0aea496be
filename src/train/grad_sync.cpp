#include "train/grad_sync.hpp"

#include "core/error.hpp"

namespace sinklab::train {

std::vector<GradBucket> make_buckets(const std::vector<FlatRange>& spans, int64_t bucket_elements) {
  std::vector<GradBucket> buckets;
  for (size_t i = 0; i < spans.size(); ++i) {
    SL_CHECK(spans[i].begin <= spans[i].end && (i == 0 || spans[i].end == spans[i - 1].begin),
             "make_buckets: span %zu [%lld, %lld) does not end where the span before it begins", i,
             (long long)spans[i].begin, (long long)spans[i].end);
    const bool open = !buckets.empty() && buckets.back().range.size() < bucket_elements;
    if (open) {  // grows downwards, as backward walks
      buckets.back().range.begin = spans[i].begin;
      buckets.back().last_span = i;
    } else {
      buckets.push_back({{spans[i].begin, spans[i].end}, i, i});
    }
  }
  return buckets;
}

GradientSync::GradientSync(parallel::Communicator& comm, Tensor flat_grads, std::vector<FlatRange> spans,
                           int64_t bucket_elements, bool zero1)
    : comm_(comm), flat_grads_(flat_grads), spans_(std::move(spans)), buckets_(make_buckets(spans_, bucket_elements)),
      zero1_(zero1) {
  const int64_t n = flat_grads_.numel();
  SL_CHECK(!spans_.empty() && spans_.front().end == n && spans_.back().begin == 0,
           "GradientSync: backward's spans do not cover the %lld gradients", (long long)n);
  for (int r = 0; r < comm_.size(); ++r) rank_begins_.push_back(zero1_partition(n, comm_.size(), r).begin);
}

FlatRange GradientSync::owned(int r) const { return zero1_partition(flat_grads_.numel(), comm_.size(), r); }

void GradientSync::start_bucket(const FlatRange& bucket) {
  float* data = flat_grads_.ptr<float>() + bucket.begin;
  if (!zero1_) {
    comm_.start_allreduce_sum(data, bucket.size());
    return;
  }
  std::vector<int64_t> begins;  // each rank's owned range, relative to the bucket
  for (int64_t b : rank_begins_) begins.push_back(b - bucket.begin);
  comm_.start_reduce_scatter_sum(data, parallel::piece_offsets(begins, bucket.size()));
}

void GradientSync::on_grads_ready(int64_t begin, int64_t end) {
  SL_CHECK(next_span_ < spans_.size() && spans_[next_span_].begin == begin && spans_[next_span_].end == end,
           "GradientSync: backward reported gradients [%lld, %lld) out of order", (long long)begin, (long long)end);
  if (buckets_[next_bucket_].last_span == next_span_) start_bucket(buckets_[next_bucket_++].range);
  ++next_span_;
  comm_.progress();
}

void GradientSync::finish() {
  SL_CHECK(next_span_ == spans_.size() && next_bucket_ == buckets_.size(),
           "GradientSync: backward reported %zu of its %zu gradient spans", next_span_, spans_.size());
  comm_.wait_all();
  next_span_ = next_bucket_ = 0;
}

void GradientSync::allgather_params(Tensor flat_params) {
  SL_CHECK(zero1_ && flat_params.numel() == flat_grads_.numel(), "allgather_params: ZeRO-1 over the model's %lld parameters",
           (long long)flat_grads_.numel());
  comm_.start_allgather(flat_params.ptr<float>(), parallel::piece_offsets(rank_begins_, flat_params.numel()));
  comm_.wait_all();
}

ops::FlatRanges GradientSync::square_sum_ranges(const std::vector<std::vector<FlatRange>>& groups) const {
  const int W = comm_.size();
  ops::FlatRanges table;
  for (int r = 0; r < W; ++r) {
    if (zero1_ && r != comm_.rank()) continue;  // that rank's piece is reduced only there
    const FlatRange piece = owned(r);
    for (size_t g = 0; g < groups.size(); ++g)
      for (const FlatRange& range : groups[g]) {
        const int64_t begin = std::max(range.begin, piece.begin), end = std::min(range.end, piece.end);
        if (begin < end) {
          table.ranges.push_back({begin, end});
          table.tags.push_back(int32_t(g * size_t(W) + size_t(r)));
        }
      }
  }
  return table;
}

std::vector<double> GradientSync::combine_square_sums(std::vector<double> slots, size_t groups) {
  const int W = comm_.size();
  SL_CHECK(slots.size() == groups * size_t(W), "combine_square_sums: %zu slots for %zu groups x %d ranks",
           slots.size(), groups, W);
  // One contributor per entry: the sum over ranks is exact, the same numbers as without ZeRO-1.
  if (zero1_) comm_.allreduce_sum_host(slots.data(), slots.size());
  std::vector<double> sums(groups, 0.0);
  for (size_t g = 0; g < groups; ++g)
    for (int r = 0; r < W; ++r) sums[g] += slots[g * size_t(W) + size_t(r)];
  return sums;
}

std::vector<double> GradientSync::sums_of_squares(const std::vector<std::vector<FlatRange>>& groups) {
  const size_t slots = groups.size() * size_t(comm_.size());
  Buffer device_slots = Buffer::for_tensor(DType::f64, {int64_t(slots)}, flat_grads_.device);
  Buffer host_slots = Buffer::for_tensor(DType::f64, {int64_t(slots)});
  ops::sum_squares_ranges(device_slots.view(DType::f64, {int64_t(slots)}), flat_grads_, square_sum_ranges(groups));
  ops::copy(host_slots.view(DType::f64, {int64_t(slots)}), device_slots.view(DType::f64, {int64_t(slots)}));
  const double* h = host_slots.view(DType::f64, {int64_t(slots)}).ptr<double>();
  return combine_square_sums(std::vector<double>(h, h + slots), groups.size());
}

}  // namespace sinklab::train
