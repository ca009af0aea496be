// Memory-level CUDA ops: fill, copy/convert between any devices, residual add, accumulate, scale (the
// elementwise engine, elementwise.cuh: f32 or bf16 operands), sum of squares and max |x| (to the host or
// into a device scalar), column sums, Philox random fills (bit-identical to the CPU backend's).
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/cuda/elementwise.cuh"
#include "core/philox.hpp"

namespace sinklab::cuda {

namespace {

// ---- kernels -----------------------------------------------------------------------------------------

__global__ void fill_kernel(void* out, DType dt, TensorRows ro, double value) {
  SL_GRID_LOOP(i, ro.numel) store_from_double(out, dt, ro.offset(i), value);
}

// Same dtype: moves the bits (no NaN canonicalisation, as the CPU's memcpy).
template <class W>
__global__ void copy_raw_kernel(W* dst, TensorRows rd, const W* src, TensorRows rs) {
  SL_GRID_LOOP(i, rd.numel) dst[rd.offset(i)] = src[rs.offset(i)];
}

// Different dtypes: through double, exactly as the CPU's load_as_double / store_from_double.
__global__ void convert_kernel(void* dst, DType ddt, TensorRows rd, const void* src, DType sdt, TensorRows rs) {
  SL_GRID_LOOP(i, rd.numel) store_from_double(dst, ddt, rd.offset(i), load_as_double(src, sdt, rs.offset(i)));
}

// The engine's functors (elementwise.cuh). in: a, b; out: a + b.
struct AddOp {
  static constexpr int kIn = 2, kOut = 1;
  __device__ void operator()(const float* in, float* out) const { out[0] = in[0] + in[1]; }
};
// in: dst, src; out: dst + alpha * src.
struct AccumulateOp {
  static constexpr int kIn = 2, kOut = 1;
  float alpha;
  __device__ void operator()(const float* in, float* out) const { out[0] = in[0] + alpha * in[1]; }
};
// in: x; out: x * factor.
struct ScaleOp {
  static constexpr int kIn = 1, kOut = 1;
  float factor;
  __device__ void operator()(const float* in, float* out) const { out[0] = in[0] * factor; }
};
// in: x; out: x (f32 <-> bf16: the engine's load widens, its store rounds to nearest even, as
// store_from_double(bf16, double(x)) does).
struct ConvertOp {
  static constexpr int kIn = 1, kOut = 1;
  __device__ void operator()(const float* in, float* out) const { out[0] = in[0]; }
};

// Sum of squares in double: per-block partial sums (fixed grid, fixed order: deterministic), then
// one block adds the partials.
constexpr int kReduceThreads = 256;
constexpr int kMaxReduceBlocks = 1024;

// The reductions to one value (ops::Reduction): sum, sum of squares (grad norms) and max |x| (the training
// monitor). max |x| keeps a NaN wherever it sits (fmax would drop it), as the CPU kernel does.
__device__ double reduce_combine(double a, double b, bool max_abs) {
  if (!max_abs) return a + b;
  return (a != a || b != b) ? __longlong_as_double(0x7ff8000000000000LL) : (a > b ? a : b);
}
__device__ double reduce_term(double v, Reduction kind) {
  return kind == Reduction::sum ? v : (kind == Reduction::sum_squares ? v * v : fabs(v));
}

__device__ double block_reduce(double v, bool max_abs) {
  __shared__ double shared[kReduceThreads];
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int width = kReduceThreads / 2; width > 0; width /= 2) {
    if (int(threadIdx.x) < width)
      shared[threadIdx.x] = reduce_combine(shared[threadIdx.x], shared[threadIdx.x + width], max_abs);
    __syncthreads();
  }
  return shared[0];
}

// x f32 or bf16. Each block's threads combine a fixed grid-stride share, then the block's tree.
__global__ void reduce_partial_kernel(const void* x, bool bf16, TensorRows rx, Reduction kind, double* partials) {
  const bool max_abs = kind == Reduction::max_abs;
  double s = 0.0;
  SL_GRID_LOOP(i, rx.numel) s = reduce_combine(s, reduce_term(double(ew_load(x, bf16, rx.offset(i))), kind), max_abs);
  double total = block_reduce(s, max_abs);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// *out = the partials combined (or combined with *out when accumulate).
__global__ void reduce_partials_kernel(const double* partials, int n, bool max_abs, double* out, bool accumulate) {
  double s = 0.0;
  for (int i = int(threadIdx.x); i < n; i += int(blockDim.x)) s = reduce_combine(s, partials[i], max_abs);
  double total = block_reduce(s, max_abs);
  if (threadIdx.x == 0) *out = accumulate ? reduce_combine(*out, total, max_abs) : total;
}

// Element i (logical row-major index) gets value i of the Philox stream, as on the CPU.
// out[o, c] (= or +=) sum over l < L of in[l*O + o, c]. One thread per output element, summing its L
// rows in order in double, as the CPU backend does: the two agree bit for bit. Neighbouring threads
// read neighbouring columns of a row (coalesced). The sums it serves (bias gradients) are small.
__global__ void column_sum_kernel(float* out, TensorRows ro, const void* in, bool in_bf16, TensorRows ri, int64_t L,
                                  bool accumulate) {
  SL_GRID_LOOP(i, ro.numel) {
    const int64_t o = i / ro.cols, c = i - o * ro.cols;
    double sum = 0.0;
    for (int64_t l = 0; l < L; ++l) sum += double(ew_load(in, in_bf16, ri.offset((l * ro.rows + o) * ro.cols + c)));
    float* y = out + ro.offset(i);
    *y = float(accumulate ? double(*y) + sum : sum);
  }
}

__global__ void fill_normal_kernel(void* out, DType dt, TensorRows ro, uint64_t seed, uint64_t stream,
                                   double mean, double std) {
  SL_GRID_LOOP(i, ro.numel) {
    store_from_double(out, dt, ro.offset(i), mean + std * double(philox_normal(seed, stream, uint64_t(i))));
  }
}

__global__ void fill_uniform_kernel(void* out, DType dt, TensorRows ro, uint64_t seed, uint64_t stream,
                                    double low, double high) {
  SL_GRID_LOOP(i, ro.numel) {
    double u = double(philox_uniform(seed, stream, uint64_t(i)));
    store_from_double(out, dt, ro.offset(i), low + (high - low) * u);
  }
}

// ---- host helpers ------------------------------------------------------------------------------------

// Device scratch memory for one op; freed (after the stream drains) at scope exit.
class Scratch {
 public:
  Scratch(size_t bytes, cudaStream_t stream) : stream_(stream) { CUDA_CHECK(cudaMalloc(&ptr_, bytes ? bytes : 1)); }
  ~Scratch() {
    (void)cudaStreamSynchronize(stream_);
    (void)cudaFree(ptr_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
};

// Copies between a row layout and a dense buffer of the same dtype on the host.
void pack_host_rows(void* dense, const Tensor& t, const TensorRows& r) {
  const size_t es = size_t(dtype_size(t.dtype)), row_bytes = size_t(r.cols) * es;
  for (int64_t row = 0; row < r.rows; ++row)
    std::memcpy(static_cast<char*>(dense) + size_t(row) * row_bytes,
                static_cast<const char*>(t.data) + size_t(r.offset(row * r.cols)) * es, row_bytes);
}
void unpack_host_rows(const Tensor& t, const TensorRows& r, const void* dense) {
  const size_t es = size_t(dtype_size(t.dtype)), row_bytes = size_t(r.cols) * es;
  for (int64_t row = 0; row < r.rows; ++row)
    std::memcpy(static_cast<char*>(t.data) + size_t(r.offset(row * r.cols)) * es,
                static_cast<const char*>(dense) + size_t(row) * row_bytes, row_bytes);
}

// Device-to-device copy of same-shaped layouts on the current device (dtype conversion if needed).
void launch_copy(void* dst, DType ddt, const TensorRows& rd, const void* src, DType sdt, const TensorRows& rs,
                 cudaStream_t stream) {
  const int64_t n = rd.numel;
  if (n == 0) return;
  if (ddt == sdt && rd.contiguous && rs.contiguous) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(n) * size_t(dtype_size(ddt)), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  if (ddt == sdt) {
    switch (dtype_size(ddt)) {
      case 2:
        copy_raw_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<uint16_t*>(dst), rd,
                                                              static_cast<const uint16_t*>(src), rs);
        break;
      case 4:
        copy_raw_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<uint32_t*>(dst), rd,
                                                              static_cast<const uint32_t*>(src), rs);
        break;
      default:
        copy_raw_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<uint64_t*>(dst), rd,
                                                              static_cast<const uint64_t*>(src), rs);
        break;
    }
    CUDA_CHECK_LAUNCH("copy_raw");
    return;
  }
  const auto activation_dtype = [](DType dt) { return dt == DType::f32 || dt == DType::bf16; };
  if (activation_dtype(ddt) && activation_dtype(sdt)) {  // f32 <-> bf16: the engine's vectorised path
    EwArg in[1], out[1];
    in[0] = EwArg{const_cast<void*>(src), sdt == DType::bf16, rs};
    out[0] = EwArg{dst, ddt == DType::bf16, rd};
    ew_launch(stream, ConvertOp{}, in, out, n, "convert");
    return;
  }
  convert_kernel<<<grid_for(n), kThreads, 0, stream>>>(dst, ddt, rd, src, sdt, rs);
  CUDA_CHECK_LAUNCH("convert");
}

TensorRows dense_rows(int64_t n) {
  TensorRows r;
  r.numel = n;
  r.rows = 1;
  r.cols = n;
  r.contiguous = true;
  return r;
}

}  // namespace

// ---- ops ---------------------------------------------------------------------------------------------

void CudaBackend::fill(Tensor out, double value) {
  check_device(*this, out, "fill", "out");
  TensorRows ro = rows_of(out, "fill", "out");
  if (ro.numel == 0) return;
  DeviceGuard guard(index_);
  if (value == 0.0 && !std::signbit(value) && ro.contiguous) {  // +0 is all zero bits in every dtype
    CUDA_CHECK(cudaMemsetAsync(out.data, 0, size_t(ro.numel) * size_t(dtype_size(out.dtype)), stream_));
    return;
  }
  fill_kernel<<<grid_for(ro.numel), kThreads, 0, stream_>>>(out.data, out.dtype, ro, value);
  CUDA_CHECK_LAUNCH("fill");
}

void CudaBackend::copy(Tensor dst, Tensor src) {
  check_same_shape(dst, src, "copy", "dst", "src");
  TensorRows rd = rows_of(dst, "copy", "dst"), rs = rows_of(src, "copy", "src");
  const int64_t n = rd.numel;
  const bool dst_here = dst.device.is_cuda() && dst.device.index == index_;
  const bool src_here = src.device.is_cuda() && src.device.index == index_;
  SL_CHECK(dst_here || src_here, "copy: neither dst (%s) nor src (%s) is on %s", dst.device.name().c_str(),
           src.device.name().c_str(), name());
  if (n == 0) return;
  DeviceGuard guard(index_);
  const size_t dsize = size_t(dtype_size(dst.dtype)), ssize = size_t(dtype_size(src.dtype));

  if (dst_here && src_here) {  // on this device: asynchronous
    launch_copy(dst.data, dst.dtype, rd, src.data, src.dtype, rs, stream_);
    return;
  }

  if (dst.device.is_cuda() && src.device.is_cuda()) {  // between two devices
    SL_CHECK(dst.dtype == src.dtype && rd.contiguous && rs.contiguous,
             "copy %s -> %s: a copy between two CUDA devices needs contiguous tensors of one dtype "
             "(got %s %s -> %s %s); copy on one device first",
             src.device.name().c_str(), dst.device.name().c_str(), src.shape_str().c_str(),
             dtype_name(src.dtype), dst.shape_str().c_str(), dtype_name(dst.dtype));
    CUDA_CHECK(cudaMemcpyPeerAsync(dst.data, dst.device.index, src.data, src.device.index, size_t(n) * dsize, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return;
  }

  if (dst_here) {  // host -> device
    // 1. src as a dense host buffer in its own dtype.
    std::vector<char> staging;
    const void* dense_src = src.data;
    if (!rs.contiguous) {
      staging.resize(size_t(n) * ssize);
      pack_host_rows(staging.data(), src, rs);
      dense_src = staging.data();
    }
    // 2. straight into dst when it is dense in the same dtype; else through device scratch. No wait for
    // the device: from pageable memory (sinklab's host buffers) cudaMemcpyAsync returns once it has
    // staged the source, so the caller may reuse it at once, and the copy is ordered on the stream (a
    // training step uploads its batch without a host synchronisation). The staging buffer of a strided
    // source is a local vector: its copy must finish before it goes.
    if (dst.dtype == src.dtype && rd.contiguous) {
      CUDA_CHECK(cudaMemcpyAsync(dst.data, dense_src, size_t(n) * ssize, cudaMemcpyHostToDevice, stream_));
      if (!staging.empty()) CUDA_CHECK(cudaStreamSynchronize(stream_));
      return;
    }
    Scratch scratch(size_t(n) * ssize, stream_);
    CUDA_CHECK(cudaMemcpyAsync(scratch.get(), dense_src, size_t(n) * ssize, cudaMemcpyHostToDevice, stream_));
    launch_copy(dst.data, dst.dtype, rd, scratch.get(), src.dtype, dense_rows(n), stream_);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return;
  }

  // device -> host
  SL_CHECK(dst.device.is_cpu(), "copy: unexpected destination %s", dst.device.name().c_str());
  // 1. src as a dense device buffer in dst's dtype.
  const void* dense_dev = src.data;
  std::unique_ptr<Scratch> scratch;
  if (!(src.dtype == dst.dtype && rs.contiguous)) {
    scratch = std::make_unique<Scratch>(size_t(n) * dsize, stream_);
    launch_copy(scratch->get(), dst.dtype, dense_rows(n), src.data, src.dtype, rs, stream_);
    dense_dev = scratch->get();
  }
  // 2. download, straight into dst when it is dense.
  if (rd.contiguous) {
    CUDA_CHECK(cudaMemcpyAsync(dst.data, dense_dev, size_t(n) * dsize, cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    check_data_errors();  // the data copied may come from an op that recorded one
    return;
  }
  std::vector<char> staging(size_t(n) * dsize);
  CUDA_CHECK(cudaMemcpyAsync(staging.data(), dense_dev, size_t(n) * dsize, cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  check_data_errors();
  unpack_host_rows(dst, rd, staging.data());
}

void CudaBackend::add(Tensor out, Tensor a, Tensor b) {
  const char* op = "add";
  check_same_shape(out, a, op, "out", "a");
  check_same_shape(out, b, op, "out", "b");
  check_device_f32_or_bf16(*this, out, op, "out");
  check_device_f32_or_bf16(*this, a, op, "a");
  check_device_f32_or_bf16(*this, b, op, "b");
  const EwArg ins[] = {ew_arg(a, op, "a"), ew_arg(b, op, "b")}, outs[] = {ew_arg(out, op, "out")};
  DeviceGuard guard(index_);
  ew_launch(stream_, AddOp{}, ins, outs, out.numel(), op);
}

void CudaBackend::accumulate(Tensor dst, Tensor src, double alpha) {
  const char* op = "accumulate";
  check_same_shape(dst, src, op, "dst", "src");
  check_device_f32_or_bf16(*this, dst, op, "dst");
  check_device_f32_or_bf16(*this, src, op, "src");
  const EwArg d = ew_arg(dst, op, "dst");
  const EwArg ins[] = {d, ew_arg(src, op, "src")}, outs[] = {d};
  DeviceGuard guard(index_);
  ew_launch(stream_, AccumulateOp{float(alpha)}, ins, outs, dst.numel(), op);
}

void CudaBackend::scale(Tensor x, double factor) {
  const char* op = "scale";
  check_device_f32_or_bf16(*this, x, op, "x");
  const EwArg ins[] = {ew_arg(x, op, "x")};
  DeviceGuard guard(index_);
  ew_launch(stream_, ScaleOp{float(factor)}, ins, ins, x.numel(), op);
}

double CudaBackend::sum_squares(Tensor x) { return reduce_to_host(x, "sum_squares", Reduction::sum_squares); }
double CudaBackend::max_abs(Tensor x) { return reduce_to_host(x, "max_abs", Reduction::max_abs); }

// The two reduction kernels on the stream, into `out` (a device double; null: the partials buffer's last
// slot), which it returns: per-block partials over a grid that depends on numel only, then one block
// combines them in a fixed tree (the same bits on every run).
double* CudaBackend::launch_reduce(Tensor x, const char* op, Reduction kind, double* out, bool accumulate) {
  check_device_f32_or_bf16(*this, x, op, "x");
  TensorRows rx = rows_of(x, op, "x");
  const int64_t want = (rx.numel + kReduceThreads - 1) / kReduceThreads;
  const int blocks = int(want < 1 ? 1 : (want < kMaxReduceBlocks ? want : kMaxReduceBlocks));
  if (!reduce_buffer_) CUDA_CHECK(cudaMalloc(&reduce_buffer_, sizeof(double) * size_t(kMaxReduceBlocks + 1)));
  double* partials = static_cast<double*>(reduce_buffer_);
  if (!out) out = partials + blocks;
  reduce_partial_kernel<<<unsigned(blocks), kReduceThreads, 0, stream_>>>(x.data, x.dtype == DType::bf16, rx, kind,
                                                                          partials);
  CUDA_CHECK_LAUNCH("reduce_partial");
  reduce_partials_kernel<<<1, kReduceThreads, 0, stream_>>>(partials, blocks, kind == Reduction::max_abs, out,
                                                            accumulate);
  CUDA_CHECK_LAUNCH("reduce_partials");
  return out;
}

double CudaBackend::reduce_to_host(Tensor x, const char* op, Reduction kind) {
  check_device_f32_or_bf16(*this, x, op, "x");
  if (x.numel() == 0) return 0.0;
  DeviceGuard guard(index_);
  // The partials buffer is one per device, reused (called once per gradient tensor per step, it must not
  // pay a cudaMalloc/cudaFree each time); the lock covers its use up to the final synchronisation.
  static std::mutex reduce_mutex;
  std::lock_guard<std::mutex> lock(reduce_mutex);
  const double* result_dev = launch_reduce(x, op, kind, nullptr, false);
  double result = 0.0;
  CUDA_CHECK(cudaMemcpyAsync(&result, result_dev, sizeof(double), cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  check_data_errors();
  return result;
}

// out (f64 [1] on this device) = or combined with the reduction of x (of nothing: 0, as on the CPU), in
// stream order, without waiting for the device.
void CudaBackend::reduce_into(Tensor out, Tensor x, Reduction kind, bool accumulate) {
  const char* op = "reduce_into";
  check_reduce_into(out, x);
  check_device(*this, out, op, "out");
  DeviceGuard guard(index_);
  launch_reduce(x, op, kind, out.ptr<double>(), accumulate);
}

void CudaBackend::column_sum(Tensor out, Tensor in, bool accumulate) {
  const char* op = "column_sum";
  const int64_t L = check_column_sum(out, in);
  check_device_f32(*this, out, op, "out");
  check_device_f32_or_bf16(*this, in, op, "in");
  TensorRows ro = rows_of(out, op, "out"), ri = rows_of(in, op, "in");
  if (ro.numel == 0) return;
  DeviceGuard guard(index_);
  column_sum_kernel<<<grid_for(ro.numel), kThreads, 0, stream_>>>(out.ptr<float>(), ro, in.data,
                                                                  in.dtype == DType::bf16, ri, L, accumulate);
  CUDA_CHECK_LAUNCH(op);
}

void CudaBackend::fill_normal(Tensor out, uint64_t seed, uint64_t stream, double mean, double std) {
  check_device(*this, out, "fill_normal", "out");
  TensorRows ro = rows_of(out, "fill_normal", "out");
  if (ro.numel == 0) return;
  DeviceGuard guard(index_);
  fill_normal_kernel<<<grid_for(ro.numel), kThreads, 0, stream_>>>(out.data, out.dtype, ro, seed, stream, mean, std);
  CUDA_CHECK_LAUNCH("fill_normal");
}

void CudaBackend::fill_uniform(Tensor out, uint64_t seed, uint64_t stream, double low, double high) {
  check_device(*this, out, "fill_uniform", "out");
  TensorRows ro = rows_of(out, "fill_uniform", "out");
  if (ro.numel == 0) return;
  DeviceGuard guard(index_);
  fill_uniform_kernel<<<grid_for(ro.numel), kThreads, 0, stream_>>>(out.data, out.dtype, ro, seed, stream, low, high);
  CUDA_CHECK_LAUNCH("fill_uniform");
}

}  // namespace sinklab::cuda
