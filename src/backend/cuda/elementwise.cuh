// The elementwise engine of the CUDA ops (add, accumulate, scale, the activations, the gated products,
// AdamW, the f32 <-> bf16 copy): one kernel shape for every op that maps the k-th element of its inputs
// to the k-th element of its outputs. An op is a functor (kIn inputs, kOut outputs, f32 values in and
// out); each operand is f32 or bf16 storage ("bf16 storage", ops.hpp): bf16 is widened exactly on load and
// rounded to nearest even (core/dtype.hpp f32_to_bf16, the CPU's rounding) on store. A thread reads all
// inputs of its elements before it writes any output, so in-place calls (an output the same view as an
// input) stay valid.
//
// Two kernels. When every operand is contiguous, ew_contiguous_kernel: when their pointers are also 16-byte
// aligned, each thread moves 8 elements per step with 128-bit loads and stores (8 bf16 or 2 x 4 f32), and
// a scalar loop does the last n % 8 (or all of n when a pointer is not aligned). Otherwise
// ew_strided_kernel: element i of each operand at its TensorRows::offset (i itself for a contiguous one).
// Neither indexes an array at run time (every operand loop is unrolled over a fixed count), so neither has
// a stack frame.
//
// An Op: `static constexpr int kIn, kOut;` and `__device__ void operator()(const float* in, float* out)
// const` (in[kIn], out[kOut]); an absent optional output (a null pointer) is not stored.
#pragma once

#include "backend/cuda/cuda_common.hpp"
#include "core/dtype.hpp"

namespace sinklab::cuda {

// One operand: its storage and, for the strided kernel, its rows.
struct EwArg {
  void* p = nullptr;
  bool bf16 = false;
  TensorRows rows;
};

// An operand of t (f32 or bf16, checked by the caller); an undefined t is an absent output.
inline EwArg ew_arg(const Tensor& t, const char* op, const char* arg) {
  EwArg a;
  if (!t.defined()) return a;
  a.p = t.data;
  a.bf16 = t.dtype == DType::bf16;
  a.rows = rows_of(t, op, arg);
  return a;
}

// The contiguous kernel's operands: pointers and dtypes only.
template <int N>
struct EwPointers {
  void* p[N > 0 ? N : 1];
  bool bf16[N > 0 ? N : 1];
};
template <int N>
struct EwStrided {
  EwArg a[N > 0 ? N : 1];
};

constexpr int kEwVec = 8;  // elements per vector step: one 128-bit word of bf16, two of f32

struct alignas(16) Bits128 {
  uint32_t w[4];
};

__device__ __forceinline__ float ew_load(const void* p, bool bf16, int64_t off) {
  return bf16 ? bf16_to_f32(static_cast<const uint16_t*>(p)[off]) : static_cast<const float*>(p)[off];
}
__device__ __forceinline__ void ew_store(void* p, bool bf16, int64_t off, float v) {
  if (bf16) static_cast<uint16_t*>(p)[off] = f32_to_bf16(v);
  else static_cast<float*>(p)[off] = v;
}

// v as an operand of that dtype holds it (bf16: rounded to nearest even).
__device__ __forceinline__ float ew_stored(bool bf16, float v) { return bf16 ? bf16_to_f32(f32_to_bf16(v)) : v; }

// Elements [i, i + 8) of an aligned operand (i a multiple of 8).
__device__ __forceinline__ void ew_load8(const void* p, bool bf16, int64_t i, float* v) {
  if (bf16) {
    const Bits128 b = *reinterpret_cast<const Bits128*>(static_cast<const uint16_t*>(p) + i);
    SL_UNROLL
    for (int k = 0; k < 4; ++k) {
      v[2 * k] = bits_f32(b.w[k] << 16);  // little endian: element 2k is the low half
      v[2 * k + 1] = bits_f32(b.w[k] & 0xffff0000u);
    }
  } else {
    const Bits128* q = reinterpret_cast<const Bits128*>(static_cast<const float*>(p) + i);
    const Bits128 lo = q[0], hi = q[1];
    SL_UNROLL
    for (int k = 0; k < 4; ++k) {
      v[k] = bits_f32(lo.w[k]);
      v[4 + k] = bits_f32(hi.w[k]);
    }
  }
}
__device__ __forceinline__ void ew_store8(void* p, bool bf16, int64_t i, const float* v) {
  if (bf16) {
    Bits128 b;
    SL_UNROLL
    for (int k = 0; k < 4; ++k) b.w[k] = uint32_t(f32_to_bf16(v[2 * k])) | (uint32_t(f32_to_bf16(v[2 * k + 1])) << 16);
    *reinterpret_cast<Bits128*>(static_cast<uint16_t*>(p) + i) = b;
  } else {
    Bits128 lo, hi;
    SL_UNROLL
    for (int k = 0; k < 4; ++k) {
      lo.w[k] = f32_bits(v[k]);
      hi.w[k] = f32_bits(v[4 + k]);
    }
    Bits128* q = reinterpret_cast<Bits128*>(static_cast<float*>(p) + i);
    q[0] = lo;
    q[1] = hi;
  }
}

// Every operand contiguous: chunks [0, n_vec) of 8 elements by 128-bit words, then elements [8 n_vec, n).
template <class Op>
__global__ void ew_contiguous_kernel(Op op, EwPointers<Op::kIn> in, EwPointers<Op::kOut> out, int64_t n,
                                     int64_t n_vec) {
  SL_GRID_LOOP(v, n_vec) {
    float x[Op::kIn > 0 ? Op::kIn : 1][kEwVec], y[Op::kOut][kEwVec];
    SL_UNROLL
    for (int k = 0; k < Op::kIn; ++k) ew_load8(in.p[k], in.bf16[k], v * kEwVec, x[k]);
    SL_UNROLL
    for (int e = 0; e < kEwVec; ++e) {
      float xe[Op::kIn > 0 ? Op::kIn : 1], ye[Op::kOut];
      SL_UNROLL
      for (int k = 0; k < Op::kIn; ++k) xe[k] = x[k][e];
      op(xe, ye);
      SL_UNROLL
      for (int k = 0; k < Op::kOut; ++k) y[k][e] = ye[k];
    }
    SL_UNROLL
    for (int k = 0; k < Op::kOut; ++k)
      if (out.p[k]) ew_store8(out.p[k], out.bf16[k], v * kEwVec, y[k]);
  }
  for (int64_t i = n_vec * kEwVec + int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x) {
    float xe[Op::kIn > 0 ? Op::kIn : 1], ye[Op::kOut];
    SL_UNROLL
    for (int k = 0; k < Op::kIn; ++k) xe[k] = ew_load(in.p[k], in.bf16[k], i);
    op(xe, ye);
    SL_UNROLL
    for (int k = 0; k < Op::kOut; ++k)
      if (out.p[k]) ew_store(out.p[k], out.bf16[k], i, ye[k]);
  }
}

// Any strided rows (last dimension contiguous): element i of each operand at its own TensorRows::offset
// (an operand may read the same elements as other rows: a dense buffer is one row of n).
template <class Op>
__global__ void ew_strided_kernel(Op op, EwStrided<Op::kIn> in, EwStrided<Op::kOut> out, int64_t n) {
  SL_GRID_LOOP(i, n) {
    float xe[Op::kIn > 0 ? Op::kIn : 1], ye[Op::kOut];
    SL_UNROLL
    for (int k = 0; k < Op::kIn; ++k) xe[k] = ew_load(in.a[k].p, in.a[k].bf16, in.a[k].rows.offset(i));
    op(xe, ye);
    SL_UNROLL
    for (int k = 0; k < Op::kOut; ++k)
      if (out.a[k].p) ew_store(out.a[k].p, out.a[k].bf16, out.a[k].rows.offset(i), ye[k]);
  }
}

// Launches op over n elements of same-shaped operands on the backend's stream (the caller holds a
// DeviceGuard and has checked shapes and dtypes).
template <class Op>
void ew_launch(cudaStream_t stream, const Op& op, const EwArg (&in)[Op::kIn > 0 ? Op::kIn : 1],
               const EwArg (&out)[Op::kOut], int64_t n, const char* name) {
  if (n == 0) return;
  bool contiguous = true, aligned = true;
  auto look = [&](const EwArg& a) {
    if (!a.p) return;
    contiguous = contiguous && a.rows.contiguous;
    aligned = aligned && reinterpret_cast<uintptr_t>(a.p) % 16 == 0;
  };
  for (int k = 0; k < Op::kIn; ++k) look(in[k]);
  for (int k = 0; k < Op::kOut; ++k) look(out[k]);
  if (contiguous) {
    EwPointers<Op::kIn> pi{};
    EwPointers<Op::kOut> po{};
    for (int k = 0; k < Op::kIn; ++k) pi.p[k] = in[k].p, pi.bf16[k] = in[k].bf16;
    for (int k = 0; k < Op::kOut; ++k) po.p[k] = out[k].p, po.bf16[k] = out[k].bf16;
    const int64_t n_vec = aligned ? n / kEwVec : 0;
    ew_contiguous_kernel<Op><<<grid_for(n_vec > 0 ? n_vec : n), kThreads, 0, stream>>>(op, pi, po, n, n_vec);
  } else {
    EwStrided<Op::kIn> si{};
    EwStrided<Op::kOut> so{};
    for (int k = 0; k < Op::kIn; ++k) si.a[k] = in[k];
    for (int k = 0; k < Op::kOut; ++k) so.a[k] = out[k];
    ew_strided_kernel<Op><<<grid_for(n), kThreads, 0, stream>>>(op, si, so, n);
  }
  CUDA_CHECK_LAUNCH(name);
}

}  // namespace sinklab::cuda
