// Memory-level CPU ops: allocation, fill, copy/convert, residual add, scaling, sums, random fills.

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/cpu_common.hpp"
#include "core/philox.hpp"

namespace sinklab {

using cpu::dispatch_float;

void* CpuBackend::allocate(size_t bytes) {
  // 64-byte alignment: one cache line, one AVX-512 vector.
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded ? rounded : 64);
  SL_CHECK(p != nullptr, "out of host memory allocating %zu bytes", bytes);
  return p;
}

void CpuBackend::deallocate(void* ptr) { std::free(ptr); }

namespace {

// Runs fn(r) for every row r of a layout, in parallel when the tensor is large enough to pay for it.
template <class Fn>
void for_rows(const TensorRows& layout, Fn&& fn) {
#pragma omp parallel for schedule(static) if (layout.rows * layout.cols > 16384)
  for (int64_t r = 0; r < layout.rows; ++r) fn(r);
}

}  // namespace

void CpuBackend::fill(Tensor out, double value) {
  TensorRows ro = rows_of(out, "fill", "out");
  for_rows(ro, [&](int64_t r) {
    int64_t o = ro.row_offset(r);
    for (int64_t c = 0; c < ro.cols; ++c) store_from_double(out.data, out.dtype, o + c, value);
  });
}

void CpuBackend::copy(Tensor dst, Tensor src) {
  cpu::check_same_shape(dst, src, "copy", "dst", "src");
  TensorRows rd = rows_of(dst, "copy", "dst"), rs = rows_of(src, "copy", "src");
  if (dst.dtype == src.dtype) {
    size_t row_bytes = size_t(rd.cols) * dtype_size(dst.dtype);
    for_rows(rd, [&](int64_t r) {
      std::memcpy(static_cast<char*>(dst.data) + rd.row_offset(r) * dtype_size(dst.dtype),
                  static_cast<const char*>(src.data) + rs.row_offset(r) * dtype_size(src.dtype), row_bytes);
    });
    return;
  }
  for_rows(rd, [&](int64_t r) {
    int64_t od = rd.row_offset(r), os = rs.row_offset(r);
    for (int64_t c = 0; c < rd.cols; ++c)
      store_from_double(dst.data, dst.dtype, od + c, load_as_double(src.data, src.dtype, os + c));
  });
}

void CpuBackend::add(Tensor out, Tensor a, Tensor b) {
  cpu::check_same_shape(out, a, "add", "out", "a");
  cpu::check_same_shape(out, b, "add", "out", "b");
  SL_CHECK(a.dtype == out.dtype && b.dtype == out.dtype, "add: operands differ in dtype");
  dispatch_float(out.dtype, "add", [&](auto zero) {
    using T = decltype(zero);
    TensorRows ro = rows_of(out, "add", "out"), ra = rows_of(a, "add", "a"), rb = rows_of(b, "add", "b");
    for_rows(ro, [&](int64_t r) {
      T* o = out.ptr<T>() + ro.row_offset(r);
      const T* x = a.ptr<T>() + ra.row_offset(r);
      const T* y = b.ptr<T>() + rb.row_offset(r);
      for (int64_t c = 0; c < ro.cols; ++c) o[c] = x[c] + y[c];
    });
  });
}

void CpuBackend::accumulate(Tensor dst, Tensor src, double alpha) {
  cpu::check_same_shape(dst, src, "accumulate", "dst", "src");
  SL_CHECK(dst.dtype == src.dtype, "accumulate: operands differ in dtype");
  dispatch_float(dst.dtype, "accumulate", [&](auto zero) {
    using T = decltype(zero);
    TensorRows rd = rows_of(dst, "accumulate", "dst"), rs = rows_of(src, "accumulate", "src");
    const T a = T(alpha);
    for_rows(rd, [&](int64_t r) {
      T* d = dst.ptr<T>() + rd.row_offset(r);
      const T* s = src.ptr<T>() + rs.row_offset(r);
      for (int64_t c = 0; c < rd.cols; ++c) d[c] += a * s[c];
    });
  });
}

void CpuBackend::scale(Tensor x, double factor) {
  dispatch_float(x.dtype, "scale", [&](auto zero) {
    using T = decltype(zero);
    TensorRows rx = rows_of(x, "scale", "x");
    const T f = T(factor);
    for_rows(rx, [&](int64_t r) {
      T* p = x.ptr<T>() + rx.row_offset(r);
      for (int64_t c = 0; c < rx.cols; ++c) p[c] *= f;
    });
  });
}

double CpuBackend::sum_squares(Tensor x) {
  return dispatch_float(x.dtype, "sum_squares", [&](auto zero) {
    using T = decltype(zero);
    TensorRows rx = rows_of(x, "sum_squares", "x");
    double total = 0.0;
#pragma omp parallel for reduction(+ : total) schedule(static) if (rx.rows * rx.cols > 16384)
    for (int64_t r = 0; r < rx.rows; ++r) {
      const T* p = x.ptr<T>() + rx.row_offset(r);
      double s = 0.0;
      for (int64_t c = 0; c < rx.cols; ++c) s += double(p[c]) * double(p[c]);
      total += s;
    }
    return total;
  });
}

double CpuBackend::max_abs(Tensor x) {
  return dispatch_float(x.dtype, "max_abs", [&](auto zero) {
    using T = decltype(zero);
    TensorRows rx = rows_of(x, "max_abs", "x");
    double result = 0.0;
    bool nan = false;
    for (int64_t r = 0; r < rx.rows; ++r) {
      const T* p = x.ptr<T>() + rx.row_offset(r);
      for (int64_t c = 0; c < rx.cols; ++c) {
        const double v = std::fabs(double(p[c]));
        if (std::isnan(v)) nan = true;  // std::max would drop a NaN depending on where it sits
        else result = std::max(result, v);
      }
    }
    return nan ? std::numeric_limits<double>::quiet_NaN() : result;
  });
}

// reduce_into: r over the logical elements in index order, in double (a row at a time, as sum_squares and
// max_abs), combined with out's value when accumulating.
void CpuBackend::reduce_into(Tensor out, Tensor x, Reduction kind, bool accumulate) {
  check_reduce_into(out, x);
  double r = 0.0;
  switch (kind) {
    case Reduction::sum_squares: r = sum_squares(x); break;
    case Reduction::max_abs: r = max_abs(x); break;
    case Reduction::sum:
      r = dispatch_float(x.dtype, "reduce_into", [&](auto zero) {
        using T = decltype(zero);
        TensorRows rx = rows_of(x, "reduce_into", "x");
        double s = 0.0;
        for (int64_t row = 0; row < rx.rows; ++row) {
          const T* p = x.ptr<T>() + rx.row_offset(row);
          for (int64_t c = 0; c < rx.cols; ++c) s += double(p[c]);
        }
        return s;
      });
      break;
  }
  double& o = *out.ptr<double>();
  if (!accumulate) o = r;
  else if (kind != Reduction::max_abs) o += r;
  else o = (std::isnan(o) || std::isnan(r)) ? std::numeric_limits<double>::quiet_NaN() : std::max(o, r);
}

// out[o, c] (= or +=) sum over l < L of in[l*O + o, c]: out read as O rows of C, in as L*O rows of C.
// The work is cut into tiles of (out row, up to 64 columns); a tile walks its L rows in order into
// double accumulators (one per column: the inner loop vectorises over contiguous columns), so every
// sum has the same order, and the same bits, for any number of threads.
void CpuBackend::column_sum(Tensor out, Tensor in, bool accumulate) {
  const char* op = "column_sum";
  const int64_t L = check_column_sum(out, in);
  dispatch_float(out.dtype, op, [&](auto zero) {
    using T = decltype(zero);
    TensorRows ro = rows_of(out, op, "out"), ri = rows_of(in, op, "in");
    const int64_t O = ro.rows, C = ro.cols;
    constexpr int64_t kTile = 64;
    const int64_t tiles_per_row = (C + kTile - 1) / kTile, tiles = O * tiles_per_row;
#pragma omp parallel for schedule(static) if (ri.rows * ri.cols > 16384)
    for (int64_t tile = 0; tile < tiles; ++tile) {
      const int64_t o = tile / tiles_per_row, c0 = (tile % tiles_per_row) * kTile, n = std::min(kTile, C - c0);
      double sum[kTile] = {};
      for (int64_t l = 0; l < L; ++l) {
        const T* x = in.ptr<T>() + ri.row_offset(l * O + o) + c0;
#pragma omp simd
        for (int64_t c = 0; c < n; ++c) sum[c] += double(x[c]);
      }
      T* y = out.ptr<T>() + ro.row_offset(o) + c0;
      for (int64_t c = 0; c < n; ++c) y[c] = T(accumulate ? double(y[c]) + sum[c] : sum[c]);
    }
  });
}

void CpuBackend::fill_normal(Tensor out, uint64_t seed, uint64_t stream, double mean, double std) {
  TensorRows ro = rows_of(out, "fill_normal", "out");
  for_rows(ro, [&](int64_t r) {
    int64_t o = ro.row_offset(r);
    for (int64_t c = 0; c < ro.cols; ++c) {
      uint64_t index = uint64_t(r * ro.cols + c);
      store_from_double(out.data, out.dtype, o + c, mean + std * double(philox_normal(seed, stream, index)));
    }
  });
}

void CpuBackend::fill_uniform(Tensor out, uint64_t seed, uint64_t stream, double low, double high) {
  TensorRows ro = rows_of(out, "fill_uniform", "out");
  for_rows(ro, [&](int64_t r) {
    int64_t o = ro.row_offset(r);
    for (int64_t c = 0; c < ro.cols; ++c) {
      uint64_t index = uint64_t(r * ro.cols + c);
      double u = double(philox_uniform(seed, stream, index));
      store_from_double(out.data, out.dtype, o + c, low + (high - low) * u);
    }
  });
}

}  // namespace sinklab
