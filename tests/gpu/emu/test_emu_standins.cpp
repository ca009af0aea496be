// Checks of the CPU emulation itself (tests/gpu/emu), so that a pass of the emulated gpu tests means what
// tests/cpp/gpu/README.md says: the device model's barriers, shuffles, shared-memory poisoning, launch
// limits and deadlock detection; the library stand-ins against hand-written cases of the libraries'
// documented semantics (column-major cuBLASLt / cuBLAS layouts with leading dimensions, transposes,
// strided batches and the bias epilogue; CUB's stable pair sort; the NCCL and cuDNN argument checks) --
// independently of sinklab's kernels, which the other emulated tests check against the CPU backend.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "cub/device/device_radix_sort.cuh"
#include "cublas_standin.hpp"
#include "cuda_emu.hpp"
#include "cudnn_standin.hpp"
#include "nccl_standin.hpp"

namespace {

// Device memory holding a copy of host values.
template <class T>
T* device_copy(const std::vector<T>& host) {
  T* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, sizeof(T) * host.size()), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, host.data(), sizeof(T) * host.size(), cudaMemcpyHostToDevice), cudaSuccess);
  return p;
}
template <class T>
std::vector<T> host_copy(const T* p, size_t n) {
  std::vector<T> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), p, sizeof(T) * n, cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

// ---- the device model ----------------------------------------------------------------------------------

void rotate_kernel(float* out) {  // out[t] = value written by thread t + 1, read after a barrier
  static float sh[64];
  emu::shared_decl(&sh, sizeof sh);
  sh[threadIdx.x] = float(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = sh[(threadIdx.x + 1) % blockDim.x];
}
void rotate_no_barrier_kernel(float* out) {
  static float sh[64];
  emu::shared_decl(&sh, sizeof sh);
  sh[threadIdx.x] = float(threadIdx.x);
  out[threadIdx.x] = sh[(threadIdx.x + 1) % blockDim.x];
}

TEST(EmuDevice, BarriersOrderSharedMemoryAndAMissingOneReadsPoison) {
  float* out = nullptr;
  ASSERT_EQ(cudaMalloc(&out, 64 * sizeof(float)), cudaSuccess);
  emu::launch("rotate", nullptr, [&] { rotate_kernel(out); }, 2, 64);
  std::vector<float> h = host_copy(out, 64);
  for (int t = 0; t < 64; ++t) EXPECT_EQ(h[size_t(t)], float((t + 1) % 64));
  emu::launch("rotate_no_barrier", nullptr, [&] { rotate_no_barrier_kernel(out); }, 2, 64);
  h = host_copy(out, 64);
  EXPECT_TRUE(std::isnan(h[0])) << "thread 0 read thread 1's slot before it was written: poison, not " << h[0];
  EXPECT_EQ(h[63], 0.0f);  // thread 0 had written by then
  cudaFree(out);
}

void shuffle_kernel(float* out) {
  float v = float(threadIdx.x);
  float x = __shfl_xor_sync(0xffffffffu, v, 1);
  float d = __shfl_down_sync(0xffffffffu, v, 2u);
  double sum = double(v);
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  out[threadIdx.x * 3 + 0] = x;
  out[threadIdx.x * 3 + 1] = d;
  out[threadIdx.x * 3 + 2] = float(sum);
}

TEST(EmuDevice, ShufflesAreWarpLockstepWithinPartialWarps) {
  const int n = 40;  // a full warp and a partial one of 8 lanes
  float* out = nullptr;
  ASSERT_EQ(cudaMalloc(&out, 3 * n * sizeof(float)), cudaSuccess);
  emu::launch("shuffle", nullptr, [&] { shuffle_kernel(out); }, 1, n);
  std::vector<float> h = host_copy(out, 3 * n);
  for (int t = 0; t < n; ++t) {
    const int lane = t % 32, base = t / 32 * 32, width = t < 32 ? 32 : 8;
    EXPECT_EQ(h[size_t(3 * t)], float(base + (lane ^ 1))) << t;
    EXPECT_EQ(h[size_t(3 * t + 1)], float(lane + 2 < width ? t + 2 : t)) << t;  // no such lane: own value
    if (t < 32) {
      EXPECT_EQ(h[size_t(3 * t + 2)], float(31 * 32 / 2)) << t;
    }
  }
  cudaFree(out);
}

void early_exit_kernel(int* out) {
  if (threadIdx.x >= 3) return;  // exited threads no longer count at the barrier (sm_70+)
  out[threadIdx.x] = 1;
  __syncthreads();
  const int next = out[(threadIdx.x + 1) % 3];
  __syncthreads();
  out[threadIdx.x] += next;
}
void deadlock_kernel() {
  if (threadIdx.x < 16) {
    __syncwarp();  // waits for lanes 16..31, which wait at the block barrier for these
  } else {
    __syncthreads();
  }
}

TEST(EmuDevice, ExitedThreadsLeaveBarriersAndDivergentBarriersDeadlock) {
  int* out = nullptr;
  ASSERT_EQ(cudaMalloc(&out, 3 * sizeof(int)), cudaSuccess);
  emu::launch("early_exit", nullptr, [&] { early_exit_kernel(out); }, 1, 64);
  EXPECT_EQ(host_copy(out, 3), (std::vector<int>{2, 2, 2}));
  EXPECT_THROW(emu::launch("deadlock", nullptr, [&] { deadlock_kernel(); }, 1, 32), std::runtime_error);
  cudaFree(out);
}

void big_smem_kernel() { emu::dyn_smem<char>()[0] = 1; }

TEST(EmuDevice, LaunchLimitsAreTheDevicesAndDynamicSharedMemoryIsPoisoned) {
  (void)cudaGetLastError();
  emu::launch("too_many_threads", nullptr, [] {}, 1, 2048);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  emu::launch("empty_grid", nullptr, [] {}, 0, 32);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  const void* fn = emu::fn_addr(&big_smem_kernel);
  emu::launch("big_smem", fn, [] { big_smem_kernel(); }, 1, 32, size_t(64) << 10);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue) << "64 KiB of dynamic shared memory without the opt-in";
  ASSERT_EQ(cudaFuncSetAttribute(&big_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10), cudaSuccess);
  emu::launch("big_smem", fn, [] { big_smem_kernel(); }, 1, 32, size_t(64) << 10);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  float first = 0.0f;
  emu::launch("read_smem", nullptr, [&] { if (threadIdx.x == 0) first = emu::dyn_smem<float>()[1]; }, 1, 1, 64);
  EXPECT_TRUE(std::isnan(first));
}

TEST(EmuDevice, CopiesCheckTheirKindsAndRanges) {
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 8 * sizeof(float)), cudaSuccess);
  std::vector<float> h(16, 1.0f);
  EXPECT_THROW(cudaMemcpy(d, h.data(), 16 * sizeof(float), cudaMemcpyHostToDevice), std::runtime_error);
  EXPECT_THROW(cudaMemcpy(h.data(), d, 4 * sizeof(float), cudaMemcpyHostToDevice), std::runtime_error);
  EXPECT_EQ(cudaMemcpy(d, h.data(), 8 * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  cudaFree(d);
}

// ---- cuBLASLt / cuBLAS ---------------------------------------------------------------------------------

// Column-major element (r, c) of an ld-strided matrix.
double cm(const std::vector<float>& m, int64_t ld, int64_t r, int64_t c) { return m[size_t(c * ld + r)]; }

struct Lt {
  cublasLtHandle_t h = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  Lt() {
    cublasLtCreate(&h);
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatmulPreferenceCreate(&pref);
  }
  ~Lt() {
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(h);
  }
  cublasStatus_t run(cublasLtMatrixLayout_t a, const void* A, cublasLtMatrixLayout_t b, const void* B,
                     cublasLtMatrixLayout_t c, void* C, float beta = 0.0f) {
    cublasLtMatmulHeuristicResult_t r;
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, desc, a, b, c, c, pref, 1, &r, &found);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (found == 0) return CUBLAS_STATUS_NOT_SUPPORTED;
    const float alpha = 1.0f;
    return cublasLtMatmul(h, desc, &alpha, A, a, B, b, &beta, C, c, C, c, &r.algo, nullptr, 0, nullptr);
  }
};

TEST(EmuCublasLt, ColumnMajorLayoutsWithLeadingDimensionsTransposesAndBias) {
  // A: 2 x 3 column-major with ld 4 (rows 2, 3 of each column are padding); B: 3 x 2 with ld 4;
  // D = A B, 2 x 2 with ld 4; then B given transposed, and the bias epilogue. (ld 4: 16-byte aligned
  // columns, which the alignment preference below claims.)
  const std::vector<float> A = {1, 2, 99, 99, 3, 4, 99, 99, 5, 6, 99, 99};
  const std::vector<float> B = {1, 0, 2, 99, 3, 1, 0, 99};
  float *dA = device_copy(A), *dB = device_copy(B), *dD = device_copy(std::vector<float>(8, NAN));
  Lt lt;
  uint32_t align = 16;
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    ASSERT_EQ(cublasLtMatmulPreferenceSetAttribute(lt.pref, attr, &align, sizeof align), CUBLAS_STATUS_SUCCESS);
  cublasLtMatrixLayout_t la, lb, ld;
  cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, 2, 3, 4);
  cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, 3, 2, 4);
  cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, 2, 2, 4);
  ASSERT_EQ(lt.run(la, dA, lb, dB, ld, dD), CUBLAS_STATUS_SUCCESS);
  std::vector<float> D = host_copy(dD, 8);
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 2; ++c) {
      double want = 0;
      for (int k = 0; k < 3; ++k) want += cm(A, 4, r, k) * cm(B, 4, k, c);
      EXPECT_EQ(D[size_t(c * 4 + r)], float(want)) << r << "," << c;
    }
  EXPECT_TRUE(std::isnan(D[2]) && std::isnan(D[3])) << "D's padding rows untouched";
  // The same product with B given transposed: Bt 2 x 3 (ld 4) read with TRANSB = T.
  const std::vector<float> Bt = {1, 3, 99, 99, 0, 1, 99, 99, 2, 0, 99, 99};
  float* dBt = device_copy(Bt);
  cublasLtMatrixLayout_t lbt;
  cublasLtMatrixLayoutCreate(&lbt, CUDA_R_32F, 2, 3, 4);
  const int32_t t = CUBLAS_OP_T;
  ASSERT_EQ(cublasLtMatmulDescSetAttribute(lt.desc, CUBLASLT_MATMUL_DESC_TRANSB, &t, sizeof t), CUBLAS_STATUS_SUCCESS);
  float* dD2 = device_copy(std::vector<float>(8, NAN));
  ASSERT_EQ(lt.run(la, dA, lbt, dBt, ld, dD2), CUBLAS_STATUS_SUCCESS);
  const std::vector<float> D2 = host_copy(dD2, 8);
  for (int i : {0, 1, 4, 5}) EXPECT_EQ(D2[size_t(i)], D[size_t(i)]) << i;
  // Bias epilogue: bias[r] added to every column (length = rows of D).
  float* dbias = device_copy(std::vector<float>{10, 20});
  const uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
  ASSERT_EQ(cublasLtMatmulDescSetAttribute(lt.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatmulDescSetAttribute(lt.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof dbias),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(lt.run(la, dA, lbt, dBt, ld, dD2), CUBLAS_STATUS_SUCCESS);
  const std::vector<float> Db = host_copy(dD2, 8);
  for (int i : {0, 1, 4, 5}) EXPECT_EQ(Db[size_t(i)], D[size_t(i)] + (i % 2 == 0 ? 10.0f : 20.0f)) << i;
  // Errors: ld < rows; an attribute of the wrong size; k disagreeing; a leading dimension that reads past
  // the allocation.
  cublasLtMatrixLayout_t bad;
  cublasLtMatrixLayoutCreate(&bad, CUDA_R_32F, 2, 3, 1);
  EXPECT_EQ(lt.run(bad, dA, lbt, dBt, ld, dD2), CUBLAS_STATUS_INVALID_VALUE);
  const int64_t t64 = CUBLAS_OP_T;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(lt.desc, CUBLASLT_MATMUL_DESC_TRANSA, &t64, sizeof t64),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(lt.run(la, dA, lb, dB, ld, dD2), CUBLAS_STATUS_INVALID_VALUE) << "op(B) = B^T is 2 x 3: k 2 != 3";
  cublasLtMatrixLayout_t wide;
  cublasLtMatrixLayoutCreate(&wide, CUDA_R_32F, 2, 3, 8);
  EXPECT_THROW(lt.run(wide, dA, lbt, dBt, ld, dD2), std::runtime_error) << "ld 8 reads past A's 12 floats";
  const int32_t n = CUBLAS_OP_N;
  ASSERT_EQ(cublasLtMatmulDescSetAttribute(lt.desc, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof n), CUBLAS_STATUS_SUCCESS);
  for (auto l : {la, lb, ld, lbt, bad, wide}) cublasLtMatrixLayoutDestroy(l);
  for (float* p : {dA, dB, dD, dBt, dD2, dbias}) cudaFree(p);
}

TEST(EmuCublasLt, StridedBatchesAndTheCublasFallback) {
  // Two batches of A (2 x 2, ld 2, stride 5) times B (2 x 1, ld 2, stride 2): D (2 x 1, ld 2, stride 3).
  const std::vector<float> A = {1, 2, 3, 4, 0, 5, 6, 7, 8, 0};
  const std::vector<float> B = {1, 1, 2, -1};
  float *dA = device_copy(A), *dB = device_copy(B), *dD = device_copy(std::vector<float>(6, NAN));
  Lt lt;
  cublasLtMatrixLayout_t la, lb, ld;
  cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, 2, 2, 2);
  cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, 2, 1, 2);
  cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, 2, 1, 2);
  const int32_t batch = 2;
  const int64_t sa = 5, sb = 2, sd = 3;
  for (auto [l, s] : {std::pair{la, sa}, std::pair{lb, sb}, std::pair{ld, sd}}) {
    cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch);
    cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s, sizeof s);
  }
  // The default preference claims 256-byte alignment, which a stride of 5 floats breaks: the heuristic
  // has an algorithm, the matmul refuses the pointers it was not chosen for.
  cublasLtMatmulHeuristicResult_t r;
  int found = 0;
  ASSERT_EQ(cublasLtMatmulAlgoGetHeuristic(lt.h, lt.desc, la, lb, ld, ld, lt.pref, 1, &r, &found), CUBLAS_STATUS_SUCCESS);
  const float one = 1.0f, zero = 0.0f;
  EXPECT_EQ(cublasLtMatmul(lt.h, lt.desc, &one, dA, la, dB, lb, &zero, dD, ld, dD, ld, &r.algo, nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  uint32_t align = 4;
  cublasLtMatmulPreferenceSetAttribute(lt.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align, sizeof align);
  EXPECT_EQ(lt.run(la, dA, lb, dB, ld, dD), CUBLAS_STATUS_NOT_SUPPORTED) << "the stand-in's heuristic: < 16 bytes";
  // cuBLAS (column-major, the same semantics) takes it.
  cublasHandle_t h;
  cublasCreate(&h);
  ASSERT_EQ(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 1, 2, &one, dA, CUDA_R_32F, 2, sa, dB, CUDA_R_32F,
                                       2, sb, &zero, dD, CUDA_R_32F, 2, sd, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  const std::vector<float> D = host_copy(dD, 6);
  EXPECT_EQ(D[0], 1 * 1 + 3 * 1.0f);
  EXPECT_EQ(D[1], 2 * 1 + 4 * 1.0f);
  EXPECT_TRUE(std::isnan(D[2])) << "between the batches: untouched";
  EXPECT_EQ(D[3], 5 * 2 + 7 * -1.0f);
  EXPECT_EQ(D[4], 6 * 2 + 8 * -1.0f);
  EXPECT_EQ(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 1, 2, &one, dA, CUDA_R_32F, 1, sa, dB,
                                       CUDA_R_32F, 2, sb, &zero, dD, CUDA_R_32F, 2, sd, 2, CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_INVALID_VALUE)
      << "lda 1 < m 2";
  cublasDestroy(h);
  for (auto l : {la, lb, ld}) cublasLtMatrixLayoutDestroy(l);
  for (float* p : {dA, dB, dD}) cudaFree(p);
}

// ---- CUB, NCCL, cuDNN ------------------------------------------------------------------------------------

TEST(EmuCub, SortPairsIsStableOverTheKeyBits) {
  const std::vector<uint32_t> keys = {3, 1, 3, 0, 1, 0x103};  // bits [0, 8): 0x103 sorts as 3
  const std::vector<uint32_t> vals = {0, 1, 2, 3, 4, 5};
  uint32_t *dk = device_copy(keys), *dv = device_copy(vals), *ok = device_copy(keys), *ov = device_copy(vals);
  size_t temp_bytes = 0;
  ASSERT_EQ(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, dk, ok, dv, ov, 6, 0, 8), cudaSuccess);
  void* temp = nullptr;
  ASSERT_EQ(cudaMalloc(&temp, temp_bytes), cudaSuccess);
  ASSERT_EQ(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, dk, ok, dv, ov, 6, 0, 8), cudaSuccess);
  EXPECT_EQ(host_copy(ov, 6), (std::vector<uint32_t>{3, 1, 4, 0, 2, 5}));
  EXPECT_EQ(host_copy(ok, 6), (std::vector<uint32_t>{0, 1, 1, 3, 3, 0x103}));
  EXPECT_EQ(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, dk, ok, dv, ov, 7, 0, 8), cudaErrorInvalidValue)
      << "temporary storage sized for 6 items";
  size_t big = temp_bytes * 2;
  void* temp2 = nullptr;
  ASSERT_EQ(cudaMalloc(&temp2, big), cudaSuccess);
  EXPECT_THROW(cub::DeviceRadixSort::SortPairs(temp2, big, dk, ok, dv, ov, 7, 0, 8), std::runtime_error)
      << "7 items read past the 6 keys";
  cudaFree(temp2);
  for (void* p : {(void*)dk, (void*)dv, (void*)ok, (void*)ov, temp}) cudaFree(p);
}

TEST(EmuNccl, OneRankCopiesAndChecksItsRanges) {
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  float* d = device_copy(std::vector<float>{1, 2, 3, 4});
  EXPECT_EQ(ncclAllReduce(d, d, 4, ncclFloat32, ncclSum, comm, nullptr), ncclSuccess);
  EXPECT_EQ(host_copy(d, 4), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_THROW(ncclAllReduce(d + 1, d + 1, 4, ncclFloat32, ncclSum, comm, nullptr), std::runtime_error);
  ncclGroupStart();
  EXPECT_EQ(ncclBroadcast(d, d + 2, 2, ncclFloat32, 0, comm, nullptr), ncclSuccess);
  EXPECT_EQ(host_copy(d, 4), (std::vector<float>{1, 2, 3, 4})) << "queued until ncclGroupEnd";
  ncclGroupEnd();
  EXPECT_EQ(host_copy(d, 4), (std::vector<float>{1, 2, 1, 2}));
  ncclCommDestroy(comm);
  cudaFree(d);
}

TEST(EmuCudnn, OneKeyAttentionIsItsValueAndTheValidationIsTheFrontends) {
  namespace fe = cudnn_frontend;
  // B = H = T = 1, d = 8: one key, so O = V and Stats = the scaled score.
  std::vector<__nv_bfloat16> q(8), k(8), v(8);
  for (int e = 0; e < 8; ++e) {
    q[size_t(e)] = __float2bfloat16(0.5f);
    k[size_t(e)] = __float2bfloat16(1.0f);
    v[size_t(e)] = __float2bfloat16(float(e));
  }
  auto *dq = device_copy(q), *dk = device_copy(k), *dv = device_copy(v), *dout = device_copy(q);
  float* dstats = device_copy(std::vector<float>{NAN});
  void* ws = nullptr;
  cudaMalloc(&ws, 4096);
  cudnnHandle_t handle;
  cudnnCreate(&handle);
  auto make = [](int64_t d) {
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16);
    auto t = [&](const char* n, int64_t uid) {
      return g->tensor(fe::graph::Tensor_attributes().set_name(n).set_uid(uid).set_dim({1, 1, 1, d}).set_stride({d, d, d, 1}));
    };
    auto Q = t("Q", 1), K = t("K", 2), V = t("V", 3);
    fe::graph::SDPA_attributes a;
    a.set_generate_stats(true).set_attn_scale(0.25f).set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT);
    a.set_diagonal_band_right_bound(0);
    auto [O, S] = g->sdpa(Q, K, V, a);
    O->set_uid(4).set_dim({1, 1, 1, d}).set_stride({d, d, d, 1});
    S->set_uid(5).set_dim({1, 1, 1, 1}).set_stride({1, 1, 1, 1}).set_data_type(fe::DataType_t::FLOAT);
    return g;
  };
  auto g = make(8);
  ASSERT_TRUE(g->validate().is_good()) << g->validate().get_message();
  ASSERT_TRUE(g->build_operation_graph(handle).is_good());
  ASSERT_TRUE(g->build_plans(handle).is_good());
  std::unordered_map<int64_t, void*> pack = {{1, dq}, {2, dk}, {3, dv}, {4, dout}, {5, dstats}};
  ASSERT_TRUE(g->execute(handle, pack, ws).is_good());
  const std::vector<__nv_bfloat16> o = host_copy(dout, 8);
  for (int e = 0; e < 8; ++e) EXPECT_EQ(__bfloat162float(o[size_t(e)]), float(e));
  EXPECT_FLOAT_EQ(host_copy(dstats, 1)[0], 0.25f * 8 * 0.5f);
  EXPECT_TRUE(make(12)->validate().is_bad()) << "head dim 12 is not a multiple of 8";
  cudnnDestroy(handle);
  for (void* p : {(void*)dq, (void*)dk, (void*)dv, (void*)dout, (void*)dstats, ws}) cudaFree(p);
}

}  // namespace
