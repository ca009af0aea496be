// A block-wide reduction of the attention row kernels (attention.cu's reference kernels, attention_gemm.cu's
// row kernels): a sum or max over kBlock threads in a fixed tree, the same bits for the same inputs.
#pragma once

#include <cuda_runtime.h>

namespace sinklab::cuda {

// red: shared scratch [kBlock]. Every thread of the block must call it; kBlock is the block size, a power of 2.
template <int kBlock, class A, bool kMax>
__device__ A block_reduce(A x, A* red) {
  red[threadIdx.x] = x;
  __syncthreads();
  for (int half = kBlock / 2; half > 0; half /= 2) {
    if (int(threadIdx.x) < half) {
      const A a = red[threadIdx.x], b = red[threadIdx.x + half];
      red[threadIdx.x] = kMax ? (a < b ? b : a) : a + b;
    }
    __syncthreads();
  }
  const A r = red[0];
  __syncthreads();
  return r;
}

}  // namespace sinklab::cuda
