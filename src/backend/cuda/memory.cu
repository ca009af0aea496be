// Memory-level CUDA ops: fill, copy/convert between any devices, residual add, accumulate, scale,
// sum of squares, column sums, Philox random fills (bit-identical to the CPU backend's).
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/cuda/cuda_common.hpp"
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

__global__ void add_kernel(float* out, TensorRows ro, const float* a, TensorRows ra, const float* b, TensorRows rb) {
  SL_GRID_LOOP(i, ro.numel) out[ro.offset(i)] = a[ra.offset(i)] + b[rb.offset(i)];
}

__global__ void accumulate_kernel(float* dst, TensorRows rd, const float* src, TensorRows rs, float alpha) {
  SL_GRID_LOOP(i, rd.numel) dst[rd.offset(i)] += alpha * src[rs.offset(i)];
}

__global__ void scale_kernel(float* x, TensorRows rx, float factor) {
  SL_GRID_LOOP(i, rx.numel) x[rx.offset(i)] *= factor;
}

// Sum of squares in double: per-block partial sums (fixed grid, fixed order: deterministic), then
// one block adds the partials.
constexpr int kReduceThreads = 256;
constexpr int kMaxReduceBlocks = 1024;

// The two reductions to one host value: sum of squares (grad norms) and max |x| (the training monitor).
// max |x| keeps a NaN wherever it sits (fmax would drop it), as the CPU kernel does.
__device__ double reduce_combine(double a, double b, bool max_abs) {
  if (!max_abs) return a + b;
  return (a != a || b != b) ? __longlong_as_double(0x7ff8000000000000LL) : (a > b ? a : b);
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

__global__ void reduce_partial_kernel(const float* x, TensorRows rx, bool max_abs, double* partials) {
  double s = 0.0;
  SL_GRID_LOOP(i, rx.numel) {
    double v = x[rx.offset(i)];
    s = max_abs ? reduce_combine(s, fabs(v), true) : s + v * v;
  }
  double total = block_reduce(s, max_abs);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void reduce_partials_kernel(const double* partials, int n, bool max_abs, double* out) {
  double s = 0.0;
  for (int i = int(threadIdx.x); i < n; i += int(blockDim.x)) s = reduce_combine(s, partials[i], max_abs);
  double total = block_reduce(s, max_abs);
  if (threadIdx.x == 0) *out = total;
}

// Element i (logical row-major index) gets value i of the Philox stream, as on the CPU.
// out[o, c] (= or +=) sum over l < L of in[l*O + o, c]. One thread per output element, summing its L
// rows in order in double, as the CPU backend does: the two agree bit for bit. Neighbouring threads
// read neighbouring columns of a row (coalesced). The sums it serves (bias gradients) are small.
__global__ void column_sum_kernel(float* out, TensorRows ro, const float* in, TensorRows ri, int64_t L,
                                  bool accumulate) {
  SL_GRID_LOOP(i, ro.numel) {
    const int64_t o = i / ro.cols, c = i - o * ro.cols;
    double sum = 0.0;
    for (int64_t l = 0; l < L; ++l) sum += double(in[ri.offset((l * ro.rows + o) * ro.cols + c)]);
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
  check_same_shape(out, a, "add", "out", "a");
  check_same_shape(out, b, "add", "out", "b");
  check_device_f32(*this, out, "add", "out");
  check_device_f32(*this, a, "add", "a");
  check_device_f32(*this, b, "add", "b");
  TensorRows ro = rows_of(out, "add", "out"), ra = rows_of(a, "add", "a"), rb = rows_of(b, "add", "b");
  if (ro.numel == 0) return;
  DeviceGuard guard(index_);
  add_kernel<<<grid_for(ro.numel), kThreads, 0, stream_>>>(out.ptr<float>(), ro, a.ptr<float>(), ra,
                                                           b.ptr<float>(), rb);
  CUDA_CHECK_LAUNCH("add");
}

void CudaBackend::accumulate(Tensor dst, Tensor src, double alpha) {
  check_same_shape(dst, src, "accumulate", "dst", "src");
  check_device_f32(*this, dst, "accumulate", "dst");
  check_device_f32(*this, src, "accumulate", "src");
  TensorRows rd = rows_of(dst, "accumulate", "dst"), rs = rows_of(src, "accumulate", "src");
  if (rd.numel == 0) return;
  DeviceGuard guard(index_);
  accumulate_kernel<<<grid_for(rd.numel), kThreads, 0, stream_>>>(dst.ptr<float>(), rd, src.ptr<float>(), rs,
                                                                  float(alpha));
  CUDA_CHECK_LAUNCH("accumulate");
}

void CudaBackend::scale(Tensor x, double factor) {
  check_device_f32(*this, x, "scale", "x");
  TensorRows rx = rows_of(x, "scale", "x");
  if (rx.numel == 0) return;
  DeviceGuard guard(index_);
  scale_kernel<<<grid_for(rx.numel), kThreads, 0, stream_>>>(x.ptr<float>(), rx, float(factor));
  CUDA_CHECK_LAUNCH("scale");
}

double CudaBackend::sum_squares(Tensor x) { return reduce_to_host(x, "sum_squares", false); }
double CudaBackend::max_abs(Tensor x) { return reduce_to_host(x, "max_abs", true); }

double CudaBackend::reduce_to_host(Tensor x, const char* op, bool max_abs) {
  check_device_f32(*this, x, op, "x");
  TensorRows rx = rows_of(x, op, "x");
  if (rx.numel == 0) return 0.0;
  DeviceGuard guard(index_);
  int64_t want = (rx.numel + kReduceThreads - 1) / kReduceThreads;
  const int blocks = int(want < kMaxReduceBlocks ? want : kMaxReduceBlocks);
  // One partials buffer per device, reused: called once per gradient tensor per step, it must not
  // pay a cudaMalloc/cudaFree each time. The lock covers its use up to the final synchronisation.
  static std::mutex reduce_mutex;
  std::lock_guard<std::mutex> lock(reduce_mutex);
  if (!reduce_buffer_) CUDA_CHECK(cudaMalloc(&reduce_buffer_, sizeof(double) * size_t(kMaxReduceBlocks + 1)));
  double* partials = static_cast<double*>(reduce_buffer_);
  reduce_partial_kernel<<<unsigned(blocks), kReduceThreads, 0, stream_>>>(x.ptr<float>(), rx, max_abs, partials);
  CUDA_CHECK_LAUNCH("reduce_partial");
  reduce_partials_kernel<<<1, kReduceThreads, 0, stream_>>>(partials, blocks, max_abs, partials + blocks);
  CUDA_CHECK_LAUNCH("reduce_partials");
  double result = 0.0;
  CUDA_CHECK(cudaMemcpyAsync(&result, partials + blocks, sizeof(double), cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  check_data_errors();
  return result;
}

void CudaBackend::column_sum(Tensor out, Tensor in, bool accumulate) {
  const char* op = "column_sum";
  const int64_t L = check_column_sum(out, in);
  check_device_f32(*this, out, op, "out");
  check_device_f32(*this, in, op, "in");
  TensorRows ro = rows_of(out, op, "out"), ri = rows_of(in, op, "in");
  if (ro.numel == 0) return;
  DeviceGuard guard(index_);
  column_sum_kernel<<<grid_for(ro.numel), kThreads, 0, stream_>>>(out.ptr<float>(), ro, in.ptr<float>(), ri, L,
                                                                  accumulate);
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
