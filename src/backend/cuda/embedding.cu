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

#include "backend/cuda/elementwise.cuh"

namespace sinklab::cuda {

namespace {

// Records the first bad id: the word is (position << 32) | id, and atomicMin keeps the smallest position.
__device__ void record_bad_id(unsigned long long* error_word, int64_t position, int32_t id) {
  atomicMin(error_word, (static_cast<unsigned long long>(position) << 32) | static_cast<uint32_t>(id));
}

// out[n, :] = table[ids[n], :]. One block per row (grid-stride), threads across the row: a gather that
// moves the storage words when out and table share a dtype (f32 or bf16: no arithmetic), and converts an
// f32 table row into bf16 out (rounded to nearest even: bf16 storage) or a bf16 one into f32 (exact).
__global__ void embedding_forward_kernel(EwArg out, const int32_t* ids, EwArg table, int64_t vocab,
                                         unsigned long long* error_word) {
  const bool same = out.bf16 == table.bf16;
  for (int64_t n = blockIdx.x; n < out.rows.rows; n += gridDim.x) {
    const int32_t id = ids[n];
    const bool valid = id >= 0 && id < vocab;
    if (!valid && threadIdx.x == 0) record_bad_id(error_word, n, id);
    const int64_t o = out.rows.row_offset(n), t = valid ? table.rows.row_offset(id) : 0;
    for (int64_t c = threadIdx.x; c < out.rows.cols; c += blockDim.x) {
      if (!valid) ew_store(out.p, out.bf16, o + c, 0.0f);
      else if (!same) ew_store(out.p, out.bf16, o + c, ew_load(table.p, table.bf16, t + c));
      else if (out.bf16) static_cast<uint16_t*>(out.p)[o + c] = static_cast<const uint16_t*>(table.p)[t + c];
      else static_cast<uint32_t*>(out.p)[o + c] = static_cast<const uint32_t*>(table.p)[t + c];
    }
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
// d_out is f32 or bf16 (widened: the same f32 additions as the CPU's on its widened copy).
__global__ void embedding_backward_kernel(float* d_table, TensorRows rt, EwArg d_out, const uint32_t* sorted_ids,
                                          const uint32_t* sorted_rows, int64_t n_rows, int64_t vocab) {
  for (int64_t p = blockIdx.x; p < n_rows; p += gridDim.x) {
    const uint32_t id = sorted_ids[p];
    if (id >= uint64_t(vocab) || (p > 0 && sorted_ids[p - 1] == id)) continue;
    float* dt = d_table + rt.offset(int64_t(id) * rt.cols);
    for (int64_t c = threadIdx.x; c < rt.cols; c += blockDim.x) {
      float acc = dt[c];
      for (int64_t q = p; q < n_rows && sorted_ids[q] == id; ++q)
        acc += ew_load(d_out.p, d_out.bf16, d_out.rows.row_offset(int64_t(sorted_rows[q])) + c);
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
  check_device_f32_or_bf16(*this, out, op, "out");
  check_device_f32_or_bf16(*this, table, op, "table");
  const EwArg o = ew_arg(out, op, "out"), tab = ew_arg(table, op, "table");
  const TensorRows &ro = o.rows, &rt = tab.rows;
  SL_CHECK(ro.cols == rt.cols, "%s: out %s and table %s differ in width", op, out.shape_str().c_str(),
           table.shape_str().c_str());
  check_ids(*this, ids, ro.rows, op);
  if (ro.rows == 0 || ro.cols == 0) return;
  SL_CHECK(rt.rows < (int64_t(1) << 31), "%s: vocabulary %lld exceeds int32 ids", op, (long long)rt.rows);
  DeviceGuard guard(index_);
  unsigned long long* err = data_error_word(DataErrorSlot::embedding_forward, rt.rows);
  embedding_forward_kernel<<<row_blocks(ro.rows), kRowThreads, 0, stream_>>>(o, ids.ptr<int32_t>(), tab, rt.rows, err);
  CUDA_CHECK_LAUNCH(op);
  publish_data_error(DataErrorSlot::embedding_forward);
}

// d_table[V,d] += sum over n with ids[n] == v of d_out[n, :], bucketed by id (see the top of the file).
void CudaBackend::embedding_backward(Tensor d_table, Tensor d_out, Tensor ids) {
  const char* op = "embedding_backward";
  SL_CHECK(d_table.ndim == 2, "%s: d_table must be [V,d], got %s", op, d_table.shape_str().c_str());
  check_device_f32(*this, d_table, op, "d_table");
  check_device_f32_or_bf16(*this, d_out, op, "d_out");
  const EwArg g = ew_arg(d_out, op, "d_out");
  const TensorRows &rg = g.rows, rt = rows_of(d_table, op, "d_table");
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
  embedding_backward_kernel<<<row_blocks(n), kRowThreads, 0, stream_>>>(d_table.ptr<float>(), rt, g, sorted_keys,
                                                                         sorted_rows, n, vocab);
  CUDA_CHECK_LAUNCH(op);
}

}  // namespace sinklab::cuda
