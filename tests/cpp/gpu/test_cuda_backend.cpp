// CUDA backend against the CPU reference (label "gpu"): copies and dtype conversions in every
// direction, Philox fills and column sums bit-identical to the CPU, the arithmetic and elementwise ops at
// f32 accuracy, and the refusal of a dtype the CUDA kernels do not take, naming the op. Every test
// skips when no CUDA device is usable (CPU-only builds, machines without a GPU or with an old driver).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "backend/memory.hpp"
#include "backend/ops.hpp"
#include "core/philox.hpp"
#include "gpu/gpu_test_util.hpp"
#include "test_util.hpp"

namespace sinklab {
namespace {

using gpu_test::Dev;
using gpu_test::random_host;
using gpu_test::same_bits;
using gpu_test::to_device;
using gpu_test::to_host;
using test::Owned;
using test::rel_error;

constexpr double kTol = 1e-6;  // rel_error against the CPU in f32

TEST(CudaBackend, CopyRoundTripsAndConversions) {
  if (!sinklab::cuda_available()) GTEST_SKIP() << "no usable CUDA device";
  Owned x = random_host(DType::f32, {37, 53}, 1, 3.0);

  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dt));
    Owned ref_dt = Owned::copy_of(x.t, dt);            // the CPU's conversion
    Owned ref_f32 = Owned::copy_of(ref_dt.t, DType::f32);
    // H2D converting, D2H same dtype and converting.
    Dev d = to_device(x.t, dt);
    EXPECT_TRUE(same_bits(to_host(d.t, dt).t, ref_dt.t));
    EXPECT_TRUE(same_bits(to_host(d.t, DType::f32).t, ref_f32.t));
    // H2D same dtype.
    Dev d2 = to_device(ref_dt.t, dt);
    EXPECT_TRUE(same_bits(to_host(d2.t, dt).t, ref_dt.t));
    // D2D converting f32 -> dt -> f32.
    Dev dev_f32 = to_device(x.t, DType::f32);
    Dev dev_dt(dt, {37, 53});
    ops::copy(dev_dt.t, dev_f32.t);
    Dev back(DType::f32, {37, 53});
    ops::copy(back.t, dev_dt.t);
    EXPECT_TRUE(same_bits(to_host(back.t, DType::f32).t, ref_f32.t));
  }

  // f64 on the host -> f32 on the device (exact round trip) and back to f64.
  Owned x64 = Owned::copy_of(x.t, DType::f64);
  Dev d32 = to_device(x64.t, DType::f32);
  EXPECT_TRUE(same_bits(to_host(d32.t, DType::f32).t, x.t));
  EXPECT_TRUE(same_bits(to_host(d32.t, DType::f64).t, x64.t));

  // Strided rows: the right half of a [37, 106] device buffer, whose left half must stay untouched.
  Dev wide(DType::f32, {37, 106});
  ops::fill(wide.t, 0.0);
  Tensor right = wide.t.slice(1, 53, 53);
  ops::copy(right, x.t);                                   // H2D into a strided view
  EXPECT_TRUE(same_bits(to_host(right, DType::f32).t, x.t));  // D2H from a strided view
  Owned wide_host = to_host(wide.t, DType::f32);
  for (int64_t r = 0; r < 37; ++r)
    for (int64_t c = 0; c < 53; ++c) ASSERT_EQ(wide_host.data<float>()[r * 106 + c], 0.0f) << r << "," << c;
  // D2H into a strided host view, converting to bf16.
  Owned host_wide(DType::bf16, {37, 106});
  Tensor host_left = host_wide.t.slice(1, 0, 53);
  ops::copy(host_left, right);
  Owned ref_bf16 = Owned::copy_of(x.t, DType::bf16);
  EXPECT_TRUE(same_bits(Owned::copy_of(host_left, DType::bf16).t, ref_bf16.t));
  // H2D from a strided host view, converting; D2D strided -> strided converting.
  Dev from_strided(DType::f16, {37, 53});
  ops::copy(from_strided.t, host_left);
  EXPECT_TRUE(same_bits(to_host(from_strided.t, DType::f16).t,
                        Owned::copy_of(ref_bf16.t, DType::f16).t));
  Dev wide16(DType::f16, {37, 106});
  ops::fill(wide16.t, 0.0);
  ops::copy(wide16.t.slice(1, 0, 53), right);
  EXPECT_TRUE(same_bits(to_host(wide16.t.slice(1, 0, 53), DType::f16).t, Owned::copy_of(x.t, DType::f16).t));
  // D2H converting from a strided view into a dense f16 buffer (convert_kernel: two layouts; f32 <-> bf16 goes
  // through the elementwise engine instead).
  EXPECT_TRUE(same_bits(to_host(right, DType::f16).t, Owned::copy_of(x.t, DType::f16).t));
}

TEST(CudaBackend, FillAddAccumulateScaleSumSquares) {
  if (!sinklab::cuda_available()) GTEST_SKIP() << "no usable CUDA device";
  const std::vector<int64_t> shape = {29, 131};
  Owned a = random_host(DType::f32, shape, 2), b = random_host(DType::f32, shape, 3);
  Dev da = to_device(a.t, DType::f32), db = to_device(b.t, DType::f32);

  // fill, into f32 and into a strided bf16 view.
  Dev f(DType::f32, shape);
  ops::fill(f.t, 1.25);
  Owned ref_fill(DType::f32, shape);
  ops::fill(ref_fill.t, 1.25);
  EXPECT_TRUE(same_bits(to_host(f.t, DType::f32).t, ref_fill.t));
  Dev fb(DType::bf16, {29, 262});
  ops::fill(fb.t, 0.0);
  ops::fill(fb.t.slice(1, 131, 131), -3.5);
  Owned ref_fb(DType::bf16, {29, 262});
  ops::fill(ref_fb.t.slice(1, 131, 131), -3.5);
  EXPECT_TRUE(same_bits(to_host(fb.t, DType::bf16).t, ref_fb.t));

  // add
  Dev out(DType::f32, shape);
  ops::add(out.t, da.t, db.t);
  Owned ref(DType::f32, shape);
  ops::add(ref.t, a.t, b.t);
  EXPECT_LE(rel_error(to_host(out.t, DType::f32).t, ref.t), kTol);

  // accumulate and scale (in place)
  ops::accumulate(out.t, da.t, 0.37);
  ops::accumulate(ref.t, a.t, 0.37);
  EXPECT_LE(rel_error(to_host(out.t, DType::f32).t, ref.t), kTol);
  ops::scale(out.t, -1.7);
  ops::scale(ref.t, -1.7);
  EXPECT_LE(rel_error(to_host(out.t, DType::f32).t, ref.t), kTol);

  // sum_squares: small, large (many blocks), strided.
  // (of the device's own values: out and ref may differ in last bits, which a 1e-10 bound would see)
  const double out_ss = ops::sum_squares(to_host(out.t, DType::f32).t);
  EXPECT_NEAR(ops::sum_squares(out.t), out_ss, 1e-10 * out_ss);
  Owned big = random_host(DType::f32, {(1 << 20) + 3}, 4);
  Dev dbig = to_device(big.t, DType::f32);
  double want = ops::sum_squares(big.t);
  EXPECT_NEAR(ops::sum_squares(dbig.t), want, 1e-10 * want);
  Dev wide = to_device(random_host(DType::f32, {29, 262}, 5).t, DType::f32);
  Tensor half = wide.t.slice(1, 100, 131);
  Owned half_host = to_host(half, DType::f32);
  want = ops::sum_squares(half_host.t);
  EXPECT_NEAR(ops::sum_squares(half), want, 1e-10 * want);

  // max_abs (the training monitor): exact, the same strided view; a NaN anywhere wins.
  EXPECT_EQ(ops::max_abs(dbig.t), ops::max_abs(big.t));
  EXPECT_EQ(ops::max_abs(half), ops::max_abs(half_host.t));
  ops::fill(dbig.t.slice(0, 777777, 1), std::numeric_limits<double>::quiet_NaN());
  EXPECT_TRUE(std::isnan(ops::max_abs(dbig.t)));

  // Device arithmetic takes f32 and bf16: a clear error for anything else, naming the op and argument.
  Dev h(DType::f64, shape);
  try {
    ops::add(h.t, da.t, h.t);
    ADD_FAILURE() << "add on f64 did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("add: out"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("f32 or bf16"), std::string::npos) << e.what();
  }
}

TEST(CudaBackend, RandomFillsAreBitIdenticalToCpu) {
  if (!sinklab::cuda_available()) GTEST_SKIP() << "no usable CUDA device";
  const uint64_t seed = 42, stream = 3;
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dt));
    Dev dn(dt, {129, 77}), du(dt, {129, 77});
    Owned cn(dt, {129, 77}), cu(dt, {129, 77});
    // std and high-low powers of two: fused and unfused multiply-adds round alike.
    ops::fill_normal(dn.t, seed, stream, 0.5, 2.0);
    ops::fill_normal(cn.t, seed, stream, 0.5, 2.0);
    ops::fill_uniform(du.t, seed, stream + 1, -1.0, 3.0);
    ops::fill_uniform(cu.t, seed, stream + 1, -1.0, 3.0);
    EXPECT_TRUE(same_bits(to_host(dn.t, dt).t, cn.t));
    EXPECT_TRUE(same_bits(to_host(du.t, dt).t, cu.t));
  }
  // Strided: element i of the view (logical order) is value i of the stream on both backends.
  Dev dw(DType::f32, {16, 66});
  Owned cw(DType::f32, {16, 66});
  ops::fill(dw.t, 0.0);
  ops::fill_normal(dw.t.slice(1, 33, 33), seed, 9, 0.0, 1.0);
  ops::fill_normal(cw.t.slice(1, 33, 33), seed, 9, 0.0, 1.0);
  EXPECT_TRUE(same_bits(to_host(dw.t, DType::f32).t, cw.t));
  // A 3-D view with strided leading dims.
  Dev d3(DType::f32, {4, 6, 40});
  Owned c3(DType::f32, {4, 6, 40});
  ops::fill(d3.t, 0.0);
  ops::fill_uniform(d3.t.slice(1, 1, 4).slice(2, 8, 24), seed, 11, 0.0, 1.0);
  ops::fill_uniform(c3.t.slice(1, 1, 4).slice(2, 8, 24), seed, 11, 0.0, 1.0);
  EXPECT_TRUE(same_bits(to_host(d3.t, DType::f32).t, c3.t));
}

// The first words of sinklab's Philox stream convention (also fixed by test_core's
// Philox.StreamFirstValuesAreFixed), computed by a device kernel: fill_uniform over [0,1) returns
// (word >> 8 + 0.5) / 2^24 as f32 (exact below 2^23, rounded to even above).
TEST(CudaBackend, PhiloxFirstWordsOnDevice) {
  if (!sinklab::cuda_available()) GTEST_SKIP() << "no usable CUDA device";
  const uint64_t seed = 0x243f6a8885a308d3ull, stream = 7;
  const uint32_t expected[4] = {0x388b67beu, 0x79626effu, 0x190e4609u, 0xf42dbaeeu};
  Dev d(DType::f32, {8});
  ops::fill_uniform(d.t, seed, stream, 0.0, 1.0);
  Owned h = to_host(d.t, DType::f32);
  for (uint64_t i = 0; i < 8; ++i) {
    float cpu = philox_uniform(seed, stream, i);
    float gpu = h.data<float>()[i];
    EXPECT_EQ(f32_bits(gpu), f32_bits(cpu)) << "value " << i;
    if (i < 4) {  // (k + 0.5) / 2^24 in f32: rounded for k >= 2^23, so compared as the same f32 expression
      const float want = (float(expected[i] >> 8) + 0.5f) * (1.0f / 16777216.0f);
      EXPECT_EQ(f32_bits(gpu), f32_bits(want)) << "word " << i;
    }
  }
}

TEST(CudaBackend, ActivationsMatchCpu) {
  if (!sinklab::cuda_available()) GTEST_SKIP() << "no usable CUDA device";
  const int64_t rows = 64, ff = 96;
  // gate and up as the two halves of one fused [rows, 2*ff] projection: strided rows.
  Owned fused = random_host(DType::f32, {rows, 2 * ff}, 20, 2.0);
  Owned d_out = random_host(DType::f32, {rows, ff}, 21);
  Dev dfused = to_device(fused.t, DType::f32);
  Dev dd_out = to_device(d_out.t, DType::f32);
  Tensor gate = fused.t.slice(1, 0, ff), up = fused.t.slice(1, ff, ff);
  Tensor dgate = dfused.t.slice(1, 0, ff), dup = dfused.t.slice(1, ff, ff);

  for (ops::Activation act : {ops::Activation::relu, ops::Activation::gelu_exact, ops::Activation::gelu_tanh,
                              ops::Activation::silu}) {
    SCOPED_TRACE(int(act));
    Owned c_out(DType::f32, {rows, ff}), c_din(DType::f32, {rows, ff});
    Dev g_out(DType::f32, {rows, ff}), g_din(DType::f32, {rows, ff});

    ops::activation_forward(c_out.t, gate, act);
    ops::activation_forward(g_out.t, dgate, act);
    EXPECT_LE(rel_error(to_host(g_out.t, DType::f32).t, c_out.t), kTol) << "activation_forward";

    ops::activation_backward(c_din.t, d_out.t, gate, act);
    ops::activation_backward(g_din.t, dd_out.t, dgate, act);
    EXPECT_LE(rel_error(to_host(g_din.t, DType::f32).t, c_din.t), kTol) << "activation_backward";

    ops::gated_forward(c_out.t, gate, up, act);
    ops::gated_forward(g_out.t, dgate, dup, act);
    EXPECT_LE(rel_error(to_host(g_out.t, DType::f32).t, c_out.t), kTol) << "gated_forward";

    // Gradients into the halves of a fused gradient buffer (strided outputs).
    Owned c_dfused(DType::f32, {rows, 2 * ff});
    Dev g_dfused(DType::f32, {rows, 2 * ff});
    ops::gated_backward(c_dfused.t.slice(1, 0, ff), c_dfused.t.slice(1, ff, ff), d_out.t, gate, up, act);
    ops::gated_backward(g_dfused.t.slice(1, 0, ff), g_dfused.t.slice(1, ff, ff), dd_out.t, dgate, dup, act);
    Owned g_dfused_host = to_host(g_dfused.t, DType::f32);
    EXPECT_LE(rel_error(g_dfused_host.t.slice(1, 0, ff), c_dfused.t.slice(1, 0, ff)), kTol) << "gated_backward d_gate";
    EXPECT_LE(rel_error(g_dfused_host.t.slice(1, ff, ff), c_dfused.t.slice(1, ff, ff)), kTol) << "gated_backward d_up";
  }
}

TEST(CudaBackend, AdamWMatchesCpu) {
  if (!sinklab::cuda_available()) GTEST_SKIP() << "no usable CUDA device";
  const std::vector<int64_t> shape = {33, 65};
  Owned param = random_host(DType::f32, shape, 30);
  Owned m(DType::f32, shape), v(DType::f32, shape);
  Dev dparam = to_device(param.t, DType::f32), dm = to_device(m.t, DType::f32), dv = to_device(v.t, DType::f32);
  ops::AdamWStep s;
  s.lr = 3e-3;
  s.beta1 = 0.9;
  s.beta2 = 0.95;
  s.eps = 1e-8;
  s.weight_decay = 0.1;
  for (int64_t step = 1; step <= 4; ++step) {
    SCOPED_TRACE(step);
    s.step = step;
    Owned grad = random_host(DType::f32, shape, 40 + uint64_t(step), 0.5);
    Dev dgrad = to_device(grad.t, DType::f32);
    ops::adamw_update(param.t, grad.t, m.t, v.t, s);
    ops::adamw_update(dparam.t, dgrad.t, dm.t, dv.t, s);
    EXPECT_LE(rel_error(to_host(dparam.t, DType::f32).t, param.t), kTol) << "param";
    EXPECT_LE(rel_error(to_host(dm.t, DType::f32).t, m.t), kTol) << "m";
    EXPECT_LE(rel_error(to_host(dv.t, DType::f32).t, v.t), kTol) << "v";
  }
}

// column_sum sums each element's rows in order in double on both backends: the same bits as the CPU,
// for column sums of odd shapes, per-head sums over several leading dims, strided views, and +=.
TEST(CudaBackend, ColumnSumIsBitIdenticalToCpu) {
  if (!sinklab::cuda_available()) GTEST_SKIP() << "no usable CUDA device";
  struct Case {
    std::vector<int64_t> in_dims, out_dims;
  };
  const std::vector<Case> cases = {{{1, 7}, {7}},           {{37, 1}, {1}},         {{1031, 129}, {129}},
                                   {{3, 11, 4, 13}, {4, 13}}, {{3, 11, 4, 13}, {13}}};
  uint64_t stream = 60;
  for (const Case& c : cases) {
    SCOPED_TRACE(Owned(DType::f32, c.in_dims).t.shape_str());
    Owned in = random_host(DType::f32, c.in_dims, stream++);
    Dev din = to_device(in.t, DType::f32);
    for (bool accumulate : {false, true}) {
      Owned out = random_host(DType::f32, c.out_dims, stream++);
      Dev dout = to_device(out.t, DType::f32);
      ops::column_sum(out.t, in.t, accumulate);
      ops::column_sum(dout.t, din.t, accumulate);
      EXPECT_TRUE(same_bits(to_host(dout.t, DType::f32).t, out.t)) << (accumulate ? "+=" : "=");
    }
  }
  // Lead key 0, first 5 of 8 features, of a [B, S, H, dh] tensor: a strided [B, 1, H, 5] view.
  Owned keys = random_host(DType::f32, {6, 9, 3, 8}, stream++);
  Dev dkeys = to_device(keys.t, DType::f32);
  Owned out(DType::f32, {3, 5});
  Dev dout = to_device(out.t, DType::f32);
  ops::column_sum(out.t, keys.t.slice(1, 0, 1).slice(3, 0, 5), true);
  ops::column_sum(dout.t, dkeys.t.slice(1, 0, 1).slice(3, 0, 5), true);
  EXPECT_TRUE(same_bits(to_host(dout.t, DType::f32).t, out.t)) << "strided";
}

// Every op has a CUDA kernel now (op_list.hpp has no CPU_ONLY_OP line); an operand the CUDA kernels do not
// take is refused naming the op.
TEST(CudaBackend, OtherDtypesAreRefusedNamingTheOp) {
  if (!sinklab::cuda_available()) GTEST_SKIP() << "no usable CUDA device";
  Dev in(DType::f64, {2, 4, 3}), out(DType::f64, {2, 4, 3}), weight(DType::f64, {3, 2});
  try {
    ops::causal_conv1d_forward(out.t, in.t, weight.t, Tensor{});
    ADD_FAILURE() << "causal_conv1d_forward on f64 did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("causal_conv1d_forward"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("f32"), std::string::npos) << e.what();
  }
}

// ---- bf16 storage (ops.hpp): every memory and elementwise op on bf16 operands, alone and mixed with f32 ones,
// against the CPU's bf16 storage (gpu_test_util.hpp kBf16Tol). Shapes: one row, a width that is no multiple
// of the 8-element vector step (the scalar tail), a multiple of it (the 128-bit path), strided halves of a
// fused buffer (the strided kernel), in-place calls.
struct DtypeMix {
  DType out, a, b;
};
constexpr DtypeMix kMixes[] = {{DType::bf16, DType::bf16, DType::bf16},
                               {DType::bf16, DType::f32, DType::bf16},
                               {DType::f32, DType::bf16, DType::bf16}};
const std::vector<std::vector<int64_t>> kBf16Shapes = {{1, 13}, {37, 131}, {16, 264}};

TEST(CudaBackendBf16, AddAccumulateScaleCopyMatchCpu) {
  SKIP_WITHOUT_CUDA();
  uint64_t stream = 300;
  for (const auto& shape : kBf16Shapes) {
    for (const DtypeMix& mix : kMixes) {
      SCOPED_TRACE(Owned(mix.out, shape).t.shape_str() + " out " + dtype_name(mix.out) + " a " + dtype_name(mix.a) +
                   " b " + dtype_name(mix.b));
      gpu_test::HostDev a = gpu_test::random_pair(mix.a, shape, stream++), b = gpu_test::random_pair(mix.b, shape, stream++);
      Owned c_out(mix.out, shape);
      Dev g_out(mix.out, shape);
      ops::add(c_out.t, a.host.t, b.host.t);
      ops::add(g_out.t, a.dev.t, b.dev.t);
      EXPECT_LE(gpu_test::device_error(g_out.t, c_out.t), gpu_test::kBf16Tol) << "add";
      ops::accumulate(c_out.t, b.host.t, 0.37);
      ops::accumulate(g_out.t, b.dev.t, 0.37);
      EXPECT_LE(gpu_test::device_error(g_out.t, c_out.t), gpu_test::kBf16Tol) << "accumulate";
      ops::scale(c_out.t, -1.7);
      ops::scale(g_out.t, -1.7);
      EXPECT_LE(gpu_test::device_error(g_out.t, c_out.t), gpu_test::kBf16Tol) << "scale";
      ops::add(a.host.t, a.host.t, b.host.t);  // in place: out is a
      ops::add(a.dev.t, a.dev.t, b.dev.t);
      EXPECT_LE(gpu_test::device_error(a.dev.t, a.host.t), gpu_test::kBf16Tol) << "add in place";
      // copy f32 <-> bf16 rounds as the CPU's copy does: the same bits.
      Owned c_copy(mix.out, shape);
      Dev g_copy(mix.out, shape);
      ops::copy(c_copy.t, b.host.t);
      ops::copy(g_copy.t, b.dev.t);
      EXPECT_TRUE(same_bits(to_host(g_copy.t).t, c_copy.t)) << "copy";
    }
  }
}

TEST(CudaBackendBf16, StridedViewsMatchCpu) {
  SKIP_WITHOUT_CUDA();
  // Halves of a fused bf16 [rows, 2 * w] buffer in and out; the other half must stay as it was.
  const int64_t rows = 19, w = 45;
  gpu_test::HostDev fused = gpu_test::random_pair(DType::bf16, {rows, 2 * w}, 320);
  gpu_test::HostDev other = gpu_test::random_pair(DType::f32, {rows, w}, 321);
  Owned c_out = Owned::copy_of(fused.host.t, DType::bf16);
  Dev g_out = to_device(c_out.t);
  ops::add(c_out.t.slice(1, w, w), fused.host.t.slice(1, 0, w), other.host.t);
  ops::add(g_out.t.slice(1, w, w), fused.dev.t.slice(1, 0, w), other.dev.t);
  EXPECT_LE(gpu_test::device_error(g_out.t, c_out.t), gpu_test::kBf16Tol) << "add into a strided half";
  Owned c_copy(DType::f32, {rows, w});
  Dev g_copy(DType::f32, {rows, w});
  ops::copy(c_copy.t, fused.host.t.slice(1, w, w));
  ops::copy(g_copy.t, fused.dev.t.slice(1, w, w));
  EXPECT_TRUE(same_bits(to_host(g_copy.t).t, c_copy.t)) << "strided bf16 -> f32 copy";
  ops::copy(c_out.t.slice(1, 0, w), other.host.t);
  ops::copy(g_out.t.slice(1, 0, w), other.dev.t);
  EXPECT_TRUE(same_bits(to_host(g_out.t).t, c_out.t)) << "f32 -> strided bf16 copy";
}

TEST(CudaBackendBf16, ActivationsMatchCpu) {
  SKIP_WITHOUT_CUDA();
  for (const auto& shape : kBf16Shapes) {
    const int64_t rows = shape[0], ff = shape[1];
    SCOPED_TRACE(Owned(DType::f32, shape).t.shape_str());
    // gate and up as the halves of one fused bf16 projection; d_out f32 (a mixed call).
    gpu_test::HostDev fused = gpu_test::random_pair(DType::bf16, {rows, 2 * ff}, 330, 2.0);
    gpu_test::HostDev d_out = gpu_test::random_pair(DType::f32, shape, 331);
    gpu_test::HostDev x = gpu_test::random_pair(DType::bf16, shape, 332, 2.0);
    const Tensor gate = fused.host.t.slice(1, 0, ff), up = fused.host.t.slice(1, ff, ff);
    const Tensor dgate = fused.dev.t.slice(1, 0, ff), dup = fused.dev.t.slice(1, ff, ff);
    for (ops::Activation act : {ops::Activation::relu, ops::Activation::gelu_tanh, ops::Activation::silu}) {
      SCOPED_TRACE(int(act));
      Owned c_out(DType::bf16, shape);
      Dev g_out(DType::bf16, shape);
      ops::activation_forward(c_out.t, x.host.t, act);
      ops::activation_forward(g_out.t, x.dev.t, act);
      EXPECT_LE(gpu_test::device_error(g_out.t, c_out.t), gpu_test::kBf16Tol) << "activation_forward";
      ops::activation_backward(c_out.t, d_out.host.t, x.host.t, act);
      ops::activation_backward(g_out.t, d_out.dev.t, x.dev.t, act);
      EXPECT_LE(gpu_test::device_error(g_out.t, c_out.t), gpu_test::kBf16Tol) << "activation_backward";
      ops::gated_forward(c_out.t, gate, up, act);
      ops::gated_forward(g_out.t, dgate, dup, act);
      EXPECT_LE(gpu_test::device_error(g_out.t, c_out.t), gpu_test::kBf16Tol) << "gated_forward";
      Owned c_dfused(DType::bf16, {rows, 2 * ff});
      Dev g_dfused(DType::bf16, {rows, 2 * ff});
      ops::gated_backward(c_dfused.t.slice(1, 0, ff), c_dfused.t.slice(1, ff, ff), d_out.host.t, gate, up, act);
      ops::gated_backward(g_dfused.t.slice(1, 0, ff), g_dfused.t.slice(1, ff, ff), d_out.dev.t, dgate, dup, act);
      EXPECT_LE(gpu_test::device_error(g_dfused.t, c_dfused.t), gpu_test::kBf16Tol) << "gated_backward";
      // In place: SwiGLU's output over its gate.
      Owned c_gate = Owned::copy_of(gate, DType::bf16);
      Dev g_gate = to_device(c_gate.t);
      ops::gated_forward(c_gate.t, c_gate.t, up, act);
      ops::gated_forward(g_gate.t, g_gate.t, dup, act);
      EXPECT_LE(gpu_test::device_error(g_gate.t, c_gate.t), gpu_test::kBf16Tol) << "gated_forward in place";
    }
  }
}

// Reductions of bf16 data: sum_squares and max_abs to the host, column_sum (bf16 in, f32 out: the same bits
// as the CPU), reduce_into (a device f64, no host synchronisation) in every kind, = and accumulate.
TEST(CudaBackendBf16, ReduceIntoAndReductionsMatchCpu) {
  SKIP_WITHOUT_CUDA();
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    gpu_test::HostDev x = gpu_test::random_pair(dt, {(1 << 17) + 5}, 340);
    gpu_test::HostDev m = gpu_test::random_pair(dt, {37, 131}, 341);
    const double ss = ops::sum_squares(x.host.t);
    EXPECT_NEAR(ops::sum_squares(x.dev.t), ss, 1e-10 * ss);
    EXPECT_EQ(ops::max_abs(m.dev.t.slice(1, 3, 100)), ops::max_abs(m.host.t.slice(1, 3, 100)));
    Owned c_col(DType::f32, {100});
    Dev g_col(DType::f32, {100});
    ops::column_sum(c_col.t, m.host.t.slice(1, 3, 100));
    ops::column_sum(g_col.t, m.dev.t.slice(1, 3, 100));
    EXPECT_TRUE(same_bits(to_host(g_col.t).t, c_col.t)) << "column_sum";
    for (ops::Reduction kind : {ops::Reduction::sum, ops::Reduction::sum_squares, ops::Reduction::max_abs}) {
      SCOPED_TRACE(int(kind));
      Owned c_out(DType::f64, {1});
      Dev g_out(DType::f64, {1});
      const std::pair<Tensor, Tensor> parts[] = {{x.host.t, x.dev.t},
                                                 {m.host.t.slice(1, 3, 100), m.dev.t.slice(1, 3, 100)},
                                                 {x.host.t.slice(0, 0, 0), x.dev.t.slice(0, 0, 0)}};
      bool first = true;
      for (const auto& [host, dev] : parts) {
        ops::reduce_into(c_out.t, host, kind, !first);
        ops::reduce_into(g_out.t, dev, kind, !first);
        first = false;
      }
      const double want = c_out.data<double>()[0];
      EXPECT_NEAR(to_host(g_out.t).data<double>()[0], want, 1e-10 * std::fabs(want)) << "reduce_into";
    }
  }
}

TEST(CudaBackend, MissingDeviceIsAClearError) {
  if (!sinklab::cuda_available()) GTEST_SKIP() << "no usable CUDA device";
  float dummy = 0.0f;
  Tensor t(&dummy, DType::f32, {1}, Device::cuda(999));
  try {
    ops::fill(t, 1.0);
    ADD_FAILURE() << "fill on cuda:999 did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:999"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sinklab
