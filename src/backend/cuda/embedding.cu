// Token embedding lookup and its backward on CUDA; the twin of cpu/embedding.cpp.
//
// The backward adds several rows of d_out into one table row when a token repeats. Float atomics would
// add them in whatever order the threads arrive (other bits on every run). Instead the rows are bucketed
// by token id with a stable radix sort of (id, row) pairs: each id's rows end up adjacent, in row order.
// One block then owns each bucket (each table row), its threads walk the bucket's rows in order, one
// column each: the same float additions in the same order as the CPU, so the two agree bit for bit
// and every run gives the same bits.
//
// Ids are validated on the device: an out-of-range id is recorded (data errors, cuda_backend.hpp) and
// thrown at the next synchronisation; its output row is zero and its gradient row is dropped.
#include <cub/device/device_radix_sort.cuh>

#include "backend/cuda/cuda_common.hpp"

namespace sinklab::cuda {

namespace {

// Records the first bad id: the word is (position << 32) | id, and atomicMin keeps the smallest position.
__device__ void record_bad_id(unsigned long long* error_word, int64_t position, int32_t id) {
  atomicMin(error_word, (static_cast<unsigned long long>(position) << 32) | static_cast<uint32_t>(id));
}

// out[n, :] = table[ids[n], :]. One block per row (grid-stride), threads across the row: a pure gather,
// moving words of the storage type (f32 or bf16: no arithmetic).
template <class W>
__global__ void embedding_forward_kernel(W* out, TensorRows ro, const int32_t* ids, const W* table, TensorRows rt,
                                         int64_t vocab, unsigned long long* error_word) {
  for (int64_t n = blockIdx.x; n < ro.rows; n += gridDim.x) {
    const int32_t id = ids[n];
    const bool valid = id >= 0 && id < vocab;
    if (!valid && threadIdx.x == 0) record_bad_id(error_word, n, id);
    W* o = out + ro.offset(n * ro.cols);
    const W* t = valid ? table + rt.offset(int64_t(id) * rt.cols) : nullptr;
    for (int64_t c = threadIdx.x; c < ro.cols; c += blockDim.x) o[c] = valid ? t[c] : W(0);
  }
}

// Sort keys: the id, or `vocab` (past every valid id) for a bad one; values: the row index.
__global__ void embedding_keys_kernel(uint32_t* keys, uint32_t* rows, const int32_t* ids, int64_t n_rows,
                                      int64_t vocab, unsigned long long* error_word) {
  SL_GRID_LOOP(n, n_rows) {
    const int32_t id = ids[n];
    const bool valid = id >= 0 && id < vocab;
    if (!valid) record_bad_id(error_word, n, id);
    keys[n] = valid ? uint32_t(id) : uint32_t(vocab);
    rows[n] = uint32_t(n);
  }
}

// One block per bucket head p (the first sorted position of an id): d_table[id, c] += d_out[row, c] for
// the bucket's rows in row order. Blocks at other positions return at once.
__global__ void embedding_backward_kernel(float* d_table, TensorRows rt, const float* d_out, TensorRows rg,
                                          const uint32_t* sorted_ids, const uint32_t* sorted_rows, int64_t n_rows,
                                          int64_t vocab) {
  for (int64_t p = blockIdx.x; p < n_rows; p += gridDim.x) {
    const uint32_t id = sorted_ids[p];
    if (id >= uint64_t(vocab) || (p > 0 && sorted_ids[p - 1] == id)) continue;
    float* dt = d_table + rt.offset(int64_t(id) * rt.cols);
    for (int64_t c = threadIdx.x; c < rt.cols; c += blockDim.x) {
      float acc = dt[c];
      for (int64_t q = p; q < n_rows && sorted_ids[q] == id; ++q)
        acc += d_out[rg.offset(int64_t(sorted_rows[q]) * rg.cols) + c];
      dt[c] = acc;
    }
  }
}

constexpr int kRowThreads = 256;

unsigned row_blocks(int64_t rows) {
  const int64_t cap = int64_t(1) << 16;
  return unsigned(rows < 1 ? 1 : (rows < cap ? rows : cap));
}

// ids: i32, on this device, contiguous, one per row.
void check_ids(const CudaBackend& be, const Tensor& ids, int64_t n, const char* op) {
  check_device(be, ids, op, "ids");
  check_dtype(ids, DType::i32, op, "ids");
  SL_CHECK(ids.is_contiguous(), "%s: ids must be contiguous", op);
  SL_CHECK(ids.numel() == n, "%s: ids %s has %lld elements but there are %lld rows", op, ids.shape_str().c_str(),
           (long long)ids.numel(), (long long)n);
}

}  // namespace

// out[N,d] = table[ids[n], :].  ids i32 [N] (any shape with N elements); table [V,d]; out rows strided.
void CudaBackend::embedding_forward(Tensor out, Tensor ids, Tensor table) {
  const char* op = "embedding_forward";
  SL_CHECK(table.ndim == 2, "%s: table must be [V,d], got %s", op, table.shape_str().c_str());
  SL_CHECK(out.dtype == table.dtype, "%s: out and table differ in dtype", op);
  SL_CHECK(out.dtype == DType::f32 || out.dtype == DType::bf16, "%s: dtype %s (the CUDA gather moves f32 or bf16)",
           op, dtype_name(out.dtype));
  check_device(*this, out, op, "out");
  check_device(*this, table, op, "table");
  TensorRows ro = rows_of(out, op, "out"), rt = rows_of(table, op, "table");
  SL_CHECK(ro.cols == rt.cols, "%s: out %s and table %s differ in width", op, out.shape_str().c_str(),
           table.shape_str().c_str());
  check_ids(*this, ids, ro.rows, op);
  if (ro.rows == 0 || ro.cols == 0) return;
  SL_CHECK(rt.rows < (int64_t(1) << 31), "%s: vocabulary %lld exceeds int32 ids", op, (long long)rt.rows);
  DeviceGuard guard(index_);
  unsigned long long* err = data_error_word(DataErrorSlot::embedding_forward, rt.rows);
  if (out.dtype == DType::f32) {
    embedding_forward_kernel<<<row_blocks(ro.rows), kRowThreads, 0, stream_>>>(
        out.ptr<uint32_t>(), ro, ids.ptr<int32_t>(), table.ptr<uint32_t>(), rt, rt.rows, err);
  } else {
    embedding_forward_kernel<<<row_blocks(ro.rows), kRowThreads, 0, stream_>>>(
        out.ptr<uint16_t>(), ro, ids.ptr<int32_t>(), table.ptr<uint16_t>(), rt, rt.rows, err);
  }
  CUDA_CHECK_LAUNCH(op);
  publish_data_error(DataErrorSlot::embedding_forward);
}

// d_table[V,d] += sum over n with ids[n] == v of d_out[n, :], bucketed by id (see the top of the file).
void CudaBackend::embedding_backward(Tensor d_table, Tensor d_out, Tensor ids) {
  const char* op = "embedding_backward";
  SL_CHECK(d_table.ndim == 2, "%s: d_table must be [V,d], got %s", op, d_table.shape_str().c_str());
  check_device_f32(*this, d_table, op, "d_table");
  check_device_f32(*this, d_out, op, "d_out");
  TensorRows rg = rows_of(d_out, op, "d_out"), rt = rows_of(d_table, op, "d_table");
  SL_CHECK(rg.cols == rt.cols, "%s: d_out %s and d_table %s differ in width", op, d_out.shape_str().c_str(),
           d_table.shape_str().c_str());
  check_ids(*this, ids, rg.rows, op);
  const int64_t n = rg.rows, vocab = rt.rows;
  if (n == 0 || rg.cols == 0) return;
  SL_CHECK(vocab < (int64_t(1) << 31) && n < (int64_t(1) << 31), "%s: %lld rows or vocabulary %lld exceed int32", op,
           (long long)n, (long long)vocab);
  DeviceGuard guard(index_);
  unsigned long long* err = data_error_word(DataErrorSlot::embedding_backward, vocab);

  // Keys need the bits of `vocab` itself (the bad-id bucket).
  int end_bit = 1;
  while (end_bit < 32 && (uint64_t(1) << end_bit) <= uint64_t(vocab)) ++end_bit;
  size_t temp_bytes = 0;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, static_cast<const uint32_t*>(nullptr),
                                             static_cast<uint32_t*>(nullptr), static_cast<const uint32_t*>(nullptr),
                                             static_cast<uint32_t*>(nullptr), n, 0, end_bit, stream_));
  uint32_t* buf = static_cast<uint32_t*>(scratch(ScratchSlot::embedding_sort, sizeof(uint32_t) * 4 * size_t(n)));
  void* temp = scratch(ScratchSlot::embedding_sort_temp, temp_bytes);
  uint32_t *keys = buf, *rows = buf + n, *sorted_keys = buf + 2 * n, *sorted_rows = buf + 3 * n;

  embedding_keys_kernel<<<grid_for(n), kThreads, 0, stream_>>>(keys, rows, ids.ptr<int32_t>(), n, vocab, err);
  CUDA_CHECK_LAUNCH("embedding_keys");
  publish_data_error(DataErrorSlot::embedding_backward);
  // LSD radix sort: stable, so each id's rows keep their order.
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys, sorted_keys, rows, sorted_rows, n, 0, end_bit,
                                             stream_));
  embedding_backward_kernel<<<row_blocks(n), kRowThreads, 0, stream_>>>(d_table.ptr<float>(), rt, d_out.ptr<float>(),
                                                                         rg, sorted_keys, sorted_rows, n, vocab);
  CUDA_CHECK_LAUNCH(op);
}

}  // namespace sinklab::cuda
