// Matmul-family CUDA ops on cuBLASLt: linear forward/backward (nn.Linear layout, weight [N,K]) and the
// general (batched) matmul; the CUDA twin of cpu/linear.cpp.
//
// Operands are f32, or bf16 with f32 accumulation (CUBLAS_COMPUTE_32F: never TF32, so f32 products
// keep f32 accuracy); an output is f32, or bf16 when the inputs are bf16. The bias of linear_forward is
// added in cuBLASLt's epilogue; d_bias is a fixed-order column reduction (column_reduce.cuh).
//
// Row-major -> cuBLASLt's column-major: a row-major [R, C] matrix with row stride ld is, read
// column-major, its transpose [C, R] with the same ld. So C = op(A) op(B) (row-major) is computed as
// C^T = op(B)^T op(A)^T: cuBLASLt's first operand is our B, its second our A, and D is [N rows, M cols].
// The bias vector runs along D's rows (length N), which is what CUBLASLT_EPILOGUE_BIAS broadcasts.
//
// One cuBLASLt handle, one cuBLAS handle (the fallback when cuBLASLt's heuristic offers no algorithm
// for a layout, e.g. odd bf16 leading dimensions) and one 32 MiB workspace per device, created on the
// first matmul and bound to the backend's stream. The same call on the same GPU picks the same
// algorithm, so two runs give the same bits.
#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <utility>

#include "backend/cuda/column_reduce.cuh"
#include "backend/cuda/cuda_common.hpp"
#include "backend/op_checks.hpp"

namespace sinklab::cuda {

namespace {

// A row-major matrix operand: element (r, c) of batch b at ptr + (b * batch_stride + r * ld + c).
struct GemmOperand {
  void* ptr = nullptr;
  DType dt = DType::f32;
  int64_t ld = 1;
  int64_t batch_stride = 0;
};

// C[b] = alpha * op(A[b]) . op(B[b]) + beta * C[b] (+ bias[N] on every row), row-major, b < batch.
// A is [M,K] ([K,M] when ta), B is [K,N] ([N,K] when tb), C is [M,N].
struct RowMajorGemm {
  int64_t M = 0, N = 0, K = 0, batch = 1;
  bool ta = false, tb = false;
  float alpha = 1.0f, beta = 0.0f;
  GemmOperand a, b, c;
  const void* bias = nullptr;  // [N], dtype of C; only with beta == 0
  int64_t bias_stride = 1;
};

cudaDataType_t cuda_type(DType dt) { return dt == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F; }

// Largest power of two (<= 256) dividing the byte address and every byte step of an operand: what
// cuBLASLt may assume about its alignment.
uint32_t alignment_of(const GemmOperand& op) {
  const uint64_t es = uint64_t(dtype_size(op.dt));
  uint64_t bits = uint64_t(reinterpret_cast<uintptr_t>(op.ptr)) | (uint64_t(op.ld) * es) | 256u;
  if (op.batch_stride) bits |= uint64_t(op.batch_stride) * es;
  return uint32_t(bits & (~bits + 1));  // lowest set bit
}

// RAII holders of the cuBLASLt descriptors.
struct LtLayout {
  cublasLtMatrixLayout_t h = nullptr;
  LtLayout(DType dt, int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t batch_stride) {
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&h, cuda_type(dt), uint64_t(rows), uint64_t(cols), ld));
    if (batch > 1) {
      const int32_t count = int32_t(batch);
      CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(h, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
      CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(h, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &batch_stride,
                                                    sizeof(batch_stride)));
    }
  }
  ~LtLayout() { (void)cublasLtMatrixLayoutDestroy(h); }
  LtLayout(const LtLayout&) = delete;
  LtLayout& operator=(const LtLayout&) = delete;
};
struct LtMatmulDesc {
  cublasLtMatmulDesc_t h = nullptr;
  LtMatmulDesc() { CUBLAS_CHECK(cublasLtMatmulDescCreate(&h, CUBLAS_COMPUTE_32F, CUDA_R_32F)); }
  ~LtMatmulDesc() { (void)cublasLtMatmulDescDestroy(h); }
  LtMatmulDesc(const LtMatmulDesc&) = delete;
  LtMatmulDesc& operator=(const LtMatmulDesc&) = delete;
};
struct LtPreference {
  cublasLtMatmulPreference_t h = nullptr;
  LtPreference() { CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&h)); }
  ~LtPreference() { (void)cublasLtMatmulPreferenceDestroy(h); }
  LtPreference(const LtPreference&) = delete;
  LtPreference& operator=(const LtPreference&) = delete;
};

// What a product's cuBLASLt call is made of, kept per layout (GemmContext::plans): the descriptors and the
// algorithm the heuristic chose. Building them and asking the heuristic cost tens of microseconds of host
// time a call; a training step makes the same few products every micro-step, so each layout pays once.
struct GemmPlanKey {
  int64_t M = 0, N = 0, K = 0, batch = 1;
  bool ta = false, tb = false, bias = false;
  DType a = DType::f32, b = DType::f32, c = DType::f32;
  int64_t lda = 0, ldb = 0, ldc = 0, stride_a = 0, stride_b = 0, stride_c = 0;
  uint32_t align_a = 0, align_b = 0, align_c = 0;
  auto operator<=>(const GemmPlanKey&) const = default;
};
struct GemmPlan {
  std::unique_ptr<LtMatmulDesc> desc;
  std::unique_ptr<LtLayout> a, b, c;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;  // false: the heuristic offered none (the cuBLAS fallback serves the layout)
};

}  // namespace

struct GemmContext {
  cublasLtHandle_t lt = nullptr;
  cublasHandle_t blas = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::map<GemmPlanKey, GemmPlan> plans;
};

// 32 MiB: what cuBLAS recommends for Hopper; more than enough for Ampere.
constexpr size_t kGemmWorkspaceBytes = size_t(32) << 20;

GemmContext& CudaBackend::gemm_context() {
  if (gemm_) return *gemm_;
  DeviceGuard guard(index_);
  auto* c = new GemmContext;
  CUBLAS_CHECK(cublasLtCreate(&c->lt));
  CUBLAS_CHECK(cublasCreate(&c->blas));
  c->workspace_bytes = kGemmWorkspaceBytes;
  c->workspace = allocate(c->workspace_bytes);
  CUBLAS_CHECK(cublasSetStream(c->blas, stream_));
  CUBLAS_CHECK(cublasSetWorkspace(c->blas, c->workspace, c->workspace_bytes));
  // CUBLAS_DEFAULT_MATH: f32 products stay f32 (no TF32 down-conversion).
  CUBLAS_CHECK(cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH));
  gemm_ = c;
  return *gemm_;
}

namespace {

// C[b] rows = beta * C[b] rows (+ bias): the K = 0 product, and the bias rows of the cuBLAS fallback.
// beta == 0 writes without reading (C may hold NaN garbage).
__global__ void scale_rows_add_bias_kernel(void* c, DType dt, int64_t M, int64_t N, int64_t ld, int64_t batch,
                                           int64_t batch_stride, float beta, const void* bias, int64_t bias_stride) {
  SL_GRID_LOOP(i, batch * M * N) {
    const int64_t b = i / (M * N), rc = i - b * M * N, r = rc / N, col = rc - r * N;
    const int64_t off = b * batch_stride + r * ld + col;
    float y = beta == 0.0f ? 0.0f : beta * float(load_as_double(c, dt, off));
    if (bias) y += float(load_as_double(bias, dt, col * bias_stride));
    store_from_double(c, dt, off, double(y));
  }
}

void launch_scale_rows(CudaBackend& be, const RowMajorGemm& g, float beta, const void* bias) {
  const int64_t n = g.batch * g.M * g.N;
  if (n == 0) return;
  scale_rows_add_bias_kernel<<<grid_for(n), kThreads, 0, be.stream()>>>(g.c.ptr, g.c.dt, g.M, g.N, g.c.ld, g.batch,
                                                                        g.c.batch_stride, beta, bias, g.bias_stride);
  CUDA_CHECK_LAUNCH("gemm scale_rows_add_bias");
}

// The cuBLAS path (any layout cuBLAS takes): the same column-major mapping, bias rows written first.
// SINKLAB_GEMM_FALLBACK_LOG=<file> appends one line per call that lands here (why, shape, dtypes, leading
// dimensions; "-" writes to stderr): how a GPU run checks that cuBLASLt serves the model's layouts.
void gemm_cublas(CudaBackend& be, GemmContext& ctx, const RowMajorGemm& g, const char* why) {
  static const char* log_path = std::getenv("SINKLAB_GEMM_FALLBACK_LOG");
  if (log_path && *log_path) {
    const bool to_stderr = std::strcmp(log_path, "-") == 0;
    if (std::FILE* f = to_stderr ? stderr : std::fopen(log_path, "a")) {
      std::fprintf(f, "sinklab gemm fallback to cuBLAS (%s): M %lld N %lld K %lld batch %lld ta %d tb %d a %s ld %lld "
                   "b %s ld %lld c %s ld %lld bias %d beta %g\n", why, (long long)g.M, (long long)g.N, (long long)g.K,
                   (long long)g.batch, int(g.ta), int(g.tb), dtype_name(g.a.dt), (long long)g.a.ld, dtype_name(g.b.dt),
                   (long long)g.b.ld, dtype_name(g.c.dt), (long long)g.c.ld, int(g.bias != nullptr), double(g.beta));
      if (!to_stderr) std::fclose(f);
    }
  }
  float beta = g.beta;
  if (g.bias) {  // only linear_forward has a bias, with beta 0: rows start as the bias, the product adds
    launch_scale_rows(be, g, 0.0f, g.bias);
    beta = 1.0f;
  }
  const cublasOperation_t opa = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLAS's A is our B
  const cublasOperation_t opb = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasGemmStridedBatchedEx(ctx.blas, opa, opb, int(g.N), int(g.M), int(g.K), &g.alpha, g.b.ptr,
                                          cuda_type(g.b.dt), int(g.b.ld), g.b.batch_stride, g.a.ptr, cuda_type(g.a.dt),
                                          int(g.a.ld), g.a.batch_stride, &beta, g.c.ptr, cuda_type(g.c.dt),
                                          int(g.c.ld), g.c.batch_stride, int(g.batch), CUBLAS_COMPUTE_32F,
                                          CUBLAS_GEMM_DEFAULT));
}

// The descriptors of a product's layout and the algorithm cuBLASLt's heuristic picks for it (GemmPlan).
GemmPlan make_plan(GemmContext& ctx, const RowMajorGemm& g, const GemmPlanKey& key) {
  GemmPlan plan;
  plan.desc = std::make_unique<LtMatmulDesc>();
  const cublasOperation_t opa = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our B
  const cublasOperation_t opb = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc->h, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc->h, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
  if (g.bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    const cudaDataType_t bias_type = cuda_type(g.c.dt);
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.desc->h, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc->h, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                sizeof(bias_type)));
  }
  // First operand (our B): [N,K] column-major when not transposed, else [K,N] read transposed.
  plan.a = std::make_unique<LtLayout>(g.b.dt, g.tb ? g.K : g.N, g.tb ? g.N : g.K, g.b.ld, g.batch, g.b.batch_stride);
  // Second operand (our A): [K,M] column-major when not transposed, else [M,K] read transposed.
  plan.b = std::make_unique<LtLayout>(g.a.dt, g.ta ? g.M : g.K, g.ta ? g.K : g.M, g.a.ld, g.batch, g.a.batch_stride);
  plan.c = std::make_unique<LtLayout>(g.c.dt, g.N, g.M, g.c.ld, g.batch, g.c.batch_stride);

  LtPreference pref;
  const uint64_t ws = ctx.workspace_bytes;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c}};
  for (const auto& [attr, bytes] : alignments)
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.h, attr, &bytes, sizeof(bytes)));
  cublasLtMatmulHeuristicResult_t result;
  std::memset(&result, 0, sizeof(result));
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(ctx.lt, plan.desc->h, plan.a->h, plan.b->h, plan.c->h,
                                                           plan.c->h, pref.h, 1, &result, &found);
  plan.found = st == CUBLAS_STATUS_SUCCESS && found > 0;
  if (plan.found) plan.algo = result.algo;
  return plan;
}

void gemm(CudaBackend& be, const RowMajorGemm& g) {
  if (g.M == 0 || g.N == 0 || g.batch == 0) return;
  SL_CHECK(!g.bias || g.beta == 0.0f, "gemm: a bias needs beta 0");  // internal: only linear_forward has one
  SL_CHECK(g.M <= INT32_MAX && g.N <= INT32_MAX && g.K <= INT32_MAX && g.batch <= INT32_MAX,
           "matmul on %s: a dimension exceeds 2^31-1 (M %lld, N %lld, K %lld, batch %lld)", be.name(), (long long)g.M,
           (long long)g.N, (long long)g.K, (long long)g.batch);
  if (g.K == 0) {  // empty product: C = beta C (+ bias)
    launch_scale_rows(be, g, g.beta, g.bias);
    return;
  }
  GemmContext& ctx = be.gemm_context();
  if (g.bias && g.bias_stride != 1) {  // cuBLASLt's bias must be packed: rows start as the bias instead
    gemm_cublas(be, ctx, g, "strided bias");
    return;
  }

  GemmPlanKey key;
  key.M = g.M, key.N = g.N, key.K = g.K, key.batch = g.batch, key.ta = g.ta, key.tb = g.tb, key.bias = g.bias != nullptr;
  key.a = g.a.dt, key.b = g.b.dt, key.c = g.c.dt;
  key.lda = g.a.ld, key.ldb = g.b.ld, key.ldc = g.c.ld;
  key.stride_a = g.a.batch_stride, key.stride_b = g.b.batch_stride, key.stride_c = g.c.batch_stride;
  key.align_a = alignment_of(g.b), key.align_b = alignment_of(g.a), key.align_c = alignment_of(g.c);
  auto it = ctx.plans.find(key);
  if (it == ctx.plans.end()) it = ctx.plans.emplace(key, make_plan(ctx, g, key)).first;  // kept only once made
  const GemmPlan& plan = it->second;
  // No algorithm for this layout (odd alignments, bias type, ...): cuBLAS takes any layout, and a real
  // argument error shows there with its own status.
  if (!plan.found) {
    gemm_cublas(be, ctx, g, "no cuBLASLt algorithm");
    return;
  }
  if (g.bias)  // the one attribute that changes from call to call
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc->h, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias)));
  const cublasStatus_t run = cublasLtMatmul(ctx.lt, plan.desc->h, &g.alpha, g.b.ptr, plan.a->h, g.a.ptr, plan.b->h,
                                            &g.beta, g.c.ptr, plan.c->h, g.c.ptr, plan.c->h, &plan.algo, ctx.workspace,
                                            ctx.workspace_bytes, be.stream());
  if (run == CUBLAS_STATUS_NOT_SUPPORTED) {  // refused before launching anything
    gemm_cublas(be, ctx, g, "cuBLASLt refused the algorithm");
    return;
  }
  CUBLAS_CHECK(run);
}

// ---- operand checks ------------------------------------------------------------------------------------

void check_here(const CudaBackend& be, const Tensor& t, const char* op, const char* arg) {
  SL_CHECK(t.device.is_cuda() && t.device.index == be.index(), "%s: %s is on %s, expected %s", op, arg,
           t.device.name().c_str(), be.name());
}

// The inputs' dtype after the products' shared rule (op_checks: check_product_dtypes): f32 or bf16 here.
DType check_gemm_dtypes(const char* op, std::initializer_list<NamedTensor> inputs, std::initializer_list<NamedTensor> outputs) {
  const DType dt = check_product_dtypes(op, inputs, outputs);
  SL_CHECK(dt == DType::f32 || dt == DType::bf16, "%s: %s has dtype %s; the CUDA matmuls take f32 or bf16 inputs", op,
           inputs.begin()->name, dtype_name(dt));
  return dt;
}

GemmOperand operand(const MatrixView& m, DType dt) { return GemmOperand{m.ptr, dt, m.ld, 0}; }

// d_bias[c] += sum over rows of d_out[r, c] (f32 or bf16 d_out).
struct BiasGradTerm {
  static constexpr int kTerms = 1;
  const void* g;
  DType dt;
  int64_t ld;
  __device__ void operator()(int64_t r, int64_t c, double* v) const { v[0] = load_as_double(g, dt, r * ld + c); }
};

}  // namespace

// ---------------------------------------------------------------------------------------------------
// out[M,N] = in[M,K] . weight[N,K]^T (+ bias[N])
void CudaBackend::linear_forward(Tensor out, Tensor in, Tensor weight, Tensor bias) {
  const char* op = "linear_forward";
  for (const Tensor* t : {&out, &in, &weight}) check_here(*this, *t, op, t == &out ? "out" : t == &in ? "in" : "weight");
  MatrixView x = as_matrix(in, op, "in"), w = as_matrix(weight, op, "weight"), y = as_matrix(out, op, "out");
  SL_CHECK(weight.ndim == 2, "linear_forward: weight must be [N,K], got %s", weight.shape_str().c_str());
  const int64_t M = x.rows, K = x.cols, N = w.rows;
  SL_CHECK(w.cols == K, "linear_forward: in %s and weight %s disagree on K", in.shape_str().c_str(),
           weight.shape_str().c_str());
  SL_CHECK(y.rows == M && y.cols == N, "linear_forward: out %s, expected [%lld rows, %lld]", out.shape_str().c_str(),
           (long long)M, (long long)N);
  check_gemm_dtypes(op, {{in, "in"}, {weight, "weight"}}, {{out, "out"}});
  if (bias.defined()) {
    check_here(*this, bias, op, "bias");
    check_shape(bias, {N}, op, "bias");
    SL_CHECK(bias.dtype == out.dtype, "%s: bias has dtype %s, out %s: they must agree", op, dtype_name(bias.dtype),
             dtype_name(out.dtype));
  }
  DeviceGuard guard(index_);
  RowMajorGemm g;
  g.M = M;
  g.N = N;
  g.K = K;
  g.tb = true;
  g.a = operand(x, in.dtype);
  g.b = operand(w, weight.dtype);
  g.c = operand(y, out.dtype);
  if (bias.defined()) {
    g.bias = bias.data;
    g.bias_stride = N == 1 ? 1 : bias.stride[0];
  }
  gemm(*this, g);
}

// d_in[M,K]      = d_out[M,N] . weight[N,K]     (written)
// d_weight[N,K] += d_out[M,N]^T . in[M,K]        (accumulated: beta = 1)
// d_bias[N]     += sum over rows of d_out        (accumulated)
void CudaBackend::linear_backward(Tensor d_in, Tensor d_weight, Tensor d_bias, Tensor d_out, Tensor in,
                                  Tensor weight) {
  const char* op = "linear_backward";
  check_here(*this, d_out, op, "d_out");
  MatrixView dy = as_matrix(d_out, op, "d_out");
  const int64_t M = dy.rows, N = dy.cols;
  check_gemm_dtypes(op, {{d_out, "d_out"}, {in, "in"}, {weight, "weight"}},
                    {{d_in, "d_in"}, {d_weight, "d_weight"}, {d_bias, "d_bias"}});
  DeviceGuard guard(index_);
  if (d_in.defined()) {
    check_here(*this, d_in, op, "d_in");
    check_here(*this, weight, op, "weight");
    MatrixView w = as_matrix(weight, op, "weight"), dx = as_matrix(d_in, op, "d_in");
    SL_CHECK(weight.ndim == 2 && w.rows == N, "linear_backward: weight %s does not match d_out %s",
             weight.shape_str().c_str(), d_out.shape_str().c_str());
    SL_CHECK(dx.rows == M && dx.cols == w.cols, "linear_backward: d_in %s, expected [%lld rows, %lld]",
             d_in.shape_str().c_str(), (long long)M, (long long)w.cols);
    RowMajorGemm g;
    g.M = M;
    g.N = w.cols;
    g.K = N;
    g.a = operand(dy, d_out.dtype);
    g.b = operand(w, weight.dtype);
    g.c = operand(dx, d_in.dtype);
    gemm(*this, g);
  }
  if (d_weight.defined()) {
    check_here(*this, d_weight, op, "d_weight");
    check_here(*this, in, op, "in");
    MatrixView x = as_matrix(in, op, "in"), dw = as_matrix(d_weight, op, "d_weight");
    SL_CHECK(x.rows == M, "linear_backward: in %s and d_out %s differ in rows", in.shape_str().c_str(),
             d_out.shape_str().c_str());
    SL_CHECK(d_weight.ndim == 2 && dw.rows == N && dw.cols == x.cols,
             "linear_backward: d_weight %s, expected [%lld, %lld]", d_weight.shape_str().c_str(), (long long)N,
             (long long)x.cols);
    if (M > 0) {
      RowMajorGemm g;
      g.M = N;
      g.N = x.cols;
      g.K = M;
      g.ta = true;
      g.beta = 1.0f;
      g.a = operand(dy, d_out.dtype);
      g.b = operand(x, in.dtype);
      g.c = operand(dw, d_weight.dtype);
      gemm(*this, g);
    }
  }
  if (d_bias.defined()) {
    check_here(*this, d_bias, op, "d_bias");
    check_shape(d_bias, {N}, op, "d_bias");
    column_reduce(*this, BiasGradTerm{dy.ptr, d_out.dtype, dy.ld}, M, N, d_bias.data, d_bias.dtype, d_bias.stride[0]);
  }
}

// ---------------------------------------------------------------------------------------------------
// out[b] = alpha * op(a[b]) . op(b[b]) + beta * out[b]
//   2-D: a [M,K] ([K,M] if transpose_a), b [K,N] ([N,K] if transpose_b), out [M,N]
//   3-D: the same with a common leading batch dimension (any batch stride, rows strided, last dim contiguous)
void CudaBackend::matmul(Tensor out, Tensor a, Tensor b, bool transpose_a, bool transpose_b, double alpha,
                         double beta) {
  const char* op = "matmul";
  check_here(*this, out, op, "out");
  check_here(*this, a, op, "a");
  check_here(*this, b, op, "b");
  check_gemm_dtypes(op, {{a, "a"}, {b, "b"}}, {{out, "out"}});
  const MatmulGeometry shape = matmul_geometry(out, a, b, transpose_a, transpose_b);
  DeviceGuard guard(index_);
  RowMajorGemm g;
  g.M = shape.M;
  g.N = shape.N;
  g.K = shape.K;
  g.batch = shape.batch;
  g.ta = transpose_a;
  g.tb = transpose_b;
  g.alpha = float(alpha);
  g.beta = float(beta);
  g.a = GemmOperand{a.data, a.dtype, shape.ld_a, shape.stride_a};
  g.b = GemmOperand{b.data, b.dtype, shape.ld_b, shape.stride_b};
  g.c = GemmOperand{out.data, out.dtype, shape.ld_out, shape.stride_out};
  gemm(*this, g);
}

}  // namespace sinklab::cuda
