// Fused softmax cross-entropy on CUDA (loss and gradient of one row in one kernel); the twin of
// cpu/cross_entropy.cpp over cross_entropy_math.hpp.
//
// One block per row. Pass 1 reads the row once, in chunks of blockDim logits: each thread keeps the
// online summary (max, sum exp(x - max)) of its elements (ce_push), and the block merges the thread
// summaries with ce_combine in a fixed tree (the same bits on every run). Pass 2 writes the gradient
// (ce_grad); thread 0 writes the loss (ce_loss). d_logits may alias logits: every element is read and
// written by one thread, after the statistics pass, and the target logit is read before it.
//
// logits and d_logits are f32 or bf16 (bf16 storage, ops.hpp: as Karpathy's fused_classifier kernel, bf16
// d_logits written over the bf16 logits): read as f32, the statistics and the gradient formed in f32 as on the CPU, the
// gradient rounded to nearest even on store; losses stay f32.
//
// A target outside [0, V) that is not ignore_index is recorded (data errors, cuda_backend.hpp) and
// thrown at the next synchronisation; its row is treated as ignored meanwhile.
#include "backend/cross_entropy_math.hpp"
#include "backend/cuda/elementwise.cuh"

namespace sinklab::cuda {

namespace {

constexpr int kCeThreads = 512;  // a power of two (tree reduction)

__global__ void cross_entropy_kernel(float* losses, int64_t loss_stride, EwArg d_logits, EwArg logits,
                                     const int32_t* targets, int64_t target_stride, int64_t V, int ignore_index,
                                     float grad_scale, unsigned long long* error_word) {
  __shared__ float s_max[kCeThreads];
  __shared__ float s_sum[kCeThreads];
  const int tid = int(threadIdx.x);
  for (int64_t n = blockIdx.x; n < logits.rows.rows; n += gridDim.x) {
    const int32_t t = targets[n * target_stride];
    const int64_t xo = logits.rows.row_offset(n), dout = d_logits.p ? d_logits.rows.row_offset(n) : 0;
    const bool d = d_logits.p != nullptr;
    const bool bad = t != ignore_index && (t < 0 || t >= V);
    if (bad && tid == 0)
      atomicMin(error_word, (static_cast<unsigned long long>(n) << 32) | static_cast<uint32_t>(t));
    if (t == ignore_index || bad) {
      if (tid == 0) losses[n * loss_stride] = 0.0f;
      if (d)
        for (int64_t j = tid; j < V; j += blockDim.x) ew_store(d_logits.p, d_logits.bf16, dout + j, 0.0f);
      continue;  // uniform across the block: no barrier is skipped by some threads only
    }
    // read before any element of d (maybe the logits) is written
    const float x_target = tid == 0 ? ew_load(logits.p, logits.bf16, xo + t) : 0.0f;

    math::SoftmaxStats<float> st = math::ce_empty<float>();
    for (int64_t j = tid; j < V; j += blockDim.x) math::ce_push(st, ew_load(logits.p, logits.bf16, xo + j));
    s_max[tid] = st.max;
    s_sum[tid] = st.sum;
    __syncthreads();
    for (int width = kCeThreads / 2; width > 0; width /= 2) {
      if (tid < width) {
        const math::SoftmaxStats<float> m =
            math::ce_combine(math::SoftmaxStats<float>{s_max[tid], s_sum[tid]},
                             math::SoftmaxStats<float>{s_max[tid + width], s_sum[tid + width]});
        s_max[tid] = m.max;
        s_sum[tid] = m.sum;
      }
      __syncthreads();
    }
    const math::SoftmaxStats<float> row{s_max[0], s_sum[0]};
    if (tid == 0) losses[n * loss_stride] = math::ce_loss(row, x_target);
    if (d)
      for (int64_t j = tid; j < V; j += blockDim.x)
        ew_store(d_logits.p, d_logits.bf16, dout + j,
                 math::ce_grad(row, ew_load(logits.p, logits.bf16, xo + j), j == t, grad_scale));
    __syncthreads();  // s_max/s_sum are read above before the next row overwrites them
  }
}

}  // namespace

// losses[N]       = -log softmax(logits[n])[targets[n]]         (0 where targets[n] == ignore_index)
// d_logits[N,V]   = (softmax(logits[n]) - onehot) * grad_scale  (0 rows where ignored; may alias logits)
void CudaBackend::cross_entropy(Tensor losses, Tensor d_logits, Tensor logits, Tensor targets, int ignore_index,
                                double grad_scale) {
  const char* op = "cross_entropy";
  SL_CHECK(logits.ndim == 2, "cross_entropy: logits must be [N,V], got %s", logits.shape_str().c_str());
  const int64_t N = logits.shape[0], V = logits.shape[1];
  check_device_f32_or_bf16(*this, logits, op, "logits");
  check_device(*this, targets, op, "targets");
  check_shape(targets, {N}, op, "targets");
  check_dtype(targets, DType::i32, op, "targets");
  check_device_f32(*this, losses, op, "losses");
  check_shape(losses, {N}, op, "losses");
  const EwArg x = ew_arg(logits, op, "logits");
  if (d_logits.defined()) {
    check_device_f32_or_bf16(*this, d_logits, op, "d_logits");
    check_shape(d_logits, {N, V}, op, "d_logits");
  }
  const EwArg d = ew_arg(d_logits, op, "d_logits");
  if (N == 0) return;
  SL_CHECK(V > 0, "cross_entropy: logits %s have an empty vocabulary", logits.shape_str().c_str());
  DeviceGuard guard(index_);
  unsigned long long* err = data_error_word(DataErrorSlot::cross_entropy, V);
  const int64_t cap = int64_t(1) << 16;
  const unsigned blocks = unsigned(N < cap ? N : cap);
  cross_entropy_kernel<<<blocks, kCeThreads, 0, stream_>>>(losses.ptr<float>(), losses.stride[0], d, x,
                                                           targets.ptr<int32_t>(), targets.stride[0], V, ignore_index,
                                                           float(grad_scale), err);
  CUDA_CHECK_LAUNCH(op);
  publish_data_error(DataErrorSlot::cross_entropy);
}

}  // namespace sinklab::cuda
