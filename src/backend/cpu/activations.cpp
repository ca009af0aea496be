// Elementwise activations and gated FFN products (SwiGLU / GeGLU / ReGLU), forward and backward.
// Per-element math: activation_math.hpp. All operands are [*] with strided rows allowed, so gate and
// up may be the two halves of one fused [N, 2F] projection.

#include <initializer_list>
#include <utility>

#include "backend/activation_math.hpp"
#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/cpu_common.hpp"

namespace sinklab {

using cpu::dispatch_float;

namespace {

// Checks that every defined operand has the shape and dtype of `ref`.
void check_operands(const char* op, const Tensor& ref, const char* ref_name,
                    std::initializer_list<std::pair<const Tensor*, const char*>> others) {
  SL_CHECK(ref.defined(), "%s: %s is required", op, ref_name);
  for (auto [t, name] : others) {
    if (!t->defined()) continue;
    cpu::check_same_shape(*t, ref, op, name, ref_name);
    SL_CHECK(t->dtype == ref.dtype, "%s: %s and %s differ in dtype", op, name, ref_name);
  }
}

}  // namespace

// out = act(in).
void CpuBackend::activation_forward(Tensor out, Tensor in, Activation act) {
  const char* op = "activation_forward";
  SL_CHECK(out.defined(), "%s: out is required", op);
  check_operands(op, in, "in", {{&out, "out"}});
  dispatch_float(in.dtype, op, [&](auto zero) {
    using T = decltype(zero);
    TensorRows ri = rows_of(in, op, "in"), ro = rows_of(out, op, "out");
#pragma omp parallel for schedule(static) if (ri.rows * ri.cols > 16384)
    for (int64_t r = 0; r < ri.rows; ++r) {
      const T* x = in.ptr<T>() + ri.row_offset(r);
      T* y = out.ptr<T>() + ro.row_offset(r);
      math::with_activation(act, [&](auto a) {
#pragma omp simd
        for (int64_t c = 0; c < ri.cols; ++c) y[c] = math::activate_as<decltype(a)::value>(x[c]);
      });
    }
  });
}

// d_in = d_out * act'(in). d_in may alias d_out.
void CpuBackend::activation_backward(Tensor d_in, Tensor d_out, Tensor in, Activation act) {
  const char* op = "activation_backward";
  SL_CHECK(d_in.defined() && d_out.defined(), "%s: d_in and d_out are required", op);
  check_operands(op, in, "in", {{&d_in, "d_in"}, {&d_out, "d_out"}});
  dispatch_float(in.dtype, op, [&](auto zero) {
    using T = decltype(zero);
    TensorRows ri = rows_of(in, op, "in"), rd = rows_of(d_in, op, "d_in"), rg = rows_of(d_out, op, "d_out");
#pragma omp parallel for schedule(static) if (ri.rows * ri.cols > 16384)
    for (int64_t r = 0; r < ri.rows; ++r) {
      const T* x = in.ptr<T>() + ri.row_offset(r);
      const T* g = d_out.ptr<T>() + rg.row_offset(r);
      T* dx = d_in.ptr<T>() + rd.row_offset(r);
      math::with_activation(act, [&](auto a) {
#pragma omp simd
        for (int64_t c = 0; c < ri.cols; ++c) dx[c] = g[c] * math::activate_grad_as<decltype(a)::value>(x[c]);
      });
    }
  });
}

// out = act(gate) * up.
void CpuBackend::gated_forward(Tensor out, Tensor gate, Tensor up, Activation act) {
  const char* op = "gated_forward";
  SL_CHECK(out.defined() && up.defined(), "%s: out and up are required", op);
  check_operands(op, gate, "gate", {{&up, "up"}, {&out, "out"}});
  dispatch_float(gate.dtype, op, [&](auto zero) {
    using T = decltype(zero);
    TensorRows rg = rows_of(gate, op, "gate"), ru = rows_of(up, op, "up"), ro = rows_of(out, op, "out");
#pragma omp parallel for schedule(static) if (rg.rows * rg.cols > 16384)
    for (int64_t r = 0; r < rg.rows; ++r) {
      const T* g = gate.ptr<T>() + rg.row_offset(r);
      const T* u = up.ptr<T>() + ru.row_offset(r);
      T* y = out.ptr<T>() + ro.row_offset(r);
      math::with_activation(act, [&](auto a) {
#pragma omp simd
        for (int64_t c = 0; c < rg.cols; ++c) y[c] = math::activate_as<decltype(a)::value>(g[c]) * u[c];
      });
    }
  });
}

// d_gate = d_out * up * act'(gate);  d_up = d_out * act(gate)   (either skipped if undefined).
// Every element reads gate, up and d_out before writing, so d_gate/d_up may alias gate/up (in-place
// backward into the fused projection buffer).
void CpuBackend::gated_backward(Tensor d_gate, Tensor d_up, Tensor d_out, Tensor gate, Tensor up, Activation act) {
  const char* op = "gated_backward";
  SL_CHECK(up.defined() && d_out.defined(), "%s: up and d_out are required", op);
  check_operands(op, gate, "gate", {{&up, "up"}, {&d_out, "d_out"}, {&d_gate, "d_gate"}, {&d_up, "d_up"}});
  dispatch_float(gate.dtype, op, [&](auto zero) {
    using T = decltype(zero);
    TensorRows rg = rows_of(gate, op, "gate"), ru = rows_of(up, op, "up"), ro = rows_of(d_out, op, "d_out");
    TensorRows rdg = d_gate.defined() ? rows_of(d_gate, op, "d_gate") : TensorRows{};
    TensorRows rdu = d_up.defined() ? rows_of(d_up, op, "d_up") : TensorRows{};
    const bool want_g = d_gate.defined(), want_u = d_up.defined();
#pragma omp parallel for schedule(static) if (rg.rows * rg.cols > 16384)
    for (int64_t r = 0; r < rg.rows; ++r) {
      const T* g = gate.ptr<T>() + rg.row_offset(r);
      const T* u = up.ptr<T>() + ru.row_offset(r);
      const T* dy = d_out.ptr<T>() + ro.row_offset(r);
      T* dg = want_g ? d_gate.ptr<T>() + rdg.row_offset(r) : nullptr;
      T* du = want_u ? d_up.ptr<T>() + rdu.row_offset(r) : nullptr;
      math::with_activation(act, [&](auto a) {
        constexpr ops::Activation A = decltype(a)::value;
        if (dg && du) {
#pragma omp simd
          for (int64_t c = 0; c < rg.cols; ++c) {
            const T gc = g[c], uc = u[c], dyc = dy[c];
            dg[c] = dyc * uc * math::activate_grad_as<A>(gc);
            du[c] = dyc * math::activate_as<A>(gc);
          }
        } else if (dg) {
#pragma omp simd
          for (int64_t c = 0; c < rg.cols; ++c) dg[c] = dy[c] * u[c] * math::activate_grad_as<A>(g[c]);
        } else if (du) {
#pragma omp simd
          for (int64_t c = 0; c < rg.cols; ++c) du[c] = dy[c] * math::activate_as<A>(g[c]);
        }
      });
    }
  });
}

}  // namespace sinklab
