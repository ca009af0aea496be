// The multi-tensor ops on CUDA (ops.hpp "Multi-tensor ops"): sum_squares_ranges (the global gradient norm's
// pieces) and adamw_update_ranges (the optimizer step over every parameter tensor), each over ranges of
// one flat buffer in one or two launches instead of one (and a host synchronisation) per tensor; the twin
// of cpu/adamw.cpp's, over adamw_math.hpp.
//
// As apex's multi_tensor_apply: the host cuts the ranges into chunks of at most kChunk elements, in table
// order, and uploads that chunk table once per distinct FlatRanges (cached on the backend: a training run
// passes the same ranges every step, so a step uploads nothing). A block works on one chunk at a time.
// The sum of squares is deterministic without float atomics: each chunk's sum in double by a fixed block
// tree into partials[chunk], then one block adds each tag's partials in chunk order.
#include <algorithm>
#include <map>
#include <vector>

#include "backend/adamw_math.hpp"
#include "backend/cuda/elementwise.cuh"

namespace sinklab::cuda {

namespace {

constexpr int64_t kChunk = 16384;  // elements of one chunk: 64 per thread of a 256-thread block
constexpr int kChunkThreads = 256;
constexpr unsigned kMaxChunkBlocks = 65535;

struct Chunk {
  int64_t begin;  // element of the flat buffer
  int32_t size;   // <= kChunk
  int32_t tag;
};

}  // namespace

// The uploaded chunk tables, by the ranges and tags they were cut from.
struct MultiTensorTables {
  struct Table {
    Chunk* chunks = nullptr;  // device
    int64_t count = 0;
    double* partials = nullptr;  // device, one per chunk (sum_squares_ranges)
  };
  std::map<std::vector<int64_t>, Table> tables;
};

MultiTensorTables& CudaBackend::multi_tensor_tables() {
  if (!multi_tensor_) multi_tensor_ = new MultiTensorTables;
  return *multi_tensor_;
}

namespace {

// The device table of `ranges` (cut and uploaded on first sight).
const MultiTensorTables::Table& chunk_table(CudaBackend& be, const ops::FlatRanges& ranges) {
  std::vector<int64_t> key;
  key.reserve(3 * ranges.ranges.size());
  for (size_t r = 0; r < ranges.ranges.size(); ++r) {
    key.push_back(ranges.ranges[r].begin);
    key.push_back(ranges.ranges[r].end);
    key.push_back(ranges.tags[r]);
  }
  MultiTensorTables::Table& table = be.multi_tensor_tables().tables[key];
  if (table.chunks || key.empty()) return table;
  std::vector<Chunk> chunks;
  for (size_t r = 0; r < ranges.ranges.size(); ++r)
    for (int64_t b = ranges.ranges[r].begin; b < ranges.ranges[r].end; b += kChunk)
      chunks.push_back(Chunk{b, int32_t(std::min(kChunk, ranges.ranges[r].end - b)), ranges.tags[r]});
  table.count = int64_t(chunks.size());
  if (chunks.empty()) return table;
  table.chunks = static_cast<Chunk*>(be.allocate(sizeof(Chunk) * chunks.size()));
  table.partials = static_cast<double*>(be.allocate(sizeof(double) * chunks.size()));
  CUDA_CHECK(cudaMemcpyAsync(table.chunks, chunks.data(), sizeof(Chunk) * chunks.size(), cudaMemcpyHostToDevice,
                             be.stream()));
  CUDA_CHECK(cudaStreamSynchronize(be.stream()));  // the host vector goes at return (once per distinct table)
  return table;
}

unsigned chunk_blocks(int64_t chunks) { return unsigned(chunks < kMaxChunkBlocks ? chunks : kMaxChunkBlocks); }

// Sum of v over the block (kChunkThreads threads) by a fixed tree; the result in thread 0.
__device__ double chunk_block_sum(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int width = kChunkThreads / 2; width > 0; width /= 2) {
    if (int(threadIdx.x) < width) shared[threadIdx.x] += shared[threadIdx.x + width];
    __syncthreads();
  }
  const double total = shared[0];
  __syncthreads();  // shared is reused by the block's next chunk
  return total;
}

// partials[c] = sum of squares of chunk c, in double.
__global__ void sum_squares_chunks_kernel(const float* flat, const Chunk* chunks, int64_t count, double* partials) {
  __shared__ double shared[kChunkThreads];
  for (int64_t c = blockIdx.x; c < count; c += gridDim.x) {
    const Chunk ch = chunks[c];
    double s = 0.0;
    for (int i = int(threadIdx.x); i < ch.size; i += kChunkThreads) {
      const double v = flat[ch.begin + i];
      s += v * v;
    }
    const double total = chunk_block_sum(s, shared);
    if (threadIdx.x == 0) partials[c] = total;
  }
}

// out[t] = the sum of the partials of the chunks tagged t, each thread over a fixed share in chunk order,
// then the block's tree (one block).
__global__ void sum_squares_tags_kernel(const double* partials, const Chunk* chunks, int64_t count, double* out,
                                        int64_t slots) {
  __shared__ double shared[kChunkThreads];
  for (int64_t t = 0; t < slots; ++t) {
    double s = 0.0;
    for (int64_t c = threadIdx.x; c < count; c += kChunkThreads)
      if (chunks[c].tag == t) s += partials[c];
    const double total = chunk_block_sum(s, shared);
    if (threadIdx.x == 0) out[t] = total;
  }
}

// AdamW over every chunk: weight decay by the chunk's tag (tag 1: c's decay factor `decay`, tag 0: none), the
// gradient scaled first (grad_scale != 1), param_lp (optional, f32 or bf16) the updated parameter as stored
// there. (A reference to one of two constant structs chosen per chunk would put both in local memory: the
// decay factor, the only field weight decay changes, is chosen instead.)
__global__ void adamw_chunks_kernel(float* param, const float* grad, float* m, float* v, void* param_lp,
                                    bool lp_bf16, const Chunk* chunks, int64_t count, math::AdamWConstants c,
                                    double decay, float grad_scale) {
  for (int64_t chunk = blockIdx.x; chunk < count; chunk += gridDim.x) {
    const Chunk ch = chunks[chunk];
    math::AdamWConstants k = c;
    k.decay = ch.tag == 1 ? decay : c.decay;
    for (int i = int(threadIdx.x); i < ch.size; i += kChunkThreads) {
      const int64_t e = ch.begin + i;
      float p = param[e], mi = m[e], vi = v[e];
      const float g = grad[e];
      math::adamw_element(p, grad_scale == 1.0f ? g : g * grad_scale, mi, vi, k);
      param[e] = p;
      m[e] = mi;
      v[e] = vi;
      if (param_lp) ew_store(param_lp, lp_bf16, e, p);
    }
  }
}

// A flat operand: contiguous 1-D f32 [n] on this device.
void check_flat(const CudaBackend& be, const Tensor& t, int64_t n, const char* op, const char* arg) {
  check_device_f32(be, t, op, arg);
  SL_CHECK(t.ndim == 1 && t.is_contiguous() && t.numel() == n, "%s: %s %s must be contiguous f32 [%lld]", op, arg,
           t.shape_str().c_str(), (long long)n);
}

}  // namespace

void CudaBackend::sum_squares_ranges(Tensor out, Tensor flat, const FlatRanges& ranges) {
  const char* op = "sum_squares_ranges";
  check_flat(*this, flat, flat.numel(), op, "flat");
  check_device(*this, out, op, "out");
  SL_CHECK(out.dtype == DType::f64 && out.is_contiguous() && out.numel() >= 1,
           "%s: out must be contiguous f64 [S], got %s %s", op, dtype_name(out.dtype), out.shape_str().c_str());
  check_flat_ranges(ranges, flat.numel(), int32_t(out.numel()), op);
  DeviceGuard guard(index_);
  const MultiTensorTables::Table& table = chunk_table(*this, ranges);
  if (table.count > 0) {
    sum_squares_chunks_kernel<<<chunk_blocks(table.count), kChunkThreads, 0, stream_>>>(
        flat.ptr<float>(), table.chunks, table.count, table.partials);
    CUDA_CHECK_LAUNCH("sum_squares_chunks");
  }
  sum_squares_tags_kernel<<<1, kChunkThreads, 0, stream_>>>(table.partials, table.chunks, table.count,
                                                            out.ptr<double>(), out.numel());
  CUDA_CHECK_LAUNCH(op);
}

void CudaBackend::adamw_update_ranges(Tensor param, Tensor grad, Tensor m, Tensor v, Tensor param_lp,
                                      const FlatRanges& ranges, const AdamWStep& s) {
  const char* op = "adamw_update_ranges";
  const int64_t n = param.numel();
  check_flat(*this, param, n, op, "param");
  check_flat(*this, grad, n, op, "grad");
  check_flat(*this, m, n, op, "m");
  check_flat(*this, v, n, op, "v");
  if (param_lp.defined()) {
    check_device_f32_or_bf16(*this, param_lp, op, "param_lp");
    SL_CHECK(param_lp.is_contiguous() && param_lp.numel() == n, "%s: param_lp %s must be contiguous [%lld] like param",
             op, param_lp.shape_str().c_str(), (long long)n);
  }
  SL_CHECK(s.step >= 1, "%s: step must be >= 1, got %lld", op, (long long)s.step);
  check_flat_ranges(ranges, n, 2, op);
  DeviceGuard guard(index_);
  const MultiTensorTables::Table& table = chunk_table(*this, ranges);
  if (table.count == 0) return;
  // Step-level constants, once per call on the host, as the CPU forms them (adamw_math.hpp): with weight
  // decay only `decay` differs.
  const math::AdamWConstants no_decay = math::adamw_constants(s.lr, s.beta1, s.beta2, s.eps, 0.0, s.step);
  const double decay = math::adamw_constants(s.lr, s.beta1, s.beta2, s.eps, s.weight_decay, s.step).decay;
  adamw_chunks_kernel<<<chunk_blocks(table.count), kChunkThreads, 0, stream_>>>(
      param.ptr<float>(), grad.ptr<float>(), m.ptr<float>(), v.ptr<float>(),
      param_lp.defined() ? param_lp.data : nullptr, param_lp.defined() && param_lp.dtype == DType::bf16, table.chunks,
      table.count, no_decay, decay, float(s.grad_scale));
  CUDA_CHECK_LAUNCH(op);
}

}  // namespace sinklab::cuda
