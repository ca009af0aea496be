// bf16 storage on the CPU (ops.hpp, "bf16 storage"; cpu/bf16_storage.hpp): an op on bf16 tensors gives
// what the same op gives on f32 tensors holding the widened values, each output rounded to nearest even
// (the rounding checked against this file's own integer rounding, ties included); in-place calls, inputs
// that overlap outputs, and f32 operands mixed with bf16 ones.
#include <cstring>
#include <vector>

#include "test_util.hpp"

namespace sinklab {
namespace {

using test::Owned;

// Round to nearest even, written independently of core/dtype.hpp: the 16 dropped bits decide.
uint16_t round_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // NaN stays NaN
  const uint32_t dropped = u & 0xffffu, kept = u >> 16;
  if (dropped > 0x8000u || (dropped == 0x8000u && (kept & 1u))) return uint16_t(kept + 1);
  return uint16_t(kept);
}
float widen(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// A bf16 tensor of `dims` holding bf16 values of a fixed random draw, and its f32 twin (same values).
struct Pair {
  Owned b, f;
  Pair(std::vector<int64_t> dims, uint64_t seed) : b(DType::bf16, dims), f(DType::f32, dims) {
    Owned r(DType::f32, dims);
    test::randn(r.t, seed);
    for (int64_t i = 0; i < r.t.numel(); ++i) b.data<uint16_t>()[i] = round_bf16(r.data<float>()[i]);
    for (int64_t i = 0; i < r.t.numel(); ++i) f.data<float>()[i] = widen(b.data<uint16_t>()[i]);
  }
};

// Every element of bf16 `got` is the rounding of f32 `want`.
void expect_rounded(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.numel(), want.numel());
  for (int64_t i = 0; i < got.numel(); ++i)
    ASSERT_EQ(got.ptr<uint16_t>()[i], round_bf16(want.ptr<float>()[i])) << "element " << i;
}

TEST(Bf16Storage, AddRoundsToNearestEvenWithTies) {
  // 1 + 2^-8 is halfway between bf16 1 and 1 + 2^-7: even (1) wins; 1 + 3*2^-8 rounds up to 1 + 2^-6.
  Owned a(DType::bf16, {4}), b(DType::f32, {4}), out(DType::bf16, {4});
  const float bs[4] = {0x1p-8f, 0x3p-8f, -0x1p-8f, 0x1p-9f};
  for (int i = 0; i < 4; ++i) {
    a.data<uint16_t>()[i] = round_bf16(1.0f);
    b.data<float>()[i] = bs[i];
  }
  ops::add(out, a, b);
  EXPECT_EQ(widen(out.data<uint16_t>()[0]), 1.0f);
  EXPECT_EQ(widen(out.data<uint16_t>()[1]), 1.0f + 0x1p-6f);
  EXPECT_EQ(widen(out.data<uint16_t>()[2]), 1.0f - 0x1p-8f);  // below 1 the spacing is 2^-8: exact
  EXPECT_EQ(widen(out.data<uint16_t>()[3]), 1.0f);
}

TEST(Bf16Storage, EachOpEqualsItsF32KernelOnTheWidenedValues) {
  const int64_t rows = 7, d = 24;
  Pair x({rows, d}, 1), g({rows, d}, 2), up({rows, d}, 3);
  Owned w(DType::f32, {d});
  test::randn(w.t, 4);
  // RMSNorm forward and backward: bf16 in and out, f32 weight and statistics.
  Owned yb(DType::bf16, {rows, d}), yf(DType::f32, {rows, d}), rb(DType::f32, {rows}), rf(DType::f32, {rows});
  ops::rmsnorm_forward(yb, rb, x.b, w, 1e-5);
  ops::rmsnorm_forward(yf, rf, x.f, w, 1e-5);
  expect_rounded(yb.t, yf.t);
  EXPECT_EQ(std::memcmp(rb.t.data, rf.t.data, size_t(rows) * 4), 0);
  Owned dxb(DType::bf16, {rows, d}), dxf(DType::f32, {rows, d}), dwb(DType::f32, {d}), dwf(DType::f32, {d});
  ops::rmsnorm_backward(dxb, dwb, g.b, x.b, w, rb, false);
  ops::rmsnorm_backward(dxf, dwf, g.f, x.f, w, rf, false);
  expect_rounded(dxb.t, dxf.t);
  EXPECT_EQ(std::memcmp(dwb.t.data, dwf.t.data, size_t(d) * 4), 0);  // f32 parameter gradient, no rounding
  // SwiGLU forward.
  Owned hb(DType::bf16, {rows, d}), hf(DType::f32, {rows, d});
  ops::gated_forward(hb, x.b, up.b, ops::Activation::silu);
  ops::gated_forward(hf, x.f, up.f, ops::Activation::silu);
  expect_rounded(hb.t, hf.t);
  // A reduction reads the widened values.
  EXPECT_EQ(ops::sum_squares(x.b), ops::sum_squares(x.f));
}

TEST(Bf16Storage, InPlaceCallsShareOneCopy) {
  // Cross-entropy's gradient written over its logits, and rotary embedding in place.
  const int64_t N = 5, V = 33;
  Pair logits({N, V}, 5);
  Owned targets(DType::i32, {N}), lb(DType::f32, {N}), lf(DType::f32, {N}), df(DType::f32, {N, V});
  for (int64_t i = 0; i < N; ++i) targets.data<int32_t>()[i] = int32_t((7 * i) % V);
  ops::cross_entropy(lf, df, logits.f, targets, -1, 0.25);
  ops::cross_entropy(lb, logits.b, logits.b, targets, -1, 0.25);
  EXPECT_EQ(std::memcmp(lb.t.data, lf.t.data, size_t(N) * 4), 0);
  expect_rounded(logits.b.t, df.t);

  Pair q({2, 3, 2, 8}, 6);
  Owned qf(DType::f32, {2, 3, 2, 8});
  ops::RopeConfig cfg;
  cfg.rotary_dim = 8;
  ops::rope_forward(qf, q.f, Tensor{}, cfg);
  ops::rope_forward(q.b, q.b, Tensor{}, cfg);
  expect_rounded(q.b.t, qf.t);
}

TEST(Bf16Storage, InputsAreReadBeforeOutputsAreWritten) {
  // dst = columns [0, 4) and src = columns [2, 6) of one bf16 buffer: the columns both touch hold the
  // sums of the values before the call, and the input's unchanged columns are not written back over them.
  Pair x({3, 6}, 7);
  Owned before = Owned::copy_of(x.f, DType::f32);
  ops::accumulate(x.b.t.slice(1, 0, 4), x.b.t.slice(1, 2, 4), 1.0);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 6; ++c) {
      const float* old = before.data<float>() + r * 6;
      const float want = c < 4 ? old[c] + old[c + 2] : old[c];
      EXPECT_EQ(x.b.data<uint16_t>()[r * 6 + c], round_bf16(want)) << r << "," << c;
    }
}

TEST(Bf16Storage, MatmulRoundsItsOutputOnce) {
  Pair a({5, 16}, 8), w({3, 16}, 9);
  Owned ob(DType::bf16, {5, 3}), of(DType::f32, {5, 3});
  ops::linear_forward(ob, a.b, w.b, Tensor{});
  ops::linear_forward(of, a.f, w.f, Tensor{});
  expect_rounded(ob.t, of.t);
}

}  // namespace
}  // namespace sinklab
