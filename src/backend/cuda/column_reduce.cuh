// Column reductions for parameter gradients (bias, norm weights): out[c] += sum over rows r of
// term(r, c), without float atomics and in a fixed order, so two runs give the same bits.
//
// Two kernels. Stage 1: the rows are cut into at most kMaxChunks chunks (the cut depends on the row
// count only); a block owns 32 columns of one chunk, its 32 x 8 threads each sum every 8th row of the
// chunk in double, and thread row 0 adds the 8 partial sums in order. Stage 2: one thread per column
// adds the chunks' partials in chunk order and does out[c] += float(sum), as the CPU's
// `dparam[c] += T(acc)`. The partials live in the backend's column_partials scratch slot.
//
// A Term is a struct with `static constexpr int kTerms` (1 or 2: LayerNorm reduces weight and bias
// gradients in one pass) and `__device__ void operator()(int64_t r, int64_t c, double* v) const`.
#pragma once

#include "backend/cuda/cuda_common.hpp"

namespace sinklab::cuda {

constexpr int kColReduceCols = 32;
constexpr int kColReduceLanes = 8;
constexpr int64_t kColReduceMaxChunks = 32;
constexpr int64_t kColReduceMinChunkRows = 256;

template <class Term>
__global__ void column_reduce_partial_kernel(Term term, int64_t rows, int64_t cols, int64_t chunk_rows,
                                             double* partials) {
  constexpr int NT = Term::kTerms;
  __shared__ double lane_sums[NT][kColReduceLanes][kColReduceCols];
  const int tx = int(threadIdx.x), ty = int(threadIdx.y);
  const int64_t c = int64_t(blockIdx.x) * kColReduceCols + tx;
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * chunk_rows;
  const int64_t r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
  double acc[NT];
  for (int k = 0; k < NT; ++k) acc[k] = 0.0;
  if (c < cols) {
    for (int64_t r = r0 + ty; r < r1; r += kColReduceLanes) {
      double v[NT];
      term(r, c, v);
      for (int k = 0; k < NT; ++k) acc[k] += v[k];
    }
  }
  for (int k = 0; k < NT; ++k) lane_sums[k][ty][tx] = acc[k];
  __syncthreads();
  if (ty == 0 && c < cols) {
    for (int k = 0; k < NT; ++k) {
      double s = lane_sums[k][0][tx];
      for (int l = 1; l < kColReduceLanes; ++l) s += lane_sums[k][l][tx];
      partials[(int64_t(k) * gridDim.y + chunk) * cols + c] = s;
    }
  }
}

// out_k[c * stride_k] += float(sum of the chunks' partials), k < n_terms; an output may be absent (null).
// Outputs are f32 or bf16 (dtype dt_k).
template <class Term>
__global__ void column_reduce_final_kernel(const double* partials, int64_t chunks, int64_t cols, void* out0, DType dt0,
                                           int64_t stride0, void* out1, DType dt1, int64_t stride1) {
  SL_GRID_LOOP(c, cols) {
    for (int k = 0; k < Term::kTerms; ++k) {
      void* out = k == 0 ? out0 : out1;
      if (!out) continue;
      const DType dt = k == 0 ? dt0 : dt1;
      const int64_t off = c * (k == 0 ? stride0 : stride1);
      double s = 0.0;
      for (int64_t ch = 0; ch < chunks; ++ch) s += partials[(int64_t(k) * chunks + ch) * cols + c];
      const float y = float(load_as_double(out, dt, off)) + float(s);
      store_from_double(out, dt, off, double(y));
    }
  }
}

// Launches both stages on the backend's stream (the caller holds a DeviceGuard).
template <class Term>
void column_reduce(CudaBackend& be, const Term& term, int64_t rows, int64_t cols, void* out0, DType dt0,
                   int64_t stride0, void* out1 = nullptr, DType dt1 = DType::f32, int64_t stride1 = 1) {
  if (cols == 0 || (!out0 && !out1)) return;
  int64_t chunk_rows = (rows + kColReduceMaxChunks - 1) / kColReduceMaxChunks;
  if (chunk_rows < kColReduceMinChunkRows) chunk_rows = kColReduceMinChunkRows;
  int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  if (chunks < 1) chunks = 1;  // rows == 0: one chunk of nothing, the outputs get += 0
  double* partials = static_cast<double*>(be.scratch(CudaBackend::ScratchSlot::column_partials,
                                                      sizeof(double) * size_t(Term::kTerms * chunks * cols)));
  dim3 grid(unsigned((cols + kColReduceCols - 1) / kColReduceCols), unsigned(chunks));
  dim3 block(kColReduceCols, kColReduceLanes);
  column_reduce_partial_kernel<Term><<<grid, block, 0, be.stream()>>>(term, rows, cols, chunk_rows, partials);
  CUDA_CHECK_LAUNCH("column_reduce_partial");
  column_reduce_final_kernel<Term><<<grid_for(cols), kThreads, 0, be.stream()>>>(partials, chunks, cols, out0, dt0,
                                                                                 stride0, out1, dt1, stride1);
  CUDA_CHECK_LAUNCH("column_reduce_final");
}

}  // namespace sinklab::cuda
