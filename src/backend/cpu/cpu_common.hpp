// Helpers shared by the CPU op files: reading a tensor as rows of its last dimension, and running a
// templated kernel in the tensor's float type.
#pragma once

#include <cstdint>

#include "core/error.hpp"
#include "backend/op_checks.hpp"
#include "core/tensor.hpp"

namespace sinklab::cpu {

// A tensor [*, cols] read as `rows` rows whose last dimension is contiguous; the leading dimensions may
// have any strides (a [B,T,H,dh] head view of a fused buffer is such a tensor).
struct Rows {
  int64_t rows = 1;
  int64_t cols = 1;
  int lead_ndim = 0;
  int64_t lead_shape[kMaxDims] = {};
  int64_t lead_stride[kMaxDims] = {};

  // Element offset of the first element of row r (0 <= r < rows). The outermost index is what is left
  // of r, so a [N, d] tensor (the common case) costs no integer division per row.
  int64_t offset(int64_t r) const {
    if (lead_ndim == 0) return 0;
    int64_t off = 0;
    for (int d = lead_ndim - 1; d > 0; --d) {
      off += (r % lead_shape[d]) * lead_stride[d];
      r /= lead_shape[d];
    }
    return off + r * lead_stride[0];
  }
};

inline Rows rows_of(const Tensor& t, const char* op, const char* arg) {
  Rows r;
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
  return r;
}

using sinklab::check_same_shape;  // backend/op_checks.hpp

// Calls fn(T{}) with T = float or double according to dtype; other dtypes are refused.
template <class Fn>
decltype(auto) dispatch_float(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::f32: return fn(float{});
    case DType::f64: return fn(double{});
    default: SL_FAIL("%s: dtype %s is not supported on the CPU backend (f32 or f64)", op, dtype_name(dtype));
  }
}

}  // namespace sinklab::cpu
