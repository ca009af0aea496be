// The data-parallel gradient reduction (train/grad_sync.hpp) over MpiComm under `mpirun -np 2` and as
// one process (CTest label "mpi"): buckets formed from backward's spans; bucketed all-reduce and ZeRO-1
// reduce-scatter started span by span equal one blocking all-reduce of the whole buffer; the gradient
// norm's partial sums are the same with ZeRO-1 on and off; the parameters' all-gather.
// The same checks over NcclComm on device buffers (CUDA builds; they skip without a GPU per rank):
// test_grad_sync_no_launcher also carries the label "gpu", so tests/gpu/run.sh runs them on one GPU.
//
// Exact float equality is asserted where the sum of an element is formed from the same two addends:
// with one or two ranks every MPI reduction algorithm computes a + b (commutative), bucketed or not.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/backend.hpp"
#include "backend/memory.hpp"
#include "core/error.hpp"
#include "parallel/comm.hpp"
#include "model/transformer.hpp"
#include "train/grad_sync.hpp"
#include "mpi/mpi_test_main.hpp"

#if SINKLAB_HAVE_CUDA
#include "backend/cuda/cuda_backend.hpp"
#include "parallel/nccl.hpp"
#endif

namespace sinklab::train {
namespace {

parallel::World* g_world = nullptr;

// Spans as backward gives them: [n - sizes[0], n), then downwards, covering [0, n).
std::vector<FlatRange> spans_of(const std::vector<int64_t>& sizes) {
  int64_t n = 0;
  for (int64_t s : sizes) n += s;
  std::vector<FlatRange> spans;
  for (int64_t s : sizes) {
    spans.push_back({n - s, n});
    n -= s;
  }
  return spans;
}

TEST(GradBuckets, WholeSpansClosedAtTheSize) {
  const std::vector<FlatRange> spans = spans_of({10, 30, 30, 30});  // [90,100) [60,90) [30,60) [0,30)
  auto ranges = [](const std::vector<GradBucket>& buckets) {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (const GradBucket& b : buckets) out.push_back({b.range.begin, b.range.end});
    return out;
  };
  using R = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(ranges(make_buckets(spans, 0)), (R{{90, 100}, {60, 90}, {30, 60}, {0, 30}}));
  EXPECT_EQ(ranges(make_buckets(spans, 25)), (R{{60, 100}, {30, 60}, {0, 30}}));  // 10 < 25: takes the next span
  EXPECT_EQ(ranges(make_buckets(spans, 70)), (R{{30, 100}, {0, 30}}));  // 10 + 30 + 30 reaches 70: closed
  EXPECT_EQ(ranges(make_buckets(spans, 1 << 30)), (R{{0, 100}}));
  const std::vector<GradBucket> b = make_buckets(spans, 25);
  EXPECT_EQ(b[0].first_span, 0u);
  EXPECT_EQ(b[0].last_span, 1u);
  EXPECT_EQ(b[2].first_span, 3u);
  EXPECT_EQ(b[2].last_span, 3u);
  // Spans with a gap between them are refused.
  EXPECT_THROW(make_buckets({{50, 100}, {0, 40}}, 0), Error);
}

// The model's spans: the head and final norm, each layer from the last, then the embeddings; they
// partition the flat buffer from its end to its start, and every parameter lies in the span of its part.
TEST(GradBuckets, TheModelsBackwardSpans) {
  model::ModelConfig cfg;
  cfg.vocab_size = 37, cfg.d_model = 16, cfg.n_layers = 3, cfg.n_heads = 2, cfg.ffn_hidden = 24, cfg.context = 8;
  cfg.attn_bias = model::AttnBias::sink_token;  // a shared tensor in the bottom span
  model::Transformer m(cfg);
  const std::vector<FlatRange>& spans = m.backward_spans();
  ASSERT_EQ(spans.size(), size_t(cfg.n_layers) + 2);
  EXPECT_EQ(spans.front().end, m.flat_grads().numel());
  EXPECT_EQ(spans.back().begin, 0);
  for (size_t i = 1; i < spans.size(); ++i) EXPECT_EQ(spans[i].end, spans[i - 1].begin);
  for (const model::ParamSpec& spec : m.specs()) {
    const int l = spec.layer;
    const bool top = spec.name == "model.norm.weight" || spec.name == "lm_head.weight";
    const FlatRange s = top ? spans.front() : l >= 0 ? spans[size_t(cfg.n_layers - l)] : spans.back();
    EXPECT_GE(spec.offset, s.begin) << spec.name;
    EXPECT_LE(spec.offset + spec.numel, s.end) << spec.name;
  }
}

// Backward as the model runs it: every span reported in order; the communicator advances between them.
void report_all(GradientSync& sync, const std::vector<FlatRange>& spans) {
  for (const FlatRange& s : spans) sync.on_grads_ready(s.begin, s.end);
  sync.finish();
}

struct Grads {
  Buffer buffer;
  Tensor flat;
  std::vector<float> local;  // this rank's own values, as backward left them
};

Grads random_grads(int64_t n, int rank, uint32_t seed) {
  Grads g;
  g.buffer = Buffer::for_tensor(DType::f32, {n});
  g.flat = g.buffer.view(DType::f32, {n});
  std::mt19937 rng(seed * 7919u + uint32_t(rank));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) g.local.push_back(u(rng));
  std::copy(g.local.begin(), g.local.end(), g.flat.ptr<float>());
  return g;
}

TEST(GradientSync, BucketedReductionEqualsOneAllReduce) {
  const parallel::World& w = *g_world;
  const std::vector<std::vector<int64_t>> layouts = {{7, 97, 96, 301, 1, 499}, {1}, {5, 0, 11}};
  for (const auto& sizes : layouts) {
    const std::vector<FlatRange> spans = spans_of(sizes);
    const int64_t n = spans.front().end;
    Grads expect = random_grads(n, w.rank(), 3);
    w.allreduce_sum(expect.flat.ptr<float>(), size_t(n));  // the blocking whole-buffer reference
    for (int64_t bucket : {int64_t(0), int64_t(13), int64_t(1) << 30}) {
      for (bool zero1 : {false, true}) {
        SCOPED_TRACE(testing::Message() << "n " << n << " bucket " << bucket << " zero1 " << zero1);
        Grads g = random_grads(n, w.rank(), 3);
        parallel::MpiComm comm(w);
        GradientSync sync(comm, g.flat, spans, bucket, zero1);
        report_all(sync, spans);
        const FlatRange owned = zero1 ? sync.owned(w.rank()) : FlatRange{0, n};
        for (int64_t i = 0; i < n; ++i) {
          const bool mine = i >= owned.begin && i < owned.end;
          ASSERT_EQ(g.flat.ptr<float>()[i], mine ? expect.flat.ptr<float>()[i] : g.local[size_t(i)]) << "element " << i;
        }
      }
    }
  }
}

TEST(GradientSync, NormsAreTheSameWithAndWithoutZero1) {
  const parallel::World& w = *g_world;
  const std::vector<FlatRange> spans = spans_of({40, 123, 77, 260});
  const int64_t n = spans.front().end;
  // Groups as the trainer's: parameter ranges with gaps (alignment padding) between them.
  const std::vector<std::vector<FlatRange>> groups = {{{0, 100}, {112, 250}}, {{256, 400}}, {{400, 490}, {496, 500}}};
  std::vector<double> sums[2];
  for (bool zero1 : {false, true}) {
    Grads g = random_grads(n, w.rank(), 11);
    parallel::MpiComm comm(w);
    GradientSync sync(comm, g.flat, spans, 64, zero1);
    report_all(sync, spans);
    sums[zero1] = sync.sums_of_squares(groups);
  }
  ASSERT_EQ(sums[0].size(), groups.size());
  for (size_t k = 0; k < groups.size(); ++k) EXPECT_EQ(sums[0][k], sums[1][k]) << "group " << k;  // bit for bit
  // Against a double-precision sum of the reduced gradients.
  Grads expect = random_grads(n, w.rank(), 11);
  w.allreduce_sum(expect.flat.ptr<float>(), size_t(n));
  for (size_t k = 0; k < groups.size(); ++k) {
    double want = 0.0;
    for (const FlatRange& r : groups[k])
      for (int64_t i = r.begin; i < r.end; ++i) want += double(expect.flat.ptr<float>()[i]) * expect.flat.ptr<float>()[i];
    EXPECT_NEAR(sums[0][k], want, 1e-9 * want) << "group " << k;
  }
}

TEST(GradientSync, AllgatherGivesEveryRankTheOwnedRanges) {
  const parallel::World& w = *g_world;
  for (int64_t n : {int64_t(1), int64_t(2), int64_t(1001)}) {
    Grads grads = random_grads(n, w.rank(), 5);
    parallel::MpiComm comm(w);
    GradientSync sync(comm, grads.flat, {{0, n}}, 0, true);
    Buffer pb = Buffer::for_tensor(DType::f32, {n});
    Tensor params = pb.view(DType::f32, {n});
    const FlatRange mine = sync.owned(w.rank());
    for (int64_t i = 0; i < n; ++i)  // the owned range updated, the rest stale (-1)
      params.ptr<float>()[i] = i >= mine.begin && i < mine.end ? float(i) * 0.5f : -1.0f;
    sync.allgather_params(params);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(params.ptr<float>()[i], float(i) * 0.5f) << "n " << n << " element " << i;
  }
}

TEST(GradientSync, RefusesSpansOutOfOrderOrMissing) {
  const parallel::World& w = *g_world;
  const std::vector<FlatRange> spans = spans_of({10, 20, 30});
  Grads g = random_grads(60, w.rank(), 1);
  parallel::MpiComm comm(w);
  GradientSync sync(comm, g.flat, spans, int64_t(1) << 30, false);
  EXPECT_THROW(sync.on_grads_ready(0, 30), Error);  // the embeddings before the head
  GradientSync partial(comm, g.flat, spans, int64_t(1) << 30, false);
  partial.on_grads_ready(50, 60);
  EXPECT_THROW(partial.finish(), Error);
  EXPECT_THROW(GradientSync(comm, g.flat, spans_of({10, 20}), 0, false), Error);  // spans short of the buffer
}

// NcclComm: the same bucketed reduction on device buffers, ordered on the backend's stream, against
// MPI's sum of host copies; ZeRO-1's norms bit for bit as without; the all-gather.
TEST(GradientSync, OverNcclOnDeviceBuffers) {
#if !SINKLAB_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  const parallel::World& w = *g_world;
  const int64_t short_of_gpus = cuda_available() && cuda::device_count() >= w.local_size() ? 0 : 1;
  if (w.allreduce_sum(short_of_gpus) > 0) GTEST_SKIP() << "no usable CUDA device for every rank";
  const Device device = Device::cuda(w.local_rank());
  parallel::NcclComm comm(w, device.index, static_cast<cuda::CudaBackend&>(backend_for(device)).stream());
  const std::vector<FlatRange> spans = spans_of({7, 97, 96, 301, 1, 499});
  const int64_t n = spans.front().end;
  Grads expect = random_grads(n, w.rank(), 17);
  w.allreduce_sum(expect.flat.ptr<float>(), size_t(n));
  const std::vector<std::vector<FlatRange>> groups = {{{0, 500}}, {{500, 1001}}};
  std::vector<double> sums[2];
  Buffer db(size_t(n) * sizeof(float), device);
  Tensor on_device = db.view(DType::f32, {n});
  for (int64_t bucket : {int64_t(0), int64_t(13), int64_t(1) << 30}) {
    for (bool zero1 : {false, true}) {
      SCOPED_TRACE(testing::Message() << "bucket " << bucket << " zero1 " << zero1);
      Grads g = random_grads(n, w.rank(), 17);
      ops::copy(on_device, g.flat);
      GradientSync sync(comm, on_device, spans, bucket, zero1);
      report_all(sync, spans);
      sums[zero1] = sync.sums_of_squares(groups);
      ops::copy(g.flat, on_device);  // waits for the backend's stream, which waited for NCCL's
      const FlatRange owned = zero1 ? sync.owned(w.rank()) : FlatRange{0, n};
      for (int64_t i = 0; i < n; ++i) {
        const bool mine = i >= owned.begin && i < owned.end;
        ASSERT_EQ(g.flat.ptr<float>()[i], mine ? expect.flat.ptr<float>()[i] : g.local[size_t(i)]) << "element " << i;
      }
    }
    for (size_t k = 0; k < groups.size(); ++k) EXPECT_EQ(sums[0][k], sums[1][k]) << "group " << k;
  }
  // The all-gather: each rank's owned range, set here, arrives everywhere.
  Grads params = random_grads(n, w.rank(), 19);
  GradientSync sync(comm, on_device, spans, 0, true);
  const FlatRange mine = sync.owned(w.rank());
  for (int64_t i = 0; i < n; ++i) params.flat.ptr<float>()[i] = i >= mine.begin && i < mine.end ? float(i) : -1.0f;
  ops::copy(on_device, params.flat);
  sync.allgather_params(on_device);
  ops::copy(params.flat, on_device);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(params.flat.ptr<float>()[i], float(i)) << "element " << i;
#endif
}

}  // namespace
}  // namespace sinklab::train

SINKLAB_MPI_TEST_MAIN(sinklab::train::g_world)
