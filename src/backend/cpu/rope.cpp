// Rotary position embedding ("rotate half" layout, partial rotary, Llama-3.1 scaling), forward and
// backward. Per-element math: rope_math.hpp.

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/cpu_common.hpp"
#include "backend/op_checks.hpp"
#include "backend/rope_math.hpp"

namespace sinklab {

using cpu::dispatch_float;

namespace {

// out = R(sign * angle) x for every head row. x, out [B,T,H,dh], any strides with a contiguous last dim;
// out may be x itself (each pair is read completely before it is written). sign = +1 forward, -1
// backward: the rotation is orthogonal, so its transpose (the backward) is the rotation by -angle.
void rope_apply(Tensor out, Tensor x, Tensor positions, const ops::RopeConfig& cfg, double sign, const char* op) {
  check_rope_args(out, x, cfg, op);
  SL_CHECK(out.dtype == x.dtype, "%s: operands differ in dtype", op);
  const int64_t T = x.shape[1], H = x.shape[2], dh = x.shape[3];
  const int32_t* pos = nullptr;
  if (positions.defined()) {
    check_dtype(positions, DType::i32, op, "positions");
    SL_CHECK(positions.is_contiguous() && positions.numel() == T, "%s: positions %s must be contiguous [T=%lld]", op,
             positions.shape_str().c_str(), (long long)T);
    pos = positions.ptr<int32_t>();
  }
  rows_of(x, op, "x");  // the last dimension must be contiguous; the others may have any strides
  rows_of(out, op, "out");
  const int64_t B = x.shape[0];
  const int half = cfg.rotary_dim / 2;

  // cos/sin of every (position, pair) once, in double: T*half transcendentals instead of B*T*H*half.
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) inv_freq[size_t(i)] = math::rope_inv_freq(i, cfg);

  dispatch_float(x.dtype, op, [&](auto zero) {
    using F = decltype(zero);
    std::vector<F> cos_t(size_t(T * half)), sin_t(size_t(T * half));  // rounded to F once, here
#pragma omp parallel for schedule(static) if (T * half > 16384)
    for (int64_t t = 0; t < T; ++t) {
      const double p = pos ? double(pos[t]) : double(t);
      for (int i = 0; i < half; ++i) {
        F c, s;
        math::rope_cos_sin(p, inv_freq[size_t(i)], c, s);
        cos_t[size_t(t * half + i)] = c;
        sin_t[size_t(t * half + i)] = sign < 0.0 ? -s : s;  // F(-sin) == -F(sin): rounding is symmetric
      }
    }
    // Loops over (b, t) then heads with the strides of the views: the head rows of q/k in a fused QKV
    // buffer are strided, and a generic row -> offset map (three divisions a row) cost more than the
    // rotation of the rotary_dim features (partial rotary: 8 of 32 in Pythia-14M).
    const int64_t xs0 = x.stride[0], xs1 = x.stride[1], xs2 = x.stride[2];
    const int64_t os0 = out.stride[0], os1 = out.stride[1], os2 = out.stride[2];
#pragma omp parallel for schedule(static) if (B * T * H * cfg.rotary_dim > 16384)
    for (int64_t bt = 0; bt < B * T; ++bt) {
      const int64_t b = bt / T, t = bt % T;
      const F* c = cos_t.data() + t * half;
      const F* s = sin_t.data() + t * half;
      for (int64_t h = 0; h < H; ++h) {
        const F* xi = x.ptr<F>() + b * xs0 + t * xs1 + h * xs2;
        F* o = out.ptr<F>() + b * os0 + t * os1 + h * os2;
        for (int i = 0; i < half; ++i) {
          F a = xi[i], bb = xi[i + half];
          math::rope_rotate(a, bb, c[i], s[i]);
          o[i] = a;
          o[i + half] = bb;
        }
        // Partial rotary: the features past rotary_dim pass through.
        if (o != xi && cfg.rotary_dim < dh)
          std::memmove(o + cfg.rotary_dim, xi + cfg.rotary_dim, size_t(dh - cfg.rotary_dim) * sizeof(F));
      }
    }
  });
}

}  // namespace

// out[B,T,H,dh] = rope(x) at positions (i32 [T], or 0..T-1 when undefined). Strided; out may alias x.
void CpuBackend::rope_forward(Tensor out, Tensor x, Tensor positions, const RopeConfig& cfg) {
  rope_apply(out, x, positions, cfg, +1.0, "rope_forward");
}

// d_x = R(-angle) d_out (the rotation is orthogonal). Strided; d_x may alias d_out.
void CpuBackend::rope_backward(Tensor d_x, Tensor d_out, Tensor positions, const RopeConfig& cfg) {
  rope_apply(d_x, d_out, positions, cfg, -1.0, "rope_backward");
}

}  // namespace sinklab
