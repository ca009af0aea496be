// Helpers of the gpu-labelled tests: device tensors that own their memory, host <-> device copies,
// bitwise comparison and random host inputs. Every test using them starts with SKIP_WITHOUT_CUDA().
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/memory.hpp"
#include "backend/ops.hpp"
#include "test_util.hpp"

namespace sinklab::gpu_test {

using test::Owned;

#define SKIP_WITHOUT_CUDA() \
  if (!sinklab::cuda_available()) GTEST_SKIP() << "no usable CUDA device"

// A tensor that owns device memory on cuda:0.
struct Dev {
  Buffer buffer;
  Tensor t;
  Dev(DType dt, const std::vector<int64_t>& dims) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    buffer = Buffer(size_t(std::max<int64_t>(n, 1)) * size_t(dtype_size(dt)), Device::cuda(0));
    t = Tensor::contiguous_view(buffer.data(), dt, dims.data(), int(dims.size()), Device::cuda(0));
  }
  operator Tensor() const { return t; }
};

inline std::vector<int64_t> dims_of(const Tensor& t) {
  return std::vector<int64_t>(t.shape.begin(), t.shape.begin() + t.ndim);
}

inline Dev to_device(const Tensor& host, DType dt) {
  Dev d(dt, dims_of(host));
  ops::copy(d.t, host);
  return d;
}
inline Dev to_device(const Tensor& host) { return to_device(host, host.dtype); }

inline Owned to_host(const Tensor& dev, DType dt) {
  Owned o(dt, dims_of(dev));
  ops::copy(o.t, dev);
  return o;
}
inline Owned to_host(const Tensor& dev) { return to_host(dev, dev.dtype); }

// Bitwise equality of two contiguous host tensors.
inline ::testing::AssertionResult same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype != b.dtype || a.numel() != b.numel() || !a.is_contiguous() || !b.is_contiguous())
    return ::testing::AssertionFailure() << "not comparable: " << a.shape_str() << " " << dtype_name(a.dtype)
                                         << " vs " << b.shape_str() << " " << dtype_name(b.dtype);
  const size_t es = size_t(dtype_size(a.dtype));
  const char* pa = static_cast<const char*>(a.data);
  const char* pb = static_cast<const char*>(b.data);
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (std::memcmp(pa + size_t(i) * es, pb + size_t(i) * es, es) != 0)
      return ::testing::AssertionFailure() << "element " << i << " differs: " << test::element(a, i) << " vs "
                                           << test::element(b, i);
  }
  return ::testing::AssertionSuccess();
}

inline Owned random_host(DType dt, const std::vector<int64_t>& dims, uint64_t stream, double std = 1.0) {
  Owned o(dt, dims);
  test::randn(o.t, stream, std);
  return o;
}

// A host tensor rounded through bf16 and back to f32: the exact inputs a bf16 device op sees.
inline Owned bf16_rounded(const Tensor& host_f32) {
  Owned b = Owned::copy_of(host_f32, DType::bf16);
  return Owned::copy_of(b.t, DType::f32);
}

// bf16 storage (ops.hpp): the CPU backend (cpu/bf16_storage.hpp) is the reference. A device op that forms
// the same f32 value rounds it to the same bf16; where the f32 values differ in their last bits (fused
// multiply-adds, the device's math functions, another summation order) the rounding may differ by one bf16
// ulp: at most 2^-7 of the tensor's largest magnitude, the tolerance below (rel_error).
constexpr double kBf16Tol = 8e-3;

// A random host tensor in dt (bf16: the rounded draw) and its device copy (same dtype, same values).
struct HostDev {
  Owned host;
  Dev dev;
};
inline HostDev random_pair(DType dt, const std::vector<int64_t>& dims, uint64_t stream, double std = 1.0) {
  Owned h = random_host(dt, dims, stream, std);
  Dev d = to_device(h.t);
  return {std::move(h), std::move(d)};
}

// rel_error of a device tensor (any view, f32 or bf16) against a host one, both read as f32.
inline double device_error(const Tensor& dev, const Tensor& ref) {
  return test::rel_error(to_host(dev, DType::f32).t, Owned::copy_of(ref, DType::f32).t);
}

// Element-wise poison (NaN) of a device tensor, so that an element an op fails to write shows.
inline void poison(const Tensor& dev) { ops::fill(dev, std::nan("")); }

}  // namespace sinklab::gpu_test
