// Rotary position embedding (CPU, f32 and f64) against float64 PyTorch goldens built from HF's
// rotate_half formula and transformers' own inverse frequencies (tests/python/goldens/gen_rope.py):
// full and partial rotary, Llama-3.1 scaling, explicit positions, T = 1, H = 1, in-place and strided
// (fused QKV / padded heads) views; finite-difference check of the backward in f64.
#include <string>
#include <vector>

#include "backend/rope_math.hpp"
#include "test_util.hpp"

namespace sinklab {
namespace {

using test::Golden;
using test::Owned;
using test::rel_error;
using test::kDtypes;
using test::tol;
using test::dims_of;

ops::RopeConfig config_of(const Golden& g, const std::string& c) {
  ops::RopeConfig cfg;
  cfg.rotary_dim = int(g.param(c + "/rotary_dim"));
  cfg.base = g.param(c + "/base");
  cfg.llama3_factor = g.param(c + "/llama3_factor");
  if (cfg.llama3_factor > 0) {
    cfg.llama3_low_freq_factor = g.param(c + "/llama3_low");
    cfg.llama3_high_freq_factor = g.param(c + "/llama3_high");
    cfg.llama3_original_max_position = g.param(c + "/llama3_orig");
  }
  return cfg;
}

Tensor positions_of(const Golden& g, const std::string& c) {
  return g.has(c + "/positions") ? g.raw(c + "/positions") : Tensor{};
}

// Inverse frequencies: against the float64 formula of the golden script (same expression, so to
// rounding) and against transformers' own float32 values (ROPE_INIT_FUNCTIONS["llama3"] and GPT-NeoX's
// default) to float32 precision. The float32 chain of the llama3 smoothing loses a few ulps, hence 1e-6.
TEST(OpsRope, InverseFrequenciesMatchTransformers) {
  Golden g("rope.safetensors");
  for (const std::string& c : g.cases()) {
    ops::RopeConfig cfg = config_of(g, c);
    Tensor ref = g.raw(c + "/inv_freq"), hf = g.raw(c + "/inv_freq_hf");
    ASSERT_EQ(ref.numel(), cfg.rotary_dim / 2);
    for (int i = 0; i < cfg.rotary_dim / 2; ++i) {
      double f = math::rope_inv_freq(i, cfg);
      EXPECT_NEAR(f / test::element(ref, i), 1.0, 1e-14) << c << " pair " << i;
      EXPECT_NEAR(f / test::element(hf, i), 1.0, 1e-6) << c << " pair " << i;
    }
  }
}

// The llama3 cases must exercise all three bands of the scaling (unchanged, smoothed, divided by factor).
TEST(OpsRope, Llama3CasesCoverAllBands) {
  Golden g("rope.safetensors");
  for (const char* c : {"llama3", "llama3_partial"}) {
    ops::RopeConfig cfg = config_of(g, c), plain = cfg;
    plain.llama3_factor = 0;
    bool same = false, divided = false, smoothed = false;
    for (int i = 0; i < cfg.rotary_dim / 2; ++i) {
      double ratio = math::rope_inv_freq(i, cfg) / math::rope_inv_freq(i, plain);
      if (ratio == 1.0) same = true;
      else if (std::fabs(ratio * cfg.llama3_factor - 1.0) < 1e-12) divided = true;
      else smoothed = true;
    }
    EXPECT_TRUE(same && divided && smoothed) << c;
  }
}

TEST(OpsRope, GoldenForwardBackward) {
  Golden g("rope.safetensors");
  ASSERT_GE(g.cases().size(), 5u);
  for (DType dt : kDtypes) {
    for (const std::string& c : g.cases()) {
      SCOPED_TRACE(c + (dt == DType::f32 ? " f32" : " f64"));
      ops::RopeConfig cfg = config_of(g, c);
      Tensor pos = positions_of(g, c);
      Owned x = g.get(c + "/x", dt), dout = g.get(c + "/d_out", dt);
      Owned out(dt, dims_of(x.t)), dx(dt, dims_of(x.t));
      ops::rope_forward(out, x, pos, cfg);
      EXPECT_LE(rel_error(out, g.raw(c + "/out")), tol(dt));
      ops::rope_backward(dx, dout, pos, cfg);
      EXPECT_LE(rel_error(dx, g.raw(c + "/d_x")), tol(dt));
      // Inputs untouched by the out-of-place calls.
      EXPECT_EQ(rel_error(x, g.raw(c + "/x")), 0.0);
      EXPECT_EQ(rel_error(dout, g.raw(c + "/d_out")), 0.0);
      // In place: out aliases x, d_x aliases d_out.
      ops::rope_forward(x, x, pos, cfg);
      EXPECT_LE(rel_error(x, g.raw(c + "/out")), tol(dt));
      ops::rope_backward(dout, dout, pos, cfg);
      EXPECT_LE(rel_error(dout, g.raw(c + "/d_x")), tol(dt));
    }
  }
}

// Strided views, in place: the k part of a fused qkv buffer [B,T,3H,dh] (the T stride is 3*H*dh), and
// heads padded to dh+3 (the H stride is not dh). Everything outside the view stays as it was.
TEST(OpsRope, GoldenStridedInPlace) {
  Golden g("rope.safetensors");
  for (DType dt : kDtypes) {
    for (const std::string& c : g.cases()) {
      for (int layout = 0; layout < 2; ++layout) {
        SCOPED_TRACE(c + (dt == DType::f32 ? " f32" : " f64") + (layout == 0 ? " fused qkv" : " padded heads"));
        ops::RopeConfig cfg = config_of(g, c);
        Tensor pos = positions_of(g, c);
        Tensor x_ref = g.raw(c + "/x");
        const int64_t B = x_ref.shape[0], T = x_ref.shape[1], H = x_ref.shape[2], dh = x_ref.shape[3];
        for (int pass = 0; pass < 2; ++pass) {  // 0: forward on x, 1: backward on d_out
          Owned buf = layout == 0 ? Owned(dt, {B, T, 3 * H, dh}) : Owned(dt, {B, T, H, dh + 3});
          test::randn(buf, 21);
          Owned before = Owned::copy_of(buf, DType::f64);
          Tensor view = layout == 0 ? buf.t.slice(2, H, H) : buf.t.slice(3, 1, dh);
          ops::copy(view, g.raw(c + (pass == 0 ? "/x" : "/d_out")));
          if (pass == 0) {
            ops::rope_forward(view, view, pos, cfg);
          } else {
            ops::rope_backward(view, view, pos, cfg);
          }
          EXPECT_LE(rel_error(view, g.raw(c + (pass == 0 ? "/out" : "/d_x"))), tol(dt));
          ops::copy(view, layout == 0 ? before.t.slice(2, H, H) : before.t.slice(3, 1, dh));
          EXPECT_EQ(rel_error(buf, before), 0.0) << "wrote outside the view";
        }
      }
    }
  }
}

TEST(OpsRope, CasesCoverTheAcceptanceShapes) {
  Golden g("rope.safetensors");
  bool t1 = false, t67 = false, h1 = false, partial = false, llama3 = false, pos = false, odd_d = false;
  for (const std::string& c : g.cases()) {
    Tensor x = g.raw(c + "/x");
    t1 |= x.shape[1] == 1;
    t67 |= x.shape[1] == 67;
    h1 |= x.shape[2] == 1;
    odd_d |= x.shape[3] % 8 != 0;
    partial |= g.param(c + "/rotary_dim") < double(x.shape[3]);
    llama3 |= g.param(c + "/llama3_factor") > 0;
    pos |= g.has(c + "/positions");
  }
  EXPECT_TRUE(t1 && t67 && h1 && partial && llama3 && pos && odd_d);
}

// f64 finite differences of loss = sum(rope(x) * R) with respect to x; the backward supplies the
// gradient. Partial rotary + llama3 + explicit positions (large ones included), 120 elements.
TEST(OpsRope, FiniteDifferences) {
  const DType f = DType::f64;
  ops::RopeConfig cfg;
  cfg.rotary_dim = 6;
  cfg.base = 500000.0;
  cfg.llama3_factor = 8.0;
  cfg.llama3_original_max_position = 64.0;
  Owned x(f, {2, 3, 2, 10}), out(f, {2, 3, 2, 10}), r(f, {2, 3, 2, 10}), dx(f, {2, 3, 2, 10});
  Owned pos(DType::i32, std::vector<int64_t>{3});
  pos.data<int32_t>()[0] = 3, pos.data<int32_t>()[1] = 0, pos.data<int32_t>()[2] = 70000;
  test::randn(x, 31);
  test::randn(r, 32);
  auto loss = [&] {
    ops::rope_forward(out, x, pos, cfg);
    return test::weighted_sum(out, r);
  };
  ops::rope_backward(dx, r, pos, cfg);
  EXPECT_LT(test::finite_difference_error(x, dx, loss), 1e-6);
  // Full rotary, default positions, every element checked (48 elements).
  ops::RopeConfig full;
  full.rotary_dim = 4;
  Owned x2(f, {1, 3, 4, 4}), out2(f, {1, 3, 4, 4}), r2(f, {1, 3, 4, 4}), dx2(f, {1, 3, 4, 4});
  test::randn(x2, 33);
  test::randn(r2, 34);
  auto loss2 = [&] {
    ops::rope_forward(out2, x2, Tensor{}, full);
    return test::weighted_sum(out2, r2);
  };
  ops::rope_backward(dx2, r2, Tensor{}, full);
  EXPECT_LT(test::finite_difference_error(x2, dx2, loss2), 1e-6);
}

// Large enough for the OpenMP path: forward then backward is the identity (orthogonal rotation), and
// the result does not depend on how rows split over threads (same as one row at a time).
TEST(OpsRope, ParallelPathRoundTrip) {
  const DType f = DType::f64;
  ops::RopeConfig cfg;
  cfg.rotary_dim = 32;
  cfg.base = 10000.0;
  Owned x(f, {2, 129, 4, 40}), y(f, {2, 129, 4, 40}), back(f, {2, 129, 4, 40});
  test::randn(x, 41);
  ops::rope_forward(y, x, Tensor{}, cfg);
  ops::rope_backward(back, y, Tensor{}, cfg);
  EXPECT_LE(rel_error(back, x), 1e-14);
  // Row (b=1, t=100, h=3) against the single-row formula.
  const int64_t b = 1, t = 100, h = 3;
  const double* xr = x.data<double>() + ((b * 129 + t) * 4 + h) * 40;
  const double* yr = y.data<double>() + ((b * 129 + t) * 4 + h) * 40;
  for (int i = 0; i < 16; ++i) {
    double a = std::cos(t * math::rope_inv_freq(i, cfg)), s = std::sin(t * math::rope_inv_freq(i, cfg));
    EXPECT_NEAR(yr[i], xr[i] * a - xr[i + 16] * s, 1e-14);
    EXPECT_NEAR(yr[i + 16], xr[i + 16] * a + xr[i] * s, 1e-14);
  }
  for (int i = 32; i < 40; ++i) EXPECT_EQ(yr[i], xr[i]);
}

TEST(OpsRope, BadArgumentsThrow) {
  Owned x(DType::f32, {1, 4, 2, 8});
  ops::RopeConfig cfg;
  cfg.rotary_dim = 7;  // odd
  EXPECT_THROW(ops::rope_forward(x, x, Tensor{}, cfg), Error);
  cfg.rotary_dim = 10;  // > head_dim
  EXPECT_THROW(ops::rope_forward(x, x, Tensor{}, cfg), Error);
  cfg.rotary_dim = 0;
  EXPECT_THROW(ops::rope_forward(x, x, Tensor{}, cfg), Error);
  cfg.rotary_dim = 8;
  Owned pos(DType::i32, std::vector<int64_t>{3});  // T is 4
  EXPECT_THROW(ops::rope_forward(x, x, pos, cfg), Error);
  Owned x3(DType::f32, {4, 2, 8});
  EXPECT_THROW(ops::rope_forward(x3, x3, Tensor{}, cfg), Error);
}

}  // namespace
}  // namespace sinklab
