// CUDA causal_conv1d_forward, selective_scan_forward, moe_router_topk and index_add_rows (Jamba's ops,
// cuda/mamba.cu) against the CPU backend (label "gpu"; skips without a usable CUDA device). Both backends
// accumulate in double from f32 storage, so the outputs agree within 1e-6 (max error over max |reference|;
// the device's exp / log1p differ from the host's in the last bits); the router picks the same experts
// (ties: the lower index); index_add_rows adds each target row's sources in order m = 0, 1, ... (repeats,
// strided rows). Outputs are NaN-poisoned first, so an element no thread writes shows; two runs give the
// same bits; a bad index is reported, naming the op and the position, at the next synchronisation.
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
using test::rel_error;

constexpr double kTol = 1e-6;

std::string dims(std::initializer_list<int64_t> v) {
  std::string s;
  for (int64_t x : v) {
    if (!s.empty()) s.push_back(' ');
    s.append(std::to_string(x));
  }
  return s;
}

TEST(CudaMamba, CausalConv1dMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  struct Case {
    int64_t B, T, C, K;
  };
  uint64_t stream = 10;
  for (const Case& c : std::vector<Case>{{1, 1, 1, 1}, {2, 37, 5, 4}, {1, 70, 33, 3}, {3, 5, 8, 7}}) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE("B T C K " + dims({c.B, c.T, c.C, c.K}) + (with_bias ? " bias" : ""));
      // in and out as the right parts of wider buffers (strided rows).
      Owned in_wide = random_host(DType::f32, {c.B, c.T, c.C + 3}, stream++);
      Owned weight = random_host(DType::f32, {c.C, c.K}, stream++), bias = random_host(DType::f32, {c.C}, stream++);
      const Tensor in = in_wide.t.slice(2, 3, c.C);
      Owned out(DType::f32, {c.B, c.T, c.C});
      ops::causal_conv1d_forward(out.t, in, weight.t, with_bias ? bias.t : Tensor{});
      Dev din_wide = to_device(in_wide.t), dweight = to_device(weight.t), dbias = to_device(bias.t);
      Dev dout_wide(DType::f32, {c.B, c.T, c.C + 2});
      poison(dout_wide.t);
      const Tensor dout = dout_wide.t.slice(2, 0, c.C);
      ops::causal_conv1d_forward(dout, din_wide.t.slice(2, 3, c.C), dweight.t, with_bias ? dbias.t : Tensor{});
      Owned got = Owned::copy_of(to_host(dout_wide.t).t.slice(2, 0, c.C), DType::f32);
      EXPECT_LE(rel_error(got.t, out.t), kTol);
      Dev dout2(DType::f32, {c.B, c.T, c.C});
      ops::causal_conv1d_forward(dout2.t, din_wide.t.slice(2, 3, c.C), dweight.t, with_bias ? dbias.t : Tensor{});
      EXPECT_TRUE(same_bits(to_host(dout2.t).t, got.t)) << "second run";
    }
  }
}

TEST(CudaMamba, SelectiveScanMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  struct Case {
    int64_t B, T, Di, N;
  };
  uint64_t stream = 100;
  for (const Case& c : std::vector<Case>{{1, 1, 1, 1}, {2, 37, 5, 16}, {1, 70, 33, 7}, {1, 9, 3, 256}}) {
    for (int variant = 0; variant < 3; ++variant) {  // 0: D, dt_bias, softplus; 1: none of them; 2: y is x
      SCOPED_TRACE("B T Di N " + dims({c.B, c.T, c.Di, c.N}) + " variant " + std::to_string(variant));
      // x, dt, B, C as slices of one fused projection [B, T, 2 Di + 2 N] (strided rows), as the model has them;
      // variant 2 scans a contiguous x in place (y = x).
      const int64_t W = 2 * c.Di + 2 * c.N;
      Owned proj = random_host(DType::f32, {c.B, c.T, W}, stream++, 0.5);
      Owned A_log = random_host(DType::f32, {c.Di, c.N}, stream++, 0.5);
      Owned D = random_host(DType::f32, {c.Di}, stream++), dt_bias = random_host(DType::f32, {c.Di}, stream++, 0.3);
      auto parts = [&](const Tensor& p) {
        return std::vector<Tensor>{p.slice(2, 0, c.Di), p.slice(2, c.Di, c.Di), p.slice(2, 2 * c.Di, c.N),
                                   p.slice(2, 2 * c.Di + c.N, c.N)};
      };
      const bool extras = variant == 0, in_place = variant == 2;
      const std::vector<Tensor> h = parts(proj.t);
      Owned x_own = Owned::copy_of(h[0], DType::f32);  // contiguous
      const Tensor x = in_place ? x_own.t : h[0];
      Owned y_own(DType::f32, {c.B, c.T, c.Di});
      const Tensor y = in_place ? x_own.t : y_own.t;
      Dev dproj = to_device(proj.t), dA = to_device(A_log.t), dD = to_device(D.t), ddtb = to_device(dt_bias.t);
      Dev dx_own = to_device(x_own.t);  // before the host scan overwrites x_own
      ops::selective_scan_forward(y, x, h[1], A_log.t, h[2], h[3], extras ? D.t : Tensor{},
                                  extras ? dt_bias.t : Tensor{}, extras);
      const std::vector<Tensor> g = parts(dproj.t);
      Dev dy(DType::f32, {c.B, c.T, c.Di});
      poison(dy.t);
      const Tensor gx = in_place ? dx_own.t : g[0], gy = in_place ? dx_own.t : dy.t;
      ops::selective_scan_forward(gy, gx, g[1], dA.t, g[2], g[3], extras ? dD.t : Tensor{}, extras ? ddtb.t : Tensor{},
                                  extras);
      Owned got = to_host(gy);
      EXPECT_LE(rel_error(got.t, y), kTol);
      if (!in_place) {
        Dev dy2(DType::f32, {c.B, c.T, c.Di});
        ops::selective_scan_forward(dy2.t, g[0], g[1], dA.t, g[2], g[3], extras ? dD.t : Tensor{},
                                    extras ? ddtb.t : Tensor{}, extras);
        EXPECT_TRUE(same_bits(to_host(dy2.t).t, got.t)) << "second run";
      }
    }
  }
}

TEST(CudaMamba, RouterTopKMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  struct Case {
    int64_t N, E, k;
  };
  uint64_t stream = 200;
  for (const Case& c : std::vector<Case>{{1, 1, 1}, {37, 8, 2}, {5, 16, 16}, {64, 7, 3}}) {
    SCOPED_TRACE("N E k " + dims({c.N, c.E, c.k}));
    Owned logits = random_host(DType::f32, {c.N, c.E}, stream++, 2.0);
    // Ties: rows with repeated logits (the lower expert index must come first on both backends).
    for (int64_t n = 0; n < c.N; n += 3)
      for (int64_t e = 1; e < c.E; e += 2) logits.data<float>()[n * c.E + e] = logits.data<float>()[n * c.E + e - 1];
    Owned w(DType::f32, {c.N, c.k}), ex(DType::i32, {c.N, c.k});
    ops::moe_router_topk(w.t, ex.t, logits.t);
    Dev dlogits = to_device(logits.t), dw(DType::f32, {c.N, c.k}), dex(DType::i32, {c.N, c.k});
    poison(dw.t);
    ops::fill(dex.t, -7.0);
    ops::moe_router_topk(dw.t, dex.t, dlogits.t);
    EXPECT_TRUE(same_bits(to_host(dex.t).t, ex.t)) << "experts";
    EXPECT_LE(rel_error(to_host(dw.t).t, w.t), kTol) << "weights";
  }
}

TEST(CudaMamba, IndexAddRowsMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  struct Case {
    int64_t N, M, d;
  };
  uint64_t stream = 300;
  for (const Case& c : std::vector<Case>{{1, 1, 1}, {7, 37, 5}, {40, 130, 129}, {3, 300, 64}}) {
    for (bool with_scale : {true, false}) {
      SCOPED_TRACE("N M d " + dims({c.N, c.M, c.d}) + (with_scale ? " scale" : ""));
      Owned out_wide = random_host(DType::f32, {c.N, c.d + 4}, stream++);
      Owned src_wide = random_host(DType::f32, {c.M, c.d + 1}, stream++);
      Owned scale = random_host(DType::f32, {c.M}, stream++);
      Owned index(DType::i32, {c.M});
      for (int64_t m = 0; m < c.M; ++m) index.data<int32_t>()[m] = int32_t((m * 5 + m / 3) % c.N);  // repeats
      const Tensor out = out_wide.t.slice(1, 2, c.d), src = src_wide.t.slice(1, 1, c.d);
      Dev dout_wide = to_device(out_wide.t), dsrc_wide = to_device(src_wide.t), dscale = to_device(scale.t);
      Dev dindex = to_device(index.t), dout_wide2 = to_device(out_wide.t);
      ops::index_add_rows(out, src, index.t, with_scale ? scale.t : Tensor{});
      ops::index_add_rows(dout_wide.t.slice(1, 2, c.d), dsrc_wide.t.slice(1, 1, c.d), dindex.t,
                          with_scale ? dscale.t : Tensor{});
      Owned got = to_host(dout_wide.t);
      EXPECT_LE(rel_error(got.t, out_wide.t), kTol) << "out (the columns outside the view untouched)";
      ops::index_add_rows(dout_wide2.t.slice(1, 2, c.d), dsrc_wide.t.slice(1, 1, c.d), dindex.t,
                          with_scale ? dscale.t : Tensor{});
      EXPECT_TRUE(same_bits(to_host(dout_wide2.t).t, got.t)) << "second run";
    }
  }
}

TEST(CudaMamba, BadIndexIsReportedAndOtherDtypesRefused) {
  SKIP_WITHOUT_CUDA();
  Owned index(DType::i32, {6});
  for (int64_t m = 0; m < 6; ++m) index.data<int32_t>()[m] = int32_t(m % 4);
  index.data<int32_t>()[4] = 4;  // out has 4 rows
  Dev dout = to_device(random_host(DType::f32, {4, 3}, 1).t), dsrc = to_device(random_host(DType::f32, {6, 3}, 2).t);
  Dev dindex = to_device(index.t);
  try {
    ops::index_add_rows(dout.t, dsrc.t, dindex.t, Tensor{});
    backend_for(Device::cuda(0)).synchronize();
    ADD_FAILURE() << "the bad index was not reported";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("index_add_rows"), std::string::npos) << what;
    EXPECT_NE(what.find("index 4 at 4"), std::string::npos) << what;
  }
  Dev logits(DType::f64, {4, 8}), weights(DType::f64, {4, 2}), experts(DType::i32, {4, 2});
  try {
    ops::moe_router_topk(weights.t, experts.t, logits.t);
    ADD_FAILURE() << "moe_router_topk on f64 did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("moe_router_topk"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("f32"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sinklab
