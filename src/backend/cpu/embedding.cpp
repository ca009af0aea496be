// Token embedding lookup and its backward (scatter-add into the table).

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/cpu_common.hpp"

namespace sinklab {

using cpu::dispatch_float;

namespace {

// Validates ids before any parallel work: an exception cannot leave an OpenMP region, and a bad id is a
// user error (tokenizer/vocab mismatch) that must name the offending id, not segfault.
void check_ids(const Tensor& ids, int64_t n, int64_t vocab, const char* op) {
  check_dtype(ids, DType::i32, op, "ids");
  SL_CHECK(ids.is_contiguous(), "%s: ids must be contiguous", op);
  SL_CHECK(ids.numel() == n, "%s: ids %s has %lld elements but there are %lld rows", op, ids.shape_str().c_str(),
           (long long)ids.numel(), (long long)n);
  const int32_t* p = ids.ptr<int32_t>();
  for (int64_t i = 0; i < n; ++i)
    SL_CHECK(p[i] >= 0 && p[i] < vocab, "%s: token id %d at position %lld is out of range [0, %lld)", op, p[i],
             (long long)i, (long long)vocab);
}

}  // namespace

// out[N,d] = table[ids[n], :].  ids i32 [N] (any shape with N elements); table [V,d]; out rows strided.
void CpuBackend::embedding_forward(Tensor out, Tensor ids, Tensor table) {
  const char* op = "embedding_forward";
  SL_CHECK(table.ndim == 2, "%s: table must be [V,d], got %s", op, table.shape_str().c_str());
  SL_CHECK(out.dtype == table.dtype, "%s: out and table differ in dtype", op);
  TensorRows ro = rows_of(out, op, "out"), rt = rows_of(table, op, "table");
  SL_CHECK(ro.cols == rt.cols, "%s: out %s and table %s differ in width", op, out.shape_str().c_str(),
           table.shape_str().c_str());
  check_ids(ids, ro.rows, rt.rows, op);
  const int32_t* id = ids.ptr<int32_t>();
  const size_t row_bytes = size_t(ro.cols) * dtype_size(out.dtype);
  dispatch_float(out.dtype, op, [&](auto zero) {
    using T = decltype(zero);
    // A pure gather: each output row is one memcpy of a table row.
#pragma omp parallel for schedule(static) if (ro.rows * ro.cols > 16384)
    for (int64_t n = 0; n < ro.rows; ++n)
      std::memcpy(out.ptr<T>() + ro.row_offset(n), table.ptr<T>() + rt.row_offset(id[n]), row_bytes);
  });
}

// d_table[V,d] += sum over n with ids[n] == v of d_out[n, :].
// Several rows may carry the same id, so a parallel loop over rows would race on d_table. Instead each
// thread owns a contiguous block of columns and walks all rows in order: no two threads ever touch the
// same element, and every element sums its rows in row order, so the result is bitwise independent of
// the thread count.
void CpuBackend::embedding_backward(Tensor d_table, Tensor d_out, Tensor ids) {
  const char* op = "embedding_backward";
  SL_CHECK(d_table.ndim == 2, "%s: d_table must be [V,d], got %s", op, d_table.shape_str().c_str());
  SL_CHECK(d_out.dtype == d_table.dtype, "%s: d_out and d_table differ in dtype", op);
  TensorRows rg = rows_of(d_out, op, "d_out"), rt = rows_of(d_table, op, "d_table");
  SL_CHECK(rg.cols == rt.cols, "%s: d_out %s and d_table %s differ in width", op, d_out.shape_str().c_str(),
           d_table.shape_str().c_str());
  check_ids(ids, rg.rows, rt.rows, op);
  const int32_t* id = ids.ptr<int32_t>();
  dispatch_float(d_table.dtype, op, [&](auto zero) {
    using T = decltype(zero);
#pragma omp parallel if (rg.rows * rg.cols > 16384)
    {
      const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t c0 = rg.cols * t / nt, c1 = rg.cols * (t + 1) / nt;
      for (int64_t n = 0; n < rg.rows; ++n) {
        const T* g = d_out.ptr<T>() + rg.row_offset(n);
        T* dt = d_table.ptr<T>() + rt.row_offset(id[n]);
        for (int64_t c = c0; c < c1; ++c) dt[c] += g[c];
      }
    }
  });
}

}  // namespace sinklab
