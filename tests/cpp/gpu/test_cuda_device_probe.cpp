// The device probe on a CUDA device (sinklab-gpuinfo, a CUDA run's results): the facts the runtime and
// libraries give, and the measurements through the op API. Under the CPU emulation (tests/gpu/emulate.sh)
// the facts are the stand-ins' and the speeds are the emulation's, so only their form is checked there;
// on a real GPU the speeds must be those of a data-centre GPU of compute capability 8 or newer.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "backend/device_probe.hpp"
#include "gpu_test_util.hpp"

namespace sinklab {
namespace {

bool emulated(const DeviceFacts& f) { return f.name.rfind("sinklab CPU emulation", 0) == 0; }

TEST(CudaDeviceProbe, FactsOfDeviceZero) {
  SKIP_WITHOUT_CUDA();
  const DeviceFacts f = cuda_device_facts(0);
  EXPECT_FALSE(f.name.empty());
  EXPECT_GE(f.compute_major, 8) << "sinklab's kernels are built for sm_80 and sm_90";
  EXPECT_GT(f.multiprocessors, 0);
  EXPECT_GT(f.memory_total, int64_t(1) << 30);
  EXPECT_GT(f.memory_free, 0);
  EXPECT_LE(f.memory_free, f.memory_total);
  EXPECT_GE(f.driver_version, f.runtime_version) << "a driver older than the runtime cannot run it";
  EXPECT_GT(f.cublaslt_version, 0);
  EXPECT_GE(f.cudnn_version, 90000) << "cuDNN 9 (the SDPA graph needs it)";
  EXPECT_GE(f.nccl_version, 21900);
  const std::string text = device_facts_text(f);
  EXPECT_NE(text.find("device: " + f.name + "\n"), std::string::npos) << text;
  EXPECT_NE(text.find("cuDNN: " + cudnn_version_text(f.cudnn_version)), std::string::npos) << text;
}

TEST(CudaDeviceProbe, NoSuchDeviceIsOneClearError) {
  SKIP_WITHOUT_CUDA();
  try {
    cuda_device_facts(1000);
    FAIL() << "device 1000 was described";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:1000"), std::string::npos) << e.what();
  }
}

TEST(CudaDeviceProbe, GemmAndCopyAreMeasured) {
  SKIP_WITHOUT_CUDA();
  const DeviceFacts f = cuda_device_facts(0);
  const bool real = !emulated(f);
  // Small under the emulation (its GEMM stand-in runs on the CPU); sinklab-gpuinfo's size on a GPU.
  const int64_t n = real ? 8192 : 64, bytes = real ? int64_t(1) << 30 : int64_t(1) << 20;
  const double tflops = measure_gemm_tflops(Device::cuda(0), DType::bf16, n, 3);
  const double gbps = measure_copy_gbps(Device::cuda(0), bytes, 3);
  std::printf("[%s] bf16 GEMM %lld^3: %.1f TFLOP/s; device copy: %.0f GB/s\n", f.name.c_str(), (long long)n, tflops,
              gbps);
  EXPECT_TRUE(std::isfinite(tflops) && tflops > 0);
  EXPECT_TRUE(std::isfinite(gbps) && gbps > 0);
  if (real) {
    // An A100 reaches ~250 bf16 TFLOP/s dense and ~1.5 TB/s; an H100 ~600-750 and ~2.5-3 TB/s. A tenth
    // of the A100's figures catches a GEMM that fell off the tensor cores or a copy that went through the host.
    EXPECT_GT(tflops, 25.0);
    EXPECT_GT(gbps, 150.0);
  }
}

}  // namespace
}  // namespace sinklab
