// Helpers shared by the CPU op files: running a templated kernel in the tensor's float type. (Reading a
// tensor as rows of its last dimension, TensorRows: backend/tensor_rows.hpp, shared with the CUDA backend.)
#pragma once

#include <cstdint>

#include "backend/op_checks.hpp"
#include "backend/tensor_rows.hpp"
#include "core/error.hpp"
#include "core/tensor.hpp"

namespace sinklab::cpu {

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
