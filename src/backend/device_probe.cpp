#include "backend/device_probe.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "backend/backend.hpp"
#include "backend/memory.hpp"
#include "backend/ops.hpp"
#include "core/error.hpp"

namespace sinklab {
namespace {

// The median seconds of `reps` calls of f, the device synchronised around each, after one warm-up call.
template <class F>
double median_seconds(Device device, int reps, F&& f) {
  SL_CHECK(reps >= 1, "a measurement needs at least one repetition, got %d", reps);
  Backend& be = backend_for(device);
  f();
  std::vector<double> seconds;
  for (int r = 0; r < reps; ++r) {
    be.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    be.synchronize();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

}  // namespace

double measure_gemm_tflops(Device device, DType dt, int64_t n, int reps) {
  SL_CHECK(n >= 1, "GEMM size must be positive, got %lld", (long long)n);
  Buffer a = Buffer::for_tensor(dt, {n, n}, device), b = Buffer::for_tensor(dt, {n, n}, device),
         c = Buffer::for_tensor(dt, {n, n}, device);
  Tensor ta = a.view(dt, {n, n}), tb = b.view(dt, {n, n}), tc = c.view(dt, {n, n});
  ops::fill(ta, 0.01);  // small values: the products stay finite in bf16
  ops::fill(tb, 0.02);
  const double s = median_seconds(device, reps, [&] { ops::matmul(tc, ta, tb, false, false); });
  return 2.0 * double(n) * double(n) * double(n) / s / 1e12;
}

double measure_copy_gbps(Device device, int64_t bytes, int reps) {
  const int64_t floats = std::max<int64_t>(bytes / 4, 1);
  Buffer from = Buffer::for_tensor(DType::f32, {floats}, device), to = Buffer::for_tensor(DType::f32, {floats}, device);
  Tensor src = from.view(DType::f32, {floats}), dst = to.view(DType::f32, {floats});
  ops::fill(src, 1.0);
  const double s = median_seconds(device, reps, [&] { ops::copy(dst, src); });
  return 2.0 * double(floats) * 4.0 / s / 1e9;
}

std::string cuda_version_text(int version) {
  char text[32];
  std::snprintf(text, sizeof text, "%d.%d", version / 1000, (version % 1000) / 10);
  return text;
}

std::string cudnn_version_text(int64_t version) {  // cuDNN 9: major * 10000 + minor * 100 + patch
  char text[32];
  std::snprintf(text, sizeof text, "%lld.%lld.%lld", (long long)(version / 10000), (long long)(version % 10000 / 100),
                (long long)(version % 100));
  return text;
}

std::string nccl_version_text(int version) {  // NCCL >= 2.9: major * 10000 + minor * 100 + patch
  char text[32];
  std::snprintf(text, sizeof text, "%d.%d.%d", version / 10000, version % 10000 / 100, version % 100);
  return text;
}

std::string device_facts_text(const DeviceFacts& f) {
  const double gib = 1024.0 * 1024.0 * 1024.0;
  char text[1024];
  std::snprintf(text, sizeof text,
                "device: %s\ncompute capability: %d.%d (%d multiprocessors)\nmemory: %.1f GiB (%.1f GiB free)\n"
                "driver: CUDA %s\nruntime: CUDA %s\ncuBLASLt: %lld\ncuDNN: %s\nNCCL: %s\n",
                f.name.c_str(), f.compute_major, f.compute_minor, f.multiprocessors, double(f.memory_total) / gib,
                double(f.memory_free) / gib, cuda_version_text(f.driver_version).c_str(),
                cuda_version_text(f.runtime_version).c_str(), (long long)f.cublaslt_version,
                cudnn_version_text(f.cudnn_version).c_str(), nccl_version_text(f.nccl_version).c_str());
  return text;
}

}  // namespace sinklab
