// CUDA embedding_forward / embedding_backward against the CPU backend (label "gpu"; skips without a
// usable CUDA device). The forward is a gather (same bits); the backward buckets rows by token id and
// adds each bucket in row order, the CPU's order, so it is bit-identical to the CPU too, with repeated
// ids, a single row, widths off every block multiple and strided views. Bad ids are reported, naming
// the op and the position, at the next synchronisation.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "gpu/gpu_test_util.hpp"

namespace sinklab {
namespace {

using gpu_test::Dev;
using gpu_test::poison;
using gpu_test::random_host;
using gpu_test::same_bits;
using gpu_test::to_device;
using gpu_test::to_host;
using test::Owned;

// ids drawn from a small range, so that most ids repeat (a Zipf-like token stream has a few very
// frequent ids), plus the first and last id of the vocabulary.
Owned make_ids(int64_t n, int64_t vocab, uint64_t stream) {
  Owned u(DType::f32, {n});
  ops::fill_uniform(u.t, 99, stream, 0.0, 1.0);
  Owned ids(DType::i32, {n});
  for (int64_t i = 0; i < n; ++i) {
    const double x = u.data<float>()[i];
    int64_t id = int64_t(x * x * x * double(vocab));  // skewed towards 0
    if (i % 7 == 3) id = vocab - 1;
    ids.data<int32_t>()[i] = int32_t(id < vocab ? id : vocab - 1);
  }
  return ids;
}

struct Case {
  int64_t n, vocab, d;
};

TEST(CudaEmbedding, ForwardAndBackwardAreBitIdenticalToCpu) {
  SKIP_WITHOUT_CUDA();
  const std::vector<Case> cases = {{1, 1, 1}, {1, 50, 64}, {37, 11, 3}, {300, 1000, 129}, {4099, 50, 80}, {2048, 50257, 64}};
  uint64_t stream = 10;
  for (const Case& c : cases) {
    SCOPED_TRACE("N " + std::to_string(c.n) + " V " + std::to_string(c.vocab) + " d " + std::to_string(c.d));
    Owned ids = make_ids(c.n, c.vocab, stream++);
    Owned table = random_host(DType::f32, {c.vocab, c.d}, stream++);
    Dev dids = to_device(ids.t), dtable = to_device(table.t);

    // forward into a strided view (the left part of a wider buffer)
    Owned out(DType::f32, {c.n, c.d});
    ops::embedding_forward(out.t, ids.t, table.t);
    Dev dwide(DType::f32, {c.n, c.d + 5});
    poison(dwide.t);
    ops::embedding_forward(dwide.t.slice(1, 0, c.d), dids.t, dtable.t);
    EXPECT_TRUE(same_bits(to_host(dwide.t.slice(1, 0, c.d)).t, out.t)) << "embedding_forward";

    // backward onto a non-zero table, twice from the same start
    Owned d_out = random_host(DType::f32, {c.n, c.d}, stream++);
    Owned d_table = random_host(DType::f32, {c.vocab, c.d}, stream++);
    Dev dd_out = to_device(d_out.t), dd_table = to_device(d_table.t), dd_table2 = to_device(d_table.t);
    ops::embedding_backward(d_table.t, d_out.t, ids.t);
    ops::embedding_backward(dd_table.t, dd_out.t, dids.t);
    ops::embedding_backward(dd_table2.t, dd_out.t, dids.t);
    Owned got = to_host(dd_table.t);
    EXPECT_TRUE(same_bits(got.t, d_table.t)) << "embedding_backward";
    EXPECT_TRUE(same_bits(to_host(dd_table2.t).t, got.t)) << "embedding_backward, second run";
  }
}

TEST(CudaEmbedding, Bf16GatherMovesTheBits) {
  SKIP_WITHOUT_CUDA();
  Owned ids = make_ids(53, 17, 40);
  Owned table = Owned::copy_of(random_host(DType::f32, {17, 33}, 41).t, DType::bf16);
  Owned table32 = Owned::copy_of(table.t, DType::f32);
  Owned out32(DType::f32, {53, 33});
  ops::embedding_forward(out32.t, ids.t, table32.t);
  Dev dids = to_device(ids.t), dtable = to_device(table.t);
  Dev dout(DType::bf16, {53, 33});
  ops::embedding_forward(dout.t, dids.t, dtable.t);
  EXPECT_TRUE(same_bits(to_host(dout.t).t, Owned::copy_of(out32.t, DType::bf16).t));
}

// bf16 storage: an f32 table gathered into bf16 activations (each element rounded: the CPU's bits), and
// bf16 output gradients added into the f32 table gradient (the CPU's widened additions: the same bits).
TEST(CudaEmbeddingBf16, F32TableToBf16RowsAndBf16GradientsAreBitIdenticalToCpu) {
  SKIP_WITHOUT_CUDA();
  const std::vector<Case> cases = {{1, 1, 1}, {37, 11, 3}, {300, 1000, 129}};
  uint64_t stream = 60;
  for (const Case& c : cases) {
    SCOPED_TRACE("N " + std::to_string(c.n) + " V " + std::to_string(c.vocab) + " d " + std::to_string(c.d));
    Owned ids = make_ids(c.n, c.vocab, stream++);
    gpu_test::HostDev table = gpu_test::random_pair(DType::f32, {c.vocab, c.d}, stream++);
    Dev dids = to_device(ids.t);
    Owned out(DType::bf16, {c.n, c.d});
    Dev dwide(DType::bf16, {c.n, c.d + 5});
    poison(dwide.t);
    ops::embedding_forward(out.t, ids.t, table.host.t);
    ops::embedding_forward(dwide.t.slice(1, 0, c.d), dids.t, table.dev.t);
    EXPECT_TRUE(same_bits(to_host(dwide.t.slice(1, 0, c.d)).t, out.t)) << "embedding_forward";
    gpu_test::HostDev d_out = gpu_test::random_pair(DType::bf16, {c.n, c.d}, stream++);
    ops::embedding_backward(table.host.t, d_out.host.t, ids.t);
    ops::embedding_backward(table.dev.t, d_out.dev.t, dids.t);
    EXPECT_TRUE(same_bits(to_host(table.dev.t).t, table.host.t)) << "embedding_backward";
  }
}

TEST(CudaEmbedding, OutOfRangeIdIsReportedAtTheNextSynchronisation) {
  SKIP_WITHOUT_CUDA();
  Owned ids = make_ids(20, 9, 50);
  ids.data<int32_t>()[13] = 9;   // one past the vocabulary
  ids.data<int32_t>()[17] = -4;  // a later bad id: the first position is reported
  Owned table = random_host(DType::f32, {9, 8}, 51);
  Dev dids = to_device(ids.t), dtable = to_device(table.t);
  Dev dout(DType::f32, {20, 8});
  Backend& be = backend_for(Device::cuda(0));
  for (const char* op : {"embedding_forward", "embedding_backward"}) {
    SCOPED_TRACE(op);
    try {
      if (std::string(op) == "embedding_forward") {
        ops::embedding_forward(dout.t, dids.t, dtable.t);
      } else {
        ops::embedding_backward(dtable.t, dout.t, dids.t);
      }
      be.synchronize();
      ADD_FAILURE() << "a bad id was not reported";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(op), std::string::npos) << what;
      EXPECT_NE(what.find("token id 9 at position 13"), std::string::npos) << what;
    }
    be.synchronize();  // reported once: nothing left
  }
  // The forward's bad rows are zero, the good ones the table's (a fresh copy: the backward above added
  // into dtable).
  Dev dtable_fresh = to_device(table.t);
  ops::embedding_forward(dout.t, dids.t, dtable_fresh.t);
  Owned got(DType::f32, {20, 8});
  try {
    ops::copy(got.t, dout.t);
    ADD_FAILURE() << "the copy to the host did not report the bad id";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("embedding_forward"), std::string::npos) << e.what();
  }
  for (int64_t c = 0; c < 8; ++c) {
    EXPECT_EQ(got.data<float>()[13 * 8 + c], 0.0f);
    EXPECT_EQ(got.data<float>()[2 * 8 + c], table.data<float>()[ids.data<int32_t>()[2] * 8 + c]);
  }
}

}  // namespace
}  // namespace sinklab
