// bf16 storage on the CPU: bf16 operands widened to f32 copies around CpuBackend's kernels
// (bf16_storage.hpp).
#include "backend/cpu/bf16_storage.hpp"

#include <array>
#include <cstring>
#include <memory>
#include <string_view>
#include <type_traits>
#include <vector>

namespace sinklab {
namespace {

// Calls fn(logical index, element offset) for every element of t in row-major logical order (any
// strides, broadcast dimensions included).
template <class Fn>
void for_each_element(const Tensor& t, Fn&& fn) {
  const int64_t n = t.numel();
  if (n == 0) return;
  std::array<int64_t, kMaxDims> index{};
  int64_t offset = 0;
  for (int64_t i = 0; i < n; ++i) {
    fn(i, offset);
    for (int d = t.ndim - 1; d >= 0; --d) {  // the next index, odometer style
      offset += t.stride[size_t(d)];
      if (++index[size_t(d)] < t.shape[size_t(d)]) break;
      offset -= t.stride[size_t(d)] * t.shape[size_t(d)];
      index[size_t(d)] = 0;
    }
  }
}

bool same_view(const Tensor& a, const Tensor& b) {
  if (a.data != b.data || a.dtype != b.dtype || a.ndim != b.ndim) return false;
  for (int d = 0; d < a.ndim; ++d)
    if (a.shape[size_t(d)] != b.shape[size_t(d)] || a.stride[size_t(d)] != b.stride[size_t(d)]) return false;
  return true;
}

bool is_cpu_bf16(const Tensor& t) { return t.defined() && t.dtype == DType::bf16 && t.device.is_cpu(); }
template <class A>
bool is_cpu_bf16(const A&) {
  return false;
}

// The f32 copies of one op call's bf16 operands.
class Widening {
 public:
  Tensor widen(const Tensor& t) {
    if (!is_cpu_bf16(t)) return t;
    for (const auto& c : copies_)
      if (same_view(c->bf16, t)) return c->f32;
    auto c = std::make_unique<Copy>();
    c->bf16 = t;
    c->bits.resize(size_t(t.numel()));
    c->values.resize(size_t(t.numel()));
    const auto* src = t.ptr<uint16_t>();
    for_each_element(t, [&](int64_t i, int64_t off) {
      c->bits[size_t(i)] = src[off];
      c->values[size_t(i)] = bf16_to_f32(src[off]);
    });
    c->f32 = Tensor::contiguous_view(c->values.data(), DType::f32, t.shape.data(), t.ndim, t.device);
    copies_.push_back(std::move(c));
    return copies_.back()->f32;
  }
  template <class A>
  const A& widen(const A& a) {
    return a;
  }

  // Rounds back every element a kernel changed (compared with the bits it read: an operand that is only
  // read writes nothing, so an input that overlaps an output cannot undo the output).
  void write_back() {
    for (const auto& c : copies_) {
      auto* dst = c->bf16.ptr<uint16_t>();
      for_each_element(c->bf16, [&](int64_t i, int64_t off) {
        const float now = c->values[size_t(i)], before = bf16_to_f32(c->bits[size_t(i)]);
        if (std::memcmp(&now, &before, sizeof now) != 0) dst[off] = f32_to_bf16(now);
      });
    }
  }

 private:
  struct Copy {
    Tensor bf16, f32;
    std::vector<uint16_t> bits;  // as read
    std::vector<float> values;   // what the kernel sees and writes
  };
  std::vector<std::unique_ptr<Copy>> copies_;
};

// The ops that handle dtypes themselves (copy, the fills; the linear products, which keep the dtype rule of
// op_checks.hpp check_product_dtypes and widen bf16 operands inside, cpu/linear.cpp) or are made of other
// ops (add_rmsnorm_forward).
bool passes_through(std::string_view op) {
  return op == "copy" || op == "fill" || op == "fill_normal" || op == "fill_uniform" || op == "linear_forward" ||
         op == "linear_backward" || op == "add_rmsnorm_forward";
}

template <class F, class... A>
decltype(auto) with_widened(const char* op, F&& kernel, const A&... args) {
  if (passes_through(op) || !(is_cpu_bf16(args) || ...)) return kernel(args...);
  Widening widening;
  if constexpr (std::is_void_v<decltype(kernel(args...))>) {
    kernel(widening.widen(args)...);
    widening.write_back();
  } else {
    auto result = kernel(widening.widen(args)...);
    widening.write_back();
    return result;
  }
}

}  // namespace

#define SINKLAB_ARGS(...) __VA_ARGS__
#define SINKLAB_BF16_STORAGE_OP(ret, name, params, args)                                           \
  ret CpuBf16Storage::name params {                                                                \
    return with_widened(#name, [this](const auto&... a) -> ret { return inner_.name(a...); }, \
                        SINKLAB_ARGS args);                                                        \
  }
SINKLAB_OPS(SINKLAB_BF16_STORAGE_OP, SINKLAB_BF16_STORAGE_OP)
#undef SINKLAB_BF16_STORAGE_OP
#undef SINKLAB_ARGS

}  // namespace sinklab
