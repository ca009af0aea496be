// The device probe's host side (backend/device_probe.hpp): version texts, the facts' text, the
// measurements on the CPU device (the same code times the GPU: tests/cpp/gpu/test_cuda_device_probe), and
// the one-line refusal without CUDA.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "backend/backend.hpp"
#include "backend/device_probe.hpp"
#include "core/error.hpp"

namespace sinklab {
namespace {

TEST(DeviceProbe, VersionTexts) {
  EXPECT_EQ(cuda_version_text(13000), "13.0");
  EXPECT_EQ(cuda_version_text(12080), "12.8");
  EXPECT_EQ(cudnn_version_text(91900), "9.19.0");
  EXPECT_EQ(cudnn_version_text(90102), "9.1.2");
  EXPECT_EQ(nccl_version_text(22805), "2.28.5");
}

TEST(DeviceProbe, FactsText) {
  DeviceFacts f;
  f.name = "NVIDIA H100 80GB HBM3";
  f.compute_major = 9;
  f.multiprocessors = 132;
  f.memory_total = int64_t(80) << 30;
  f.memory_free = int64_t(79) << 30;
  f.driver_version = 13000;
  f.runtime_version = 13000;
  f.cublaslt_version = 130100;
  f.cudnn_version = 91900;
  f.nccl_version = 22805;
  EXPECT_EQ(device_facts_text(f),
            "device: NVIDIA H100 80GB HBM3\ncompute capability: 9.0 (132 multiprocessors)\nmemory: 80.0 GiB (79.0 GiB "
            "free)\ndriver: CUDA 13.0\nruntime: CUDA 13.0\ncuBLASLt: 130100\ncuDNN: 9.19.0\nNCCL: 2.28.5\n");
}

TEST(DeviceProbe, MeasurementsOnTheCpu) {
  // 2 n^3 FLOPs in the median call's time: finite and positive; a larger GEMM is not slower per FLOP by
  // orders of magnitude (the count would be wrong then).
  const double small = measure_gemm_tflops(Device::cpu(), DType::f32, 64, 3);
  const double large = measure_gemm_tflops(Device::cpu(), DType::f32, 256, 3);
  EXPECT_TRUE(std::isfinite(small) && small > 0);
  EXPECT_TRUE(std::isfinite(large) && large > 0);
  EXPECT_GT(large, small / 100);
  const double gbps = measure_copy_gbps(Device::cpu(), int64_t(1) << 22, 3);
  EXPECT_TRUE(std::isfinite(gbps) && gbps > 0.1);
  EXPECT_THROW(measure_gemm_tflops(Device::cpu(), DType::f32, 64, 0), Error);
}

TEST(DeviceProbe, WithoutAUsableDeviceOneLineSaysWhy) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is usable here";
  try {
    cuda_device_facts(0);
    FAIL() << "described a device that is not there";
  } catch (const Error& e) {
    const std::string why = e.what();
    EXPECT_TRUE(why.find("built without CUDA") != std::string::npos ||
                why.find("no CUDA device is usable") != std::string::npos)
        << why;
    EXPECT_EQ(why.find('\n'), std::string::npos) << why;
  }
}

}  // namespace
}  // namespace sinklab
