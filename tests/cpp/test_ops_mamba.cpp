// State-space (Mamba) and mixture-of-experts ops on the CPU (forward only):
// - against PyTorch float64 references of the formulas (golden file from
//   tests/python/goldens/gen_mamba.py), in f32 and f64: causal depthwise conv1d (T = 1, T = 67,
//   C not a multiple of 8, K = 1, no bias), selective scan (T = 1, T = 67, Di not a multiple of 8,
//   N = 1, without skip / dt bias / softplus, dt above softplus' threshold), top-k router (k = E,
//   E = 1, 16 experts), index_add_rows (repeated indices, no scale);
// - strided views (the halves of a fused projection) give bit-identical results to contiguous ones;
// - y may be x itself in the scan;
// - bad shapes and out-of-range indices throw sinklab::Error.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_util.hpp"

namespace sinklab {
namespace {

using test::Owned;

const std::vector<std::string> kConvCases = {"conv_t1", "conv_t67", "conv_k3_nobias", "conv_k1"};
const std::vector<std::string> kScanCases = {"scan_t1", "scan_t67", "scan_n1", "scan_nosoftplus", "scan_threshold"};
const std::vector<std::string> kRouterCases = {"router_e4k2", "router_e16k2", "router_e5k5", "router_e1k1"};
const std::vector<std::string> kIndexAddCases = {"iadd_repeat", "iadd_noscale"};

// The golden operand in dtype dt, or an empty Owned when the case has none (optional operand).
Owned optional(const test::Golden& g, const std::string& name, DType dt) {
  return g.has(name) ? g.get(name, dt) : Owned();
}

// Bitwise equality of two tensors of the same shape (strided and contiguous runs of one op).
bool identical(const Tensor& a, const Tensor& b) {
  if (a.numel() != b.numel()) return false;
  for (int64_t i = 0; i < a.numel(); ++i)
    if (test::element(a, i) != test::element(b, i)) return false;
  return true;
}

TEST(MambaOps, CausalConv1dVsTorch) {
  test::Golden g("mamba.safetensors");
  for (DType dt : test::kDtypes)
    for (const std::string& c : kConvCases) {
      Owned x = g.get(c + "/x", dt), w = g.get(c + "/weight", dt), bias = optional(g, c + "/bias", dt);
      Owned out(dt, test::dims_of(x));
      ops::fill(out, 99.0);
      ops::causal_conv1d_forward(out, x, w, bias);
      EXPECT_LE(test::rel_error(out, g.raw(c + "/out")), test::tol(dt)) << c << " " << dtype_name(dt);
    }
}

TEST(MambaOps, SelectiveScanVsTorch) {
  test::Golden g("mamba.safetensors");
  for (DType dt : test::kDtypes)
    for (const std::string& c : kScanCases) {
      Owned x = g.get(c + "/x", dt), dts = g.get(c + "/dt", dt), A_log = g.get(c + "/A_log", dt), B = g.get(c + "/B", dt),
            C = g.get(c + "/C", dt), D = optional(g, c + "/D", dt), dt_bias = optional(g, c + "/dt_bias", dt);
      const bool softplus = g.param(c + "/softplus") != 0.0;
      Owned y(dt, test::dims_of(x));
      ops::fill(y, 99.0);
      ops::selective_scan_forward(y, x, dts, A_log, B, C, D, dt_bias, softplus);
      EXPECT_LE(test::rel_error(y, g.raw(c + "/y")), test::tol(dt)) << c << " " << dtype_name(dt);
      // In place: y written over x.
      Owned x2 = g.get(c + "/x", dt);
      ops::selective_scan_forward(x2, x2, dts, A_log, B, C, D, dt_bias, softplus);
      EXPECT_TRUE(identical(x2, y)) << c << " in place";
    }
}

TEST(MambaOps, RouterTopKVsTorch) {
  test::Golden g("mamba.safetensors");
  for (DType dt : test::kDtypes)
    for (const std::string& c : kRouterCases) {
      Owned logits = g.get(c + "/logits", dt);
      Tensor experts_ref = g.raw(c + "/experts"), weights_ref = g.raw(c + "/weights");
      const int64_t N = experts_ref.shape[0], k = experts_ref.shape[1];
      Owned w(dt, {N, k}), e(DType::i32, {N, k});
      ops::moe_router_topk(w, e, logits);
      EXPECT_LE(test::rel_error(w, weights_ref), test::tol(dt)) << c << " " << dtype_name(dt);
      for (int64_t i = 0; i < N * k; ++i)
        ASSERT_EQ(e.data<int32_t>()[i], experts_ref.ptr<int32_t>()[i]) << c << " element " << i;
    }
}

TEST(MambaOps, IndexAddRowsVsTorch) {
  test::Golden g("mamba.safetensors");
  for (DType dt : test::kDtypes)
    for (const std::string& c : kIndexAddCases) {
      Owned out = g.get(c + "/out0", dt), src = g.get(c + "/src", dt), scale = optional(g, c + "/scale", dt);
      Tensor index = g.raw(c + "/index");
      ops::index_add_rows(out, src, index, scale);
      EXPECT_LE(test::rel_error(out, g.raw(c + "/out")), test::tol(dt)) << c << " " << dtype_name(dt);
    }
}

// In a Mamba layer the conv input is the first half of the in_proj output [B,T,2Di] and B/C are
// slices of the x_proj output: strided views must give exactly the contiguous result.
TEST(MambaOps, StridedViewsMatchContiguous) {
  const int64_t Bn = 2, T = 11, Di = 6, N = 3, K = 4;
  Owned fused(DType::f32, {Bn, T, 2 * Di}), w(DType::f32, {Di, K}), bias(DType::f32, {Di});
  test::randn(fused, 1), test::randn(w, 2, 0.5), test::randn(bias, 3);
  Tensor x_view = fused.t.slice(2, Di, Di);  // the second half: non-zero offset and row stride 2Di
  Owned x = Owned::copy_of(x_view, DType::f32);
  Owned out_strided_buf(DType::f32, {Bn, T, 3 * Di}), out(DType::f32, {Bn, T, Di});
  Tensor out_strided = out_strided_buf.t.slice(2, Di, Di);
  ops::causal_conv1d_forward(out_strided, x_view, w, bias);
  ops::causal_conv1d_forward(out, x, w, bias);
  EXPECT_TRUE(identical(out_strided, out));

  Owned xproj(DType::f32, {Bn, T, 1 + 2 * N}), A_log(DType::f32, {Di, N}), D(DType::f32, {Di});
  Owned dts(DType::f32, {Bn, T, Di});
  test::randn(xproj, 4), test::randn(A_log, 5), test::randn(D, 6), test::randn(dts, 7);
  Tensor Bv = xproj.t.slice(2, 1, N), Cv = xproj.t.slice(2, 1 + N, N);
  Owned Bc = Owned::copy_of(Bv, DType::f32), Cc = Owned::copy_of(Cv, DType::f32);
  Owned y1(DType::f32, {Bn, T, Di}), y2(DType::f32, {Bn, T, Di});
  ops::selective_scan_forward(y1, x_view, dts, A_log, Bv, Cv, D, Tensor{}, true);
  ops::selective_scan_forward(y2, x, dts, A_log, Bc, Cc, D, Tensor{}, true);
  EXPECT_TRUE(identical(y1, y2));
}

// Causality and tap order: a change of the input at time 5 of one channel changes exactly the outputs
// at times 5..5+K-1 of that channel, output t by the tap weight[c, K-1-(t-5)].
TEST(MambaOps, ConvIsCausal) {
  const int64_t T = 9, C = 3, K = 4;
  Owned x(DType::f64, {1, T, C}), w(DType::f64, {C, K}), out1(DType::f64, {1, T, C}), out2(DType::f64, {1, T, C});
  test::randn(x, 11), test::randn(w, 12);
  ops::causal_conv1d_forward(out1, x, w, Tensor{});
  x.data<double>()[5 * C + 1] += 1.0;  // time 5, channel 1
  ops::causal_conv1d_forward(out2, x, w, Tensor{});
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < C; ++c) {
      const double d = out2.data<double>()[t * C + c] - out1.data<double>()[t * C + c];
      if (c != 1 || t < 5 || t > 5 + K - 1) EXPECT_EQ(d, 0.0) << t << "," << c;
      else EXPECT_NEAR(d, w.data<double>()[c * K + (K - 1 - (t - 5))], 1e-15) << t;
    }
}

TEST(MambaOps, BadInputsThrow) {
  Owned x(DType::f32, {2, 5, 4}), w(DType::f32, {4, 3}), out(DType::f32, {2, 5, 4});
  Owned w_bad(DType::f32, {3, 3}), bias_bad(DType::f32, {5});
  EXPECT_THROW(ops::causal_conv1d_forward(out, x, w_bad, Tensor{}), Error);
  EXPECT_THROW(ops::causal_conv1d_forward(out, x, w, bias_bad), Error);
  EXPECT_THROW(ops::causal_conv1d_forward(x, x, w, Tensor{}), Error);  // in place is not allowed

  Owned A_log(DType::f32, {4, 2}), B(DType::f32, {2, 5, 2}), C(DType::f32, {2, 5, 3}), y(DType::f32, {2, 5, 4});
  EXPECT_THROW(ops::selective_scan_forward(y, x, x, A_log, B, C, Tensor{}, Tensor{}, true), Error);  // C width
  Owned x64(DType::f64, {2, 5, 4});
  EXPECT_THROW(ops::selective_scan_forward(y, x64, x, A_log, B, B, Tensor{}, Tensor{}, true), Error);  // dtype

  Owned logits(DType::f32, {3, 4}), tw(DType::f32, {3, 5}), te(DType::i32, {3, 5});
  EXPECT_THROW(ops::moe_router_topk(tw, te, logits), Error);  // k > E

  Owned dst(DType::f32, {4, 3}), src(DType::f32, {2, 3}), index(DType::i32, {2});
  index.data<int32_t>()[0] = 1, index.data<int32_t>()[1] = 4;
  EXPECT_THROW(ops::index_add_rows(dst, src, index, Tensor{}), Error);
}

}  // namespace
}  // namespace sinklab
