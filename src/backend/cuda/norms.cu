// RMSNorm and LayerNorm over the last dimension on CUDA, forward and backward; the twin of
// cpu/norms.cpp, over the same norm_math.hpp pieces (rms_rstd, rms_y, split_mean, ln_y, rms_dx, ln_dx,
// the parameter-gradient terms).
//
// One block per row. Row sums are accumulated in double, as on the CPU: each thread sums a fixed
// stride of the row, then a fixed butterfly over the warp and a fixed sum over the warps; the block
// size depends on the row length only, so the same row gives the same bits on every run. The outputs
// are formed in f32 from the f32-rounded rstd and the hi+lo mean, exactly as the CPU forward does; the
// input gradients in double, as the CPU backward does. Parameter gradients are fixed-order column
// reductions (column_reduce.cuh), run before the input gradient (d_in may alias d_out).
#include "backend/cuda/column_reduce.cuh"
#include "backend/cuda/cuda_common.hpp"
#include "backend/norm_math.hpp"

namespace sinklab::cuda {

namespace {

// Threads per row block: a multiple of the warp, up to 256, about one per 4 features.
int norm_threads(int64_t d) {
  int64_t t = (d + 3) / 4;
  t = (t + 31) / 32 * 32;
  return int(t < 32 ? 32 : (t > 256 ? 256 : t));
}

// Sum of v over the block, the same value returned to every thread. `shared` holds 32 doubles.
__device__ double block_sum(double v, double* shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, warps = int(blockDim.x) / 32;
  __syncthreads();  // a previous call's readers are done with shared
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = shared[0];
    for (int w = 1; w < warps; ++w) s += shared[w];
    shared[0] = s;
  }
  __syncthreads();
  return shared[0];
}

__global__ void rmsnorm_forward_kernel(float* out, TensorRows ro, float* rstd, const float* in, TensorRows ri,
                                       const float* w, double eps) {
  __shared__ double shared[32];
  const int64_t d = ri.cols;
  for (int64_t row = blockIdx.x; row < ri.rows; row += gridDim.x) {
    const float* x = in + ri.offset(row * d);
    float* o = out + ro.offset(row * d);
    double ss = 0.0;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) ss += double(x[i]) * double(x[i]);
    ss = block_sum(ss, shared);
    const double r = math::rms_rstd(ss, d, eps);
    const float rt = float(r);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) o[i] = math::rms_y(x[i], rt, w ? w[i] : 1.0f);
    if (threadIdx.x == 0) rstd[row] = float(r);
  }
}

// dx = r g w - r^3 x (sum_j g_j w_j x_j) / d   (norm_math.hpp rms_dx), in double.
__global__ void rmsnorm_backward_kernel(float* d_in, TensorRows rd, const float* d_out, TensorRows rg, const float* in,
                                        TensorRows ri, const float* w, const float* rstd, bool accumulate) {
  __shared__ double shared[32];
  const int64_t d = ri.cols;
  for (int64_t row = blockIdx.x; row < ri.rows; row += gridDim.x) {
    const float* x = in + ri.offset(row * d);
    const float* g = d_out + rg.offset(row * d);
    float* dx = d_in + rd.offset(row * d);
    double dot = 0.0;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) dot += double(g[i]) * (w ? double(w[i]) : 1.0) * double(x[i]);
    dot = block_sum(dot, shared);
    const double dot_over_d = dot / double(d), r = double(rstd[row]);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      const float v = float(math::rms_dx(r, double(g[i]) * (w ? double(w[i]) : 1.0), double(x[i]), dot_over_d));
      dx[i] = accumulate ? dx[i] + v : v;
    }
  }
}

__global__ void layernorm_forward_kernel(float* out, TensorRows ro, float* mean, float* rstd, const float* in,
                                         TensorRows ri, const float* w, const float* b, double eps) {
  __shared__ double shared[32];
  const int64_t d = ri.cols;
  for (int64_t row = blockIdx.x; row < ri.rows; row += gridDim.x) {
    const float* x = in + ri.offset(row * d);
    float* o = out + ro.offset(row * d);
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) s += double(x[i]);
    const double mu = block_sum(s, shared) / double(d);
    double ss = 0.0;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) ss += (double(x[i]) - mu) * (double(x[i]) - mu);
    const double r = math::ln_rstd(block_sum(ss, shared), d, eps);
    float mh, ml;
    math::split_mean(mu, mh, ml);
    const float rt = float(r);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
      o[i] = math::ln_y(x[i], mh, ml, rt, w ? w[i] : 1.0f, b ? b[i] : 0.0f);
    if (threadIdx.x == 0) {
      mean[row] = float(mu);
      rstd[row] = float(r);
    }
  }
}

// dx = r (gh - mean(gh) - xh mean(gh xh)), gh = g w, xh = (x - mu) r   (norm_math.hpp ln_dx), in double.
__global__ void layernorm_backward_kernel(float* d_in, TensorRows rd, const float* d_out, TensorRows rg,
                                          const float* in, TensorRows ri, const float* w, const float* mean,
                                          const float* rstd) {
  __shared__ double shared[32];
  const int64_t d = ri.cols;
  for (int64_t row = blockIdx.x; row < ri.rows; row += gridDim.x) {
    const float* x = in + ri.offset(row * d);
    const float* g = d_out + rg.offset(row * d);
    float* dx = d_in + rd.offset(row * d);
    const double mu = double(mean[row]), r = double(rstd[row]);
    double sum_gh = 0.0, sum_gh_xh = 0.0;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      const double gh = double(g[i]) * (w ? double(w[i]) : 1.0);
      sum_gh += gh;
      sum_gh_xh += gh * (double(x[i]) - mu) * r;
    }
    const double mean_gh = block_sum(sum_gh, shared) / double(d);
    const double mean_gh_xh = block_sum(sum_gh_xh, shared) / double(d);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      const double gh = double(g[i]) * (w ? double(w[i]) : 1.0);
      dx[i] = float(math::ln_dx(r, gh, (double(x[i]) - mu) * r, mean_gh, mean_gh_xh));
    }
  }
}

// d_weight[c] += sum_rows g x r  (RMSNorm)
struct RmsWeightGradTerm {
  static constexpr int kTerms = 1;
  const float* g;
  TensorRows rg;
  const float* x;
  TensorRows rx;
  const float* rstd;
  __device__ void operator()(int64_t r, int64_t c, double* v) const {
    v[0] = math::rms_dw_term(double(g[rg.offset(r * rg.cols) + c]), double(x[rx.offset(r * rx.cols) + c]),
                             double(rstd[r]));
  }
};

// d_weight[c] += sum_rows g (x - mu) r, d_bias[c] += sum_rows g  (LayerNorm)
struct LnParamGradTerm {
  static constexpr int kTerms = 2;
  const float* g;
  TensorRows rg;
  const float* x;
  TensorRows rx;
  const float* mean;
  const float* rstd;
  __device__ void operator()(int64_t r, int64_t c, double* v) const {
    const double gv = double(g[rg.offset(r * rg.cols) + c]);
    v[0] = math::ln_dw_term(gv, double(x[rx.offset(r * rx.cols) + c]), double(mean[r]), double(rstd[r]));
    v[1] = gv;
  }
};

unsigned row_grid(int64_t rows) {
  const int64_t cap = int64_t(1) << 16;
  return unsigned(rows < 1 ? 1 : (rows < cap ? rows : cap));
}

const float* ptr_or_null(const Tensor& t) { return t.defined() ? t.ptr<float>() : nullptr; }

// The rows of a backward's optional d_in (checked like in; empty when d_in is undefined).
TensorRows grad_rows(const CudaBackend& be, const Tensor& d_in, const Tensor& in, const char* op) {
  if (!d_in.defined()) return TensorRows{};
  check_same_shape(d_in, in, op, "d_in", "in");
  check_device_f32(be, d_in, op, "d_in");
  return rows_of(d_in, op, "d_in");
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// RMSNorm. in/out [*, d] (rows may be strided; out may alias in); weight [d] or undefined; rstd [*] written.
void CudaBackend::rmsnorm_forward(Tensor out, Tensor rstd, Tensor in, Tensor weight, double eps) {
  const char* op = "rmsnorm_forward";
  check_same_shape(out, in, op, "out", "in");
  check_device_f32(*this, out, op, "out");
  check_device_f32(*this, in, op, "in");
  TensorRows ri = rows_of(in, op, "in"), ro = rows_of(out, op, "out");
  check_norm_operands(op, ri, {{rstd, "rstd"}}, {{weight, "weight"}},
                      [&](const Tensor& t, const char* arg) { check_device_f32(*this, t, op, arg); });
  if (ri.rows == 0 || ri.cols == 0) return;
  DeviceGuard guard(index_);
  rmsnorm_forward_kernel<<<row_grid(ri.rows), norm_threads(ri.cols), 0, stream_>>>(
      out.ptr<float>(), ro, rstd.ptr<float>(), in.ptr<float>(), ri, ptr_or_null(weight), eps);
  CUDA_CHECK_LAUNCH(op);
}

// d_in [*, d] written (skipped if undefined); d_weight [d] += sum_rows d_out * in * rstd (skipped if
// undefined; must be undefined when weight is).
void CudaBackend::rmsnorm_backward(Tensor d_in, Tensor d_weight, Tensor d_out, Tensor in, Tensor weight,
                                   Tensor rstd, bool accumulate) {
  const char* op = "rmsnorm_backward";
  SL_CHECK(!(accumulate && d_in.defined() && tensors_overlap(d_in, d_out)),
           "%s: d_in may not overlap d_out when accumulating", op);
  check_same_shape(d_out, in, op, "d_out", "in");
  check_device_f32(*this, d_out, op, "d_out");
  check_device_f32(*this, in, op, "in");
  TensorRows ri = rows_of(in, op, "in"), rg = rows_of(d_out, op, "d_out");
  check_norm_operands(op, ri, {{rstd, "rstd"}}, {{weight, "weight"}, {d_weight, "d_weight"}},
                      [&](const Tensor& t, const char* arg) { check_device_f32(*this, t, op, arg); });
  SL_CHECK(!d_weight.defined() || weight.defined(), "%s: d_weight given but there is no weight", op);
  const TensorRows rd = grad_rows(*this, d_in, in, op);
  if (ri.cols == 0) return;
  DeviceGuard guard(index_);
  // Parameter gradient first: d_in may alias d_out.
  if (d_weight.defined())
    column_reduce(*this, RmsWeightGradTerm{d_out.ptr<float>(), rg, in.ptr<float>(), ri, rstd.ptr<float>()}, ri.rows,
                  ri.cols, d_weight.data, DType::f32, 1);
  if (d_in.defined() && ri.rows > 0) {
    rmsnorm_backward_kernel<<<row_grid(ri.rows), norm_threads(ri.cols), 0, stream_>>>(
        d_in.ptr<float>(), rd, d_out.ptr<float>(), rg, in.ptr<float>(), ri, ptr_or_null(weight), rstd.ptr<float>(),
        accumulate);
    CUDA_CHECK_LAUNCH(op);
  }
}

// ---------------------------------------------------------------------------------------------------
// LayerNorm. in/out [*, d] (rows may be strided; out may alias in); weight, bias [d] or undefined;
// mean, rstd [*] written.
void CudaBackend::layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor in, Tensor weight, Tensor bias,
                                    double eps) {
  const char* op = "layernorm_forward";
  check_same_shape(out, in, op, "out", "in");
  check_device_f32(*this, out, op, "out");
  check_device_f32(*this, in, op, "in");
  TensorRows ri = rows_of(in, op, "in"), ro = rows_of(out, op, "out");
  check_norm_operands(op, ri, {{mean, "mean"}, {rstd, "rstd"}}, {{weight, "weight"}, {bias, "bias"}},
                      [&](const Tensor& t, const char* arg) { check_device_f32(*this, t, op, arg); });
  if (ri.rows == 0 || ri.cols == 0) return;
  DeviceGuard guard(index_);
  layernorm_forward_kernel<<<row_grid(ri.rows), norm_threads(ri.cols), 0, stream_>>>(
      out.ptr<float>(), ro, mean.ptr<float>(), rstd.ptr<float>(), in.ptr<float>(), ri, ptr_or_null(weight),
      ptr_or_null(bias), eps);
  CUDA_CHECK_LAUNCH(op);
}

// d_in written (skipped if undefined); d_weight += sum_rows d_out * xhat; d_bias += sum_rows d_out
// (each skipped if undefined).
void CudaBackend::layernorm_backward(Tensor d_in, Tensor d_weight, Tensor d_bias, Tensor d_out, Tensor in,
                                     Tensor weight, Tensor mean, Tensor rstd) {
  const char* op = "layernorm_backward";
  check_same_shape(d_out, in, op, "d_out", "in");
  check_device_f32(*this, d_out, op, "d_out");
  check_device_f32(*this, in, op, "in");
  TensorRows ri = rows_of(in, op, "in"), rg = rows_of(d_out, op, "d_out");
  check_norm_operands(op, ri, {{mean, "mean"}, {rstd, "rstd"}},
                      {{weight, "weight"}, {d_weight, "d_weight"}, {d_bias, "d_bias"}},
                      [&](const Tensor& t, const char* arg) { check_device_f32(*this, t, op, arg); });
  SL_CHECK(!d_weight.defined() || weight.defined(), "%s: d_weight given but there is no weight", op);
  const TensorRows rd = grad_rows(*this, d_in, in, op);
  if (ri.cols == 0) return;
  DeviceGuard guard(index_);
  // Parameter gradients first: d_in may alias d_out.
  if (d_weight.defined() || d_bias.defined())
    column_reduce(*this,
                  LnParamGradTerm{d_out.ptr<float>(), rg, in.ptr<float>(), ri, mean.ptr<float>(), rstd.ptr<float>()},
                  ri.rows, ri.cols, d_weight.defined() ? d_weight.data : nullptr, DType::f32, 1,
                  d_bias.defined() ? d_bias.data : nullptr, DType::f32, 1);
  if (d_in.defined() && ri.rows > 0) {
    layernorm_backward_kernel<<<row_grid(ri.rows), norm_threads(ri.cols), 0, stream_>>>(
        d_in.ptr<float>(), rd, d_out.ptr<float>(), rg, in.ptr<float>(), ri, ptr_or_null(weight), mean.ptr<float>(),
        rstd.ptr<float>());
    CUDA_CHECK_LAUNCH(op);
  }
}

}  // namespace sinklab::cuda
