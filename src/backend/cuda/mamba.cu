// State-space (Mamba) layers and mixture-of-experts routing on CUDA, forward only (Jamba's ops): causal
// depthwise convolution, selective scan, top-k router, weighted row scatter-add; the twins of cpu/mamba.cpp
// over the same mamba_math.hpp functions, accumulating in double as the CPU does, f32 storage. Argument
// checks: op_checks.hpp (shared with the CPU). Written for correctness and determinism, not speed:
//   causal_conv1d_forward   one thread per output element (b, t, c), its K taps in order;
//   selective_scan_forward  one thread per channel (b, d), the recurrence over t in order with the channel's
//                           state h[N] and A row in local memory (N <= 256);
//   moe_router_topk         one thread per row (mamba_math.hpp's moe_topk_row);
//   index_add_rows          no float atomics: the (index, m) pairs sorted by a stable radix sort (CUB), one
//                           block per target row adds its source rows in m order, one column per thread:
//                           the CPU's order, so every run gives the same bits. An index outside [0, N) is
//                           recorded (data errors, cuda_backend.hpp) and thrown at the next synchronisation;
//                           its row is dropped meanwhile.
#include <cub/device/device_radix_sort.cuh>

#include <utility>

#include "backend/cuda/cuda_common.hpp"
#include "backend/mamba_math.hpp"
#include "backend/op_checks.hpp"

namespace sinklab::cuda {

namespace {

constexpr int kMaxScanState = 256;  // the scan's state per channel (Jamba: 16; Mamba-2 style models: 64, 128)
constexpr int kRowThreads = 256;

__global__ void causal_conv1d_kernel(float* out, int64_t os0, int64_t os1, const float* in, int64_t is0, int64_t is1,
                                     const float* weight, const float* bias, int64_t B, int64_t T, int64_t C,
                                     int64_t K) {
  SL_GRID_LOOP(i, B * T * C) {
    const int64_t c = i % C, r = i / C, t = r % T, b = r / T;
    const double acc =
        math::causal_conv1d_at<double>(in + b * is0 + c, is1, t, weight + c * K, K, bias ? double(bias[c]) : 0.0);
    out[b * os0 + t * os1 + c] = float(acc);
  }
}

struct ScanArgs {
  float* y;
  int64_t ys0, ys1;
  const float* x;
  int64_t xs0, xs1;
  const float* dt;
  int64_t dts0, dts1;
  const float* A_log;  // [Di, N] contiguous
  const float* Bm;
  int64_t bs0, bs1;
  const float* Cm;
  int64_t cs0, cs1;
  const float* D;        // [Di] or null
  const float* dt_bias;  // [Di] or null
  int64_t batch, T, Di, N;
  bool softplus;
};

// One thread per channel ch = b * Di + d: neighbouring threads read neighbouring channels of a time step.
__global__ void selective_scan_kernel(ScanArgs a) {
  SL_GRID_LOOP(ch, a.batch * a.Di) {
    const int64_t b = ch / a.Di, d = ch - b * a.Di;
    double h[kMaxScanState], A[kMaxScanState];
    for (int64_t n = 0; n < a.N; ++n) {
      h[n] = 0.0;
      A[n] = math::scan_a_from_log(double(a.A_log[d * a.N + n]));
    }
    const double db = a.dt_bias ? double(a.dt_bias[d]) : 0.0, skip = a.D ? double(a.D[d]) : 0.0;
    for (int64_t t = 0; t < a.T; ++t) {
      const double xv = double(a.x[b * a.xs0 + t * a.xs1 + d]);
      const double delta = math::scan_delta(double(a.dt[b * a.dts0 + t * a.dts1 + d]), db, a.softplus);
      const float* bt = a.Bm + b * a.bs0 + t * a.bs1;
      const float* ct = a.Cm + b * a.cs0 + t * a.cs1;
      const double yv = math::selective_scan_step(h, A, bt, ct, a.N, xv, delta) + skip * xv;
      a.y[b * a.ys0 + t * a.ys1 + d] = float(yv);
    }
  }
}

__global__ void moe_topk_kernel(float* weights, int32_t* experts, const float* logits, int64_t N, int64_t E,
                                int64_t k) {
  SL_GRID_LOOP(n, N) math::moe_topk_row<double>(weights + n * k, experts + n * k, logits + n * E, E, k);
}

// Sort keys: the index, or N (past every valid row) for a bad one; values: the source row m.
__global__ void index_keys_kernel(uint32_t* keys, uint32_t* rows, const int32_t* index, int64_t M, int64_t N,
                                  unsigned long long* error_word) {
  SL_GRID_LOOP(m, M) {
    const int32_t id = index[m];
    const bool valid = id >= 0 && id < N;
    if (!valid) atomicMin(error_word, (static_cast<unsigned long long>(m) << 32) | static_cast<uint32_t>(id));
    keys[m] = valid ? uint32_t(id) : uint32_t(N);
    rows[m] = uint32_t(m);
  }
}

// One block per bucket head p (the first sorted position of a target row): out[row, c] += scale[m] src[m, c]
// over the bucket's source rows m in order. Blocks at other positions return at once.
__global__ void index_add_kernel(float* out, TensorRows ro, const float* src, TensorRows rs, const float* scale,
                                 const uint32_t* sorted_rows_of_out, const uint32_t* sorted_src, int64_t M, int64_t N) {
  for (int64_t p = blockIdx.x; p < M; p += gridDim.x) {
    const uint32_t row = sorted_rows_of_out[p];
    if (row >= uint64_t(N) || (p > 0 && sorted_rows_of_out[p - 1] == row)) continue;
    float* o = out + ro.row_offset(row);
    for (int64_t c = threadIdx.x; c < ro.cols; c += blockDim.x) {
      float acc = o[c];
      for (int64_t q = p; q < M && sorted_rows_of_out[q] == row; ++q) {
        const uint32_t m = sorted_src[q];
        const float f = scale ? scale[m] : 1.0f;
        acc += f * src[rs.row_offset(m) + c];
      }
      o[c] = acc;
    }
  }
}

unsigned row_blocks(int64_t rows) {
  const int64_t cap = int64_t(1) << 16;
  return unsigned(rows < 1 ? 1 : (rows < cap ? rows : cap));
}

const float* ptr_or_null(const Tensor& t) { return t.defined() ? t.ptr<float>() : nullptr; }

}  // namespace

// out[b,t,c] = bias[c] + sum_k weight[c,k] in[b, t-(K-1)+k, c] (ops.hpp).
void CudaBackend::causal_conv1d_forward(Tensor out, Tensor in, Tensor weight, Tensor bias) {
  const char* op = "causal_conv1d_forward";
  const Conv1dDims d = check_causal_conv1d(out, in, weight, bias);
  const std::pair<const Tensor*, const char*> operands[] = {{&out, "out"}, {&in, "in"}, {&weight, "weight"}, {&bias, "bias"}};
  for (const auto& [t, arg] : operands)
    if (t->defined()) check_device_f32(*this, *t, op, arg);
  const int64_t n = d.B * d.T * d.C;
  if (n == 0) return;
  DeviceGuard guard(index_);
  causal_conv1d_kernel<<<grid_for(n), kThreads, 0, stream_>>>(out.ptr<float>(), out.stride[0], out.stride[1],
                                                               in.ptr<float>(), in.stride[0], in.stride[1],
                                                               weight.ptr<float>(), ptr_or_null(bias), d.B, d.T, d.C, d.K);
  CUDA_CHECK_LAUNCH(op);
}

// The selective scan (ops.hpp), from a zero state.
void CudaBackend::selective_scan_forward(Tensor y, Tensor x, Tensor dt, Tensor A_log, Tensor B, Tensor C, Tensor D,
                                         Tensor dt_bias, bool dt_softplus) {
  const char* op = "selective_scan_forward";
  const ScanDims d = check_selective_scan(y, x, dt, A_log, B, C, D, dt_bias);
  const std::pair<const Tensor*, const char*> operands[] = {{&y, "y"}, {&x, "x"},   {&dt, "dt"}, {&A_log, "A_log"},
                                                            {&B, "B"}, {&C, "C"},   {&D, "D"},   {&dt_bias, "dt_bias"}};
  for (const auto& [t, arg] : operands)
    if (t->defined()) check_device_f32(*this, *t, op, arg);
  SL_CHECK(d.N <= kMaxScanState, "%s on %s: state size N = %lld exceeds the kernel's %d", op, name(), (long long)d.N,
           kMaxScanState);
  if (d.B * d.Di == 0 || d.T == 0) return;
  ScanArgs a;
  a.y = y.ptr<float>();
  a.ys0 = y.stride[0];
  a.ys1 = y.stride[1];
  a.x = x.ptr<float>();
  a.xs0 = x.stride[0];
  a.xs1 = x.stride[1];
  a.dt = dt.ptr<float>();
  a.dts0 = dt.stride[0];
  a.dts1 = dt.stride[1];
  a.A_log = A_log.ptr<float>();
  a.Bm = B.ptr<float>();
  a.bs0 = B.stride[0];
  a.bs1 = B.stride[1];
  a.Cm = C.ptr<float>();
  a.cs0 = C.stride[0];
  a.cs1 = C.stride[1];
  a.D = ptr_or_null(D);
  a.dt_bias = ptr_or_null(dt_bias);
  a.batch = d.B;
  a.T = d.T;
  a.Di = d.Di;
  a.N = d.N;
  a.softplus = dt_softplus;
  DeviceGuard guard(index_);
  selective_scan_kernel<<<grid_for(d.B * d.Di), kThreads, 0, stream_>>>(a);
  CUDA_CHECK_LAUNCH(op);
}

// The top-k router of each row (ops.hpp).
void CudaBackend::moe_router_topk(Tensor top_weights, Tensor top_experts, Tensor logits) {
  const char* op = "moe_router_topk";
  const int64_t k = check_moe_router_topk(top_weights, top_experts, logits);
  check_device_f32(*this, logits, op, "logits");
  check_device_f32(*this, top_weights, op, "top_weights");
  check_device(*this, top_experts, op, "top_experts");
  const int64_t N = logits.shape[0], E = logits.shape[1];
  if (N == 0) return;
  DeviceGuard guard(index_);
  moe_topk_kernel<<<grid_for(N), kThreads, 0, stream_>>>(top_weights.ptr<float>(), top_experts.ptr<int32_t>(),
                                                         logits.ptr<float>(), N, E, k);
  CUDA_CHECK_LAUNCH(op);
}

// out[index[m], :] += scale[m] src[m, :], repeated indices in order m = 0, 1, ... (ops.hpp).
void CudaBackend::index_add_rows(Tensor out, Tensor src, Tensor index, Tensor scale) {
  const char* op = "index_add_rows";
  const IndexAddRows r = check_index_add_rows(out, src, index, scale);
  check_device_f32(*this, out, op, "out");
  check_device_f32(*this, src, op, "src");
  check_device(*this, index, op, "index");
  if (scale.defined()) check_device_f32(*this, scale, op, "scale");
  const int64_t M = r.src.rows, N = r.out.rows;
  if (M == 0 || r.out.cols == 0) return;
  SL_CHECK(N < (int64_t(1) << 31) && M < (int64_t(1) << 31), "%s: %lld rows or %lld source rows exceed int32", op,
           (long long)N, (long long)M);
  DeviceGuard guard(index_);
  unsigned long long* err = data_error_word(DataErrorSlot::index_add_rows, N);
  int end_bit = 1;  // the keys need the bits of N itself (the bad-index bucket)
  while (end_bit < 32 && (uint64_t(1) << end_bit) <= uint64_t(N)) ++end_bit;
  size_t temp_bytes = 0;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, static_cast<const uint32_t*>(nullptr),
                                             static_cast<uint32_t*>(nullptr), static_cast<const uint32_t*>(nullptr),
                                             static_cast<uint32_t*>(nullptr), M, 0, end_bit, stream_));
  uint32_t* buf = static_cast<uint32_t*>(scratch(ScratchSlot::index_add_sort, sizeof(uint32_t) * 4 * size_t(M)));
  void* temp = scratch(ScratchSlot::index_add_sort_temp, temp_bytes);
  uint32_t *keys = buf, *rows = buf + M, *sorted_keys = buf + 2 * M, *sorted_rows = buf + 3 * M;
  index_keys_kernel<<<grid_for(M), kThreads, 0, stream_>>>(keys, rows, index.ptr<int32_t>(), M, N, err);
  CUDA_CHECK_LAUNCH("index_add_rows keys");
  publish_data_error(DataErrorSlot::index_add_rows);
  // LSD radix sort: stable, so each target row's sources keep their order.
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys, sorted_keys, rows, sorted_rows, M, 0, end_bit,
                                             stream_));
  index_add_kernel<<<row_blocks(M), kRowThreads, 0, stream_>>>(out.ptr<float>(), r.out, src.ptr<float>(), r.src,
                                                                ptr_or_null(scale), sorted_keys, sorted_rows, M, N);
  CUDA_CHECK_LAUNCH(op);
}

}  // namespace sinklab::cuda
