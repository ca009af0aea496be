// Rotary position embedding on CUDA ("rotate half" layout, partial rotary, Llama-3.1 scaling), forward
// and backward; the twin of cpu/rope.cpp over rope_math.hpp (rope_inv_freq, rope_cos_sin, rope_rotate).
//
// cos/sin tables [P, rotary_dim/2] in f32, each entry from a double angle rounded once (as the CPU's).
// With default positions (0..T-1) the table of a configuration is built once and cached on the device,
// grown when a longer T comes; a call then only reads it. With explicit positions (a device tensor
// whose values the host does not know) the call builds a [T, half] table of those positions first,
// into scratch memory: T*half transcendentals, as on the CPU, instead of one per element.
#include <map>
#include <tuple>

#include "backend/cuda/elementwise.cuh"
#include "backend/op_checks.hpp"
#include "backend/rope_math.hpp"

namespace sinklab::cuda {

// One device table per configuration: cos rows then sin rows, [rows, half] each.
struct RopeTables {
  struct Table {
    float* data = nullptr;
    int64_t rows = 0;
  };
  using Key = std::tuple<int, double, double, double, double, double>;
  std::map<Key, Table> tables;
};

RopeTables& CudaBackend::rope_tables() {
  if (!rope_) rope_ = new RopeTables;
  return *rope_;
}

namespace {

// cos[t, i], sin[t, i] for position pos[t] (or t when pos is null), t < T, i < half.
__global__ void rope_table_kernel(float* cos_t, float* sin_t, const int32_t* pos, int64_t T, int half,
                                  ops::RopeConfig cfg) {
  SL_GRID_LOOP(k, T * half) {
    const int64_t t = k / half;
    const int i = int(k - t * half);
    const double p = pos ? double(pos[t]) : double(t);
    float c, s;
    math::rope_cos_sin(p, math::rope_inv_freq(i, cfg), c, s);
    cos_t[k] = c;
    sin_t[k] = s;
  }
}

// x, out [B,T,H,dh] with their strides (last dim contiguous). Thread k handles, in head row
// (b, t, h), either pair j < half (features j and j + half) or, for j >= half, the pass-through
// feature rotary_dim + (j - half) (only when out is not x). sign = -1 rotates backwards.
// x and out are f32 or bf16 (bf16 storage: the pair is read, rotated in f32 and rounded on store).
struct RopeGeometry {
  int64_t B, T, H, dh;
  int64_t xs0, xs1, xs2, os0, os1, os2;
  int half, rotary_dim;
  int64_t per_row;  // half, plus dh - rotary_dim when the pass-through features must be copied
  bool x_bf16, out_bf16;
};

__global__ void rope_apply_kernel(void* out, const void* x, RopeGeometry g, const float* cos_t, const float* sin_t,
                                  float sign) {
  SL_GRID_LOOP(k, g.B * g.T * g.H * g.per_row) {
    const int64_t row = k / g.per_row;
    const int64_t j = k - row * g.per_row;
    const int64_t h = row % g.H, bt = row / g.H, t = bt % g.T, b = bt / g.T;
    const int64_t xi = b * g.xs0 + t * g.xs1 + h * g.xs2;
    const int64_t o = b * g.os0 + t * g.os1 + h * g.os2;
    if (j < g.half) {
      float a = ew_load(x, g.x_bf16, xi + j), bb = ew_load(x, g.x_bf16, xi + j + g.half);
      const float s = sin_t[t * g.half + j];
      math::rope_rotate(a, bb, cos_t[t * g.half + j], sign < 0.0f ? -s : s);
      ew_store(out, g.out_bf16, o + j, a);
      ew_store(out, g.out_bf16, o + j + g.half, bb);
    } else {
      const int64_t f = g.rotary_dim + (j - g.half);
      ew_store(out, g.out_bf16, o + f, ew_load(x, g.x_bf16, xi + f));
    }
  }
}

void rope_apply(CudaBackend& be, Tensor out, Tensor x, Tensor positions, const ops::RopeConfig& cfg, float sign,
                const char* op) {
  check_rope_args(out, x, cfg, op);
  check_device_f32_or_bf16(be, x, op, "x");
  check_device_f32_or_bf16(be, out, op, "out");
  const int64_t B = x.shape[0], T = x.shape[1], H = x.shape[2], dh = x.shape[3];
  if (positions.defined()) {
    check_device(be, positions, op, "positions");
    check_dtype(positions, DType::i32, op, "positions");
    SL_CHECK(positions.is_contiguous() && positions.numel() == T, "%s: positions %s must be contiguous [T=%lld]", op,
             positions.shape_str().c_str(), (long long)T);
  }
  rows_of(x, op, "x");  // the last dimension must be contiguous; the others may have any strides
  rows_of(out, op, "out");
  const int half = cfg.rotary_dim / 2;
  if (B * T * H == 0) return;
  DeviceGuard guard(be.index());
  cudaStream_t stream = be.stream();

  const float *cos_t = nullptr, *sin_t = nullptr;
  if (positions.defined()) {
    float* table = static_cast<float*>(
        be.scratch(CudaBackend::ScratchSlot::rope_table, sizeof(float) * 2 * size_t(T) * size_t(half)));
    rope_table_kernel<<<grid_for(T * half), kThreads, 0, stream>>>(table, table + T * half, positions.ptr<int32_t>(),
                                                                   T, half, cfg);
    CUDA_CHECK_LAUNCH("rope_table");
    cos_t = table;
    sin_t = table + T * half;
  } else {
    // The llama3 fields only matter when the scaling is on: one key for every config without it.
    const bool l3 = cfg.llama3_factor > 0.0;
    const RopeTables::Key key{cfg.rotary_dim, cfg.base, l3 ? cfg.llama3_factor : 0.0,
                              l3 ? cfg.llama3_low_freq_factor : 0.0, l3 ? cfg.llama3_high_freq_factor : 0.0,
                              l3 ? cfg.llama3_original_max_position : 0.0};
    RopeTables::Table& tab = be.rope_tables().tables[key];
    if (tab.rows < T) {
      // Grown to at least twice its size: a run whose T creeps up rebuilds rarely.
      const int64_t rows = T > 2 * tab.rows ? T : 2 * tab.rows;
      if (tab.data) {
        CUDA_CHECK(cudaStreamSynchronize(stream));  // queued calls may still read the old table
        be.deallocate(tab.data);
        tab.data = nullptr;
        tab.rows = 0;
      }
      float* data = static_cast<float*>(be.allocate(sizeof(float) * 2 * size_t(rows) * size_t(half)));
      rope_table_kernel<<<grid_for(rows * half), kThreads, 0, stream>>>(data, data + rows * half, nullptr, rows, half,
                                                                        cfg);
      CUDA_CHECK_LAUNCH("rope_table");
      tab.data = data;
      tab.rows = rows;
    }
    cos_t = tab.data;
    sin_t = tab.data + tab.rows * half;
  }

  RopeGeometry g;
  g.B = B;
  g.T = T;
  g.H = H;
  g.dh = dh;
  g.xs0 = x.stride[0];
  g.xs1 = x.stride[1];
  g.xs2 = x.stride[2];
  g.os0 = out.stride[0];
  g.os1 = out.stride[1];
  g.os2 = out.stride[2];
  g.half = half;
  g.rotary_dim = cfg.rotary_dim;
  g.x_bf16 = x.dtype == DType::bf16;
  g.out_bf16 = out.dtype == DType::bf16;
  // Partial rotary: the features past rotary_dim pass through (nothing to do in place).
  const bool in_place =
      out.data == x.data && out.dtype == x.dtype && g.os0 == g.xs0 && g.os1 == g.xs1 && g.os2 == g.xs2;
  g.per_row = half + (in_place ? 0 : dh - cfg.rotary_dim);
  const int64_t n = B * T * H * g.per_row;
  rope_apply_kernel<<<grid_for(n), kThreads, 0, stream>>>(out.data, x.data, g, cos_t, sin_t, sign);
  CUDA_CHECK_LAUNCH(op);
}

}  // namespace

// out[B,T,H,dh] = rope(x) at positions (i32 [T] on the device, or 0..T-1 when undefined). Strided; out
// may alias x.
void CudaBackend::rope_forward(Tensor out, Tensor x, Tensor positions, const RopeConfig& cfg) {
  rope_apply(*this, out, x, positions, cfg, +1.0f, "rope_forward");
}

// d_x = R(-angle) d_out (the rotation is orthogonal). Strided; d_x may alias d_out.
void CudaBackend::rope_backward(Tensor d_x, Tensor d_out, Tensor positions, const RopeConfig& cfg) {
  rope_apply(*this, d_x, d_out, positions, cfg, -1.0f, "rope_backward");
}

}  // namespace sinklab::cuda
