// How the kernels of both backends address a tensor: as rows of its last dimension (TensorRows: the
// CPU loops and the CUDA elementwise / row kernels), or by its first three indices (View3: the CUDA
// attention kernels' [B, L, heads, dh] and [B, H, T(, S)] views). Host and device code (SL_HD); passed
// to kernels by value.
#pragma once

#include <cstdint>

#include "core/error.hpp"
#include "core/hd.hpp"
#include "core/tensor.hpp"

namespace sinklab {

// A tensor [*, cols] read as `rows` rows whose last dimension is contiguous; the leading dimensions may
// have any strides (a [B,T,H,dh] head view of a fused buffer is such a tensor).
struct TensorRows {
  int64_t rows = 1;
  int64_t cols = 1;
  int64_t numel = 1;
  int lead_ndim = 0;
  bool contiguous = true;  // offset(i) == i
  int64_t lead_shape[kMaxDims] = {};
  int64_t lead_stride[kMaxDims] = {};

  // Element offset of the first element of row r (0 <= r < rows). The outermost index is what is left
  // of r, so a [N, d] tensor (the common case) costs no integer division per row.
  //
  // Both offsets loop over a fixed count (kMaxDims), unrolled, and skip the dimensions past lead_ndim:
  // every array index is a constant, so a kernel that takes TensorRows by value reads the arrays from its
  // parameters. A loop bounded by lead_ndim indexes them at run time, which made every such kernel copy
  // its TensorRows to local memory first (224-560-byte stack frames, issue #53). The integer arithmetic
  // (the dimensions visited and their order) is the same as such a loop's.
  SL_HD int64_t row_offset(int64_t r) const {
    if (lead_ndim == 0) return 0;
    int64_t off = 0;
    SL_UNROLL
    for (int d = kMaxDims - 1; d > 0; --d) {
      if (d < lead_ndim) {
        off += (r % lead_shape[d]) * lead_stride[d];
        r /= lead_shape[d];
      }
    }
    return off + r * lead_stride[0];
  }

  // Element offset of logical (row-major) element i (0 <= i < numel), e.g. a grid-stride loop's index.
  // (Not of row i: that is row_offset.)
  SL_HD int64_t offset(int64_t i) const {
    if (contiguous) return i;
    int64_t r = i / cols;
    int64_t off = i - r * cols;
    SL_UNROLL
    for (int d = kMaxDims - 1; d >= 0; --d) {
      if (d < lead_ndim) {
        int64_t q = r / lead_shape[d];
        off += (r - q * lead_shape[d]) * lead_stride[d];
        r = q;
      }
    }
    return off;
  }
};

// t as rows; throws naming op and arg when its last dimension is not contiguous.
inline TensorRows rows_of(const Tensor& t, const char* op, const char* arg) {
  TensorRows r;
  r.numel = t.numel();
  r.contiguous = t.is_contiguous();
  if (t.ndim == 0) return r;
  SL_CHECK(t.stride[t.ndim - 1] == 1 || t.shape[t.ndim - 1] == 1,
           "%s: the last dimension of %s must be contiguous (stride %lld)", op, arg,
           (long long)t.stride[t.ndim - 1]);
  r.cols = t.shape[t.ndim - 1];
  r.lead_ndim = t.ndim - 1;
  r.rows = 1;
  for (int d = 0; d < r.lead_ndim; ++d) {
    r.lead_shape[d] = t.shape[d];
    r.lead_stride[d] = t.stride[d];
    r.rows *= t.shape[d];
  }
  if (r.cols == 0) r.contiguous = true;  // nothing to address
  return r;
}

// An f32 tensor addressed by its first three indices, strides s0, s1, s2: row (b, l, h) of q/k/v/out
// [B, L, heads, dh] (contiguous last dim), row (b, h, i) of probs [B, H, T, S], element (b, h, i) of
// stats [B, H, T]. p is null for an undefined tensor.
struct View3 {
  float* p = nullptr;
  int64_t s0 = 0, s1 = 0, s2 = 0;
  SL_HD float* at(int64_t i0, int64_t i1, int64_t i2) const { return p + i0 * s0 + i1 * s1 + i2 * s2; }
};

// t (at least 3-D, f32; undefined: an empty view) by its first three indices.
inline View3 view3(const Tensor& t) {
  View3 v;
  if (!t.defined()) return v;
  v.p = static_cast<float*>(t.data);
  v.s0 = t.stride[0];
  v.s1 = t.stride[1];
  v.s2 = t.stride[2];
  return v;
}

// The same for rows [B, L, heads, dh]; throws naming op and arg when the last dimension is not contiguous.
inline View3 head_rows(const Tensor& t, const char* op, const char* arg) {
  if (t.defined()) rows_of(t, op, arg);
  return view3(t);
}

}  // namespace sinklab
