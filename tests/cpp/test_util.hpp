// Test helpers: owned CPU tensors, golden files (safetensors written by tests/python/goldens/*.py with
// PyTorch as the oracle) and finite-difference gradient checks.
//
// Error metric used everywhere: rel_error(a, ref) = max_i |a_i - ref_i| / max_i |ref_i|, i.e. the
// worst absolute error relative to the tensor's scale (an elementwise ratio would be meaningless where
// a reference value is near zero through cancellation).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "backend/memory.hpp"
#include "backend/ops.hpp"
#include "core/philox.hpp"
#include "io/safetensors.hpp"

namespace sinklab::test {

// A CPU tensor that owns its storage.
struct Owned {
  Buffer buffer;
  Tensor t;
  Owned() = default;
  Owned(DType dt, std::initializer_list<int64_t> dims) {
    buffer = Buffer::for_tensor(dt, dims);
    t = buffer.view(dt, dims);
    ops::fill(t, 0.0);
  }
  Owned(DType dt, const std::vector<int64_t>& dims) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    buffer = Buffer(size_t(std::max<int64_t>(n, 1)) * dtype_size(dt), Device::cpu());
    t = Tensor::contiguous_view(buffer.data(), dt, dims.data(), int(dims.size()), Device::cpu());
    if (dt != DType::i32) ops::fill(t, 0.0);
  }
  // A converted copy of src (any float dtype) in dtype dt.
  static Owned copy_of(const Tensor& src, DType dt) {
    std::vector<int64_t> dims(src.shape.begin(), src.shape.begin() + src.ndim);
    Owned o(dt, dims);
    ops::copy(o.t, src);
    return o;
  }
  template <class T> T* data() const { return t.ptr<T>(); }
  operator Tensor() const { return t; }
};

// Element i (row-major logical order) of a float tensor as double.
inline double element(const Tensor& t, int64_t i) {
  int64_t off = 0, rem = i;
  for (int d = t.ndim - 1; d >= 0; --d) {
    off += (rem % t.shape[d]) * t.stride[d];
    rem /= t.shape[d];
  }
  return load_as_double(t.data, t.dtype, off);
}

// The float types every CPU op runs in, and the golden-file bound of each: f32 <= 1e-5, f64 <= 1e-10.
inline constexpr DType kDtypes[] = {DType::f32, DType::f64};
inline double tol(DType dt) { return dt == DType::f32 ? 1e-5 : 1e-10; }
inline std::vector<int64_t> dims_of(const Tensor& t) { return {t.shape.begin(), t.shape.begin() + t.ndim}; }

inline double rel_error(const Tensor& a, const Tensor& ref) {
  EXPECT_EQ(a.numel(), ref.numel()) << "shapes " << a.shape_str() << " vs " << ref.shape_str();
  double max_err = 0.0, max_ref = 0.0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double err = std::fabs(element(a, i) - element(ref, i));
    // A NaN anywhere (an element never written, a poisoned output) is an infinite error: std::max would
    // silently skip it.
    if (std::isnan(err)) return std::numeric_limits<double>::infinity();
    max_err = std::max(max_err, err);
    max_ref = std::max(max_ref, std::fabs(element(ref, i)));
  }
  return max_ref > 0 ? max_err / max_ref : max_err;
}

// Normalised mean squared error sum (a - ref)^2 / sum ref^2 (the HF families' logits bound).
inline double nmse(const Tensor& a, const Tensor& ref) {
  EXPECT_EQ(a.numel(), ref.numel()) << a.shape_str() << " vs " << ref.shape_str();
  double err = 0.0, norm = 0.0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double r = element(ref, i), d = element(a, i) - r;
    err += d * d;
    norm += r * r;
  }
  return norm > 0 ? err / norm : err;
}

// max_i |a_i - ref_i| (bounds on probabilities, which have a natural scale of 1).
inline double max_abs_diff(const Tensor& a, const Tensor& ref) {
  EXPECT_EQ(a.numel(), ref.numel()) << a.shape_str() << " vs " << ref.shape_str();
  double worst = 0.0;
  for (int64_t i = 0; i < ref.numel(); ++i) worst = std::max(worst, std::fabs(element(a, i) - element(ref, i)));
  return worst;
}

// "a,b,c" -> {"a", "b", "c"} (a golden file's "cases" metadata).
inline std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == ',') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

inline std::string golden_path(const std::string& file) { return std::string(SINKLAB_GOLDEN_DIR) + "/" + file; }

// A golden file: tensors under "<case>/<name>", scalar parameters in the metadata as "<case>/<name>".
class Golden {
 public:
  explicit Golden(const std::string& file) : st_(golden_path(file)) {}
  bool has(const std::string& name) const { return st_.contains(name); }
  Tensor raw(const std::string& name) const { return st_.view(name); }
  // The tensor converted to dtype dt (inputs are stored exactly representable in f32).
  Owned get(const std::string& name, DType dt) const { return Owned::copy_of(st_.view(name), dt); }
  double param(const std::string& name) const {
    auto it = st_.metadata().find(name);
    if (it == st_.metadata().end()) throw Error("golden " + st_.path() + " lacks parameter " + name);
    return std::stod(it->second);
  }
  std::vector<std::string> cases() const {
    auto it = st_.metadata().find("cases");
    return it == st_.metadata().end() ? std::vector<std::string>{} : split_commas(it->second);
  }

 private:
  io::SafetensorsFile st_;
};

// Fills an f64/f32 tensor with deterministic normals (Philox stream `stream`).
inline void randn(Tensor t, uint64_t stream, double std = 1.0) { ops::fill_normal(t, 1234, stream, 0.0, std); }

// Central-difference check of a gradient in f64. `loss` recomputes the scalar loss from the current
// contents of `x`; `grad` is the analytic gradient of that loss with respect to `x`. Checks every
// element when x is small, otherwise `directions` random directions. Returns the worst relative error
// |fd - analytic| / max(|analytic|, 1e-3 * scale).
inline double finite_difference_error(Tensor x, const Tensor& grad, const std::function<double()>& loss,
                                      double h = 1e-6, int directions = 24) {
  EXPECT_EQ(x.dtype, DType::f64);
  EXPECT_TRUE(x.is_contiguous());
  const int64_t n = x.numel();
  double* px = x.ptr<double>();
  double grad_scale = 0.0;
  for (int64_t i = 0; i < n; ++i) grad_scale = std::max(grad_scale, std::fabs(element(grad, i)));
  double worst = 0.0;
  auto check = [&](const std::vector<double>& v) {
    for (int64_t i = 0; i < n; ++i) px[i] += h * v[size_t(i)];
    double plus = loss();
    for (int64_t i = 0; i < n; ++i) px[i] -= 2 * h * v[size_t(i)];
    double minus = loss();
    for (int64_t i = 0; i < n; ++i) px[i] += h * v[size_t(i)];
    double fd = (plus - minus) / (2 * h);
    double analytic = 0.0;
    for (int64_t i = 0; i < n; ++i) analytic += element(grad, i) * v[size_t(i)];
    double denom = std::max(std::fabs(analytic), 1e-3 * std::max(grad_scale, 1e-12));
    worst = std::max(worst, std::fabs(fd - analytic) / denom);
  };
  if (n <= 64) {
    for (int64_t i = 0; i < n; ++i) {
      std::vector<double> v(size_t(n), 0.0);
      v[size_t(i)] = 1.0;
      check(v);
    }
  } else {
    for (int k = 0; k < directions; ++k) {
      std::vector<double> v(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) v[size_t(i)] = philox_normal(99, uint64_t(k), uint64_t(i));
      check(v);
    }
  }
  return worst;
}

// sum_i w_i * y_i in double: the scalar loss used by finite-difference checks (w fixed, random).
inline double weighted_sum(const Tensor& y, const Tensor& w) {
  double s = 0.0;
  for (int64_t i = 0; i < y.numel(); ++i) s += element(y, i) * element(w, i);
  return s;
}

}  // namespace sinklab::test
