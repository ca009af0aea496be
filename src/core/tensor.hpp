// Tensor: a non-owning view (pointer, dtype, device, shape, strides in elements). Ops take views, so
// a head slice of a fused QKV buffer or a [B,T,H,dh] reading of a [B*T, H*dh] matrix costs nothing.
// Storage is owned elsewhere: Buffer (below) or an Arena.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/dtype.hpp"
#include "core/error.hpp"

namespace sinklab {

enum class DeviceKind : uint8_t { cpu, cuda };
// "cpu" | "cuda" -> the kind; anything else throws naming `flag` (e.g. "--device").
DeviceKind parse_device_kind(const std::string& name, const char* flag);

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;
  static Device cpu() { return {DeviceKind::cpu, 0}; }
  static Device cuda(int i = 0) { return {DeviceKind::cuda, i}; }
  bool is_cpu() const { return kind == DeviceKind::cpu; }
  bool is_cuda() const { return kind == DeviceKind::cuda; }
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  std::string name() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
};

inline constexpr int kMaxDims = 5;

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> stride{};  // in elements

  Tensor() = default;
  // A contiguous (row-major) view.
  Tensor(void* ptr, DType dt, std::initializer_list<int64_t> dims, Device dev = Device::cpu());
  static Tensor contiguous_view(void* ptr, DType dt, const int64_t* dims, int nd, Device dev);

  bool defined() const { return data != nullptr; }
  int64_t numel() const;
  int64_t size(int d) const { return shape[d < 0 ? d + ndim : d]; }
  size_t nbytes() const { return size_t(numel()) * size_t(dtype_size(dtype)); }
  bool is_contiguous() const;
  std::string shape_str() const;

  template <class T>
  T* ptr() const {
    return static_cast<T*>(data);
  }

  // Same storage, new contiguous shape (requires a contiguous tensor, numel unchanged).
  Tensor reshape(std::initializer_list<int64_t> dims) const;
  // Elements [start, start+len) of dimension d.
  Tensor slice(int d, int64_t start, int64_t len) const;
  // Element i of the first dimension, as a view of the other dimensions (strides kept); ndim >= 2.
  Tensor select(int64_t i) const;
  // Splits dimension d into (outer, inner) with outer*inner == size(d).
  Tensor split_dim(int d, int64_t outer, int64_t inner) const;
};

// Checks used by every op entry point; messages name the op and the argument.
void check_shape(const Tensor& t, std::initializer_list<int64_t> dims, const char* op, const char* arg);
void check_dtype(const Tensor& t, DType dt, const char* op, const char* arg);
void check_same_device(const Tensor& a, const Tensor& b, const char* op);

}  // namespace sinklab
