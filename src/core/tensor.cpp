#include "core/tensor.hpp"

namespace sinklab {

Tensor Tensor::contiguous_view(void* ptr, DType dt, const int64_t* dims, int nd, Device dev) {
  SL_CHECK(nd >= 0 && nd <= kMaxDims, "tensor rank %d exceeds %d", nd, kMaxDims);
  Tensor t;
  t.data = ptr;
  t.dtype = dt;
  t.device = dev;
  t.ndim = nd;
  int64_t s = 1;
  for (int d = nd - 1; d >= 0; --d) {
    t.shape[d] = dims[d];
    t.stride[d] = s;
    s *= dims[d];
  }
  return t;
}

Tensor::Tensor(void* ptr, DType dt, std::initializer_list<int64_t> dims, Device dev) {
  *this = contiguous_view(ptr, dt, dims.begin(), int(dims.size()), dev);
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  return n;
}

bool Tensor::is_contiguous() const {
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] != 1 && stride[d] != s) return false;
    s *= shape[d];
  }
  return true;
}

DeviceKind parse_device_kind(const std::string& name, const char* flag) {
  if (name == "cpu") return DeviceKind::cpu;
  if (name == "cuda") return DeviceKind::cuda;
  SL_FAIL("%s must be cpu or cuda, not '%s'", flag, name.c_str());
}

std::string Tensor::shape_str() const {
  std::string s = "[";
  for (int d = 0; d < ndim; ++d) {
    if (d) s += ',';
    s += std::to_string(shape[d]);
  }
  s += ']';
  return s;
}

Tensor Tensor::reshape(std::initializer_list<int64_t> dims) const {
  SL_CHECK(is_contiguous(), "reshape of a non-contiguous tensor %s", shape_str().c_str());
  Tensor t = contiguous_view(data, dtype, dims.begin(), int(dims.size()), device);
  SL_CHECK(t.numel() == numel(), "reshape %s -> %s changes the element count", shape_str().c_str(),
           t.shape_str().c_str());
  return t;
}

Tensor Tensor::slice(int d, int64_t start, int64_t len) const {
  if (d < 0) d += ndim;
  SL_CHECK(d >= 0 && d < ndim && start >= 0 && len >= 0 && start + len <= shape[d],
           "slice [%lld, %lld) out of range for dim %d of %s", (long long)start, (long long)(start + len), d,
           shape_str().c_str());
  Tensor t = *this;
  t.data = static_cast<char*>(data) + start * stride[d] * dtype_size(dtype);
  t.shape[d] = len;
  return t;
}

Tensor Tensor::select(int64_t i) const {
  SL_CHECK(ndim >= 2 && i >= 0 && i < shape[0], "select %lld out of range for %s", (long long)i, shape_str().c_str());
  Tensor t = *this;
  t.data = static_cast<char*>(data) + i * stride[0] * dtype_size(dtype);
  t.ndim = ndim - 1;
  for (int d = 0; d < t.ndim; ++d) {
    t.shape[d] = shape[d + 1];
    t.stride[d] = stride[d + 1];
  }
  t.shape[t.ndim] = 0;
  t.stride[t.ndim] = 0;
  return t;
}

Tensor Tensor::split_dim(int d, int64_t outer, int64_t inner) const {
  if (d < 0) d += ndim;
  SL_CHECK(ndim < kMaxDims && outer * inner == shape[d], "split_dim %lld x %lld of dim %d of %s",
           (long long)outer, (long long)inner, d, shape_str().c_str());
  Tensor t = *this;
  for (int i = ndim; i > d + 1; --i) {
    t.shape[i] = shape[i - 1];
    t.stride[i] = stride[i - 1];
  }
  t.shape[d] = outer;
  t.stride[d] = stride[d] * inner;
  t.shape[d + 1] = inner;
  t.stride[d + 1] = stride[d];
  t.ndim = ndim + 1;
  return t;
}

void check_shape(const Tensor& t, std::initializer_list<int64_t> dims, const char* op, const char* arg) {
  bool ok = t.ndim == int(dims.size());
  int d = 0;
  for (int64_t want : dims) {
    if (ok && want >= 0 && t.shape[d] != want) ok = false;
    ++d;
  }
  if (!ok) {
    std::string want = "[";
    d = 0;
    for (int64_t w : dims) {
      if (d++) want += ',';
      want += w < 0 ? std::string("*") : std::to_string(w);
    }
    SL_FAIL("%s: %s has shape %s, expected %s]", op, arg, t.shape_str().c_str(), want.c_str());
  }
}

void check_dtype(const Tensor& t, DType dt, const char* op, const char* arg) {
  SL_CHECK(t.dtype == dt, "%s: %s has dtype %s, expected %s", op, arg, dtype_name(t.dtype), dtype_name(dt));
}

void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  SL_CHECK(a.device == b.device, "%s: operands on %s and %s", op, a.device.name().c_str(),
           b.device.name().c_str());
}

}  // namespace sinklab
