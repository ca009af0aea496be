// Elementwise CUDA ops over the shared per-element math (activation_math.hpp, adamw_math.hpp): the same
// functions the CPU backend runs, instantiated for float, as functors of the elementwise engine
// (elementwise.cuh: f32 or bf16 operands, a contiguous 128-bit path and a strided one).
#include <cmath>

#include "backend/activation_math.hpp"
#include "backend/adamw_math.hpp"
#include "backend/cuda/elementwise.cuh"

namespace sinklab::cuda {

namespace {

struct ActivationForwardOp {  // in: x; out: act(x)
  static constexpr int kIn = 1, kOut = 1;
  Activation act;
  __device__ void operator()(const float* in, float* out) const { out[0] = math::activate(act, in[0]); }
};

struct ActivationBackwardOp {  // in: d_out, x; out: d_out * act'(x)
  static constexpr int kIn = 2, kOut = 1;
  Activation act;
  __device__ void operator()(const float* in, float* out) const {
    out[0] = in[0] * math::activate_grad(act, in[1]);
  }
};

struct GatedForwardOp {  // in: gate, up; out: act(gate) * up
  static constexpr int kIn = 2, kOut = 1;
  Activation act;
  __device__ void operator()(const float* in, float* out) const { out[0] = math::activate(act, in[0]) * in[1]; }
};

// in: d_out, gate, up; out: d_gate = d_out * up * act'(gate), d_up = d_out * act(gate) (either may be absent).
struct GatedBackwardOp {
  static constexpr int kIn = 3, kOut = 2;
  Activation act;
  __device__ void operator()(const float* in, float* out) const {
    const float dy = in[0], g = in[1], u = in[2];
    out[0] = dy * u * math::activate_grad(act, g);
    out[1] = dy * math::activate(act, g);
  }
};

// in: param, grad, m, v; out: param, m, v (the gradient scaled first as scale() would, when grad_scale != 1).
struct AdamWOp {
  static constexpr int kIn = 4, kOut = 3;
  math::AdamWConstants c;
  float grad_scale;
  __device__ void operator()(const float* in, float* out) const {
    float p = in[0], m = in[2], v = in[3];
    math::adamw_element(p, grad_scale == 1.0f ? in[1] : in[1] * grad_scale, m, v, c);
    out[0] = p;
    out[1] = m;
    out[2] = v;
  }
};

}  // namespace

void CudaBackend::activation_forward(Tensor out, Tensor in, Activation act) {
  const char* op = "activation_forward";
  check_same_shape(out, in, op, "out", "in");
  check_device_f32_or_bf16(*this, out, op, "out");
  check_device_f32_or_bf16(*this, in, op, "in");
  const EwArg ins[] = {ew_arg(in, op, "in")}, outs[] = {ew_arg(out, op, "out")};
  DeviceGuard guard(index_);
  ew_launch(stream_, ActivationForwardOp{act}, ins, outs, out.numel(), op);
}

void CudaBackend::activation_backward(Tensor d_in, Tensor d_out, Tensor in, Activation act) {
  const char* op = "activation_backward";
  check_same_shape(d_in, in, op, "d_in", "in");
  check_same_shape(d_out, in, op, "d_out", "in");
  check_device_f32_or_bf16(*this, d_in, op, "d_in");
  check_device_f32_or_bf16(*this, d_out, op, "d_out");
  check_device_f32_or_bf16(*this, in, op, "in");
  const EwArg ins[] = {ew_arg(d_out, op, "d_out"), ew_arg(in, op, "in")}, outs[] = {ew_arg(d_in, op, "d_in")};
  DeviceGuard guard(index_);
  ew_launch(stream_, ActivationBackwardOp{act}, ins, outs, in.numel(), op);
}

void CudaBackend::gated_forward(Tensor out, Tensor gate, Tensor up, Activation act) {
  const char* op = "gated_forward";
  check_same_shape(out, gate, op, "out", "gate");
  check_same_shape(up, gate, op, "up", "gate");
  check_device_f32_or_bf16(*this, out, op, "out");
  check_device_f32_or_bf16(*this, gate, op, "gate");
  check_device_f32_or_bf16(*this, up, op, "up");
  const EwArg ins[] = {ew_arg(gate, op, "gate"), ew_arg(up, op, "up")}, outs[] = {ew_arg(out, op, "out")};
  DeviceGuard guard(index_);
  ew_launch(stream_, GatedForwardOp{act}, ins, outs, gate.numel(), op);
}

void CudaBackend::gated_backward(Tensor d_gate, Tensor d_up, Tensor d_out, Tensor gate, Tensor up, Activation act) {
  const char* op = "gated_backward";
  check_same_shape(d_out, gate, op, "d_out", "gate");
  check_same_shape(up, gate, op, "up", "gate");
  check_device_f32_or_bf16(*this, d_out, op, "d_out");
  check_device_f32_or_bf16(*this, gate, op, "gate");
  check_device_f32_or_bf16(*this, up, op, "up");
  if (d_gate.defined()) {
    check_same_shape(d_gate, gate, op, "d_gate", "gate");
    check_device_f32_or_bf16(*this, d_gate, op, "d_gate");
  }
  if (d_up.defined()) {
    check_same_shape(d_up, gate, op, "d_up", "gate");
    check_device_f32_or_bf16(*this, d_up, op, "d_up");
  }
  const EwArg ins[] = {ew_arg(d_out, op, "d_out"), ew_arg(gate, op, "gate"), ew_arg(up, op, "up")};
  const EwArg outs[] = {ew_arg(d_gate, op, "d_gate"), ew_arg(d_up, op, "d_up")};
  if (!d_gate.defined() && !d_up.defined()) return;
  DeviceGuard guard(index_);
  ew_launch(stream_, GatedBackwardOp{act}, ins, outs, gate.numel(), op);
}

void CudaBackend::adamw_update(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWStep& s) {
  const char* op = "adamw_update";
  check_same_shape(grad, param, op, "grad", "param");
  check_same_shape(m, param, op, "m", "param");
  check_same_shape(v, param, op, "v", "param");
  check_device_f32(*this, param, op, "param");
  check_device_f32(*this, grad, op, "grad");
  check_device_f32(*this, m, op, "m");
  check_device_f32(*this, v, op, "v");
  SL_CHECK(s.step >= 1, "%s: step must be >= 1 (got %lld)", op, (long long)s.step);
  const EwArg p = ew_arg(param, op, "param"), mm = ew_arg(m, op, "m"), vv = ew_arg(v, op, "v");
  const EwArg ins[] = {p, ew_arg(grad, op, "grad"), mm, vv}, outs[] = {p, mm, vv};
  // Step-level constants, once per call on the host, as the CPU forms them (adamw_math.hpp).
  const AdamWOp adamw{math::adamw_constants(s.lr, s.beta1, s.beta2, s.eps, s.weight_decay, s.step),
                      float(s.grad_scale)};
  DeviceGuard guard(index_);
  ew_launch(stream_, adamw, ins, outs, param.numel(), op);
}

}  // namespace sinklab::cuda
