// CUDA rope_forward / rope_backward against the CPU backend (label "gpu"; skips without a usable CUDA
// device): f32 within 1e-5 (max error over max |reference|); two runs give the same bits. Full and
// partial rotary, head dims 2/64/80/128, T = 1 and T off every block multiple, H = 1, head views of a
// fused QKV buffer (strided), in place, Llama-3.1 scaling, explicit (large) positions, and the cached
// table growing from a short T to a long one and back; the same in bf16 storage (CudaRopeBf16).
#include <gtest/gtest.h>

#include <string>
#include <vector>

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

constexpr double kTol = 1e-5;

struct Case {
  int64_t B, T, H, dh;
  int rotary_dim;
  bool llama3;
  bool positions;
};

// In dtype dt (f32, or bf16 storage: every tensor but the positions bf16, against the CPU's bf16 storage).
void check_rope(const Case& c, uint64_t stream, DType dt = DType::f32) {
  const double tol = dt == DType::bf16 ? gpu_test::kBf16Tol : kTol;
  SCOPED_TRACE(std::string(dtype_name(dt)) + " " + "B " + std::to_string(c.B) + " T " + std::to_string(c.T) + " H " + std::to_string(c.H) + " dh " +
               std::to_string(c.dh) + " rotary " + std::to_string(c.rotary_dim) + (c.llama3 ? " llama3" : "") +
               (c.positions ? " positions" : ""));
  ops::RopeConfig cfg;
  cfg.rotary_dim = c.rotary_dim;
  cfg.base = c.llama3 ? 500000.0 : 10000.0;
  if (c.llama3) {
    cfg.llama3_factor = 8.0;
    cfg.llama3_original_max_position = 64.0;  // small, so that the test's T reaches every band
  }
  // q as the first dh features of the first H heads of a [B, T, 3H, 2 dh] buffer: strided rows, whose head
  // stride (2 dh) differs from out's (dh).
  Owned fused = random_host(dt, {c.B, c.T, 3 * c.H, 2 * c.dh}, stream);
  Tensor q = fused.t.slice(2, 0, c.H).slice(3, 0, c.dh);
  Owned pos(DType::i32, {c.T});
  for (int64_t t = 0; t < c.T; ++t) pos.data<int32_t>()[t] = int32_t(100000 + 37 * t);  // far positions
  Tensor positions = c.positions ? pos.t : Tensor{};
  Dev dfused = to_device(fused.t), dpos = to_device(pos.t);
  Tensor dq = dfused.t.slice(2, 0, c.H).slice(3, 0, c.dh);
  Tensor dpositions = c.positions ? dpos.t : Tensor{};

  Owned out(dt, {c.B, c.T, c.H, c.dh});
  ops::rope_forward(out.t, q, positions, cfg);
  Dev gout(dt, {c.B, c.T, c.H, c.dh});
  poison(gout.t);
  ops::rope_forward(gout.t, dq, dpositions, cfg);
  Owned gout_h = to_host(gout.t);
  EXPECT_LE(gpu_test::device_error(gout.t, out.t), tol) << "rope_forward";
  Dev gout2(dt, {c.B, c.T, c.H, c.dh});
  ops::rope_forward(gout2.t, dq, dpositions, cfg);
  EXPECT_TRUE(same_bits(to_host(gout2.t).t, gout_h.t)) << "forward, second run";

  // backward, out of place and in place on the strided view
  // (from the CPU's forward output on both sides)
  Owned d_x(dt, {c.B, c.T, c.H, c.dh});
  ops::rope_backward(d_x.t, out.t, positions, cfg);
  Dev gd_x(dt, {c.B, c.T, c.H, c.dh}), gd_out = to_device(out.t);
  poison(gd_x.t);
  ops::rope_backward(gd_x.t, gd_out.t, dpositions, cfg);
  EXPECT_LE(gpu_test::device_error(gd_x.t, d_x.t), tol) << "rope_backward";
  ops::rope_forward(q, q, positions, cfg);
  ops::rope_forward(dq, dq, dpositions, cfg);
  EXPECT_LE(gpu_test::device_error(dq, q), tol) << "in place";
  // the other heads of the fused buffer are untouched
  EXPECT_TRUE(same_bits(to_host(dfused.t.slice(2, c.H, 2 * c.H), DType::f32).t,
                        Owned::copy_of(fused.t.slice(2, c.H, 2 * c.H), DType::f32).t));
}

TEST(CudaRope, MatchesCpu) {
  SKIP_WITHOUT_CUDA();
  const std::vector<Case> cases = {
      {1, 1, 1, 2, 2, false, false},     {2, 7, 3, 64, 64, false, false},   {1, 33, 1, 80, 80, false, false},
      {2, 5, 4, 128, 32, false, false},  {1, 300, 2, 64, 16, false, false}, {3, 129, 2, 128, 128, true, false},
      {2, 17, 3, 80, 40, false, true},   {1, 1, 4, 64, 64, true, true},     {1, 5, 2, 64, 64, false, false}};
  uint64_t stream = 10;
  // The default-position cases share one cached table per configuration: T = 5 after T = 300 reads
  // the first rows of the grown table.
  for (const Case& c : cases) check_rope(c, stream++);
}

// bf16 storage: q as a strided head view of a fused bf16 QKV buffer, rotated out of place and in place.
TEST(CudaRopeBf16, MatchesCpu) {
  SKIP_WITHOUT_CUDA();
  const std::vector<Case> cases = {{1, 1, 1, 2, 2, false, false},
                                   {2, 7, 3, 64, 64, false, false},
                                   {1, 33, 1, 80, 40, false, true},
                                   {3, 129, 2, 128, 128, true, false}};
  uint64_t stream = 60;
  for (const Case& c : cases) check_rope(c, stream++, DType::bf16);
}

}  // namespace
}  // namespace sinklab
