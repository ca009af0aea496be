#include "backend/backend.hpp"

#include "backend/cpu/bf16_storage.hpp"
#include "backend/device_probe.hpp"
#include "core/error.hpp"

#if SINKLAB_HAVE_CUDA
#include "backend/cuda/cuda_backend.hpp"
#endif

namespace sinklab {

Backend& backend_for(Device device) {
  if (device.is_cpu()) {
    static CpuBf16Storage cpu;  // CpuBackend, with bf16 storage for every op
    return cpu;
  }
#if SINKLAB_HAVE_CUDA
  return cuda::backend(device.index);
#else
  SL_FAIL("tensor on %s, but this sinklab was built without CUDA (SINKLAB_CUDA=OFF)", device.name().c_str());
#endif
}

Backend& backend_for(std::span<const Tensor> tensors, const char* op) {
  const Tensor* first = nullptr;
  Device chosen = Device::cpu();
  for (const Tensor& t : tensors) {
    if (!t.defined()) continue;
    if (!first) {
      first = &t;
      chosen = t.device;
    } else if (!(t.device == chosen)) {
      // Only a copy may span devices; it runs on the accelerator side.
      SL_CHECK(std::string(op) == "copy", "%s: operands on %s and %s", op, chosen.name().c_str(),
               t.device.name().c_str());
      if (chosen.is_cpu()) chosen = t.device;
    }
  }
  return backend_for(chosen);
}

int cuda_device_count() {
#if SINKLAB_HAVE_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

bool cuda_available() { return cuda_device_count() > 0; }

Device device_from_flag(const std::string& value, const char* flag, const std::function<int(int)>& gpu_for) {
  return resolve_device(parse_device_kind(value, flag), flag, gpu_for);
}

Device resolve_device(DeviceKind kind, const char* flag, const std::function<int(int)>& gpu_for) {
  if (kind == DeviceKind::cpu) return Device::cpu();
#if !SINKLAB_HAVE_CUDA
  SL_FAIL("%s cuda: this sinklab was built without CUDA (configure with -DSINKLAB_CUDA=ON)", flag);
#endif
  const int visible = cuda_device_count();
  SL_CHECK(visible > 0, "%s cuda: no usable CUDA device (none visible, or the driver is too old for this build)", flag);
  return Device::cuda(gpu_for(visible));
}

int64_t cudnn_version() {
#if SINKLAB_HAVE_CUDA
  return cuda::cudnn_library_version();
#else
  return 0;
#endif
}

DeviceFacts cuda_device_facts(int index) {  // declared in device_probe.hpp
#if SINKLAB_HAVE_CUDA
  return cuda::device_facts(index);
#else
  (void)index;
  SL_FAIL("this sinklab was built without CUDA (SINKLAB_CUDA=OFF): no GPU to describe");
#endif
}

}  // namespace sinklab
