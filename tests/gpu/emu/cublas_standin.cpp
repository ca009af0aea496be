// The cuBLAS / cuBLASLt stand-in (cublas_standin.hpp): the documented column-major semantics on the host.
#include "cublas_standin.hpp"

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

struct cublasContext {
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
};
struct cublasLtContext {
  int unused = 0;
};
struct cublasLtMatrixLayoutOpaque_t {
  cudaDataType_t type = CUDA_R_32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t order = CUBLASLT_ORDER_COL;
  int32_t batch = 1;
  int64_t stride = 0;
};
struct cublasLtMatmulDescOpaque_t {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = CUDA_R_32F;
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  int32_t bias_type = -1;  // -1: the documented default, D's type
};
struct cublasLtMatmulPreferenceOpaque_t {
  uint64_t max_workspace = 0;
  uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D: the defaults the library assumes
};

namespace emu {
GemmCounts& gemm_counts() {
  static GemmCounts c;
  return c;
}
}  // namespace emu

namespace {

size_t type_size(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_32F: return 4;
    case CUDA_R_64F: return 8;
    case CUDA_R_16F:
    case CUDA_R_16BF: return 2;
  }
  return 0;
}

double load(const void* p, cudaDataType_t t, int64_t i) {
  switch (t) {
    case CUDA_R_32F: return double(static_cast<const float*>(p)[i]);
    case CUDA_R_64F: return static_cast<const double*>(p)[i];
    case CUDA_R_16BF: return double(__bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]));
    case CUDA_R_16F: break;
  }
  throw std::runtime_error("cublas stand-in: unsupported data type");
}

void store(void* p, cudaDataType_t t, int64_t i, double v) {
  switch (t) {
    case CUDA_R_32F: static_cast<float*>(p)[i] = float(v); return;
    case CUDA_R_64F: static_cast<double*>(p)[i] = v; return;
    case CUDA_R_16BF: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(float(v)); return;
    case CUDA_R_16F: break;
  }
  throw std::runtime_error("cublas stand-in: unsupported data type");
}

// A column-major operand: element (r, c) of batch b at ptr + b * stride + c * ld + r.
struct Operand {
  const void* ptr;
  cudaDataType_t type;
  int64_t rows, cols, ld, stride;
};

// The operand's extent (every element a call may read or write) lies inside one device allocation.
void check_extent(const Operand& o, int64_t batch, const char* what) {
  if (o.rows == 0 || o.cols == 0 || batch == 0) return;
  const int64_t last = (batch - 1) * o.stride + (o.cols - 1) * o.ld + (o.rows - 1);
  emu::require_device_range(o.ptr, size_t(last + 1) * type_size(o.type), what);
}

bool aligned(const void* p, int64_t ld, int64_t stride, int64_t batch, cudaDataType_t t, uint32_t claim) {
  if (claim <= 1) return true;
  const uint64_t es = type_size(t);
  uint64_t bits = uint64_t(reinterpret_cast<uintptr_t>(p)) | (uint64_t(ld) * es);
  if (batch > 1) bits |= uint64_t(stride) * es;
  return bits % claim == 0;
}

// D[b] = alpha op(A[b]) op(B[b]) + beta C[b] (+ bias[r]); op(A) m x k, op(B) k x n; sums in double.
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const Operand& A, const Operand& B,
          double beta, const Operand& C, const Operand& D, int64_t batch, const void* bias, cudaDataType_t bias_type) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < m; ++i) {
        double acc = 0.0;
        for (int64_t p = 0; p < k; ++p) {
          const int64_t ia = b * A.stride + (ta ? i * A.ld + p : p * A.ld + i);
          const int64_t ib = b * B.stride + (tb ? p * B.ld + j : j * B.ld + p);
          acc += load(A.ptr, A.type, ia) * load(B.ptr, B.type, ib);
        }
        double v = alpha * acc;
        if (beta != 0.0) v += beta * load(C.ptr, C.type, b * C.stride + j * C.ld + i);
        if (bias) v += load(bias, bias_type, i);
        store(const_cast<void*>(D.ptr), D.type, b * D.stride + j * D.ld + i, v);
      }
}

bool float_types_ok(cudaDataType_t a, cudaDataType_t b, cudaDataType_t c) {
  if (a != b) return false;
  if (a == CUDA_R_32F) return c == CUDA_R_32F;
  if (a == CUDA_R_16BF) return c == CUDA_R_32F || c == CUDA_R_16BF;
  return false;
}

template <class T>
cublasStatus_t read_attr(T* dst, const void* buf, size_t bytes) {
  if (bytes != sizeof(T) || !buf) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(dst, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

// The problem an Lt call describes, checked.
struct LtProblem {
  bool ta = false, tb = false;
  int64_t m = 0, n = 0, k = 0, batch = 1;
};
cublasStatus_t lt_problem(const cublasLtMatmulDescOpaque_t* d, const cublasLtMatrixLayoutOpaque_t* a,
                          const cublasLtMatrixLayoutOpaque_t* b, const cublasLtMatrixLayoutOpaque_t* c,
                          const cublasLtMatrixLayoutOpaque_t* dd, LtProblem* p) {
  if (!d || !a || !b || !c || !dd) return CUBLAS_STATUS_INVALID_VALUE;
  if (d->transa == CUBLAS_OP_C || d->transb == CUBLAS_OP_C) return CUBLAS_STATUS_NOT_SUPPORTED;
  for (const auto* l : {a, b, c, dd}) {
    if (l->order != CUBLASLT_ORDER_COL) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (l->ld < std::max<int64_t>(1, int64_t(l->rows))) return CUBLAS_STATUS_INVALID_VALUE;
  }
  p->ta = d->transa == CUBLAS_OP_T;
  p->tb = d->transb == CUBLAS_OP_T;
  p->m = int64_t(p->ta ? a->cols : a->rows);
  p->k = int64_t(p->ta ? a->rows : a->cols);
  const int64_t kb = int64_t(p->tb ? b->cols : b->rows);
  p->n = int64_t(p->tb ? b->rows : b->cols);
  if (kb != p->k || int64_t(c->rows) != p->m || int64_t(c->cols) != p->n || dd->rows != c->rows || dd->cols != c->cols ||
      dd->ld != c->ld || dd->type != c->type)
    return CUBLAS_STATUS_INVALID_VALUE;
  p->batch = c->batch;
  if (a->batch != p->batch || b->batch != p->batch || dd->batch != p->batch) return CUBLAS_STATUS_INVALID_VALUE;
  if (d->compute != CUBLAS_COMPUTE_32F || d->scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (!float_types_ok(a->type, b->type, c->type)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (d->epilogue != CUBLASLT_EPILOGUE_DEFAULT && d->epilogue != CUBLASLT_EPILOGUE_BIAS) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (d->epilogue == CUBLASLT_EPILOGUE_BIAS) {
    const int32_t bt = d->bias_type < 0 ? int32_t(c->type) : d->bias_type;
    if (bt != int32_t(c->type) && bt != int32_t(CUDA_R_32F)) return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

const char* cublasGetStatusString(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid value was used as an argument";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    default: return "cuBLAS stand-in error";
  }
}
const char* cublasGetStatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_(other)";
  }
}

cublasStatus_t cublasCreate(cublasHandle_t* h) {
  *h = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void* workspace, size_t bytes) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  emu::require_device_range(workspace, bytes, "cublasSetWorkspace");
  h->workspace = workspace;
  h->workspace_bytes = bytes;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m,
                                          int n, int k, const void* alpha, const void* A, cudaDataType_t Atype, int lda,
                                          long long strideA, const void* B, cudaDataType_t Btype, int ldb,
                                          long long strideB, const void* beta, void* C, cudaDataType_t Ctype, int ldc,
                                          long long strideC, int batchCount, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  // The documented INVALID_VALUE conditions.
  if (m < 0 || n < 0 || k < 0 || batchCount < 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (transa == CUBLAS_OP_C || transb == CUBLAS_OP_C) return CUBLAS_STATUS_NOT_SUPPORTED;
  const bool ta = transa == CUBLAS_OP_T, tb = transb == CUBLAS_OP_T;
  if (lda < std::max(1, ta ? k : m) || ldb < std::max(1, tb ? n : k) || ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (computeType != CUBLAS_COMPUTE_32F || !float_types_ok(Atype, Btype, Ctype)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (h->math != CUBLAS_DEFAULT_MATH) return CUBLAS_STATUS_NOT_SUPPORTED;  // sinklab never asks for TF32
  if (m == 0 || n == 0 || batchCount == 0) return CUBLAS_STATUS_SUCCESS;
  const Operand a{A, Atype, ta ? k : m, ta ? m : k, lda, strideA};
  const Operand b{B, Btype, tb ? n : k, tb ? k : n, ldb, strideB};
  const Operand c{C, Ctype, m, n, ldc, strideC};
  check_extent(a, batchCount, "cublasGemmStridedBatchedEx A");
  check_extent(b, batchCount, "cublasGemmStridedBatchedEx B");
  check_extent(c, batchCount, "cublasGemmStridedBatchedEx C");
  emu::count_library_call();
  ++emu::gemm_counts().fallback;
  if (emu::count_only()) return CUBLAS_STATUS_SUCCESS;
  const double al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  gemm(ta, tb, m, n, k, al, a, b, be, c, c, batchCount, nullptr, CUDA_R_32F);
  return CUBLAS_STATUS_SUCCESS;
}

size_t cublasLtGetVersion() { return 130000; }

cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  *h = new cublasLtContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType_t type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
  if (type_size(type) == 0) return CUBLAS_STATUS_INVALID_VALUE;
  *l = new cublasLtMatrixLayoutOpaque_t;
  (*l)->type = type;
  (*l)->rows = rows;
  (*l)->cols = cols;
  (*l)->ld = ld;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t bytes) {
  if (!l) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return read_attr(&l->batch, buf, bytes);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return read_attr(&l->stride, buf, bytes);
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return read_attr(&l->order, buf, bytes);
    case CUBLASLT_MATRIX_LAYOUT_LD: return read_attr(&l->ld, buf, bytes);
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return read_attr(&l->rows, buf, bytes);
    case CUBLASLT_MATRIX_LAYOUT_COLS: return read_attr(&l->cols, buf, bytes);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute, cudaDataType_t scale) {
  *d = new cublasLtMatmulDescOpaque_t;
  (*d)->compute = compute;
  (*d)->scale = scale;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t bytes) {
  if (!d) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return read_attr(&d->transa, buf, bytes);
    case CUBLASLT_MATMUL_DESC_TRANSB: return read_attr(&d->transb, buf, bytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return read_attr(&d->epilogue, buf, bytes);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return read_attr(&d->bias, buf, bytes);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return read_attr(&d->bias_type, buf, bytes);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  *p = new cublasLtMatmulPreferenceOpaque_t;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t bytes) {
  if (!p) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return read_attr(&p->max_workspace, buf, bytes);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return read_attr(&p->align[0], buf, bytes);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return read_attr(&p->align[1], buf, bytes);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return read_attr(&p->align[2], buf, bytes);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return read_attr(&p->align[3], buf, bytes);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
  if (!h || !pref || requested < 1 || !results || !returned) return CUBLAS_STATUS_INVALID_VALUE;
  *returned = 0;
  LtProblem p;
  const cublasStatus_t st = lt_problem(desc, a, b, c, d, &p);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  // The stand-in's model of what has no kernel: alignments under 16 bytes, bf16 with an odd ld.
  for (int i = 0; i < 3; ++i)
    if (pref->align[i] < 16) return CUBLAS_STATUS_NOT_SUPPORTED;
  for (const auto* l : {a, b, c})
    if (l->type == CUDA_R_16BF && l->ld % 2 != 0) return CUBLAS_STATUS_NOT_SUPPORTED;
  std::memset(&results[0], 0, sizeof results[0]);
  for (int i = 0; i < 4; ++i) results[0].algo.data[i] = pref->align[i];  // what the algorithm may assume
  results[0].algo.data[4] = 0x5eed;                                        // marks a stand-in algorithm
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t) {
  if (!h || !alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
  LtProblem p;
  const cublasStatus_t st = lt_problem(desc, Adesc, Bdesc, Cdesc, Ddesc, &p);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (!algo || algo->data[4] != 0x5eed) return CUBLAS_STATUS_INVALID_VALUE;
  if (workspace_bytes) emu::require_device_range(workspace, workspace_bytes, "cublasLtMatmul workspace");
  // The alignments the algorithm was chosen for must hold for what is passed now.
  const struct {
    const void* ptr;
    const cublasLtMatrixLayoutOpaque_t* l;
    const char* name;
  } ops[4] = {{A, Adesc, "A"}, {B, Bdesc, "B"}, {C, Cdesc, "C"}, {D, Ddesc, "D"}};
  for (int i = 0; i < 4; ++i)
    if (!aligned(ops[i].ptr, ops[i].l->ld, ops[i].l->stride, ops[i].l->batch, ops[i].l->type,
                 uint32_t(algo->data[i]))) {
      std::fprintf(stderr, "cublasLtMatmul stand-in: %s is not %u-byte aligned as the preference claimed\n",
                   ops[i].name, unsigned(algo->data[i]));
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  if (p.m == 0 || p.n == 0 || p.batch == 0) return CUBLAS_STATUS_SUCCESS;
  const Operand a{A, Adesc->type, int64_t(Adesc->rows), int64_t(Adesc->cols), Adesc->ld, Adesc->stride};
  const Operand b{B, Bdesc->type, int64_t(Bdesc->rows), int64_t(Bdesc->cols), Bdesc->ld, Bdesc->stride};
  const Operand c{C, Cdesc->type, int64_t(Cdesc->rows), int64_t(Cdesc->cols), Cdesc->ld, Cdesc->stride};
  const Operand d{D, Ddesc->type, int64_t(Ddesc->rows), int64_t(Ddesc->cols), Ddesc->ld, Ddesc->stride};
  check_extent(a, p.batch, "cublasLtMatmul A");
  check_extent(b, p.batch, "cublasLtMatmul B");
  const double al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  if (be != 0.0) check_extent(c, p.batch, "cublasLtMatmul C");
  check_extent(d, p.batch, "cublasLtMatmul D");
  const void* bias = nullptr;
  cudaDataType_t bias_type = Ddesc->type;
  if (desc->epilogue == CUBLASLT_EPILOGUE_BIAS) {
    if (!desc->bias) return CUBLAS_STATUS_INVALID_VALUE;
    bias = desc->bias;
    if (desc->bias_type >= 0) bias_type = cudaDataType_t(desc->bias_type);
    emu::require_device_range(bias, size_t(p.m) * type_size(bias_type), "cublasLtMatmul bias (rows of D, packed)");
  }
  emu::count_library_call();
  ++emu::gemm_counts().lt;
  if (emu::count_only()) return CUBLAS_STATUS_SUCCESS;
  gemm(p.ta, p.tb, p.m, p.n, p.k, al, a, b, be, c, d, p.batch, bias, bias_type);
  return CUBLAS_STATUS_SUCCESS;
}
